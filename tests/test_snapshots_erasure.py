"""Snapshots and erasure: the erasure patches the newest snapshot (or purge removes exactly the
snapshots holding an erased event); the refold after an erasure resumes from a snapshot without
the erased events and re-merges cached extractions (no extraction call); a snapshot holding an
erased event is never used even if nobody purged it."""

from __future__ import annotations

import pytest

import refold
from refold import erasing
from refold.fold.extract import Extraction, ExtractedFact, ModelRequest
from refold.fold.incremental import LiveFold
from refold.fold.spec import FoldSpec
from refold.folding import build_state
from refold.storage import erasure as erasure_procedure
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import CountingRules, memory_log

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"

X = "s-x"


def _others(n: int, start: int = 0) -> list[dict]:
    return [fact_event(f"Person{i % 5}", "lives_in" if i % 2 else "works_at",
                       f"Place{i % 6}" if i % 2 else f"Org{i % 3}", day=i) for i in range(start, start + n)]


def _x_events() -> list[dict]:
    return [fact_event("Xavier Quill", "likes", f"quillberry{i}", day=60 + i, event_id=f"x-{i}", subjects=[X])
            for i in range(4)] + [fact_event("Xavier Quill", "lives_in", "Place1", day=70, event_id="x-move",
                                             subjects=[X])]


@pytest.fixture
def mem(tmp_path):
    """seq 0: spec; 1-50: others; 51-55: X (near the end); 56-64: others. Snapshots every 10."""
    store = refold.init(tmp_path / "store")
    store.append(_others(50))
    store.fold(snapshot_every=10)
    store.append(_x_events())
    store.append(_others(9, start=50))
    store.fold(snapshot_every=10)
    assert [s.last_seq for s in SnapshotStore(store.layout).list()] == [29, 39, 49, 59]
    return store


def _expected(mem) -> str:
    spec = FoldSpec(extractor="rules", extractor_version=CountingRules.version)
    return canonical_graph(build_state(spec, mem.events(), mem.cache.get(spec.hash)).graph)


def test_erasure_patches_the_snapshot_holding_x_and_the_refold_extracts_nothing(mem):
    store = SnapshotStore(mem.layout)
    x_ids = {"x-0", "x-1", "x-2", "x-3", "x-move"}
    preview = store.preview(sorted(x_ids))
    assert preview.rows == 1 and preview.detail[0].endswith("000000000059")
    receipt = erasing.erase(mem, X)
    # the newest snapshot is patched in place (refold.erasing.snapshot_patch), so the purge finds no holder
    patched = [p for p in receipt.purged if p["store"] == "snapshot patch"]
    assert patched and patched[0]["rows"] == 1 and patched[0]["detail"][0].startswith("000000000059")
    purged = [p for p in receipt.purged if p["store"] == "snapshots"]
    assert purged and purged[0]["rows"] == 0
    assert [s.last_seq for s in store.list()] == [29, 39, 49, 59]
    ext = CountingRules()
    report = refold.Memory(mem.root).fold(extractor=ext, snapshot_every=10)
    assert report.extraction_calls == ext.calls == 0
    assert report.started_from == 59  # the patched snapshot
    graph = refold.Memory(mem.root).graph()
    assert canonical_graph(graph) == _expected(mem)
    assert not [d for *_, d in graph.edges(data=True) if set(d["sources"]) & x_ids]
    for info in store.list():  # no snapshot holds X
        assert not store.contained_ids(info) & x_ids


def test_a_snapshot_holding_an_erased_event_is_skipped_even_when_not_purged(mem):
    # tombstones and cache purge only: the snapshot at 59 still holds X's facts on disk
    erasure_procedure.erase(mem, X, derived=[mem.cache])
    assert 59 in [s.last_seq for s in SnapshotStore(mem.layout).list()]
    ext = CountingRules()
    report = refold.Memory(mem.root).fold(extractor=ext, snapshot_every=0)
    assert report.started_from == 49 and ext.calls == 0
    assert canonical_graph(refold.Memory(mem.root).graph()) == _expected(mem)
    removed = SnapshotStore(mem.layout).purge(["x-2"])
    assert removed.store == "snapshots" and removed.rows == 1
    assert [s.last_seq for s in SnapshotStore(mem.layout).list()] == [29, 39, 49]


def test_the_in_process_state_is_dropped_when_its_events_are_erased(mem):
    mem.graph()  # this Memory now holds a live fold containing X
    erasure_procedure.erase(mem, X, derived=[mem.cache, SnapshotStore(mem.layout)])
    ext = CountingRules()
    report = mem.fold(extractor=ext, snapshot_every=0)
    assert report.started_from == 49 and ext.calls == 0
    assert canonical_graph(mem.graph()) == _expected(mem)


def test_contained_ids_include_the_events_a_model_request_was_built_from():
    spec = FoldSpec()
    events = memory_log([("Ann", "lives_in", "Oslo", 1, False, False)] * 3)
    live = LiveFold.empty(spec)
    request = ModelRequest(event_ids=("e0000", "e0001", "e0002"), payload="{}")
    live.apply(events[0], Extraction(event_id="e0000", spec_hash=spec.hash))  # nothing extracted
    live.apply(events[1], Extraction(event_id="e0001", spec_hash=spec.hash))
    live.apply(events[2], Extraction(event_id="e0002", spec_hash=spec.hash, request=request,
                                     facts=(ExtractedFact("Ann", "lives_in", "Oslo"),)))
    assert live.contained == {"e0000", "e0001", "e0002"}
    fresh = LiveFold.empty(spec)
    fresh.apply(events[0], Extraction(event_id="e0000", spec_hash=spec.hash))
    assert fresh.contained == set()  # an event that left no trace is not contained
