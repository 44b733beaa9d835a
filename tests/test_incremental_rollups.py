"""A full roll-up fills the compose rules' partner lists (fold/incremental.py, ``_partners``) in its
pass over the edges, so the next partial refreshes use them instead of scanning a hub's edges:
the lists equal what a scan finds, stay equal as facts arrive, and refreshes that use them equal
roll-ups recomputed from scratch, attribute for attribute (pure core, hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.incremental import LiveFold
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import T0, CountingRules, check_indexes, memory_log, memory_steps, recomputed

step = memory_steps()


def scanned(live: LiveFold, node: str, relation: str, leaving: bool) -> dict[str, dict]:
    """The merged edges of ``relation`` leaving (entering) ``node``, found by a scan."""
    adjacency = (live.graph._succ if leaving else live.graph._pred)[node]
    return {k: d for keydict in adjacency.values() for k, d in keydict.items()
            if d["relation"] == relation and d["derivation"] == "extracted"}


def check_partner_lists(live: LiveFold, *, complete: bool) -> None:
    """Every kept list holds exactly the scanned edges (the graph's own dicts); ``complete``: a
    list is kept for every node with such an edge (right after a full roll-up)."""
    compose = [r for r in live.spec.rollups if r.kind == "compose"]
    wanted = {(n, False, r.inputs[0]) for r in compose for n in live.graph} | \
             {(n, True, r.inputs[1]) for r in compose for n in live.graph}
    for (node, leaving), lists in live._partners.items():
        for relation, found in lists.items():
            expected = scanned(live, node, relation, leaving)
            assert found.keys() == expected.keys(), (node, leaving, relation)
            assert all(found[k] is expected[k] for k in expected)
    if complete:
        for node, leaving, relation in wanted:
            if scanned(live, node, relation, leaving):
                assert relation in live._partners.get((node, leaving), {}), (node, leaving, relation)


def _applied(live: LiveFold, events, extractions) -> None:
    for e in events:
        live.apply(e, extractions.get(e.event_id))


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(step, min_size=2, max_size=50), data=st.data())
def test_a_full_rollup_lists_every_partner_and_later_refreshes_equal_a_recompute(steps, data):
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    first = data.draw(st.integers(1, len(events)), label="events in the full roll-up")
    live = LiveFold.empty(spec)
    _applied(live, events[:first], extractions)
    live.refresh()  # built from the start: a full roll-up
    check_partner_lists(live, complete=True)
    check_indexes(live)
    done = first
    while done < len(events):
        cut = data.draw(st.integers(done + 1, len(events)), label="next refresh after")
        _applied(live, events[done:cut], extractions)
        done = cut
        live.refresh()
        check_partner_lists(live, complete=False)
        check_indexes(live)
        assert canonical_graph(live.graph) == canonical_graph(recomputed(live))


def test_an_organisation_moving_after_a_full_rollup_uses_the_list_made_there():
    """Acme's staff (one left before the move) are listed by the full roll-up; Acme moves: the
    refresh reads that list (the same dict, now with the move's partner filed in), the one who
    left keeps a works_in edge that ended when they left, the others' end at the move."""
    spec = CountingRules().default_spec()
    events = memory_log([
        ("Acme", "located_in", "Oslo", 1, False, False),
        ("Ann", "works_at", "Acme", 2, False, False),
        ("Bo", "works_at", "Acme", 3, False, False),
        ("Bo", "works_at", "Globex", 5, False, False),  # Bo leaves Acme on day 5
        ("Acme", "located_in", "Rome", 9, False, False),  # Acme moves on day 9
        ("Globex", "located_in", "Rome", 10, False, False),
    ])
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    _applied(live, events[:4], extractions)
    live.refresh()
    acme = next(n for n, d in live.graph.nodes(data=True) if d["name"] == "Acme")
    staff = live._partners[(acme, False)]["works_at"]
    assert len(staff) == 2
    _applied(live, events[4:], extractions)
    live.refresh()
    assert live._partners[(acme, False)]["works_at"] is staff
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    check_indexes(live)
    day = lambda t: None if t is None else (t - T0).days  # noqa: E731
    works_in = {(live.graph.nodes[u]["name"], live.graph.nodes[v]["name"], day(d["valid_from"]), day(d["valid_to"]))
                for u, v, d in live.graph.edges(data=True) if d["relation"] == "works_in"}
    assert works_in == {("Ann", "Oslo", 2, 9), ("Ann", "Rome", 9, None), ("Bo", "Oslo", 3, 5),
                        ("Bo", "Rome", 10, None)}


def test_a_refresh_pauses_the_collector_and_restores_its_setting():
    """The collector is off during a refresh (its objects all stay) and as it was afterwards."""
    import gc

    spec = CountingRules().default_spec()
    events = memory_log([("Ann", "works_at", "Acme", 1, False, False), ("Acme", "located_in", "Oslo", 2, False, False),
                         ("Acme", "located_in", "Rome", 3, False, False)])
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    _applied(live, events[:2], extractions)
    live.refresh()
    seen = []
    real = live._partial_rollups
    live._partial_rollups = lambda *a, **k: (seen.append(gc.isenabled()), real(*a, **k))
    was = gc.isenabled()
    try:
        gc.enable()
        _applied(live, events[2:], extractions)
        live.refresh()
        assert seen == [False] and gc.isenabled()
        gc.disable()  # a caller that paused it keeps it paused
        live._stale = True
        live.refresh()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
