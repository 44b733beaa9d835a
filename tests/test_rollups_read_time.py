"""Compose roll-ups are derived when read, not stored in the state tables (issue #17).

Real stores, real Delta tables: the state tables hold no compose row (so an organisation that
moves writes nothing per member of its staff), and every read (one subject, a relation, a tenant,
the whole state, a neighbourhood, ``why``) answers the same derived facts as the reference fold
of the log (refold.fold.reference).
"""

from __future__ import annotations

import pytest

from pathlib import Path

import polars as pl
from deltalake import DeltaTable

import refold
from refold.fold.queries import why
from refold.fold.timeutil import parse_time_or_none
from refold.reads.queries import graph_view
from tests.fold_helpers import canonical_graph, fact_event, reference_facts, reference_of


def _staff_log() -> list[dict]:
    """Acme moves twice; three people work there; a second tenant has an Acme of its own."""
    log = [fact_event("Acme", "located_in", "Boston", day=0)]
    log += [fact_event(f"Person{i}", "works_at", "Acme", day=1 + i) for i in range(3)]
    log += [fact_event("Acme", "located_in", "Paris", day=10), fact_event("Person1", "works_at", "Globex", day=12),
            fact_event("Globex", "located_in", "Oslo", day=0), fact_event("Acme", "located_in", "Rome", day=20),
            fact_event("Person9", "works_at", "Acme", day=3, tenant="other"),
            fact_event("Acme", "located_in", "Lyon", day=1, tenant="other")]
    return log


def _reference(root: Path):
    """The reference fold of the store's log (a fresh Memory reads its events)."""
    return reference_of(refold.open(root)).graph


def _want(graph, ask: dict):
    """What ``Memory.facts(**ask)`` must answer, from the reference graph."""
    return reference_facts(graph, **{**ask, "valid_at": parse_time_or_none(ask.get("valid_at"))})


def _stored_relations(mem) -> set[str]:
    store = mem.state_store(mem.current_spec())
    rows = store.read("facts", layer="derived", columns=["relation"])
    return set(rows["relation"].to_pylist())


def test_compose_rollups_are_not_stored_and_every_read_derives_them(mem):
    mem.append(_staff_log())
    ref = _reference(Path(mem.root))
    asks = [dict(subject="Person0"), dict(subject="Person1"), dict(subject="Person1", relation="works_in"),
            dict(subject="Person9", tenant="other"), dict(relation="works_in"), dict(tenant="other"),
            dict(subject="Person0", valid_at="2024-01-15T00:00:00+00:00"), dict(current_only=True), {}]
    want = [_want(ref, ask) for ask in asks]
    assert any(w.filter(pl.col("derivation") == "works_in").height for w in want)
    mem.fold(full=True)
    assert _stored_relations(mem) == {"employs"}  # the inverse rule's rows only
    for ask, frame in zip(asks, want):
        assert mem.facts(**ask).equals(frame), ask
    store = mem.state_store(mem.current_spec())
    tag = store.tag()
    for subject, depth in (("Person1", 1), ("Person0", 2)):
        from refold.reads.queries import neighbourhood

        expected = neighbourhood(ref, subject=subject, depth=depth)
        assert canonical_graph(mem.graph(subject=subject, depth=depth)) == canonical_graph(expected)
    assert canonical_graph(graph_view(store, tag)) == canonical_graph(ref)


def test_a_moved_organisation_writes_no_row_per_member(mem):
    mem.append([fact_event("Acme", "located_in", "Boston", day=0)]
               + [fact_event(f"Person{i}", "works_at", "Acme", day=1) for i in range(40)])
    mem.fold(full=True)
    store = mem.state_store(mem.current_spec())
    mem.append([fact_event("Acme", "located_in", "Paris", day=5)])
    mem.fold()
    head = store.tag().log_seq
    written = pl.read_delta(store.path("facts")).filter(pl.col("seen_at") == head)
    # the new located_in row and the closed old one; nothing for the 40 members' works_in
    assert sorted(written["relation"].to_list()) == ["located_in", "located_in"]
    ref = _reference(Path(mem.root))
    for who in ("Person0", "Person39"):
        got = mem.facts(subject=who, relation="works_in")
        assert got.height == 2 and got.equals(_want(ref, {"subject": who, "relation": "works_in"}))


@pytest.mark.parametrize("hinted", [True, False], ids=["after-a-read", "searched"])
def test_why_explains_a_rollup_derived_at_read_time(mem, monkeypatch, hinted):
    """``why`` of an id a read of this process derived (its inputs remembered), and of one it
    did not (a search of the inputs' join): the same answer as the reference fold's."""
    from refold.reads import rollups as state_rollups
    mem.append(_staff_log())
    ref = _reference(Path(mem.root))
    mem.fold(full=True)
    by_id = {e.event_id: e for e in mem.events()}
    derived = mem.facts(subject="Person0", relation="works_in")
    assert derived.height == 3 and not derived["current"].all()  # Boston, Paris (closed), Rome
    assert set(derived["fact_id"].to_list()) <= set(state_rollups._HINTS)
    if not hinted:
        monkeypatch.setattr(state_rollups, "_HINTS", {})
    for fact_id in derived["fact_id"].to_list():
        got = mem.why(fact_id)
        assert got == why(ref, fact_id, lambda ids: {i: by_id[i] for i in ids if i in by_id})
        assert len(got["inputs"]) == 2


def test_a_state_of_the_previous_format_is_not_read_and_is_refolded_in_full(mem):
    mem.append(_staff_log())
    mem.fold(full=True)
    store = mem.state_store(mem.current_spec())
    # what a fold of the previous format left: its tag names format "1"
    DeltaTable(store.path("facts")).alter.set_table_properties({"refold.state_format": "1"},
                                                                raise_if_not_exists=False)
    old = refold.open(mem.root)
    assert old.state_store(old.current_spec()).tag() is None  # not read as this format's state
    want = _want(_reference(Path(mem.root)), {"subject": "Person1"})
    assert old.facts(subject="Person1").equals(want)  # the whole log overlaid on an empty state
    report = old.fold()
    assert report.started_from == -1  # a full refold
    tag = old.state_store(old.current_spec()).tag()
    assert tag is not None and [r[0] for r in tag.rollups] == ["works_in"]
    assert refold.open(mem.root).facts(subject="Person1").equals(want)


def test_why_in_a_process_that_read_nothing_answers_as_a_warm_one(mem):
    """``why`` of a stored fact, a stored (inverse) roll-up and a compose roll-up, as a process
    that never read them (no hints: it locates the stored ids' buckets by id, and reads a found
    roll-up's inputs from their subjects' buckets only), answers what a warm process does, with
    subjects spread over many buckets."""
    from refold.reads.rollups import forget_hints

    log = [fact_event(org, "located_in", city, day=0) for org, city in (("Acme", "Boston"), ("Globex", "Oslo"))]
    log += [fact_event(f"Person{i}", "works_at", ("Acme", "Globex")[i % 2], day=1 + i) for i in range(24)]
    log += [fact_event("Acme", "located_in", "Paris", day=40)]
    mem.append(log)
    mem.fold(full=True)
    rows = pl.concat([mem.facts(subject=f"Person{i}") for i in (3, 8, 17)] + [mem.facts(subject="Acme")])
    ids = {d: rows.filter(pl.col("derivation") == d)["fact_id"].to_list() for d in ("extracted", "works_in", "employs")}
    assert all(ids.values()), ids
    warm = {i: mem.why(i) for found in ids.values() for i in found}
    for fact_id, answer in warm.items():
        forget_hints()
        assert refold.open(mem.root).why(fact_id) == answer, fact_id
