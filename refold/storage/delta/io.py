"""Reading Delta tables into Arrow the one way that is safe here.

deltalake 1.6.6's ``to_pyarrow_dataset()`` hands pyarrow a Rust-backed filesystem; when such a
dataset is still referenced at interpreter shutdown the process can abort ("terminate called
without an active exception", exit 134), which would corrupt CLI exit codes and the test runner's
status. So refold reads the table's current data files with pyarrow's own dataset reader (local
paths or URIs pyarrow understands); the file list still comes from the Delta log, so what is read
is exactly the table version loaded.

File pruning: a reader that knows where its rows lie passes ``prune`` (column ranges); the data
files whose min/max statistics in the Delta log (``get_add_actions``) show that no row can lie
there are not opened. It is exact: the ranges are also applied as a filter, so a pruned read
returns the same rows as an unpruned one, and a statistic is trusted only as far as it is a true
bound (delta-rs cuts long strings, so a string maximum may be a prefix of the real one).

Both readers take a ``DeltaTable`` (the tables kept open per process are in
:mod:`refold.storage.delta.handles`).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from deltalake import DeltaTable

from refold.storage.files.options import arrow_filesystem, arrow_paths

__all__ = ["Bounds", "never_null", "parquet_dataset", "read_arrow", "read_files", "scan", "seq_spans", "sql_in"]


#: One pruning alternative: column → (low, high), inclusive; None leaves that end open (a null
#: value lies in no range).
Bounds = Mapping[str, tuple[Any, Any]]


def read_arrow(dt: DeltaTable, schema: pa.Schema, *, columns: Sequence[str] | None = None,
               filter: pc.Expression | None = None, prune: Sequence[Bounds] | None = None) -> pa.Table:
    """Rows of ``dt`` at its loaded version, projected and filtered (``schema`` is the table's).

    ``prune``: rows are wanted only where, for at least one alternative, every named column lies
    in its range (an extra filter, e.g. ``[{"seq": (100, None)}, {"kind": ("tombstone",
    "tombstone")}]`` for ``seq >= 100 or kind == "tombstone"``); data files whose statistics rule
    out every alternative are skipped unread. Same rows as an unpruned read with that filter.
    """
    uris = dt.file_uris()
    wanted = list(columns) if columns else None
    if prune is not None:
        within = _bounds_filter(prune)
        filter = within if filter is None else filter & within
        uris = _pruned(dt, uris, prune) if uris else uris
    if not uris:  # (no filter to run: nothing to keep, and a plan over no rows costs ~0.3 ms)
        table = schema.empty_table()
        return table.select(wanted) if wanted else table
    return scan(parquet_dataset(dt, uris, schema), columns=wanted, filter=filter)


def scan(dataset: ds.Dataset, *, columns: Sequence[str] | None = None,
         filter: pc.Expression | None = None) -> pa.Table:
    """``dataset.to_table(columns=..., filter=...)``, also where some files hold string_view
    columns: files written by delta-rs MERGE/DELETE (DataFusion) store strings that way, and a
    pushed-down filter then meets mixed string/string_view kernels; the rows are then read
    whole and filtered after."""
    try:
        return dataset.to_table(columns=columns, filter=filter)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        table = dataset.to_table()
        if filter is not None:
            table = table.filter(filter)
        return table.select(list(columns)) if columns else table


def parquet_dataset(dt: DeltaTable, uris: Sequence[str], schema: pa.Schema, *,
                    partitions: Sequence[str] = ()) -> ds.Dataset:
    """A pyarrow dataset over ``uris`` (data files of ``dt``), read through the filesystem that
    ``dt``'s storage options describe (:func:`refold.storage.files.options.arrow_filesystem`):
    every pyarrow read of a table's files goes through here, so a store on object storage is read
    with the endpoint, credentials and retries its Delta table was opened with. ``partitions``:
    the table's partition columns (fields of ``schema``), read from the files' Hive-style paths
    (``bucket=3/``), so a filter may test them."""
    # deltalake keeps the options the table was opened with; there is no public getter
    fs = arrow_filesystem(dt.table_uri, getattr(dt, "_storage_options", None))
    options = {}
    if partitions:
        options = {"partitioning": ds.partitioning(pa.schema([schema.field(c) for c in partitions]), flavor="hive"),
                   "partition_base_dir": arrow_paths([dt.table_uri.rstrip("/")], fs)[0]}
    return ds.dataset(arrow_paths(uris, fs), schema=schema, format="parquet", filesystem=fs, **options)


def read_files(dt: DeltaTable, schema: pa.Schema, *, columns: Sequence[str] | None = None,
               where: Mapping[str, Sequence[Any]] | None = None, prune: Sequence[Bounds] | None = None) -> pa.Table:
    """The rows of ``dt`` whose column values are among ``where``'s (column -> allowed values)
    and that lie within ``prune``, read file by file on the calling thread.

    For reads that pick a few rows out of a few files (``prune`` leaves the few): each file is
    opened with ``pq.ParquetFile`` and decoded without Arrow's thread pool, and the rows are
    picked with compute kernels. A dataset scan (:func:`read_arrow`) costs ~1 ms per file of
    scanner set-up and runs on the pool, where it competes with the caller's other threads, and
    an expression filter costs a query plan (~5 ms for 32 ranges). Same rows as
    ``read_arrow(dt, schema, filter=<where as is_in terms>, prune=prune)``. A file whose columns
    do not match ``schema`` (written by another engine, or before a schema change) sends the
    whole read there.
    """
    uris = dt.file_uris()
    wanted = list(columns) if columns else list(schema.names)
    where = dict(where or {})
    if any("://" in uri and not uri.startswith("file://") for uri in uris):  # an object store
        return read_arrow(dt, schema, columns=columns, filter=_where_filter(where), prune=prune)
    needed = list(dict.fromkeys([*wanted, *where, *(name for p in (prune or ()) for name in p)]))
    target = pa.schema([schema.field(name) for name in needed])
    if prune is not None and uris:
        uris = _pruned(dt, uris, prune)
    try:
        parts = []
        for uri in uris:
            with pa.OSFile(uri.removeprefix("file://")) as source, pq.ParquetFile(source) as fh:
                part = fh.read(columns=needed, use_threads=False)
            parts.append(part if part.schema.equals(target) else part.cast(target))
    except (KeyError, ValueError, pa.ArrowException):
        return read_arrow(dt, schema, columns=columns, filter=_where_filter(where), prune=prune)
    table = pa.concat_tables(parts) if parts else target.empty_table()
    for name, values in where.items():  # the value sets first: the ranges then test a few rows
        if table.num_rows:
            table = table.filter(pc.is_in(table[name], value_set=pa.array(list(values), schema.field(name).type)))
    if prune is not None and table.num_rows:
        table = table.filter(pc.fill_null(_bounds_mask(table, prune), False))
    return table.select(wanted)


def _where_filter(where: Mapping[str, Sequence[Any]]) -> pc.Expression | None:
    out = None
    for name, values in where.items():
        term = pc.field(name).isin(list(values))
        out = term if out is None else out & term
    return out


def _bounds_mask(table: pa.Table, prune: Sequence[Bounds]):
    """Per row of ``table``: does it lie within an alternative of ``prune`` (see
    :func:`_bounds_filter`, the same test as an expression)?"""
    out = None
    for alternative in prune:
        term = None
        for name, (low, high) in alternative.items():
            parts = ([] if low is None else [pc.greater_equal(table[name], low)]) + \
                    ([] if high is None else [pc.less_equal(table[name], high)])
            for part in parts or [pc.is_valid(table[name])]:
                term = part if term is None else pc.and_kleene(term, part)
        if term is None:  # no bounds: every row
            return pa.array(np.ones(table.num_rows, dtype=bool))
        out = term if out is None else pc.or_kleene(out, term)
    return pa.array(np.zeros(table.num_rows, dtype=bool)) if out is None else out


def _bounds_filter(prune: Sequence[Bounds]) -> pc.Expression:
    """The rows ``prune`` allows, as an expression (false for no alternative)."""
    out: pc.Expression | None = None
    for alternative in prune:
        term: pc.Expression | None = None
        for name, (low, high) in alternative.items():
            parts = ([] if low is None else [pc.field(name) >= low]) + ([] if high is None else [pc.field(name) <= high])
            for part in parts or [pc.field(name).is_valid()]:  # a null lies in no range
                term = part if term is None else term & part
        term = pc.scalar(True) if term is None else term
        out = term if out is None else out | term
    return pc.scalar(False) if out is None else out


class _FileStats:
    """One table version's data files and their per-column min/max statistics (read once)."""

    def __init__(self, dt: DeltaTable):
        self.version = dt.version()
        self.actions = pa.table(dt.get_add_actions(flatten=True))
        self.paths: list[str] = self.actions["path"].to_pylist()
        self._columns: dict[str, tuple[list, list] | None] = {}

    def column(self, name: str) -> tuple[list, list] | None:
        """(minimums, maximums) per file, or None when the log keeps no statistics on ``name``."""
        if name not in self._columns:
            names = self.actions.column_names
            self._columns[name] = ((self.actions[f"min.{name}"].to_pylist(), self.actions[f"max.{name}"].to_pylist())
                                   if f"min.{name}" in names and f"max.{name}" in names else None)
        return self._columns[name]

    def never_null(self, name: str) -> bool:
        """Whether the log's statistics show no null ``name`` in any file (False when a file
        keeps no null count for it)."""
        key = f"null_count.{name}"
        if key not in self.actions.column_names:
            return not self.paths
        counts = self.actions[key]
        return counts.null_count == 0 and pc.sum(counts).as_py() in (0, None)


def never_null(dt: DeltaTable, name: str) -> bool:
    """Whether no data file of ``dt`` holds a null ``name`` (from the log's statistics): then a
    read pruned on ``name``'s ranges misses no row it could hold."""
    try:
        return _file_stats(dt).never_null(name)
    except Exception:  # noqa: BLE001 - no statistics: not known
        return False


#: id(DeltaTable) → (a weak reference to it, its statistics at one version): a fold prunes the
#: same table version several times (cache look-up, then the write's key check)
_STATS: dict[int, tuple[weakref.ref, _FileStats]] = {}


def _file_stats(dt: DeltaTable) -> _FileStats:
    entry = _STATS.get(id(dt))
    if entry is not None and entry[0]() is dt and entry[1].version == dt.version():
        return entry[1]
    stats = _FileStats(dt)
    if len(_STATS) >= 64:
        _STATS.clear()
    _STATS[id(dt)] = (weakref.ref(dt), stats)
    return stats


def _pruned(dt: DeltaTable, uris: list[str], prune: Sequence[Bounds]) -> list[str]:
    """``uris`` without the files whose statistics show no row within any alternative."""
    try:
        stats = _file_stats(dt)
    except Exception:  # noqa: BLE001 - no statistics to use: read every file
        return uris
    columns = {name: stats.column(name) for alternative in prune for name in alternative}
    skip = set()
    for i, path in enumerate(stats.paths):
        if not any(all(columns[name] is None or _may_hold(columns[name][0][i], columns[name][1][i], low, high)
                       for name, (low, high) in alternative.items()) for alternative in prune):
            skip.add(path)
    if not skip:
        return uris
    root = dt.table_uri.rstrip("/")
    prefixes = {root.removeprefix("file://") + "/", root.split("://", 1)[-1] + "/"}
    out = []
    for uri in uris:
        path = uri.replace("\\", "/")
        prefix = next((p for p in prefixes if path.startswith(p)), None)
        if prefix is None or path[len(prefix):] not in skip:  # add actions name files relative to the root
            out.append(uri)
    return out


def _may_hold(low_stat, high_stat, low, high) -> bool:
    """Whether a file whose column statistics are [low_stat, high_stat] may hold a value in [low, high]."""
    try:
        if high is not None and low_stat is not None and low_stat > high:
            return False  # a cut minimum is a prefix: still a lower bound
        if low is not None and high_stat is not None and high_stat < low:
            # a cut string maximum is a prefix of the real one, which may still reach ``low``
            return isinstance(high_stat, str) and isinstance(low, str) and low.startswith(high_stat)
    except TypeError:  # statistics of another type than the bounds: no conclusion
        return True
    return True


def seq_spans(seqs: Iterable[int], most: int = 32) -> list[tuple[int, int]]:
    """Sorted seqs as at most ``most`` inclusive ranges (closest neighbours merged first)."""
    points = sorted(set(seqs))
    if not points:
        return []
    gaps = sorted((b - a for a, b in zip(points, points[1:])), reverse=True)
    widest = gaps[most - 1] if len(gaps) >= most else 0  # split only at the most - 1 widest gaps
    spans = [[points[0], points[0]]]
    for seq in points[1:]:
        if seq - spans[-1][1] > widest:
            spans.append([seq, seq])
        else:
            spans[-1][1] = seq
    return [(a, b) for a, b in spans]


def sql_in(column: str, values: Iterable[str]) -> str:
    """A Delta SQL predicate term: string ``column`` is one of ``values`` (quotes doubled).

    delta-rs records a commit's predicate in its ``commitInfo``, which outlives an erasure's
    vacuum: only ids that the log keeps anyway (event ids, fact-id hashes) may be named here,
    never a name or other content."""
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in sorted(set(values)))
    return f"{column} IN ({quoted})"
