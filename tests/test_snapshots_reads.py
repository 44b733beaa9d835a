"""The erasure patch's light reads and writes: ``delta_io.read_files`` (file by file, picked by
value sets) returns the rows of the equivalent ``read_arrow``, on the same eight-file table as the
pruning tests (a MERGE-written file with string_view columns included); ``LogReader.rows_of_kinds``
equals a filter of the whole log, also after tombstones widened the files' kind statistics; and a
snapshot's files are hashed from the bytes that were written and parsed, so a manifest's digests
match the files on disk and a file changed after writing is refused.

Real Delta tables and real stores in tmp_path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold import erasing
from refold.fold.errors import StoreError
from refold.storage import delta_io, snapshots
from refold.storage.delta_io import read_arrow, read_files
from refold.storage.schema import EVENTS_SCHEMA
from refold.storage.snapshot_info import contained_digest
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import fact_event
from tests.test_erasure_patch import X, _store, _x
from tests.test_snapshots_pruning import KINDS, SCHEMA, alternative, table  # noqa: F401 - the fixture

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"

values = st.lists(st.integers(min_value=-5, max_value=760), max_size=6)


def _rows(t) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["n"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prune=st.one_of(st.none(), st.lists(alternative, min_size=0, max_size=3)),
       kinds=st.one_of(st.none(), st.lists(st.sampled_from(KINDS), max_size=2)),
       seqs=st.one_of(st.none(), values))
def test_read_files_returns_the_rows_of_read_arrow(table, prune, kinds, seqs):  # noqa: F811
    where = {name: vs for name, vs in (("kind", kinds), ("seq", seqs)) if vs is not None}
    expr = None
    for name, vs in where.items():
        term = pc.field(name).isin(pa.array(vs, SCHEMA.field(name).type))
        expr = term if expr is None else expr & term
    expected = read_arrow(table, SCHEMA, filter=expr, prune=prune)
    assert _rows(read_files(table, SCHEMA, where=where, prune=prune)) == _rows(expected)
    got = read_files(table, SCHEMA, columns=["n", "key"], where=where, prune=prune)
    assert got.column_names == ["n", "key"]
    assert _rows(got) == _rows(expected.select(["n", "key"]))


def test_read_files_reads_the_files_itself_and_hands_older_schemas_to_read_arrow(table, tmp_path, monkeypatch):  # noqa: F811
    calls = []
    real = delta_io.read_arrow
    monkeypatch.setattr(delta_io, "read_arrow", lambda *a, **k: calls.append(k) or real(*a, **k))
    plain = read_files(table, SCHEMA, where={"kind": ["tool_call"]}, prune=[{"seq": (0, 150)}])
    assert sorted(plain["seq"].to_pylist()) == [i for i in range(151) if i % 7 and i % 4 == 3]
    # the MERGE-written file (seq 700-749) holds string_view columns: cast on reading
    merged = read_files(table, SCHEMA, where={"kind": ["tool_call"]}, prune=[{"seq": (690, None)}])
    assert sorted(merged["n"].to_pylist()) == [i for i in range(690, 750) if i % 7 and i % 4 == 3]
    assert calls == []
    # a file written before a column was added lacks it: the whole read goes to read_arrow
    path = str(tmp_path / "evolved")
    old = pa.schema([("seq", pa.int64()), ("kind", pa.string())])
    write_deltalake(path, pa.table({"seq": [1, 2], "kind": ["a", "b"]}, schema=old))
    write_deltalake(path, pa.table({"seq": [3], "kind": ["a"], "n": [30]}, schema=SCHEMA.remove(1)),
                    mode="append", schema_mode="merge")
    evolved = DeltaTable(path)
    schema = pa.schema(evolved.schema().to_arrow())
    rows = read_files(evolved, schema, where={"kind": ["a"]})
    assert len(calls) == 1
    assert sorted((r["seq"], r["n"]) for r in rows.to_pylist()) == [(1, None), (3, 30)]


def test_rows_of_kinds_equals_a_filter_of_the_whole_log_after_tombstones(tmp_path):
    mem = _store(tmp_path, _x())
    mem.append([fact_event("Person1", "lives_in", "Place1", kind="retraction")])
    erasing.erase(mem, X)  # the tombstones' file holds kinds from chat_turn to tombstone
    log = refold.Memory(mem.root).log_store
    everything = log.arrow()
    for kinds in (["retraction", "spec_changed"], ["spec_changed"], ["tool_call"]):
        rows = log.rows_of_kinds(kinds)
        expected = everything.filter(pc.field("kind").isin(kinds))
        if expected.num_rows == 0:
            assert rows is None
            continue
        assert rows.to_pylist() == expected.to_pylist()
        assert log.rows_of_kinds(kinds, columns=["content"]).column_names == ["content", "seq"]
    assert log.rows_of_kinds(["retraction"])["kind"].to_pylist() == ["retraction"]
    assert set(EVENTS_SCHEMA.names) == set(everything.column_names)


def _snapshot(tmp_path):
    mem = _store(tmp_path, _x())
    store = SnapshotStore(mem.layout)
    return mem, store, store.list()[-1]


def test_written_digests_are_those_of_the_files_on_disk_also_after_a_patch(tmp_path):
    mem, store, _ = _snapshot(tmp_path)
    erasing.erase(mem, X)  # the patch rewrites nodes, contained and the changed buckets
    for info in store.list():
        for name, digest in info.files.items():
            assert hashlib.sha256((Path(info.path) / f"{name}.parquet").read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("name", ["nodes", "edges-000", "contained"])
def test_a_file_changed_after_writing_is_refused(tmp_path, name):
    _, store, info = _snapshot(tmp_path)
    assert set(store.read_tables(info, use_threads=False)) == {"nodes", "edges", "edge_rows", "contained"}
    path = Path(info.path) / f"{name}.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: still the same size
    path.write_bytes(bytes(data))
    for contained in (True, False):  # the contained ids are checked even when not read
        with pytest.raises(StoreError, match="does not match its manifest digest"):
            store.read_tables(info, contained=contained, for_decode=True)


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.text(min_size=1, max_size=8), max_size=40, unique=True))
def test_the_contained_digest_joined_in_arrow_is_the_python_one(ids):
    arr = snapshots._sorted_ids(ids)  # Arrow's byte order is Python's code point order
    assert arr.to_pylist() == sorted(ids)
    assert snapshots._ids_digest(arr) == contained_digest(ids)
    assert snapshots._ids_digest(snapshots._sorted_ids(pa.chunked_array([sorted(ids)], pa.string()))) == \
        contained_digest(ids)


def test_a_table_read_shared_by_a_worker_equals_a_read_on_one_thread(tmp_path):
    _, store, info = _snapshot(tmp_path)
    alone = store.read_tables(info, for_decode=True, use_threads=False)
    shared = snapshots.TableRead(info, for_decode=True, use_threads=False)
    snapshots.io_worker().submit(shared.work)
    together = shared.result()  # this thread takes whatever files the worker has not
    assert set(together) == set(alone)
    for name in alone:
        assert together[name].equals(alone[name])
    # a file the worker or this thread finds changed fails the read with the digest error
    path = Path(info.path) / "edges-000.parquet"
    path.write_bytes(path.read_bytes()[:-8] + b"12345678")
    broken = snapshots.TableRead(info)
    snapshots.io_worker().submit(broken.work)
    with pytest.raises(StoreError, match="edges-000.parquet does not match its manifest digest"):
        broken.result()
    closed = snapshots.TableRead(info)
    closed.close()  # nothing taken: a later result() reads nothing and says so
    with pytest.raises(StoreError, match="closed before it was done"):
        closed.result()
