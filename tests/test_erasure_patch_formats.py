"""Snapshots written by older versions still patch: one with a single edge file (before edges were
bucketed) is patched and written back bucketed, and the refold from it equals a full rebuild.
Real stores in tmp_path; the older layout is made by rewriting a snapshot folder as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refold
from refold import erasing
from refold.storage import snapshots
from refold.storage.snapshots import MANIFEST, SnapshotStore
from tests.fold_helpers import canonical_graph
from tests.snapshot_helpers import CountingRules
from tests.test_erasure_patch import X, _full, _patched, _store, _x

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


def _as_single_file(info: snapshots.SnapshotInfo) -> None:
    """Rewrite ``info``'s folder with one ``edges.parquet`` (the layout before buckets, format 2:
    no bucket index)."""
    folder = Path(info.path)
    names = snapshots._edge_files(info)
    pq.write_table(pa.concat_tables([pq.read_table(folder / f"{n}.parquet") for n in names]),
                   folder / "edges.parquet", compression="zstd")
    manifest = json.loads((folder / MANIFEST).read_text())
    for n in names:
        (folder / f"{n}.parquet").unlink()
        del manifest["files"][n]
    manifest["files"]["edges"] = snapshots._sha256(folder / "edges.parquet")
    manifest["format"] = "refold-snapshot/2"
    del manifest["files"]["index"]
    (folder / "index.parquet").unlink()
    (folder / MANIFEST).write_text(json.dumps(manifest))


def test_a_single_file_snapshot_is_patched_and_written_back_bucketed(tmp_path, monkeypatch):
    monkeypatch.setattr(snapshots, "BUCKET_ROWS", 6)
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    before = store.list()[-1]
    _as_single_file(before)
    old = store.list()[-1]
    assert snapshots.edge_bucket_count(old) == 1 and "edges" in old.files
    receipt = erasing.erase(mem, X)
    assert _patched(receipt)["rows"] == 1
    after = store.list()[-1]
    assert after.last_seq == before.last_seq and snapshots.edge_bucket_count(after) > 1
    assert after.edges == sum(pq.read_metadata(Path(after.path) / f"{n}.parquet").num_rows
                              for n in snapshots._edge_files(after))
    fresh, ext = refold.Memory(mem.root), CountingRules()
    report = fresh.fold(extractor=ext)
    assert report.started_from == after.last_seq and ext.calls == 0
    assert canonical_graph(fresh.state().graph) == _full(fresh)
