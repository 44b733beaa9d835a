"""The erasure on one engine: it refolds the buckets the erased events touched from the surviving
events' cached extractions (no model call) and the state tables then answer what the reference
fold of the rewritten log does: after supersession and corroboration, when the subject named an
entity first (the name moves to the next surface, roll-ups follow), when a retraction that matched
nothing matches once the superseding fact is gone, in shred mode, and for random logs erased
twice. No snapshot stage runs (no "snapshot patch" or "snapshots" in the receipt), the dry run
reads the state tables only, and the removed ``decremental`` options say what replaced them."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

import refold
from tests.fold_helpers import canonical_graph, fact_event, reference_of
from tests.snapshot_helpers import CountingRules

X = "s-x"


def _others(n: int, start: int = 0) -> list[dict]:
    return [fact_event(f"Person{i % 5}", "lives_in" if i % 2 else "works_at",
                       f"Place{i % 6}" if i % 2 else f"Org{i % 3}", day=i) for i in range(start, start + n)]


def _x(subject: str = "Xavier Quill", n: int = 4) -> list[dict]:
    return [fact_event(subject, "likes", f"quillberry{i}", day=60 + i, event_id=f"x-{i}", subjects=[X])
            for i in range(n)] + [
        fact_event(subject, "lives_in", "Place1", day=70, event_id="x-move", subjects=[X]),
        fact_event("Person1", "likes", "Place2", day=71, event_id="x-says", subjects=[X]),  # corroborates
    ]


def _store(tmp_path, x_events: list[dict], *, mode: str = "delete") -> refold.Memory:
    mem = refold.init(tmp_path / "store", mode=mode)
    mem.append([fact_event("Person1", "likes", "Place2", day=5, event_id="p-likes")] + _others(20))
    mem.append(x_events[: len(x_events) // 2])
    mem.append(_others(20, start=20))
    mem.fold()  # a tag in the middle: the rest is an incremental fold's
    mem.append(x_events[len(x_events) // 2:])
    mem.append(_others(9, start=40))
    mem.fold()
    return mem


def _equals_the_reference(root) -> None:
    """The state tables (a fresh Memory's whole-store view) equal the reference fold of the log,
    and a fold after the erasure makes no model call."""
    fresh, ext = refold.open(root, create=False), CountingRules()
    fresh.fold(extractor=ext)
    assert ext.calls == 0
    assert canonical_graph(fresh.graph()) == canonical_graph(reference_of(fresh).graph)


@pytest.mark.slow
def test_the_erasure_refolds_from_cached_extractions_to_the_reference_state(tmp_path):
    mem = _store(tmp_path, _x())
    assert mem.facts(subject="Xavier Quill").height == 5
    receipt = mem.erase(X)
    assert receipt.extraction_calls == 0
    stores = {p["store"]: p for p in receipt.purged}
    assert set(stores) == {"extractions", "state"}
    assert "6 item row(s) removed" in stores["state"]["detail"][0]
    assert "snapshot" not in json.dumps(receipt.purged)
    fresh = refold.open(mem.root, create=False)
    assert fresh.facts(subject="Xavier Quill").height == 0
    # Person1 likes Place2 was also stated by another event: kept, with fewer sources
    kept = fresh.facts(subject="Person1", relation="likes")
    assert kept["sources"].to_list() == [["p-likes"]]
    _equals_the_reference(mem.root)


def test_a_subject_that_named_an_entity_first_renames_it_and_roll_ups_follow(tmp_path):
    x = [fact_event("globex", "located_in", "Oslo", day=1, event_id="x-0", subjects=[X]),  # first "globex"
         fact_event("Xavier", "works_at", "Globex", day=2, event_id="x-1", subjects=[X])]
    mem = refold.init(tmp_path / "store")
    mem.append(x)
    mem.append([fact_event("Globex", "located_in", "Oslo", day=3),
                fact_event("Ann", "works_at", "Globex", day=4)] + _others(12))
    mem.fold()
    assert mem.graph().nodes["default/globex"]["name"] == "globex"
    mem.erase(X)
    graph = refold.open(mem.root, create=False).graph()
    assert graph.nodes["default/globex"]["name"] == "Globex"
    assert graph.nodes["default/ann"]["summary"]["works_at"] == ["Globex"]
    assert any(d["relation"] == "works_in" for *_, d in graph.out_edges("default/ann", data=True))
    _equals_the_reference(mem.root)


def test_a_retraction_that_matched_nothing_ends_the_fact_once_the_superseding_one_is_erased(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_others(20))
    mem.append([fact_event("Person9", "works_at", "Org1", day=30, event_id="a"),
                fact_event("Org1", "located_in", "Place3", day=30, event_id="o")])
    mem.append([fact_event("Person9", "works_at", "Org2", day=31, event_id="x-move", subjects=[X])])
    mem.append([fact_event("Person9", "works_at", "Org1", day=32, event_id="r", kind="retraction")])
    mem.append(_others(9, start=20))
    mem.fold()
    mem.erase(X)
    graph = refold.open(mem.root, create=False).graph(subject="Person9")
    works = [d for *_, d in graph.out_edges("default/person9", data=True) if d["relation"] == "works_at"]
    assert [(d["object"], d["ended_by"], d["superseded_by"]) for d in works] == [("default/org1", "r", None)]
    _equals_the_reference(mem.root)


@pytest.mark.slow
def test_shred_mode_refolds_to_the_reference_state(tmp_path):
    mem = _store(tmp_path, _x(), mode="shred")
    receipt = mem.erase(X)
    assert {p["store"] for p in receipt.purged} == {"extractions", "state", "keys destroyed outside an erasure"}
    assert refold.open(mem.root, create=False).facts(subject="Xavier Quill").height == 0
    _equals_the_reference(mem.root)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.slow
def test_random_logs_erased_twice_equal_the_reference_fold(tmp_path, seed):
    """Two subjects erased one after the other from a random log of people, organisations and
    places (corroboration, supersession, roll-ups, shared entities, mixed spellings)."""
    rng = random.Random(seed)
    people, orgs, places = ["Ann", "Bob", "Cy", "Dee"], ["Acme", "acme", "Globex", "Initech"], ["Oslo", "Rome", "oslo"]
    events = []
    for i in range(70):
        who = rng.choice(["s-a", "s-b", None, None])
        name = {"s-a": "Quinn Ash", "s-b": "Rex Birch"}.get(who) or rng.choice(people)
        kind = rng.random()
        if kind < 0.15:
            e = fact_event(rng.choice(orgs), "located_in", rng.choice(places), day=i, event_id=f"e{i}")
        elif kind < 0.55:
            e = fact_event(name, "works_at", rng.choice(orgs), day=i, event_id=f"e{i}")
        else:
            e = fact_event(name, rng.choice(["lives_in", "likes"]), rng.choice(places + orgs), day=i,
                           event_id=f"e{i}")
        if who:
            e["subjects"] = [who]
        events.append(e)
    mem = refold.init(tmp_path / "store")
    for start in range(0, len(events), 10):
        mem.append(events[start:start + 10])
        if start == 30:
            mem.fold(buckets=4)  # few buckets: erased and surviving facts share them
    mem.fold()
    for subject in ("s-a", "s-b"):
        receipt = mem.erase(subject)
        assert receipt.status == "erased" and receipt.extraction_calls == 0
        _equals_the_reference(mem.root)
        mem = refold.open(mem.root, create=False)


def test_the_dry_run_reads_the_state_tables_only(tmp_path, monkeypatch):
    mem = _store(tmp_path, _x())

    def whole_store(*args, **kwargs):
        raise AssertionError("the dry run built a whole-store graph")

    monkeypatch.setattr(refold.Memory, "state", whole_store)
    monkeypatch.setattr(refold.Memory, "graph", whole_store)
    plan = refold.open(mem.root, create=False).erase(X, dry_run=True)
    impact = next(d for d in plan.derived if d["store"] == "state")
    assert impact["rows"] == 5  # Xavier's four likes and his move; Person1's corroborated fact stays
    assert impact["detail"][:2] == ["5 fact(s) removed: 5 current, 0 historical",
                                    "1 fact(s) also stated by other events: kept with fewer sources"]


def test_the_removed_decremental_options_name_their_replacement(tmp_path):
    from refold.cli import main

    mem = _store(tmp_path, _x())
    for command in (["erase"], ["job", "erase"]):  # `refold erase` and the erase job
        for flag in ("--no-decremental", "--decremental"):
            out = CliRunner().invoke(main, [*command, str(mem.root), "--subject", X, flag])
            assert out.exit_code == 2, out.output
            assert "removed in refold 0.2: erasure always refolds the touched buckets of the state tables" in out.output
    assert refold.open(mem.root, create=False).facts(subject="Xavier Quill").height == 5  # nothing was erased
