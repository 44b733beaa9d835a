"""The erasure patch on a snapshot with many edge buckets: every row of the patched snapshot lies
in the bucket its key places it in (rows kept from the snapshot stay in the file they came from,
the region's rows are placed by their keys), buckets without a changed edge are hard links of
the old files, and the refold from it equals a full rebuild. Also: the receipt's state digest is
the columnar one, equals the digest of a copied state, and a receipt holding the older JSON
digest still verifies."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refold
from refold import erasing
from refold.storage import snapshots
from refold.storage.snapshots import SnapshotStore, bucket_keys, edge_buckets
from tests.snapshot_helpers import CountingRules
from tests.test_erasure_patch import X, _full, _patched, _store, _x
from tests.fold_helpers import canonical_graph

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


def test_patched_rows_lie_in_their_buckets_and_untouched_buckets_are_linked(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    before = store.list()[-1]
    count = snapshots.edge_bucket_count(before)
    assert count > 3
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    after = store.list()[-1]
    assert after.last_seq == before.last_seq and snapshots.edge_bucket_count(after) == count
    tables = [pq.read_table(Path(after.path) / f"edges-{b:03d}.parquet") for b in range(count)]
    whole = pa.concat_tables(tables)
    assert after.edges == whole.num_rows  # the manifest counts the linked buckets' rows too
    where = edge_buckets(bucket_keys(whole), count).to_pylist()
    start = 0
    for b, table in enumerate(tables):
        assert set(where[start:start + table.num_rows]) <= {b}
        start += table.num_rows
    linked = [b for b in range(count)
              if after.files[f"edges-{b:03d}"] == before.files[f"edges-{b:03d}"]]
    assert 0 < len(linked) < count  # some buckets changed, the others were reused
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert report.started_from == after.last_seq and ext.calls == 0
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_the_receipt_digest_is_columnar_and_old_json_digests_still_verify(tmp_path):
    mem = _store(tmp_path, _x())
    receipt = erasing.erase(mem, X)
    assert receipt.state_digest.startswith(erasing.DIGEST_SCHEME)
    fresh = refold.Memory(mem.root)
    assert erasing.state_digest(fresh.state().graph) == receipt.state_digest
    checks = {c.name: c for c in erasing.verify_receipt(fresh, receipt).checks}
    assert checks["state digest"].ok
    legacy = dataclasses.replace(receipt, state_digest=erasing.json_state_digest(fresh.state().graph))
    assert not legacy.state_digest.startswith(erasing.DIGEST_SCHEME)
    checks = {c.name: c for c in erasing.verify_receipt(refold.Memory(mem.root), legacy).checks}
    assert checks["state digest"].ok
    wrong = dataclasses.replace(receipt, state_digest=erasing.DIGEST_SCHEME + "0" * 64)
    checks = {c.name: c for c in erasing.verify_receipt(refold.Memory(mem.root), wrong).checks}
    assert not checks["state digest"].ok


def test_a_retraction_that_matched_nothing_before_ends_the_fact_once_the_erased_one_is_gone(tmp_path):
    """The patch reads the log's retractions (two-phase: seqs from the kind column, then those
    rows): here one that found nothing open because an erased event had superseded its fact."""
    from tests.fold_helpers import fact_event
    from tests.test_erasure_patch import _others

    mem = refold.init(tmp_path / "store")
    mem.append(_others(20))
    mem.append([fact_event("Person9", "lives_in", "Place1", day=30, event_id="a")])
    mem.append([fact_event("Person9", "lives_in", "Place2", day=31, event_id="x-move", subjects=[X])])
    mem.append([fact_event("Person9", "lives_in", "Place1", day=32, event_id="r", kind="retraction")])
    mem.append(_others(9, start=20))
    mem.fold(snapshot_every=10)
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    fresh, ext = refold.Memory(mem.root), CountingRules()
    fresh.fold(extractor=ext)
    assert ext.calls == 0
    graph = fresh.state().graph
    assert canonical_graph(graph) == _full(fresh)
    ended = [d["ended_by"] for *_, d in graph.edges(data=True)
             if d["derivation"] == "extracted" and d["subject"].endswith("person9") and d["relation"] == "lives_in"]
    assert ended == ["r"]
