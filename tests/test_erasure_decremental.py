"""Decremental erasure (pure core): patching a fold to drop erased events == folding the log with
those events tombstoned, from scratch (hypothesis over random logs, extractions and erasure sets).

The logs are built to hit every rule the patch must respect: supersession (also by a fact about
the past), corroboration (also an event repeating its own fact), retractions (also ones that
matched nothing before the erasure and match something after it), surface forms that become a
node's name or aliases, facts the merge rejects, two tenants, compose and inverse roll-ups, and
events appended after the patch.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.decremental import Inputs, NotDecremental, remove_events
from refold.fold.events import Event, Fact
from refold.fold.extract import ExtractedFact, Extraction, Rejection
from refold.fold.incremental import LiveFold
from refold.folding import build_state
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SPEC = CountingRules().default_spec()
SURFACES = {"Ann": ("Ann", "ann", "ANN "), "Bo": ("Bo", "the Bo"), "Acme": ("Acme", "acme")}
OBJECTS = ("Oslo", "oslo", "Rome", "Acme", "Globex", "low", "high", "Bo")
RELATIONS = ("lives_in", "works_at", "located_in", "likes", "risk_tolerance")

fact = st.tuples(st.sampled_from(sorted(SURFACES)), st.integers(0, 2), st.sampled_from(RELATIONS),
                 st.sampled_from(OBJECTS + ("!!!",)),  # "!!!" has no entity key: rejected by the merge
                 st.one_of(st.none(), st.integers(0, 60)))
step = st.tuples(
    st.sampled_from(["facts"] * 6 + ["retraction"]),
    st.lists(fact, min_size=0, max_size=3),
    st.sampled_from(["t1", "t1", "t1", "t2"]),
    st.booleans(),  # a rejection in the extraction
    st.one_of(st.none(), st.integers(0, 60)),  # the event's valid_from day
)


def _log(steps) -> tuple[list[Event], dict[str, Extraction]]:
    events, extractions, link = [], {}, "genesis"
    for seq, (kind, facts, tenant, rejected, day) in enumerate(steps):
        link = hashlib.sha256(f"{link}/{seq}".encode()).hexdigest()
        eid = f"e{seq:03d}"
        made = [ExtractedFact(subject=SURFACES[s][min(i, len(SURFACES[s]) - 1)], relation=r, object=o,
                              valid_from=None if d is None else T0 + timedelta(days=d))
                for s, i, r, o, d in facts]
        first = made[0] if made else ExtractedFact(subject="Ann", relation="lives_in", object="Oslo")
        events.append(Event(
            seq=seq, event_id=eid, recorded_at=T0 + timedelta(days=400, seconds=seq), table_version=seq,
            kind="retraction" if kind == "retraction" else "memory_written", tenant=tenant,
            source="test", content=f"event {seq}", principals=(f"p{seq % 3}",),
            valid_from=None if day is None else T0 + timedelta(days=day), justification="test",
            fact=Fact(first.subject, first.relation, first.object) if kind == "retraction" else None,
            link=link,
        ))
        if kind != "retraction":
            extractions[eid] = Extraction(
                event_id=eid, spec_hash=SPEC.hash, facts=tuple(made),
                rejected=(Rejection(reason="schema", detail="test"),) if rejected else ())
    return events, extractions


def _inputs(events, extractions, erased, calls=None) -> Inputs:
    by_id = {e.event_id: e for e in events}

    def _events(ids):
        if calls is not None:
            calls.append(len(ids))
        return {i: by_id[i] for i in ids if i in by_id and i not in erased}

    return Inputs(
        events=_events,
        extractions=lambda ids: {i: extractions[i] for i in ids if i in extractions and i not in erased},
        retractions=lambda until: [e for e in events if e.kind == "retraction" and e.seq <= until
                                   and e.event_id not in erased],
    )


def _tombstoned(events, erased):
    return [e.with_(kind="tombstone", tenant=None, source=None, content=None, fact=None, valid_from=None,
                    principals=()) if e.event_id in erased else e for e in events]


def _folded(events, extractions) -> LiveFold:
    live = LiveFold.empty(SPEC)
    for e in events:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()
    return live


def _assert_equal(live: LiveFold, events, extractions) -> None:
    full = build_state(SPEC, events, extractions)
    assert canonical_graph(live.detached_graph()) == canonical_graph(full.graph)
    stats = {k: v for k, v in full.stats.items() if k != "derived"}
    assert dict(live.builder.stats.__dict__) == stats
    assert live.derived_count == full.stats["derived"]


@settings(max_examples=250, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=30), data=st.data())
def test_patched_fold_equals_a_fold_of_the_log_without_the_erased_events(steps, data):
    events, extractions = _log(steps)
    cut = data.draw(st.integers(1, len(events)), label="state after n events")
    erased = set(data.draw(st.lists(st.sampled_from([e.event_id for e in events[:cut]]), max_size=6),
                           label="erased"))
    live = _folded(events[:cut], extractions)
    remove_events(live, erased, {i: extractions[i] for i in erased if i in extractions},
                  _inputs(events, extractions, erased))
    survivors = {i: x for i, x in extractions.items() if i not in erased}
    _assert_equal(live, _tombstoned(events[:cut], erased), survivors)
    assert not live.contained & erased
    for e in _tombstoned(events[cut:], set()):  # the patched fold goes on like any other
        live.apply(e, extractions.get(e.event_id))
    _assert_equal(live, _tombstoned(events, erased), survivors)


def test_erasing_the_first_mention_renames_the_entity_and_its_roll_ups_follow():
    steps = [("facts", [("Acme", 1, "located_in", "Oslo", None)], "t1", False, None),   # "acme" first
             ("facts", [("Acme", 0, "located_in", "Oslo", None)], "t1", False, None),   # "Acme" alias
             ("facts", [("Ann", 0, "works_at", "Acme", None)], "t1", False, None)]      # roll-up: works_in
    events, extractions = _log(steps)
    live = _folded(events, extractions)
    assert live.graph.nodes["t1/acme"]["name"] == "acme"
    patch = remove_events(live, {"e000"}, {"e000": extractions["e000"]}, _inputs(events, extractions, {"e000"}))
    assert patch.nodes_renamed == 1 and live.graph.nodes["t1/acme"]["name"] == "Acme"
    assert live.graph.nodes["t1/ann"]["summary"]["works_at"] == ["Acme"]
    _assert_equal(live, _tombstoned(events, {"e000"}), {k: v for k, v in extractions.items() if k != "e000"})


def test_a_retraction_that_matched_nothing_matches_once_the_superseding_fact_is_erased():
    steps = [("facts", [("Ann", 0, "lives_in", "Oslo", 1)], "t1", False, None),
             ("facts", [("Ann", 0, "lives_in", "Rome", 5)], "t1", False, None),   # erased: closed Oslo
             ("retraction", [("Ann", 0, "lives_in", "Oslo", None)], "t1", False, 9)]
    events, extractions = _log(steps)
    live = _folded(events, extractions)
    remove_events(live, {"e001"}, {"e001": extractions["e001"]}, _inputs(events, extractions, {"e001"}))
    edges = [d for *_, d in live.graph.edges(data=True) if d["derivation"] == "extracted"]
    assert len(edges) == 1 and edges[0]["ended_by"] == "e002" and edges[0]["superseded_by"] is None
    _assert_equal(live, _tombstoned(events, {"e001"}), {k: v for k, v in extractions.items() if k != "e001"})


def test_only_the_erased_keys_are_remerged():
    steps = [("facts", [("Ann", 0, "lives_in", "Oslo", None)], "t1", False, None)] + [
        ("facts", [("Bo", 0, "likes", f"{o}", None)], "t1", False, None) for o in OBJECTS] + [
        ("facts", [("Ann", 0, "lives_in", "Rome", None)], "t1", False, None)]
    events, extractions = _log(steps)
    live = _folded(events, extractions)
    asked: list[int] = []
    last = events[-1].event_id
    patch = remove_events(live, {last}, {last: extractions[last]}, _inputs(events, extractions, {last}, asked))
    assert patch.keys == 1 and patch.survivors == 1 and asked == [1]  # Bo's likes were not read


def test_a_missing_surviving_extraction_refuses_the_patch():
    steps = [("facts", [("Ann", 0, "lives_in", "Oslo", None)], "t1", False, None),
             ("facts", [("Ann", 0, "lives_in", "Rome", None)], "t1", False, None)]
    events, extractions = _log(steps)
    live = _folded(events, extractions)
    inputs = _inputs(events, {"e001": extractions["e001"]}, {"e001"})
    with pytest.raises(NotDecremental, match="no cached extraction"):
        remove_events(live, {"e001"}, {"e001": extractions["e001"]}, inputs)
