"""Which edge bucket file of a snapshot each edge lies in (see :mod:`refold.storage.snapshots`).

Edges are bucketed by a node id: a merged edge's subject, a derived edge's first input's subject,
hashed with CRC-32 (stable across runs and machines), so that a patch finds an edge's file again
and rewrites only the buckets it changed.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["bucket_keys", "edge_buckets"]


def edge_buckets(subjects: pa.ChunkedArray | pa.Array, buckets: int) -> pa.Array:
    """The bucket of each bucket key (a node id): CRC-32 modulo ``buckets`` (stable across runs
    and machines, so a patch finds an edge's file again)."""
    if buckets == 1:
        return pa.array(np.zeros(len(subjects), dtype=np.int32))
    encoded = pc.dictionary_encode(subjects).combine_chunks() if isinstance(subjects, pa.ChunkedArray) \
        else pc.dictionary_encode(subjects)
    per_value = np.array([zlib.crc32(v.encode()) % buckets for v in encoded.dictionary.to_pylist()],
                         dtype=np.int32)
    return pa.array(per_value[encoded.indices.to_numpy(zero_copy_only=False)])


def bucket_keys(edges: pa.Table, *, among: pa.Table | None = None) -> pa.Array:
    """The node id that places each edge in a bucket: a merged edge's subject, and for a derived
    edge the subject of its first input. An inverse roll-up's own subject is its input's object;
    keeping it next to its input means that changing one subject's facts rewrites its bucket
    only (an erasure's patch), not the buckets of everything those facts point at.

    ``among``: the whole edge table when ``edges`` is a part of it (first inputs are looked up
    there); an input in neither places the edge by its own subject.
    """
    table = edges if among is None else among
    subjects = edges["subject"].combine_chunks()
    inputs = edges["inputs"].combine_chunks()
    offsets = inputs.offsets.to_numpy()
    has = offsets[1:] > offsets[:-1]
    if not has.any():
        return subjects
    rows = np.flatnonzero(has)
    first = inputs.values.take(pa.array(offsets[:-1][rows]))
    where = pc.index_in(first, value_set=table["fact_id"].combine_chunks())
    found = where.to_numpy(zero_copy_only=False)
    ok = ~np.isnan(found) if found.dtype.kind == "f" else np.ones(len(found), dtype=bool)
    if among is None:  # rows of the same table: a take by row number
        source = np.arange(len(subjects))  # the row whose subject places each row
        source[rows[ok]] = found[ok].astype(np.int64)
        return subjects.take(pa.array(source))
    keys = np.array(subjects.to_pylist(), dtype=object)  # a part: small
    keys[rows[ok]] = table["subject"].combine_chunks().take(pa.array(found[ok].astype(np.int64))).to_pylist()
    return pa.array(keys.tolist(), pa.string())
