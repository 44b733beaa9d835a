"""The fold on real stores: essays' examples, provenance, lineage, determinism, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import refold
from refold.fold.errors import NotFoundError, ValidationError
from tests.fold_helpers import canonical_graph, fact_event


def test_risk_tolerance_low_then_high_keeps_both_with_intervals(mem):
    mem.append(fact_event("Maria", "risk_tolerance", "low", day=0))
    mem.append(fact_event("Maria", "risk_tolerance", "high", day=100))
    frame = mem.facts(subject="maria", relation="risk_tolerance").sort("valid_from")
    assert frame["object"].to_list() == ["low", "high"]
    low, high = frame.to_dicts()
    assert low["valid_to"] == high["valid_from"]  # closed exactly when the new value began
    assert (low["current"], high["current"]) == (False, True)
    assert mem.facts(subject="Maria", valid_at="2024-02-01T00:00:00+00:00")["object"].to_list() == ["low"]


def test_three_address_changes_give_four_facts_exactly_one_current(mem):
    for day, city in enumerate(["Lisbon", "Porto", "Madrid", "Berlin"]):
        mem.append(fact_event("Maria", "lives_in", city, day=day * 30))
    frame = mem.facts(subject="Maria", relation="lives_in")
    assert frame.height == 4
    assert frame.filter(frame["current"])["object"].to_list() == ["Berlin"]
    closed = frame.filter(~frame["current"]).sort("valid_from")
    assert closed["object"].to_list() == ["Lisbon", "Porto", "Madrid"]


def test_relation_alias_and_entity_resolution(mem):
    mem.append(fact_event("The Acme Corp.", "based_in", "Berlin", day=0))
    mem.append(fact_event("acme corp", "located_in", "Munich", day=5))
    frame = mem.facts(subject="ACME CORP", relation="located_in")
    assert frame.height == 2 and frame.filter(frame["current"])["object"].to_list() == ["Munich"]
    node = mem.graph().nodes["default/acme corp"]
    assert node["name"] == "The Acme Corp."  # the first surface seen
    # (a read overlays events no fold merged yet: their aliases wait for the fold, docs/fold.md "Reads")
    mem.fold()
    node = mem.graph().nodes["default/acme corp"]
    assert node["name"] == "The Acme Corp." and node["aliases"] == ["acme corp"]


def test_corroboration_adds_sources_instead_of_edges(mem):
    mem.append(fact_event("Bob", "works_at", "Acme", day=0, event_id="e1"))
    mem.append(fact_event("Bob", "works_at", "Acme", day=3, event_id="e2"))
    frame = mem.facts(relation="works_at")
    assert frame.height == 1 and frame["sources"].to_list() == [["e1", "e2"]]


def test_retraction_closes_the_open_fact(mem):
    mem.append(fact_event("Tom", "allergic_to", "penicillin", day=0))
    retraction = fact_event("Tom", "allergic_to", "penicillin", day=10)
    retraction["kind"] = "retraction"
    mem.append(retraction)
    frame = mem.facts(subject="Tom")
    assert frame.height == 1 and frame["current"].to_list() == [False]


def test_out_of_order_history_does_not_replace_the_current_value(mem):
    mem.append(fact_event("Ana", "lives_in", "Madrid", day=100))
    mem.append(fact_event("Ana", "lives_in", "Seville", day=10))  # learned later, true earlier
    frame = mem.facts(subject="Ana").sort("valid_from")
    assert frame["object"].to_list() == ["Seville", "Madrid"]
    assert frame["current"].to_list() == [False, True]
    assert frame["valid_to"][0] == frame["valid_from"][1]


def test_tenants_never_share_entities(mem):
    mem.append(fact_event("Bob", "lives_in", "Paris", day=0, tenant="a"))
    mem.append(fact_event("Bob", "lives_in", "Rome", day=1, tenant="b"))
    frame = mem.facts(subject="Bob", current_only=True).sort("tenant")
    assert frame["object"].to_list() == ["Paris", "Rome"]
    assert mem.facts(tenant="a")["object"].to_list() == ["Paris"]


def test_every_edge_has_existing_source_events(mem):
    from refold.demo import sample_lines

    mem.append_jsonl(sample_lines())
    mem.fold()
    ids = set(mem.log()["event_id"].to_list())
    graph = mem.graph()
    assert graph.number_of_edges() > 10
    for _, _, d in graph.edges(data=True):
        assert d["sources"] and set(d["sources"]) <= ids


def test_derived_edge_lineage_is_union_of_inputs_and_goes_with_them(mem):
    mem.append(fact_event("Bob", "works_at", "Acme", day=0, event_id="w"))
    mem.append(fact_event("Acme", "located_in", "Berlin", day=0, event_id="l"))
    derived = mem.facts(relation="works_in")
    assert derived["object"].to_list() == ["Berlin"]
    assert sorted(derived["sources"][0]) == ["l", "w"]
    answer = mem.why(derived["fact_id"][0])
    assert answer["derivation"] == "works_in"
    assert {i["fact"]["relation"] for i in answer["inputs"]} == {"works_at", "located_in"}
    # without one input (the log prefix before it), the derived edge does not exist
    assert mem.facts(relation="works_in", as_of=1).height == 0
    inverse = mem.facts(relation="employs")
    assert inverse["subject"].to_list() == ["Acme"] and inverse["sources"].to_list() == [["w"]]


def test_why_reaches_source_events_with_provenance(mem):
    mem.append(fact_event("Maria", "lives_in", "Porto", day=1, trace_id="trace-9",
                          ingestion_run="run-7", source="tool#write_memory"))
    fid = mem.facts()["fact_id"][0]
    answer = mem.why(fid)
    (event,) = answer["events"]
    assert event["trace_id"] == "trace-9" and event["ingestion_run"] == "run-7"
    assert event["justification"] == "test statement about Maria"
    assert "Porto" in event["quote"] and event["seq"] == 0


def test_fold_twice_gives_the_same_graph_and_counts(mem):
    from refold.demo import sample_lines

    mem.append_jsonl(sample_lines())
    first = mem.fold()
    g1 = canonical_graph(mem.graph())
    second = mem.fold()
    assert second.extraction_calls == 0  # everything came from the cache
    assert canonical_graph(refold.open(mem.root).graph()) == g1
    assert (first.facts, first.derived_facts) == (second.facts, second.derived_facts)


@pytest.mark.slow
def test_fold_is_deterministic_in_a_fresh_process(mem):
    from refold.demo import sample_lines

    mem.append_jsonl(sample_lines())
    mem.fold()
    here = canonical_graph(mem.graph())
    code = ("import sys, refold; from tests.fold_helpers import canonical_graph; "
            "sys.stdout.write(canonical_graph(refold.open(sys.argv[1]).graph()))")
    out = subprocess.run([sys.executable, "-c", code, mem.root], capture_output=True, text=True,
                         check=True, cwd=str(__import__("pathlib").Path(__file__).parents[1]))
    assert out.stdout == here


def test_unknown_fact_id_is_a_clear_error(mem):
    mem.append(fact_event("A", "likes", "B", day=0))
    with pytest.raises(NotFoundError, match="no fact with id 'f_nope'.*refold facts"):
        mem.why("f_nope")


@pytest.mark.parametrize("bad", ["yesterday", "2024-13-01T00:00:00+00:00", "2024-01-01T00:00:00"])
def test_malformed_valid_at_is_a_clear_error(mem, bad):
    mem.append(fact_event("A", "likes", "B", day=0))
    with pytest.raises(ValidationError, match="valid_at"):
        mem.facts(valid_at=bad)


@pytest.mark.parametrize("bad", ["last tuesday", "2024-01-01T00:00:00", -1])
def test_malformed_as_of_is_a_clear_error(mem, bad):
    mem.append(fact_event("A", "likes", "B", day=0))
    with pytest.raises(ValidationError, match="as_of"):
        mem.facts(as_of=bad)


def test_unknown_extractor_is_a_clear_error(mem):
    with pytest.raises(ValidationError, match="unknown extractor 'gpt-9'.*rules"):
        mem.fold(extractor="gpt-9")


def test_spec_is_recorded_in_the_log_before_use(mem):
    mem.append(fact_event("A", "likes", "B", day=0))
    report = mem.fold()
    specs = mem.log().filter(mem.log()["kind"] == "spec_changed")
    assert specs.height == 1
    assert json.loads(specs["content"][0])["extractor"] == "rules"
    assert specs["source"][0].endswith(report.spec_hash)
    mem.fold()
    assert mem.log().filter(mem.log()["kind"] == "spec_changed").height == 1  # not re-recorded


def test_hand_built_new_events_are_validated_like_jsonl(mem):
    from refold.fold.errors import EventValidationError
    from refold.fold.events import NewEvent

    with pytest.raises(EventValidationError, match="unknown kind 'bogus'"):
        mem.append(NewEvent(kind="bogus", content="x", source="s"))
    with pytest.raises(EventValidationError, match="justification"):
        mem.append(NewEvent(kind="memory_written", content="x", source="s",
                            fact=refold.Fact("a", "b", "c")))
    assert mem.log().height == 0
    assert mem.append(NewEvent(kind="chat_turn", content="hello", source="chat#1", event_id="e1")) == [0]


def test_group_commit_memory_appends_from_threads(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    refold.init(tmp_path / "g")
    shared = refold.open(tmp_path / "g", group_commit=True)
    with ThreadPoolExecutor(8) as pool:
        seqs = list(pool.map(lambda i: shared.append(fact_event("A", "likes", f"x{i}", day=i))[0], range(40)))
    assert sorted(seqs) == list(range(40))
    assert shared.verify().ok
