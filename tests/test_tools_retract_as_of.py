"""The ``retract_memory`` and ``memory_as_of`` agent tools (issue #20 item 3), through
``refold.agent.tools.handle`` on real stores: a retraction appends a ``retraction`` event that closes the
fact (history keeps it), and ``memory_as_of`` answers what memory held at a past record time."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

import refold
from refold.agent import tools
from refold.fold.errors import NotFoundError, ValidationError

EMB = "hashing"
WRITE = {"subject": "Alice", "relation": "lives_in", "object": "Berlin", "trace_id": "run-1",
         "justification": "Alice said so in chat #7"}
WHY_WRONG = {"justification": "Alice corrected it in chat #9", "trace_id": "run-2"}


@pytest.fixture
def ctx(tmp_path):
    mem = refold.init(tmp_path / "store")
    return tools.ToolContext(memory=mem, tenant="acme", embedder=EMB)


def _current(ctx):
    return {(r["subject"], r["object"]) for r in ctx.memory.facts(tenant="acme", current_only=True).to_dicts()}


@pytest.mark.search
def test_retract_by_fact_id_closes_the_fact_and_keeps_history(ctx):
    tools.handle("write_memory", WRITE, ctx)
    [fact_id] = ctx.memory.facts(current_only=True)["fact_id"].to_list()
    out = tools.handle("retract_memory", {"fact_id": fact_id, **WHY_WRONG}, ctx)
    json.dumps(out)
    assert out["status"] == "recorded" and out["retracts"] == [fact_id] and out["trace_id"] == "run-2"
    [event] = [e for e in ctx.memory.events() if e.kind == "retraction"]
    assert (event.tenant, event.justification, event.trace_id, event.source) == \
        ("acme", "Alice corrected it in chat #9", "run-2", "agent:retract_memory")
    assert (event.fact.subject, event.fact.relation, event.fact.object) == ("Alice", "lives_in", "Berlin")
    ctx.memory.fold()
    assert _current(ctx) == set()
    [closed] = ctx.memory.facts(tenant="acme").to_dicts()  # closed, not deleted
    assert closed["fact_id"] == fact_id and closed["valid_to"] is not None
    assert tools.handle("search_memory", {"query": "where does Alice live"}, ctx)["results"] == []


def test_retract_by_subject_relation_object_with_a_valid_to(ctx):
    tools.handle("write_memory", WRITE, ctx)
    tools.handle("write_memory", {**WRITE, "relation": "likes", "object": "Jazz"}, ctx)
    out = tools.handle("retract_memory", {"subject": "alice", "relation": "likes", "object": "jazz",
                                          "valid_to": "2025-01-01T00:00:00+00:00", **WHY_WRONG}, ctx)
    assert len(out["retracts"]) == 1
    ctx.memory.fold()
    assert _current(ctx) == {("Alice", "Berlin")}
    [jazz] = ctx.memory.facts(relation="likes").to_dicts()
    assert jazz["valid_to"] == datetime(2025, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("bad, needle", [
    ({"fact_id": "f_1", "trace_id": "t"}, "'justification' is a required property"),
    ({"fact_id": "f_1", "justification": "wrong"}, "'trace_id' is a required property"),
    ({"fact_id": "f_1", "justification": " ", "trace_id": "t"}, "justification: must not be empty"),
    ({"subject": "Alice", **WHY_WRONG}, "missing: relation, object"),
    ({"fact_id": "f_1", "subject": "Alice", **WHY_WRONG}, "either fact_id or subject, relation and object"),
])
def test_bad_retractions_are_refused_and_write_nothing(ctx, bad, needle):
    tools.handle("write_memory", WRITE, ctx)
    with pytest.raises(ValidationError, match=needle):
        tools.handle("retract_memory", bad, ctx)
    assert [e.kind for e in ctx.memory.events()] == ["memory_written"]


def test_retracting_an_unknown_or_invisible_fact_is_not_found(ctx):
    tools.handle("write_memory", WRITE, ctx)
    [fact_id] = ctx.memory.facts()["fact_id"].to_list()
    other = tools.ToolContext(memory=ctx.memory, tenant="globex", embedder=EMB)
    with pytest.raises(NotFoundError, match="no current fact with id"):
        tools.handle("retract_memory", {"fact_id": fact_id, **WHY_WRONG}, other)  # another tenant's fact
    with pytest.raises(NotFoundError, match=r"no current fact \(Alice, lives_in, Paris\)"):
        tools.handle("retract_memory", {"subject": "Alice", "relation": "lives_in", "object": "Paris",
                                        **WHY_WRONG}, ctx)
    tools.handle("retract_memory", {"fact_id": fact_id, **WHY_WRONG}, ctx)
    ctx.memory.fold()
    with pytest.raises(NotFoundError, match="already be closed"):
        tools.handle("retract_memory", {"fact_id": fact_id, **WHY_WRONG}, ctx)
    assert [e.kind for e in ctx.memory.events() if e.kind != "spec_changed"] == ["memory_written", "retraction"]


def test_memory_as_of_answers_what_memory_held_then(ctx):
    mem = ctx.memory
    tools.handle("write_memory", WRITE, ctx)
    tools.handle("write_memory", {**WRITE, "subject": "Bob", "object": "Rome"}, ctx)
    mem.fold()
    between = mem.log()["recorded_at"].max()
    [berlin] = mem.facts(subject="Alice")["fact_id"].to_list()
    tools.handle("retract_memory", {"fact_id": berlin, **WHY_WRONG}, ctx)
    tools.handle("write_memory", {**WRITE, "object": "Paris"}, ctx)
    mem.fold()

    then = tools.handle("memory_as_of", {"as_of": between.isoformat()}, ctx)
    json.dumps(then)
    assert then["as_of"] == between.isoformat() and then["count"] == 2 and not then["truncated"]
    assert {(f["subject"], f["object"]) for f in then["facts"]} == {("Alice", "Berlin"), ("Bob", "Rome")}
    assert all(f["valid_to"] is None for f in then["facts"])  # as known then: still open
    now = tools.handle("memory_as_of", {"as_of": datetime.now(timezone.utc).isoformat(), "subject": "alice"}, ctx)
    assert [(f["subject"], f["object"]) for f in now["facts"]] == [("Alice", "Paris")]
    one = tools.handle("memory_as_of", {"as_of": between.isoformat(), "limit": 1, "relation": "lives_in"}, ctx)
    assert one["count"] == 2 and one["truncated"] and [f["subject"] for f in one["facts"]] == ["Bob"]  # newest first
    before = tools.handle("memory_as_of", {"as_of": "2000-01-01T00:00:00+00:00"}, ctx)
    assert before["facts"] == [] and before["count"] == 0
    other = tools.ToolContext(memory=mem, tenant="globex", embedder=EMB)
    assert tools.handle("memory_as_of", {"as_of": between.isoformat()}, other)["facts"] == []
    with pytest.raises(ValidationError, match="as_of: 'yesterday' is not an ISO-8601 time"):
        tools.handle("memory_as_of", {"as_of": "yesterday"}, ctx)
