"""Agent tools: schemas in both formats (meta-validated, Draft 2020-12), clear errors for bad input,
write → fold → search → why through refold.agent.tools.handle, and tenant/principal scoping."""

from __future__ import annotations

import json

import pytest
from jsonschema import Draft202012Validator

import refold
from refold.agent import tools
from refold.fold.errors import NotFoundError, ValidationError

EMB = "hashing"


def test_schemas_meta_validate_in_both_formats():
    anthropic, openai = tools.anthropic_tools(), tools.openai_tools()
    mcp = tools.mcp_tools()
    assert [t["name"] for t in anthropic] == ["write_memory", "retract_memory", "search_memory", "memory_as_of", "why"]
    assert [t["function"]["name"] for t in openai] == [t["name"] for t in mcp] == ["write_memory", "retract_memory", "search_memory", "memory_as_of", "why"]
    for a, o, m in zip(anthropic, openai, mcp):
        assert set(m) == {"name", "description", "inputSchema", "annotations"}
        assert m["annotations"]["readOnlyHint"] == (m["name"] in ("search_memory", "memory_as_of", "why"))
        assert m["inputSchema"] == a["input_schema"] and m["description"] == a["description"]
        assert set(a) == {"name", "description", "input_schema"}
        assert o["type"] == "function" and set(o["function"]) == {"name", "description", "parameters"}
        assert a["input_schema"] == o["function"]["parameters"] and a["description"] == o["function"]["description"]
        Draft202012Validator.check_schema(a["input_schema"])
        assert a["input_schema"]["type"] == "object" and a["input_schema"]["additionalProperties"] is False
        json.dumps(a), json.dumps(o)  # plain JSON
    write = anthropic[0]
    assert "justification" in write["input_schema"]["required"]
    # every write tool requires a trace id, in every form (the handler has no default to fall back on)
    for form in (anthropic, [o["function"] for o in openai], mcp):
        for tool in form:
            schema = tool.get("input_schema") or tool.get("parameters") or tool["inputSchema"]
            if tool["name"] in ("write_memory", "retract_memory"):
                assert {"justification", "trace_id"} <= set(schema["required"]), tool["name"]
    assert "next search_memory" in write["description"] and "justification" in write["description"].lower()
    # returned copies: editing one does not change the next
    anthropic[0]["input_schema"]["required"].clear()
    assert "justification" in tools.anthropic_tools()[0]["input_schema"]["required"]


@pytest.fixture
def ctx(tmp_path):
    mem = refold.init(tmp_path / "store")
    return tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)


GOOD = {"subject": "Alice", "relation": "lives_in", "object": "Berlin", "trace_id": "run-1",
        "justification": "Alice said so in chat #7", "statement": "I moved to Berlin last week"}


@pytest.mark.parametrize("bad, needles", [
    ({**GOOD, "justification": ""}, ["justification", "must not be empty"]),
    ({**GOOD, "justification": "   "}, ["justification", "must not be empty"]),
    ({k: v for k, v in GOOD.items() if k != "justification"}, ["'justification' is a required property"]),
    ({**GOOD, "subject": 3, "colour": "red"}, ["2 problem(s)", "subject: 3 is not of type 'string'",
                                               "Additional properties are not allowed ('colour'"]),
    ({**GOOD, "valid_from": "last tuesday"}, ["valid_from", "ISO-8601"]),
    ({**GOOD, "valid_from": "2024-01-01T00:00:00"}, ["valid_from", "timezone"]),
    ("Alice lives in Berlin", ["must be a JSON object"]),
])
def test_bad_write_input_is_refused_with_every_problem_named(ctx, bad, needles):
    with pytest.raises(ValidationError) as err:
        tools.handle("write_memory", bad, ctx)
    for needle in needles:
        assert needle in str(err.value)
    assert ctx.memory.head().seq == -1  # nothing was written


