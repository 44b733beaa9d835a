"""The erasure patch's reads: the cache's merge-only read (:meth:`ExtractionCache.facts`) returns
what :meth:`ExtractionCache.get` does for a merge (facts, rejections, the request's event ids),
pruned by seq or not, also from files a purge rewrote; and the patch picks the snapshot without
waiting for the log's spec read, yet never patches a snapshot of a spec that is no longer current.
Real Delta tables and stores in tmp_path."""

from __future__ import annotations

import refold
from refold import erasing
from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection
from refold.fold.spec import FoldSpec
from refold.folding import record_spec
from refold.storage.cache import ExtractionCache
from refold.storage.layout import Layout
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph
from tests.test_erasure_patch import X, _full, _patched, _store, _x


def _extraction(i: int) -> Extraction:
    request = ModelRequest(event_ids=(f"ev-{i:03d}", f"ev-{i + 1:03d}"), payload='{"p": %d}' % i) if i % 3 == 0 else None
    rejected = (Rejection("ungrounded", f"detail {i}"),) if i % 4 == 0 else ()
    return Extraction(event_id=f"ev-{i:03d}", spec_hash="s1", request=request, rejected=rejected,
                      facts=(ExtractedFact(f"P{i}", "lives_in", "Oslo", confidence=0.5),
                             ExtractedFact(f"P{i}", "likes", f"tea{i}")), engine="rules")


def _same(light, full: Extraction) -> bool:
    return (light.event_id, light.spec_hash, light.facts, light.rejected) == (
        full.event_id, full.spec_hash, full.facts, full.rejected) and light.request_event_ids == (
        None if full.request is None else full.request.event_ids)


def test_the_merge_read_returns_what_get_does_pruned_or_not_and_after_a_purge(tmp_path):
    cache = ExtractionCache(Layout(str(tmp_path)))
    cache.warm()  # no table yet: nothing to load, nothing created
    assert cache.facts("s1", ["ev-001"]) == {}
    batches = [[_extraction(i) for i in range(b, b + 10)] for b in range(0, 30, 10)]
    for batch in batches:  # a file per batch, each with seq statistics
        cache.put(batch, seqs={x.event_id: int(x.event_id[3:]) for x in batch})
    cache.warm()
    wanted = [f"ev-{i:03d}" for i in (0, 3, 4, 12, 27)]
    full = cache.get("s1", wanted)
    for light in (cache.facts("s1", wanted), cache.facts("s1", wanted, seqs=[0, 3, 4, 12, 27])):
        assert light.keys() == full.keys() == set(wanted)
        assert all(_same(light[i], full[i]) for i in wanted)
    assert cache.facts("s1", wanted, seqs=[0]).keys() == {"ev-000"}  # the seqs prune, exactly
    assert cache.facts("s2", wanted) == {}
    cache.purge(["ev-002", "ev-011"])  # delta-rs rewrites those files (other string types)
    after = cache.facts("s1", wanted, seqs=[0, 3, 4, 12, 27])
    assert after.keys() == set(wanted) and all(_same(after[i], full[i]) for i in wanted)


def test_a_spec_recorded_after_the_snapshot_is_honoured(tmp_path):
    mem = _store(tmp_path, _x())
    assert len(SnapshotStore(mem.layout).spec_hashes()) == 1
    record_spec(mem, FoldSpec(extractor_version="2"))  # the current spec now has no snapshot
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 0 and "current spec" in _patched(receipt)["detail"][0]
    assert next(p for p in receipt.purged if p["store"] == "snapshots")["rows"] >= 1
    fresh = refold.Memory(mem.root)
    assert fresh.current_spec().extractor_version == "2"
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_with_snapshots_of_two_specs_the_current_one_is_patched(tmp_path):
    mem = _store(tmp_path, _x())
    old = SnapshotStore(mem.layout).spec_hashes()
    spec = FoldSpec(extractor_version="2")
    mem.fold(spec=spec, snapshot_every=10)
    assert mem.current_spec() == spec and len(SnapshotStore(mem.layout).spec_hashes()) == 2
    newest = SnapshotStore(mem.layout).newest(spec.hash, at_most=1 << 62)[0]
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1 and newest.path.endswith(_patched(receipt)["detail"][0].split(":")[0])
    assert SnapshotStore(mem.layout).newest(spec.hash, at_most=1 << 62)[0].last_seq == newest.last_seq
    x_ids = {f"x-{i}" for i in range(4)} | {"x-move", "x-says"}
    store = SnapshotStore(mem.layout)
    assert not any(store.contained_ids(s) & x_ids for s in store.list(old[0]))  # the old spec's: purged
    fresh = refold.Memory(mem.root)
    assert canonical_graph(fresh.state().graph) == _full(fresh)
