"""Row selection over Arrow tables, as the erasure patch's region needs it (refold/erasure_region.py).

Rows are picked with boolean numpy masks over whole columns, so that only the few rows selected
are ever turned into Python values. Columns may be Arrow dictionaries (the snapshot store reads
the repetitive string columns so): these helpers work on the dictionary where that is cheaper.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["comparable", "cut", "isin", "keep", "list_hits", "plain", "plain_values"]


def isin(column: pa.ChunkedArray | pa.Array, values: Iterable[str] | pa.Array) -> np.ndarray:
    """Boolean per row: is the (string) value among ``values``? (null: no). A dictionary column
    is tested on its dictionary, then per row by index (a quarter of Arrow's is_in on it)."""
    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = pa.array(sorted(values), pa.string())
    elif pa.types.is_dictionary(values.type):  # (a unique() of a dictionary column)
        values = values.cast(pa.string())
    parts = []
    for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
        # (is_in gives false, not null, for a null: no fill needed)
        if not pa.types.is_dictionary(chunk.type):
            parts.append(np.asarray(pc.is_in(chunk, value_set=values)))
            continue
        hit = np.asarray(pc.is_in(chunk.dictionary, value_set=values))
        if len(hit) == 0:
            parts.append(np.zeros(len(chunk), dtype=bool))
        elif chunk.indices.null_count:
            rows = hit[np.asarray(pc.fill_null(chunk.indices, 0))]
            parts.append(rows & np.asarray(chunk.indices.is_valid()))
        else:
            parts.append(hit[np.asarray(chunk.indices)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def list_hits(column: pa.ChunkedArray, values: pa.Array) -> np.ndarray:
    """Boolean per row: does the list in ``column`` hold any of ``values``? (chunk by chunk: a
    combine would copy every list)"""
    parts = []
    for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
        mask = np.zeros(len(chunk), dtype=bool)
        rows = pc.filter(pc.list_parent_indices(chunk), pc.is_in(pc.list_flatten(chunk), value_set=values))
        mask[rows.to_numpy()] = True
        parts.append(mask)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def comparable(table: pa.Table) -> pa.Table:
    """``table`` with its timestamp columns as their int64 microseconds (the same equality: the
    offsets are columns of their own), so that rows compare as Python values without an aware
    datetime built per value (most of a row's conversion)."""
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return pa.table(columns, names=table.column_names)


def cut(table: pa.Table, rows: np.ndarray) -> pa.Table:
    """``table`` without the (sorted) ``rows``: slices between them, concatenated (zero-copy;
    a filter copies every column of a bucket to drop a few rows)."""
    parts, start = [], 0
    for row in rows.tolist():
        if row > start:
            parts.append(table.slice(start, row - start))
        start = row + 1
    if start < table.num_rows:
        parts.append(table.slice(start))
    return pa.concat_tables(parts) if parts else table.slice(0, 0)


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded: a few rows picked out of a bucket still
    carry the bucket's whole dictionary, which decoding would turn into Python strings."""
    columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(columns, names=table.column_names)


def keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table.filter(pa.array(mask))


def plain_values(values: pa.Array | pa.ChunkedArray) -> set[str]:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_dictionary(values.type):
        values = values.cast(values.type.value_type)
    return {v for v in values.to_pylist() if v is not None}
