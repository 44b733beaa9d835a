"""Light reads of Delta tables: ``delta_io.read_files`` (file by file, picked by value sets; what
the log's tail, the extraction cache and the reads by kind use) returns the rows of the
equivalent ``read_arrow``, on the same eight-file table as the pruning tests (a MERGE-written
file with string_view columns included); ``LogReader.rows_of_kinds`` equals a filter of the whole
log, also after an erasure's tombstones widened the files' kind statistics.

Real Delta tables and real stores in tmp_path.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold.storage.delta import io as delta_io
from refold.storage.delta.io import read_arrow, read_files
from refold.storage.log.schema import EVENTS_SCHEMA
from tests.fold_helpers import fact_event
from tests.test_snapshots_pruning import KINDS, SCHEMA, alternative, table  # noqa: F401 - the fixture

X = "s-x"

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
    """``read_files`` decodes the files itself (no dataset scan: its set-up cost per file is what
    it avoids) and hands a read to ``read_arrow`` only when a file's columns differ from the
    schema. Both give the same rows (the property test above), so no answer tells them apart: a
    spy counts the hand-overs. It wraps ``delta_io.read_arrow``, the module global that
    ``read_files`` calls, so it sees every hand-over; the evolved table below shows it does."""
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


def _store(tmp_path) -> refold.Memory:
    """Others' facts, X's spread among them (one corroborating another's), folded."""
    mem = refold.init(tmp_path / "store")
    others = [fact_event(f"Person{i % 5}", "lives_in" if i % 2 else "works_at",
                         f"Place{i % 6}" if i % 2 else f"Org{i % 3}", day=i) for i in range(49)]
    x = [fact_event("Xavier Quill", "likes", f"quillberry{i}", day=60 + i, subjects=[X]) for i in range(4)]
    x.append(fact_event("Person1", "works_at", "Org2", day=71, subjects=[X]))
    mem.append(others[:20])
    mem.append(x[:2])
    mem.append(others[20:40])
    mem.append(x[2:])
    mem.append(others[40:])
    mem.fold()
    return mem


def test_rows_of_kinds_equals_a_filter_of_the_whole_log_after_tombstones(tmp_path):
    mem = _store(tmp_path)
    mem.append([fact_event("Person1", "lives_in", "Place1", kind="retraction")])
    mem.erase(X)  # the tombstones' file holds kinds from chat_turn to tombstone
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
