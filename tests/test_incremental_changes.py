"""The merge's change log (``GraphBuilder.changes``; fold/merge.py), which the incremental merge
of the state tables reads (:func:`refold.fold.partition.advance_subjects`: the rows it reports as
changed are the rows a fold rewrites and the roll-ups it refreshes); pure core, hypothesis.

The log must name every merged edge ``apply`` made or changed, and an edge it files as closed
(and not as made or corroborated) must differ in nothing but ``valid_to``, ``superseded_by`` and
``ended_by``.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.fold.merge import GraphBuilder, MergeChanges
from tests.snapshot_helpers import CountingRules, memory_log, memory_steps

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
