"""Pruned Delta reads (refold.storage.delta.io) return exactly the rows of an unpruned read, and
skip files; the shared table handle follows commits by others and tables replaced at its path.

Real Delta tables in tmp_path: files written by plain appends, with nulls and with strings long
enough that delta-rs cuts their statistics, and files written by a MERGE (DataFusion, string_view).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.storage.delta.io import _pruned, read_arrow
from refold.storage.delta.handles import shared_table

SCHEMA = pa.schema([("seq", pa.int64()), ("key", pa.string()), ("kind", pa.string()), ("n", pa.int64())])
CONFIG = {"delta.dataSkippingStatsColumns": "seq,key,kind"}
KINDS = ("chat_turn", "memory_written", "tombstone", "tool_call")


def _key(i: int, long: bool) -> str:
    # long keys share a 70-character prefix: delta-rs cuts such statistics (a maximum to a prefix)
    return ("k" * 70 + f"{i:05d}") if long else f"k-{i:05d}"


def _batch(start: int, size: int, *, long: bool, nulls: bool) -> pa.Table:
    seqs = list(range(start, start + size))
    return pa.table({
        "seq": [None if nulls and i % 3 == 0 else i for i in seqs],
        "key": [_key(i, long) for i in seqs],
        "kind": [KINDS[i % len(KINDS)] if i % 7 else "tombstone" for i in seqs],
        "n": seqs,
    }, schema=SCHEMA)


@pytest.fixture(scope="module")
def table(tmp_path_factory) -> DeltaTable:
    """Eight files: short and long keys, nulls in seq, and one file written by a MERGE."""
    path = str(tmp_path_factory.mktemp("pruning") / "t")
    DeltaTable.create(path, SCHEMA, configuration=CONFIG)
    for number, start in enumerate(range(0, 700, 100)):
        write_deltalake(path, _batch(start, 100, long=number % 2 == 1, nulls=number == 3), mode="append")
    dt = DeltaTable(path)
    dt.merge(_batch(700, 50, long=True, nulls=False), predicate="t.n = s.n", source_alias="s",
             target_alias="t").when_not_matched_insert_all().execute()
    return DeltaTable(path)


def _sorted(t: pa.Table) -> list[dict]:
    return sorted(t.to_pylist(), key=lambda r: r["n"])


bound = st.one_of(st.none(), st.integers(min_value=-10, max_value=800))
key_bound = st.one_of(st.none(), st.integers(min_value=-10, max_value=800).map(lambda i: _key(i, False)),
                      st.integers(min_value=-10, max_value=800).map(lambda i: _key(i, True)),
                      st.sampled_from(["k", "k" * 70, "k" * 71, "z", ""]))
alternative = st.fixed_dictionaries({}, optional={
    "seq": st.tuples(bound, bound), "key": st.tuples(key_bound, key_bound),
    "kind": st.sampled_from(KINDS).map(lambda k: (k, k)),
    "n": st.tuples(bound, bound),  # no statistics on n: never prunes, still filters
})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prune=st.lists(alternative, min_size=0, max_size=3),
       extra=st.sampled_from([None, "n_even", "kind_in"]))
@pytest.mark.slow
def test_a_pruned_read_returns_the_rows_of_an_unpruned_read(table, prune, extra):
    flt = {None: None, "n_even": pc.equal(pc.bit_wise_and(pc.field("n"), 1), 0),
           "kind_in": pc.field("kind").isin(["tombstone", "chat_turn"])}[extra]
    pruned = read_arrow(table, SCHEMA, filter=flt, prune=prune)
    # the same rows by hand: every row, filtered in Python by the filter and the ranges
    everything = read_arrow(table, SCHEMA).to_pylist()

    def within(row, alt):
        return all(row[c] is not None and (lo is None or row[c] >= lo) and (hi is None or row[c] <= hi)
                   for c, (lo, hi) in alt.items())

    wanted = [r for r in everything if any(within(r, alt) for alt in prune)
              and (extra != "n_even" or r["n"] % 2 == 0)
              and (extra != "kind_in" or r["kind"] in ("tombstone", "chat_turn"))]
    assert _sorted(pruned) == sorted(wanted, key=lambda r: r["n"])
    assert _sorted(read_arrow(table, SCHEMA, columns=["n", "key"], filter=flt, prune=prune)) == \
        sorted(({"n": r["n"], "key": r["key"]} for r in wanted), key=lambda r: r["n"])


def test_pruning_skips_the_files_that_cannot_hold_a_row(table):
    uris = table.file_uris()
    assert len(uris) == 8
    assert len(_pruned(table, uris, [{"seq": (650, None)}])) == 2  # 600-699 and the merged 700-749
    # a cut maximum of long keys is a prefix of the real one: files that may reach the bound stay
    assert len(_pruned(table, uris, [{"key": (_key(150, True), _key(160, True))}])) >= 1
    assert _pruned(table, uris, [{"key": ("z", None)}]) == []
    assert len(_pruned(table, uris, [{"kind": ("tombstone", "tombstone")}])) == 8  # every file has one
    assert _pruned(table, uris, [{"n": (0, 10)}]) == uris  # no statistics on n
    rows = read_arrow(table, SCHEMA, prune=[{"key": (_key(220, False), _key(221, False))}])
    assert sorted(rows["n"].to_pylist()) == [220, 221]


def test_the_shared_handle_follows_other_writers_and_a_replaced_table(tmp_path):
    path = str(tmp_path / "t")
    handle = shared_table(path)
    with handle.fresh() as dt:
        assert dt is None  # no table yet
    write_deltalake(path, _batch(0, 10, long=False, nulls=False), configuration=CONFIG)
    with handle.fresh() as dt:
        assert dt is not None and dt.version() == 0
        first = dt
    write_deltalake(path, _batch(10, 10, long=False, nulls=False), mode="append")  # another writer
    with handle.fresh() as dt:
        assert dt is first and dt.version() == 1  # refreshed in place, not reloaded
        assert read_arrow(dt, SCHEMA).num_rows == 20
    shutil.rmtree(path)  # a new table at the same path, with as many commits
    write_deltalake(path, _batch(100, 3, long=False, nulls=False), configuration=CONFIG)
    write_deltalake(path, _batch(200, 4, long=False, nulls=False), mode="append")
    with handle.fresh() as dt:
        assert sorted(read_arrow(dt, SCHEMA)["n"].to_pylist()) == [100, 101, 102, 200, 201, 202, 203]
    assert shared_table(Path(path)) is handle
