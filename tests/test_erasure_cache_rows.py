"""The extraction cache as erasure and the fold read it: the merge-only read
(:meth:`ExtractionCache.facts`, what the partitioned fold and the read overlay take) returns what
:meth:`ExtractionCache.get` does for a merge (facts, rejections, the request's event ids), pruned
by seq or not, also from files a purge rewrote; and the plan counts, and the purge removes, the
rows built from an erased event: by key, or by a model request that quoted it. Real Delta tables
in tmp_path."""

from __future__ import annotations

from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection
from refold.storage.cache.table import ExtractionCache
from refold.storage.layout import Layout


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


def test_the_plan_counts_and_the_purge_removes_cache_rows_by_key_or_by_request(tmp_path):
    from refold.erasure.planning import cache_impact, cache_rows_from

    def _cache_impact(layout, ids):
        return cache_impact(cache_rows_from(layout, ids), ids)

    layout = Layout(str(tmp_path))
    assert _cache_impact(layout, {"ev-001"}) == (0, ())  # no cache table yet
    cache = ExtractionCache(layout)
    cache.put([_extraction(i) for i in range(10)])
    # the rows of ev-001 and ev-004, and of ev-000 and ev-003 whose requests quoted them
    rows, engines = _cache_impact(layout, {"ev-001", "ev-004", "ev-999"})
    assert rows == 4 and engines == ({"engine": "rules", "model_id": None, "host": None, "events": 4},)
    assert _cache_impact(layout, {"ev-002"})[0] == 1
    # a batch reads the hits of every subject's events once, then splits them per subject
    hits = cache_rows_from(layout, {"ev-001", "ev-004", "ev-002"})
    assert hits.num_rows == 5
    assert cache_impact(hits, {"ev-001", "ev-004"}) == (rows, engines)
    assert cache_impact(hits, {"ev-002"})[0] == 1 and cache_impact(hits, set()) == (0, ())
    # the purge removes the same rows: by key, or by a request that quoted an erased event
    assert cache.purge(["ev-001", "ev-004", "ev-999"]).rows == 4
    assert cache.keys("s1") == {f"ev-{i:03d}" for i in range(10)} - {"ev-000", "ev-001", "ev-003", "ev-004"}
