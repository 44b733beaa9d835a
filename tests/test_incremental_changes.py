"""The merge's change log (``GraphBuilder.changes``) and the roll-up refresh that reads it
(fold/merge.py, fold/incremental.py; pure core, hypothesis).

A partial refresh looks only at the merged edges the log names, and for an edge that was only
closed it keeps the derived edges' dicts and recomputes their valid time: so the log must name
every merged edge ``apply`` made or changed, and an edge it files as closed (and not as made or
corroborated) must differ in nothing but ``valid_to``, ``superseded_by`` and ``ended_by``.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.incremental import LiveFold
from refold.fold.merge import GraphBuilder, MergeChanges
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules, check_indexes, memory_log, memory_steps, recomputed

step = memory_steps(retract_one_in=4)
CLOSING = {"valid_to", "superseded_by", "ended_by"}


def _merged(builder: GraphBuilder) -> dict[str, dict]:
    graph = builder.graph
    return {fid: copy.deepcopy(graph.edges[u, v, fid]) for fid, (u, v) in builder._edges.items()}


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=40), data=st.data())
def test_the_change_log_names_every_edge_apply_made_or_changed(steps, data):
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    builder = GraphBuilder(spec=spec)
    cut = data.draw(st.integers(0, len(events)), label="log kept from")
    for e in events[:cut]:
        builder.apply(e, extractions.get(e.event_id))
    before = _merged(builder)
    builder.changes = MergeChanges()
    for e in events[cut:]:
        builder.apply(e, extractions.get(e.event_id))
    after = _merged(builder)
    changes = builder.changes
    assert changes.added == after.keys() - before.keys()
    changed = {fid for fid in before if after[fid] != before[fid]}
    assert changed == (changes.grown | changes.closed) - changes.added
    for fid in changes.closed - changes.added - changes.grown:  # only closed: nothing else differs
        assert {k for k in after[fid] if after[fid][k] != before[fid][k]} <= CLOSING
        assert before[fid]["valid_to"] is None and after[fid]["valid_to"] is not None


def test_a_plain_builder_keeps_no_change_log():
    spec = CountingRules().default_spec()
    events = memory_log([("Ann", "works_at", "Acme", 1, False, False)])
    builder = GraphBuilder(spec=spec)
    builder.apply(events[0], CountingRules().extract(events, spec)[0])
    assert builder.changes is None


@settings(max_examples=120, deadline=None)
@given(steps=st.lists(step, min_size=2, max_size=50), data=st.data())
def test_refreshes_from_the_change_log_equal_a_full_recompute(steps, data):
    """Refreshes at random points (each partial unless more than half of the entities were
    touched), retractions one step in four, times in two offsets: the state and the derived-edge
    indexes equal roll-ups from scratch after every one."""
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    points = sorted(set(data.draw(st.lists(st.integers(1, len(events)), max_size=8), label="refresh after")))
    done = 0
    for cut in [*points, len(events)]:
        for e in events[done:cut]:
            live.apply(e, extractions.get(e.event_id))
        done = cut
        live.refresh()
        assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
        check_indexes(live)
        assert live.builder.changes == MergeChanges()


def _refreshed(steps: list[tuple]) -> list[str]:
    """Fold ``steps`` refreshing after each; the canonical graph after each refresh, checked."""
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    states = []
    for e in events:
        live.apply(e, extractions.get(e.event_id))
        live.refresh()
        assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
        check_indexes(live)
        states.append(canonical_graph(live.graph))
    return states


def test_closing_an_input_shortens_its_derived_edges_in_place():
    """Ann leaves Acme (her works_at is closed): her works_in and Acme's employs edge keep their
    dicts and end when she left; Acme moving afterwards closes only the old located_in."""
    spec = CountingRules().default_spec()
    events = memory_log([
        ("Ann", "likes", "Rome", None, False, False),
        ("Acme", "located_in", "Oslo", 1, False, True),
        ("Ann", "works_at", "Acme", 2, False, False),
        ("Ann", "works_at", "Globex", 5, False, True),
        ("Acme", "located_in", "Rome", 9, False, False),
    ])
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    for e in events[:3]:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()
    derived_before = {k: d for u, v, k, d in live.graph.edges(keys=True, data=True) if d["derivation"] != "extracted"}
    assert {d["relation"] for d in derived_before.values()} == {"works_in", "employs"}
    live.apply(events[3], extractions.get(events[3].event_id))
    assert live.builder.changes.closed - live.builder.changes.added  # Ann's Acme job, only closed
    live.refresh()
    for k, old in derived_before.items():  # the same dict objects, now closed when she left
        (u, v), _ = live._derived[k]
        assert live.graph.edges[u, v, k] is old and old["valid_to"] == events[3].valid_from
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    live.apply(events[4], extractions.get(events[4].event_id))
    live.refresh()
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    check_indexes(live)


def test_a_retraction_or_a_backdated_close_that_empties_an_overlap_drops_the_derived_edge():
    _refreshed([
        ("Ann", "likes", "Rome", None, False, False),
        ("Acme", "located_in", "Oslo", 10, False, False),
        ("Ann", "works_at", "Acme", 20, False, True),
        ("Acme", "located_in", "Rome", 20, False, False),  # Oslo ends where Ann starts: no overlap
        ("Ann", "works_at", "Acme", None, True, False),  # retracted: works_in (Rome) ends now
        ("Bo", "works_at", "Acme", 30, False, False),
        ("Acme", "located_in", "Oslo", 5, False, True),  # backdated: history, closed at birth
    ])


def test_an_input_closed_at_the_instant_its_partner_ended_gives_the_recomputed_offset():
    """Acme leaves Oslo on day 10 (UTC); Ann leaves Acme at that same instant, stated in Paris
    time: her works_in (Oslo) is recomputed, as a full roll-up does, and takes her end (the
    first input's) — not kept because it already ended then."""
    states = _refreshed([
        ("Ann", "likes", "Rome", None, False, False),
        ("Acme", "located_in", "Oslo", 1, False, False),
        ("Ann", "works_at", "Acme", 2, False, False),
        ("Acme", "located_in", "Rome", 10, False, False),
        ("Ann", "works_at", "Globex", 10, False, True),
    ])
    assert "+02:00" in states[-1] and states[-1] != states[-2]


def test_a_hub_subjects_summary_follows_its_open_edges_only():
    """An employer with many employs edges moves: its summary (from the merge's open-edge index)
    names its new city; a person's summary keeps every open relation across refreshes."""
    _refreshed([
        ("Ann", "likes", "Rome", None, False, False),
        ("Ann", "works_at", "Acme", 1, False, False),
        ("Bo", "works_at", "Acme", 2, False, False),
        ("Acme", "located_in", "Oslo", 3, False, False),
        ("Ann", "lives_in", "Oslo", 4, False, False),
        ("Acme", "located_in", "Rome", 5, False, False),
        ("Ann", "lives_in", "Oslo", None, True, False),  # retracted: Ann's summary loses lives_in
        ("Ann", "lives_in", "Rome", 6, False, False),
        ("Acme", "likes", "Bo", 7, False, False),
    ])