def test_other_bad_calls(ctx):
    with pytest.raises(ValidationError, match="unknown tool 'delete_memory'.*write_memory, retract_memory, "
                                              "search_memory, memory_as_of, why"):
        tools.handle("delete_memory", {}, ctx)
    with pytest.raises(ValidationError, match="k: 0 is less than the minimum of 1"):
        tools.handle("search_memory", {"query": "x", "k": 0}, ctx)
    with pytest.raises(ValidationError, match="kind: 'people' is not one of"):
        tools.handle("search_memory", {"query": "x", "kind": "people"}, ctx)
    with pytest.raises(ValidationError, match="query: must not be empty"):
        tools.handle("search_memory", {"query": ""}, ctx)
    with pytest.raises(ValidationError, match="'fact_id' is a required property"):
        tools.handle("why", {}, ctx)
    with pytest.raises(ValidationError, match="context must be a ToolContext"):
        tools.handle("why", {"fact_id": "f_1"}, {"tenant": "acme"})
    no_trace = {k: v for k, v in GOOD.items() if k != "trace_id"}
    with pytest.raises(ValidationError, match="'trace_id' is a required property"):
        tools.handle("write_memory", no_trace, ctx)


@pytest.mark.search
def test_write_fold_search_why_round_trip(ctx):
    out = tools.handle("write_memory", {**GOOD, "valid_from": "2024-05-01T00:00:00+00:00"}, ctx)
    assert out["status"] == "recorded" and "next search_memory" in out["note"] and out["trace_id"] == "run-1"
    [event] = [e for e in ctx.memory.events() if e.kind == "memory_written"]
    assert (event.tenant, event.justification, event.trace_id, event.content) == \
        ("acme", "Alice said so in chat #7", "run-1", "I moved to Berlin last week")
    assert event.source == "agent:write_memory" and event.valid_from.year == 2024
    ctx.memory.fold()
    found = tools.handle("search_memory", {"query": "where does Alice live", "k": 3}, ctx)
    json.dumps(found)  # JSON-ready
    top = found["results"][0]
    assert (top["subject"], top["relation"], top["object"]) == ("Alice", "lives_in", "Berlin")
    assert top["valid_from"].startswith("2024-05-01")
    answer = tools.handle("why", {"fact_id": top["fact_id"]}, ctx)
    json.dumps(answer)
    assert answer["events"][0]["justification"] == "Alice said so in chat #7"
    assert answer["events"][0]["trace_id"] == "run-1"
    events = tools.handle("search_memory", {"query": "Berlin", "kind": "events"}, ctx)
    assert events["results"][0]["text"] == "I moved to Berlin last week"
    # a dict context works too
    out = tools.handle("write_memory", {**GOOD, "object": "Rome", "trace_id": "run-2"},
                       {"memory": ctx.memory, "tenant": "acme", "embedder": EMB})
    assert out["trace_id"] == "run-2"


@pytest.mark.search
def test_tenant_and_principal_scoping(ctx):
    mem = ctx.memory
    hr = tools.ToolContext(memory=mem, tenant="acme", readers=("hr",), embedder=EMB)
    tools.handle("write_memory", {**GOOD, "relation": "salary", "object": "90k", "justification": "payroll"}, hr)
    tools.handle("write_memory", GOOD, ctx)
    other = tools.ToolContext(memory=mem, tenant="globex", embedder=EMB)
    tools.handle("write_memory", {**GOOD, "subject": "Gus", "object": "Oslo"}, other)
    mem.fold()
    q = {"query": "Alice salary Berlin", "k": 10}
    as_hr = tools.ToolContext(memory=mem, tenant="acme", principal="hr", embedder=EMB)
    as_intern = tools.ToolContext(memory=mem, tenant="acme", principal="intern", embedder=EMB)
    assert {r["object"] for r in tools.handle("search_memory", q, as_hr)["results"]} == {"90k", "Berlin"}
    assert {r["object"] for r in tools.handle("search_memory", q, as_intern)["results"]} == {"Berlin"}
    assert {r["subject"] for r in tools.handle("search_memory", q, other)["results"]} == {"Gus"}
    salary = mem.facts(relation="salary")["fact_id"][0]
    assert tools.handle("why", {"fact_id": salary}, as_hr)["fact"]["object"] == "90k"
    for scope in (as_intern, other):  # invisible facts are unknown, not forbidden: no leak of existence
        with pytest.raises(NotFoundError, match="no fact with id"):
            tools.handle("why", {"fact_id": salary}, scope)
