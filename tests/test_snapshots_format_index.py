"""The snapshot format 3 bucket index (``index.parquet`` and the contained ids' buckets): it says
exactly where every node's and event's edges lie when a snapshot is written, a patch keeps its
bucket lists supersets and its first mentions exact, and the patch reads only the buckets it
needs. A format 2 snapshot (no index) still loads and patches, and is written back as format 2.
A flipped byte in the index is refused by the patch (the snapshot is then purged, not used).
Real stores in tmp_path; the format 2 folder is made by rewriting a format 3 one as it was."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refold
from refold import erasing
from refold.erasing.snapshot_patch import SnapshotPatcher
from refold.storage import snapshot_files, snapshots
from refold.storage.snapshots import MANIFEST, SnapshotStore, bucket_keys, edge_buckets
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules
from tests.test_erasure_patch import X, _full, _patched, _store, _x

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


def _edges(info) -> tuple[list[dict], list[int]]:
    """Every edge row of ``info`` and the bucket file it lies in."""
    rows, where = [], []
    for b, name in enumerate(snapshots._edge_files(info)):
        table = pq.read_table(Path(info.path) / f"{name}.parquet").to_pylist()
        rows += table
        where += [b] * len(table)
    return rows, where


def _truth(info):
    """The index computed by hand from the edge rows: per node (has merged out-edges, buckets of
    merged in-edges, buckets of derived edges with an input of its, first mention), per event
    (buckets of the merged edges it is a source of or ended)."""
    rows, where = _edges(info)
    subject_of = {r["fact_id"]: r["subject"] for r in rows}
    out, into, derived = set(), collections.defaultdict(set), collections.defaultdict(set)
    first, events = {}, collections.defaultdict(set)
    for r, b in zip(rows, where):
        if r["derivation"] == "extracted":
            out.add(r["subject"])
            into[r["object"]].add(b)
            for seq, eid in zip(r["source_seqs"], r["sources"]):
                events[eid].add(b)
                for n in (r["subject"], r["object"]):
                    first[n] = min(first.get(n, (seq, eid)), (seq, eid))
            if r["ended_by"]:
                events[r["ended_by"]].add(b)
        else:
            for i in r["inputs"]:
                if i in subject_of:
                    derived[subject_of[i]].add(b)
    return out, into, derived, first, events


def _index(info):
    index = {r["id"]: r for r in pq.read_table(Path(info.path) / "index.parquet").to_pylist()}
    contained = {r["event_id"]: set(r["buckets"] or ())
                 for r in pq.read_table(Path(info.path) / "contained.parquet").to_pylist()}
    return index, contained


def _check(info, *, exact: bool) -> None:
    out, into, derived, first, events = _truth(info)
    index, contained = _index(info)
    nodes = set(pq.read_table(Path(info.path) / "nodes.parquet")["id"].to_pylist())
    assert set(index) <= nodes and (first.keys() <= set(index))
    same = (lambda got, want: got == want) if exact else (lambda got, want: got >= want)
    for n, row in index.items():
        assert same(row["has_out"], n in out) if exact else (row["has_out"] or n not in out)
        assert same(set(row["in_buckets"] or ()), into.get(n, set()))
        assert same(set(row["derived_buckets"] or ()), derived.get(n, set()))
        want = first.get(n)
        assert (row["first_seq"], row["first_event"]) == (want if want else (None, None))  # always exact
    for eid, buckets in contained.items():
        assert same(buckets, events.get(eid, set()))


def test_a_written_snapshot_indexes_exactly_where_its_edges_lie(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    info = SnapshotStore(mem.layout).list()[-1]
    assert info.indexed and info.format == "refold-snapshot/3" and snapshots.edge_bucket_count(info) > 3
    _check(info, exact=True)


def test_a_patch_reads_only_the_buckets_it_needs_and_keeps_the_index_valid(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    before = store.list()[-1]
    count = snapshots.edge_bucket_count(before)
    read: list[str] = []
    patching = []
    real, purge = snapshot_files.read_file, SnapshotPatcher.purge

    def counting(info, name, kind, **kw):
        if patching and name.startswith("edges"):
            read.append(name)
        return real(info, name, kind, **kw)

    def purging(self, ids):
        patching.append(True)
        try:
            return purge(self, ids)
        finally:
            patching.clear()

    monkeypatch.setattr(snapshot_files, "read_file", counting)
    monkeypatch.setattr("refold.erasing.snapshot_patch.read_file", counting)
    monkeypatch.setattr(SnapshotPatcher, "purge", purging)
    receipt = erasing.erase(mem, X)
    monkeypatch.undo()
    assert _patched(receipt)["rows"] == 1
    assert 0 < len(set(read)) < count  # the index kept the patch away from some buckets
    after = store.list()[-1]
    assert after.indexed and after.last_seq == before.last_seq
    _check(after, exact=False)
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert report.started_from == after.last_seq and ext.calls == 0
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def _as_format_2(info) -> None:
    """Rewrite ``info``'s folder as format 2 wrote it: no index file, contained ids only."""
    folder = Path(info.path)
    (folder / "index.parquet").unlink()
    ids = pq.read_table(folder / "contained.parquet").select(["event_id"])
    pq.write_table(ids, folder / "contained.parquet", compression="zstd")
    manifest = json.loads((folder / MANIFEST).read_text())
    del manifest["files"]["index"]
    manifest["files"]["contained"] = snapshots._sha256(folder / "contained.parquet")
    manifest["format"] = "refold-snapshot/2"
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_a_format_2_snapshot_loads_and_patches_and_stays_format_2(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    info = store.list()[-1]
    spec = mem.current_spec()
    graph = canonical_graph(store.load(info, spec).graph)
    _as_format_2(info)
    old = store.list()[-1]
    assert old.format == "refold-snapshot/2" and not old.indexed
    assert canonical_graph(store.load(old, spec).graph) == graph  # loads the same
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    after = store.list()[-1]
    assert after.last_seq == old.last_seq and not after.indexed and "index" not in after.files
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert report.started_from == after.last_seq and ext.calls == 0
    assert canonical_graph(fresh.state().graph) == _full(fresh)


def test_a_flipped_byte_in_the_index_is_refused_and_the_snapshot_purged(tmp_path):
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    info = store.list()[-1]
    path = Path(info.path) / "index.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 0 and "not patched" in _patched(receipt)["detail"][0]
    assert all(s.path != info.path for s in store.list())  # purged: it held the erased events
    fresh, ext = refold.Memory(mem.root), CountingRules()
    fresh.fold(extractor=ext)
    assert ext.calls == 0 and canonical_graph(fresh.state().graph) == _full(fresh)


def test_an_unknown_format_is_ignored(tmp_path):
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    info = store.list()[-1]
    manifest = json.loads((Path(info.path) / MANIFEST).read_text())
    manifest["format"] = "refold-snapshot/9"
    (Path(info.path) / MANIFEST).write_text(json.dumps(manifest))
    assert all(s.path != info.path for s in store.list())


def test_the_bucket_of_every_row_is_its_key_s_after_a_patch(tmp_path, monkeypatch):
    """(as tests/test_erasure_patch_buckets.py, for the rows a format 3 patch read lazily)"""
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    erasing.erase(mem, X)
    after = SnapshotStore(mem.layout).list()[-1]
    rows, where = _edges(after)
    whole = pa.Table.from_pylist(rows)
    assert edge_buckets(bucket_keys(whole), snapshots.edge_bucket_count(after)).to_pylist() == where


def test_the_region_s_own_index_rows_equal_the_whole_snapshot_computation(tmp_path, monkeypatch):
    """snapshot_buckets.small_node_index (Python, for a patch's few rows) == node_index (Arrow)."""
    import random

    import numpy as np

    from refold.storage.snapshot_buckets import node_index, small_node_index

    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    rows, _ = _edges(SnapshotStore(mem.layout).list()[-1])
    rng = random.Random(3)
    for size in (1, 5, 20, len(rows)):
        part = pa.Table.from_pylist(rng.sample(rows, size))
        placed = np.array([rng.randrange(4) for _ in range(size)], dtype=np.int32)
        want = {r["id"]: r for r in node_index(part, placed).to_pylist()}
        got = small_node_index(part, placed)
        assert got.keys() == want.keys()
        for n, row in want.items():
            for name in ("in_buckets", "derived_buckets"):
                row[name] = sorted(row[name]) if row[name] else None
            assert got[n] == row
