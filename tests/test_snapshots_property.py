"""Load a snapshot + replay the tail == a full fold (hypothesis over random logs and snapshot points).

Two levels: the pure core (LiveFold written to and loaded from real snapshot files, many examples)
and a real store (Delta log, extraction cache, snapshots written by ``mem.fold``; fewer examples,
each builds a store). Graphs are compared with every node and edge attribute, after roll-ups.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold.fold.incremental import LiveFold
from refold.fold.spec import FoldSpec
from refold.folding import build_state
from refold.storage.layout import Layout
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import OBJECTS, RELATIONS, SUBJECTS, CountingRules, memory_log

step = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(RELATIONS), st.sampled_from(OBJECTS),
                 st.one_of(st.none(), st.integers(min_value=0, max_value=60)),
                 st.sampled_from([False] * 5 + [True]),  # a retraction now and then
                 st.booleans())  # valid time written with a +02:00 offset
logs = st.lists(step, min_size=1, max_size=40)


def _extract(events, spec):
    return {x.event_id: x for x in CountingRules().extract(events, spec)}


@settings(max_examples=120, deadline=None)
@given(steps=logs, data=st.data())
def test_snapshot_then_tail_equals_full_fold(steps, data):
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = _extract(events, spec)
    full = build_state(spec, events, extractions)
    cut = data.draw(st.integers(min_value=1, max_value=len(events)), label="snapshot after n events")
    refresh_every = data.draw(st.integers(min_value=1, max_value=8), label="refresh every")

    live = LiveFold.empty(spec)
    for i, e in enumerate(events[:cut]):
        live.apply(e, extractions.get(e.event_id))
        if i % refresh_every == 0:
            live.refresh()
    with tempfile.TemporaryDirectory() as tmp:
        store = SnapshotStore(Layout(tmp))
        info = store.write(live)
        assert info is not None and info.last_seq == cut - 1
        loaded = store.load(info, spec)
    assert loaded.link == events[cut - 1].link and loaded.contained == live.contained
    for i, e in enumerate(events[cut:]):  # the loaded fold and the one kept in memory both go on
        loaded.apply(e, extractions.get(e.event_id))
        live.apply(e, extractions.get(e.event_id))
        if i % refresh_every == 0:
            live.refresh()
    expected = canonical_graph(full.graph)
    assert canonical_graph(loaded.detached_graph()) == expected
    assert canonical_graph(live.detached_graph()) == expected
    stats = {k: v for k, v in full.stats.items() if k != "derived"}
    assert dict(loaded.builder.stats.__dict__) == stats
    assert loaded.derived_count == live.derived_count == full.stats["derived"]


fact_step = st.tuples(st.sampled_from(["Ann", "Bo", "Acme"]), st.sampled_from(RELATIONS),
                      st.sampled_from(OBJECTS), st.integers(min_value=0, max_value=90))
batches = st.lists(st.lists(fact_step, min_size=1, max_size=5), min_size=2, max_size=5)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches, every=st.integers(min_value=2, max_value=7), fold_after=st.data())
def test_store_fold_resumed_from_snapshots_equals_full_fold(batches, every, fold_after):
    with tempfile.TemporaryDirectory() as tmp:
        mem = refold.init(Path(tmp) / "store")
        for number, batch in enumerate(batches):
            mem.append([fact_event(s, r, o, day=d) for s, r, o, d in batch])
            if fold_after.draw(st.booleans(), label=f"fold after batch {number}"):
                refold.Memory(mem.root).fold(snapshot_every=every)
        mem.fold(snapshot_every=every)
        fresh = refold.Memory(mem.root)  # a new process's view: only the snapshots on disk
        report = fresh.fold(snapshot_every=every)
        assert report.extraction_calls == 0
        snaps = SnapshotStore(mem.layout).list()
        if snaps:
            assert report.started_from == max(s.last_seq for s in snaps)
        spec = FoldSpec(extractor="rules", extractor_version=CountingRules.version)
        events = mem.events()
        full = build_state(spec, events, mem.cache.get(spec.hash))
        assert canonical_graph(fresh.state().graph) == canonical_graph(full.graph)
        assert canonical_graph(refold.Memory(mem.root).graph()) == canonical_graph(full.graph)
