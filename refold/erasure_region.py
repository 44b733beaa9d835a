"""The region of a snapshot that an erasure patch works on, found with Arrow over its columns,
and the splice of the patched region back into the snapshot's tables.

See :mod:`refold.erasure_refold` (the patch) and :mod:`refold.fold.decremental` (what a region
must hold). Rows are selected with boolean masks (numpy) over the whole edge table, and only the
few selected rows are decoded into Python: a region is tens of edges out of tens of thousands.
The tables may hold the repetitive string columns as Arrow dictionaries (as the snapshot store
reads them for decoding: less to build, and the compute kernels work on the dictionary).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.incremental import LiveFold
from refold.fold.snapshot_codec import decode_graph, encode_graph
from refold.storage.snapshot_buckets import bucket_keys, edge_buckets

__all__ = ["Region"]

#: the columns :meth:`Region.first_mentions` and :meth:`Region.outside_all` read of the edges
_MENTION_COLUMNS = ["subject", "object", "sources", "source_seqs"]


def _isin(column: pa.ChunkedArray | pa.Array, values: Iterable[str] | pa.Array) -> np.ndarray:
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


def _list_hits(column: pa.ChunkedArray, values: pa.Array) -> np.ndarray:
    """Boolean per row: does the list in ``column`` hold any of ``values``? (chunk by chunk: a
    combine would copy every list)"""
    parts = []
    for chunk in (column.chunks if isinstance(column, pa.ChunkedArray) else [column]):
        mask = np.zeros(len(chunk), dtype=bool)
        rows = pc.filter(pc.list_parent_indices(chunk), pc.is_in(pc.list_flatten(chunk), value_set=values))
        mask[rows.to_numpy()] = True
        parts.append(mask)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _comparable(table: pa.Table) -> pa.Table:
    """``table`` with its timestamp columns as their int64 microseconds (the same equality: the
    offsets are columns of their own), so that rows compare as Python values without an aware
    datetime built per value (most of a row's conversion)."""
    columns = [c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c for c in table.columns]
    return pa.table(columns, names=table.column_names)


def _cut(table: pa.Table, rows: np.ndarray) -> pa.Table:
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


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary columns decoded: a few rows picked out of a bucket still
    carry the bucket's whole dictionary, which decoding would turn into Python strings."""
    columns = [c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(columns, names=table.column_names)


def _keep(table: pa.Table, mask: np.ndarray) -> pa.Table:
    return table.filter(pa.array(mask))


class Region:
    """The part of one snapshot's tables that a patch needs, and the splice back."""

    def __init__(self, nodes: pa.Table, edges: pa.Table, bucket_rows: list[int] | None = None):
        """``bucket_rows``: the row count of each edge bucket file, in the order ``edges`` holds
        them (None: an older snapshot with one edge file)."""
        self.nodes, self.edges = nodes, edges
        self.bucket = None if bucket_rows is None else np.repeat(np.arange(len(bucket_rows), dtype=np.int32),
                                                                 bucket_rows)
        self.base = _isin(edges["derivation"], ["extracted"])
        self.taken = np.zeros(edges.num_rows, dtype=bool)  # the rows in the region so far
        self.node_ids: set[str] = set()
        self._firsts: dict[str, tuple[int, str]] = {}

    def hits(self, erased: pa.Array) -> pa.Table:
        """Merged edges an erased event is a source of or ended (their subject, relation, object
        and sources)."""
        mask = self.base & (_list_hits(self.edges["sources"], erased) | _isin(self.edges["ended_by"], erased))
        return _keep(self.edges.select(["subject", "relation", "object", "sources"]), mask)

    def load(self, hit: pa.Table) -> pa.Table:
        """The region's edges for the keys of ``hit``: the merged edges of those (subject,
        relation) keys and all merged edges of their subjects, their roll-up partners (merged
        edges of the keys' objects, or pointing at the subjects) and the derived edges built from
        the keys' edges."""
        e = self.edges
        keys = set(zip(hit["subject"].to_pylist(), hit["relation"].to_pylist()))
        subjects = pa.array(sorted({s for s, _ in keys}), pa.string())
        own = self.base & _isin(e["subject"], subjects)
        picked = _keep(e.select(["subject", "relation", "fact_id", "object"]), own)
        in_keys = np.array([k in keys for k in zip(picked["subject"].to_pylist(), picked["relation"].to_pylist())],
                           dtype=bool)
        key_ids = picked["fact_id"].filter(pa.array(in_keys)).combine_chunks()
        objects = pc.unique(picked["object"].filter(pa.array(in_keys)))
        partners = self.base & (_isin(e["subject"], objects) | _isin(e["object"], subjects))
        derived = ~self.base & _list_hits(e["inputs"], key_ids)
        return self._take(own | partners | derived)

    def pull_in(self, live: LiveFold, nodes: set[str]) -> None:
        """Merged edges pointing at ``nodes`` and every merged out-edge of their subjects."""
        e = self.edges
        pointing = self.base & _isin(e["object"], nodes)
        subjects = pc.unique(_keep(e.select(["subject"]), pointing)["subject"])
        live.adopt_merged(self._decode(self._take(self.base & _isin(e["subject"], subjects))))

    def first_mentions(self, nodes: set[str], erased: set[str]) -> dict[str, tuple[int, str]]:
        """Per node: the earliest surviving (seq, event id) source of its merged edges outside the
        region (the region's own edges the patch reads itself): the sources flattened once, each
        source filed under the node(s) of ``nodes`` its edge has at either end, then the least
        seq per node (no joins, no loop over nodes)."""
        rows = self._at(nodes)
        if rows.num_rows == 0:
            return {}
        wanted = pa.array(sorted(nodes), pa.string())
        lists = rows["sources"].combine_chunks()
        parents = pc.list_parent_indices(lists).to_numpy()
        ids = pc.list_flatten(lists)
        seqs = pc.list_flatten(rows["source_seqs"].combine_chunks()).to_numpy()
        alive = ~_isin(ids, erased)
        node_of, seq_of, item = [], [], []
        for end in ("subject", "object"):
            at = np.asarray(pc.fill_null(pc.index_in(rows[end], value_set=wanted), -1))[parents]
            ok = alive & (at >= 0)
            node_of.append(at[ok])
            seq_of.append(seqs[ok])
            item.append(np.flatnonzero(ok))
        node_of, seq_of, item = (np.concatenate(x) for x in (node_of, seq_of, item))
        order = np.lexsort((seq_of, node_of))  # by node, then seq: each node's first is its least
        first = order[np.r_[True, node_of[order][1:] != node_of[order][:-1]]] if len(order) else order
        out = {wanted[int(node_of[j])].as_py(): (int(seq_of[j]), ids[int(item[j])].as_py()) for j in first}
        self._firsts = out
        return out

    def outside_first(self, node: str) -> tuple[int, str] | None:
        return self._firsts.get(node)

    def outside_all(self, node: str) -> list[tuple[int, str]]:
        """Every (seq, event id) source of the merged edges at ``node`` outside the region."""
        rows = self._at({node})
        out: list[tuple[int, str]] = []
        for seqs, ids in zip(rows["source_seqs"].to_pylist(), rows["sources"].to_pylist()):
            out.extend(zip(seqs, ids))
        return out

    def _at(self, nodes: set[str]) -> pa.Table:
        """The mention columns of the merged edges outside the region with an end in ``nodes``."""
        e = self.edges
        at = self.base & ~self.taken & (_isin(e["subject"], nodes) | _isin(e["object"], nodes))
        return _keep(e.select(_MENTION_COLUMNS), at)

    def _take(self, mask: np.ndarray) -> pa.Table:
        """The rows of ``mask`` not in the region yet, which join it (with their end nodes)."""
        mask = mask & ~self.taken
        self.taken |= mask
        edges = _keep(self.edges, mask)
        self.node_ids.update(edges["subject"].to_pylist())
        self.node_ids.update(edges["object"].to_pylist())
        return edges

    def _decode(self, edges: pa.Table) -> nx.MultiDiGraph:
        ends = set(edges["subject"].to_pylist()) | set(edges["object"].to_pylist())
        return decode_graph(_plain(_keep(self.nodes, _isin(self.nodes["id"], ends))), _plain(edges))

    def graph(self, edges: pa.Table, mentioned: Iterable[str]) -> nx.MultiDiGraph:
        self.node_ids.update(mentioned)
        return self._decode(edges)

    def splice(self, graph: nx.MultiDiGraph, count: int) -> tuple[pa.Table, dict[int, pa.Table] | pa.Table, int]:
        """(nodes, edges, edge count) of the snapshot with the region replaced by ``graph``.

        Edges of a bucketed snapshot: only the buckets holding a changed edge (removed, added, or
        with another value in any column) before or after, by number — rows kept from the
        snapshot stay in the bucket file they came from, the region's rows are placed by their
        keys, and the other buckets' rows are not copied at all. An older single-file snapshot:
        the whole edge table."""
        nodes, edges = encode_graph(graph)
        keep_nodes = ~_isin(self.nodes["id"], self.node_ids)
        nodes = pa.concat_tables([_keep(self.nodes, keep_nodes).cast(nodes.schema), nodes])
        keep = ~self.taken
        if self.bucket is None:
            whole = pa.concat_tables([_keep(self.edges, keep).cast(edges.schema), edges])
            return nodes, whole, whole.num_rows
        region = np.flatnonzero(self.taken)
        old = _keep(self.edges, self.taken).cast(edges.schema)  # (a take would combine the buckets' chunks)
        before = {r["fact_id"]: r for r in _comparable(old).to_pylist()}  # (tens of rows)
        after = {r["fact_id"]: r for r in _comparable(edges).to_pylist()}
        changed = {f for f in before.keys() | after.keys() if before.get(f) != after.get(f)}
        placed = edge_buckets(bucket_keys(edges, among=self._inputs_among(edges, keep)), count)
        placed = placed.to_numpy(zero_copy_only=False)
        rewrite = {int(self.bucket[row]) for row, f in zip(region, before) if f in changed}
        rewrite |= {int(b) for b, f in zip(placed, after) if f in changed}
        starts = np.concatenate([[0], np.cumsum(np.bincount(self.bucket, minlength=count))])
        out = {}
        for b in sorted(rewrite):
            lo, hi = int(starts[b]), int(starts[b + 1])
            kept = _cut(self.edges.slice(lo, hi - lo), np.flatnonzero(self.taken[lo:hi])).cast(edges.schema)
            out[b] = pa.concat_tables([kept, edges.filter(pa.array(placed == b))])
        return nodes, out, int(keep.sum()) + edges.num_rows

    def _inputs_among(self, edges: pa.Table, keep: np.ndarray) -> pa.Table:
        """(fact_id, subject) of the spliced table's rows that :func:`bucket_keys` can meet as a
        first input of ``edges``: the kept rows that are one, then ``edges``' own — the same
        answers as the whole spliced table, without hashing every fact id of the snapshot."""
        inputs = edges["inputs"].combine_chunks()
        offsets = inputs.offsets.to_numpy()
        starts = offsets[:-1][offsets[1:] > offsets[:-1]]
        firsts = pc.unique(inputs.values.take(pa.array(starts, pa.int64()))) if len(starts) else pa.array([], pa.string())
        own = edges.select(["fact_id", "subject"])
        kept = _keep(self.edges.select(["fact_id", "subject"]), keep & _isin(self.edges["fact_id"], firsts))
        return pa.concat_tables([kept.cast(own.schema), own])
