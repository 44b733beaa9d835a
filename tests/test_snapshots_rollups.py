"""LiveFold._refresh_rollups (the incremental roll-up step the erasure patch reuses) equals a full
recompute: after merged edges are removed from the graph or changed in place, refreshing only the
subjects, changed edges and removed fact ids gives the derived edges and summaries that
``apply_rollups`` computes from scratch, and the derived-edge indexes match the graph."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.incremental import LiveFold
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules, check_indexes, folded, memory_log, memory_steps, recomputed

step = memory_steps()


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(step, min_size=1, max_size=40), data=st.data())
def test_refresh_after_removing_and_changing_merged_edges_equals_a_full_recompute(steps, data):
    live = folded(steps)
    graph, builder = live.graph, live.builder
    merged = sorted(builder._edges)
    removed = data.draw(st.lists(st.sampled_from(merged), unique=True), label="removed") if merged else []
    subjects: set[str] = set()
    for fid in removed:  # as an erasure takes a merged edge out of the graph and the merge index
        u, v = builder._edges.pop(fid)
        graph.remove_edge(u, v, key=fid)
        for bucket in builder._open.values():
            if fid in bucket:
                bucket.remove(fid)
        subjects.add(u)
    left = [fid for fid in merged if fid not in removed]
    changed = data.draw(st.lists(st.sampled_from(left), unique=True), label="changed") if left else []
    touched = {}
    for fid in changed:  # close (or shorten) the edge's valid time in place
        u, v = builder._edges[fid]
        d = graph.edges[u, v, fid]
        d["valid_to"] = d["valid_from"] + timedelta(days=data.draw(st.integers(1, 40), label="days"))
        touched[fid] = (u, v)
        subjects.add(u)
    live._refresh_rollups(subjects, touched, removed=removed)
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    check_indexes(live)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(step, min_size=2, max_size=40), cut=st.data())
def test_partial_refresh_after_more_events_equals_a_full_recompute(steps, cut):
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    n = cut.draw(st.integers(min_value=1, max_value=len(events) - 1), label="refresh after")
    live = LiveFold.empty(spec)
    for e in events[:n]:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()
    for e in events[n:]:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()  # partial unless more than half of the entities were touched
    assert canonical_graph(live.graph) == canonical_graph(recomputed(live))
    check_indexes(live)
