"""LiveFold keeps the compose rules' partner edges between refreshes (fold/incremental.py,
``_partners``): many partial refreshes in a row, with an erasure-style change of the merged edges
(edges removed outside ``apply``, then ``_refresh_rollups`` called from outside) in between, must
still equal roll-ups recomputed from scratch, attribute for attribute (pure core, hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.incremental import LiveFold
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules, folded, memory_log, memory_steps, recomputed

step = memory_steps()


def _remove_merged(live: LiveFold, fid: str) -> None:
    """Take a merged edge out as an erasure patch does, and refresh from outside."""
    builder, graph = live.builder, live.graph
    u, v = builder._edges.pop(fid)
    graph.remove_edge(u, v, key=fid)
    for bucket in builder._open.values():
        if fid in bucket:
            bucket.remove(fid)
    live._refresh_rollups({u}, {}, removed=[fid])


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(step, min_size=4, max_size=60), data=st.data())
def test_partial_refreshes_in_a_row_equal_a_full_recompute(steps, data):
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    every = data.draw(st.integers(1, 4), label="refresh every")
    cuts = list(range(every, len(events), every)) or [1]
    erase_at = data.draw(st.sampled_from(cuts), label="erase after")
    live = LiveFold.empty(spec)
    done = 0
    for cut in [*cuts, len(events)]:
        for e in events[done:cut]:
            live.apply(e, extractions.get(e.event_id))
        done = cut
        live.refresh()  # the first is a full roll-up; the others partial (few subjects here)
        assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
        if cut == erase_at and live.builder._edges:
            _remove_merged(live, data.draw(st.sampled_from(sorted(live.builder._edges)), label="erased"))
            assert canonical_graph(live.graph) == canonical_graph(recomputed(live))


def _refreshed_after_each(steps) -> LiveFold:
    def same_as_recomputed(live: LiveFold) -> None:
        assert canonical_graph(live.graph) == canonical_graph(recomputed(live))

    return folded(steps, check_each=same_as_recomputed)


def test_a_hub_gains_an_edge_between_two_uses_of_its_partner_list():
    """Acme's incoming works_at edges are listed when Acme moves; Bo joins Acme; Acme moves again:
    Bo's works_in must follow (the list kept from the first move is stale by then)."""
    live = _refreshed_after_each([
        ("Ann", "likes", "Rome", None, False, False),  # (the first refresh rolls up everything)
        ("Ann", "works_at", "Acme", 1, False, False),
        ("Acme", "located_in", "Oslo", 2, False, False),
        ("Bo", "works_at", "Acme", 3, False, False),
        ("Acme", "located_in", "Rome", 4, False, False),
        ("Globex", "located_in", "Rome", 5, False, False),
        ("Acme", "located_in", "Oslo", 6, False, False),
    ])
    works_in = {(u, v) for u, v, r in live.graph.edges(data="relation") if r == "works_in"}
    assert len(works_in) >= 4  # Ann and Bo, in Oslo and in Rome


def test_a_subject_gains_an_edge_between_two_uses_of_its_partner_list():
    """Acme's outgoing located_in edges are listed when Ann joins; Acme moves; Bo joins Acme."""
    _refreshed_after_each([
        ("Ann", "likes", "Rome", None, False, False),
        ("Acme", "located_in", "Oslo", 1, False, False),
        ("Ann", "works_at", "Acme", 2, False, False),
        ("Acme", "located_in", "Rome", 3, False, False),
        ("Bo", "works_at", "Acme", 4, False, False),
    ])


def test_a_partner_list_does_not_outlive_an_erasure_of_its_edges():
    spec = CountingRules().default_spec()
    events = memory_log([
        ("Ann", "likes", "Rome", None, False, False),
        ("Acme", "located_in", "Oslo", 1, False, False),
        ("Ann", "works_at", "Acme", 2, False, False),  # lists Acme's located_in edges
        ("Bo", "works_at", "Acme", 3, False, False),
    ])
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    for e in events[:3]:
        live.apply(e, extractions.get(e.event_id))
        live.refresh()
    located = next(k for k, (u, v) in live.builder._edges.items()
                   if live.graph.edges[u, v, k]["relation"] == "located_in")
    _remove_merged(live, located)  # as an erasure patch: Acme is nowhere any more
    live.apply(events[3], extractions.get(events[3].event_id))
    live.refresh()
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    assert not any(r == "works_in" for _, _, r in live.graph.edges(data="relation"))
