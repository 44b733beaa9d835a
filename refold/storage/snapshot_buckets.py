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

__all__ = ["INDEX_SCHEMA", "bucket_keys", "edge_buckets", "event_buckets", "node_index", "small_node_index"]


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


# -- the bucket index (format 3) -------------------------------------------------------------------
#
# So that an erasure's patch decodes only the edge buckets its region lies in (see
# refold.erasing.region), a snapshot carries where each node's and each contained event's edges
# are. Bucket lists may be supersets (a patch only ever adds to them: a needless bucket costs a
# decode, a missing one would lose rows); the first mention is exact.

BUCKET_LIST = pa.list_(pa.int32())
MAX_BUCKET = 1 << 16  # (bucket numbers are below the store's MAX_BUCKETS)
#: index.parquet: per node id that is an end of an edge, or the subject of a derived edge's input.
INDEX_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("has_out", pa.bool_()),  # has merged out-edges (they lie in the node's own bucket)
    ("in_buckets", BUCKET_LIST),  # buckets of the merged edges pointing at it
    ("derived_buckets", BUCKET_LIST),  # buckets of the derived edges with an input whose subject it is
    ("first_seq", pa.int64()),  # its first mention: the least (seq, event id) source of a merged edge at it
    ("first_event", pa.string()),
])


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column


def _lists(nodes: int, owner: np.ndarray, buckets: np.ndarray) -> pa.Array:
    """A list column of ``nodes`` rows: the distinct ``buckets`` of each owner (null: none)."""
    pairs = np.unique(owner.astype(np.int64) * (MAX_BUCKET + 1) + buckets)
    owner, buckets = pairs // (MAX_BUCKET + 1), (pairs % (MAX_BUCKET + 1)).astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=nodes))]).astype(np.int32)
    empty = offsets[1:] == offsets[:-1]
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(buckets, pa.int32()),
                                    mask=pa.array(empty)).cast(BUCKET_LIST)


def node_index(edges: pa.Table, which: pa.Array | np.ndarray) -> pa.Table:
    """The index rows (:data:`INDEX_SCHEMA`) of every node of ``edges`` (a whole snapshot's, or a
    patch's region), ``which`` being each row's bucket. Node ids are coded once (a dictionary
    over both ends) and grouped with numpy: Arrow's group-by cost ~25 ms at 21k edges, this ~6."""
    which = np.asarray(which, dtype=np.int32)
    rows = len(which)
    coded = pc.dictionary_encode(pa.concat_arrays([_plain(edges["subject"]), _plain(edges["object"])]))
    nodes, codes = coded.dictionary, np.asarray(coded.indices)
    subject, obj = codes[:rows], codes[rows:]
    base = np.asarray(pc.fill_null(pc.equal(_plain(edges["derivation"]), "extracted"), False))
    n = len(nodes)
    has_out = np.zeros(n, dtype=bool)
    has_out[subject[base]] = True
    # derived edges, by their inputs' subjects
    derived = np.flatnonzero(~base)
    inputs = edges["inputs"].combine_chunks().take(pa.array(derived, pa.int64()))
    at = np.asarray(pc.fill_null(pc.index_in(pc.list_flatten(inputs), value_set=_plain(edges["fact_id"])), -1))
    parents = np.asarray(pc.list_parent_indices(inputs))
    found = at >= 0
    derived_lists = _lists(n, subject[at[found]], which[derived[parents[found]]])
    # first mentions: each merged edge's sources, filed under both its ends
    sources = edges["sources"].combine_chunks().filter(pa.array(base))
    seqs = np.asarray(pc.list_flatten(edges["source_seqs"].combine_chunks().filter(pa.array(base))))
    owner = np.asarray(pc.list_parent_indices(sources))
    rows_base = np.flatnonzero(base)
    ends = np.concatenate([subject[rows_base][owner], obj[rows_base][owner]])
    both = np.concatenate([seqs, seqs])
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, ends, both)
    item = np.full(n, -1, dtype=np.int64)
    hit = both == first[ends]
    item[ends[hit]] = np.flatnonzero(hit) % max(len(seqs), 1)  # (a seq is one event: any item of it will do)
    has_first = item >= 0
    ids = pc.list_flatten(sources)
    return pa.table([
        nodes, pa.array(has_out),
        _lists(n, obj[base], which[base]), derived_lists,
        pa.array(first, mask=~has_first),
        pc.if_else(pa.array(has_first), ids.take(pa.array(np.where(has_first, item, 0))),
                   pa.scalar(None, pa.string())) if len(ids) else pa.nulls(n, pa.string()),
    ], schema=INDEX_SCHEMA)


def event_buckets(edges: pa.Table, which: pa.Array | np.ndarray, events: pa.Array) -> pa.Array:
    """Per event id of ``events``: the buckets of the merged edges it is a source of or ended
    (null: none)."""
    which = pa.array(np.asarray(which, dtype=np.int32))
    mask = pc.fill_null(pc.equal(_plain(edges["derivation"]), "extracted"), False)
    sources = edges["sources"].combine_chunks().filter(mask)
    b = which.filter(mask)
    ended = _plain(edges["ended_by"]).filter(mask)
    has_end = pc.is_valid(ended)
    keys = pa.concat_arrays([pc.list_flatten(sources), ended.filter(has_end)])
    values = pa.concat_arrays([b.take(pc.list_parent_indices(sources)), b.filter(has_end)])
    if len(keys) == 0:
        return pa.nulls(len(events), BUCKET_LIST)
    at = np.asarray(pc.fill_null(pc.index_in(keys, value_set=events), -1))
    found = at >= 0
    return _lists(len(events), at[found], np.asarray(values)[found])


def small_node_index(edges: pa.Table, placed: np.ndarray) -> dict[str, dict]:
    """:func:`node_index` of a patch region's few rows, in Python (the
    Arrow version's fixed cost, ~2 ms, is for whole snapshots), as rows by node id."""
    rows = edges.select(["fact_id", "subject", "object", "derivation", "inputs", "sources",
                         "source_seqs"]).to_pylist()
    subject_of = {r["fact_id"]: r["subject"] for r in rows}
    out: dict[str, dict] = {}

    def row(n: str) -> dict:
        if n not in out:
            out[n] = {"id": n, "has_out": False, "in_buckets": set(), "derived_buckets": set(), "first": None}
        return out[n]

    for r, b in zip(rows, placed.tolist()):
        u, v = row(r["subject"]), row(r["object"])
        if r["derivation"] != "extracted":
            for i in r["inputs"]:
                if i in subject_of:
                    row(subject_of[i])["derived_buckets"].add(b)
            continue
        u["has_out"] = True
        v["in_buckets"].add(b)
        if r["sources"]:
            least = min(zip(r["source_seqs"], r["sources"]))
            for end in (u, v):
                end["first"] = least if end["first"] is None else min(end["first"], least)
    for r in out.values():
        r["in_buckets"] = sorted(r["in_buckets"]) or None
        r["derived_buckets"] = sorted(r["derived_buckets"]) or None
        first = r.pop("first")
        r["first_seq"], r["first_event"] = first if first is not None else (None, None)
    return out
