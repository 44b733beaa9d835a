"""The erasure patch's reads: the cache's merge-only read (:meth:`ExtractionCache.facts`) returns
what :meth:`ExtractionCache.get` does for a merge (facts, rejections, the request's event ids),
pruned by seq or not, also from files a purge rewrote; and the patch picks the snapshot without
waiting for the log's spec read, yet never patches a snapshot of a spec that is no longer current.
Real Delta tables and stores in tmp_path."""

from __future__ import annotations

import refold
from refold import erasing
from refold.erasing.snapshot_patch import _current_spec, _from_log
from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection
from refold.fold.spec import FoldSpec
from refold.folding import record_spec
from refold.storage.cache import ExtractionCache
from refold.storage.layout import Layout
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph
from tests.test_erasure_patch import X, _full, _patched, _store, _x

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


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


def test_the_patch_reads_only_the_erased_rows_and_the_re_merged_sources(tmp_path, monkeypatch):
    """An entity the subject mentioned after someone else did keeps its name: the patch does not
    read that earlier mention's extraction to know it; the erased rows come pruned by the plan's seqs."""
    mem = _store(tmp_path, _x())
    events = mem.events()
    x_ids = {f"x-{i}" for i in range(4)} | {"x-move", "x-says"}
    place1 = next(e.event_id for e in events if e.fact and e.fact.object == "Place1")  # Person1 lives_in
    org2 = next(e.event_id for e in events if e.fact and e.fact.object == "Org2")  # Person2 works_at
    k_sources = {e.event_id for e in events if e.fact and (e.fact.subject, e.fact.relation) == ("Person1", "works_at")}
    asked: list[tuple[frozenset, bool]] = []
    real = ExtractionCache.facts

    def facts(self, spec_hash, event_ids, *, seqs=None):
        event_ids = list(event_ids)
        asked.append((frozenset(event_ids), seqs is not None))
        return real(self, spec_hash, event_ids, seqs=seqs)

    monkeypatch.setattr(ExtractionCache, "facts", facts)
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    read = set().union(*(ids for ids, _ in asked))
    assert x_ids <= read and read <= x_ids | k_sources and not {place1, org2} & read
    assert all(pruned for ids, pruned in asked if ids <= x_ids)  # by seq, from the plan
    fresh = refold.Memory(mem.root)
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_the_patch_reads_the_same_current_spec_as_the_memory(tmp_path):
    mem = refold.init(tmp_path / "store")
    assert _current_spec(mem) == mem.current_spec() == FoldSpec()  # none recorded: the default
    a, b = FoldSpec(extractor_version="2"), FoldSpec(extractor_version="3")
    for spec, current in ((a, a), (b, b), (a, b)):  # recording a known spec again changes nothing
        record_spec(mem, spec)
        fresh = refold.Memory(mem.root)
        assert _current_spec(fresh) == _from_log(fresh)[0] == fresh.current_spec() == current


def test_the_plan_counts_and_the_purge_removes_cache_rows_by_key_or_by_request(tmp_path):
    from refold.storage.erasure.planning import _cache_impact

    layout = Layout(str(tmp_path))
    assert _cache_impact(layout, {"ev-001"}) == (0, ())  # no cache table yet
    cache = ExtractionCache(layout)
    cache.put([_extraction(i) for i in range(10)])
    # the rows of ev-001 and ev-004, and of ev-000 and ev-003 whose requests quoted them
    rows, engines = _cache_impact(layout, {"ev-001", "ev-004", "ev-999"})
    assert rows == 4 and engines == ({"engine": "rules", "model_id": None, "host": None, "events": 4},)
    assert _cache_impact(layout, {"ev-002"})[0] == 1
    # the purge removes the same rows: by key, or by a request that quoted an erased event
    assert cache.purge(["ev-001", "ev-004", "ev-999"]).rows == 4
    assert cache.keys("s1") == {f"ev-{i:03d}" for i in range(10)} - {"ev-000", "ev-001", "ev-003", "ev-004"}
