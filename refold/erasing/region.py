"""The region of a snapshot that an erasure patch works on, found with Arrow over its columns,
and the splice of the patched region back into the snapshot's tables.

See :mod:`refold.erasing.snapshot_patch` (the patch) and :mod:`refold.fold.decremental` (what a
region must hold). Rows are selected with boolean masks (numpy) over the whole edge table, and only
the few selected rows are decoded into Python: a region is tens of edges out of tens of thousands.
The tables may hold the repetitive string columns as Arrow dictionaries (as the snapshot store
reads them for decoding: less to build, and the compute kernels work on the dictionary); the
row-selection helpers at the end of this module (:func:`isin`, :func:`cut` …) work on the
dictionary where that is cheaper.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.incremental import LiveFold
from refold.fold.snapshot_codec import decode_graph, encode_graph
from refold.storage.snapshot_buckets import INDEX_SCHEMA, bucket_keys, edge_buckets, small_node_index

__all__ = ["Region", "Splice"]

#: the columns :meth:`Region.first_mentions` and :meth:`Region.outside_all` read of the edges
_MENTION_COLUMNS = ["subject", "object", "sources", "source_seqs"]


class Region:
    """The part of one snapshot's tables that a patch needs, and the splice back.

    An indexed snapshot (format 3) starts with the buckets its caller read (those of the erased
    events' edges) and reads more through ``load`` as the region grows, as the bucket index says
    they hold rows it needs (a bucket it lists but that holds none costs a decode, nothing else);
    an older one has every bucket from the start."""

    def __init__(self, nodes: pa.Table, parts: dict[int, pa.Table] | pa.Table, *, count: int = 1,
                 total: int | None = None, index: pa.Table | None = None,
                 load: Callable[[set[int]], dict[int, pa.Table]] | None = None):
        """``parts``: edge rows by bucket number (or an older snapshot's single table); ``count``:
        the snapshot's bucket count; ``total``: its edge count (default: the rows given);
        ``index``: its bucket index (:data:`~refold.storage.snapshot_buckets.INDEX_SCHEMA`), with
        ``load`` reading buckets by number (None: every bucket is in ``parts``)."""
        self.nodes, self.count, self.index, self._load = nodes, count, index, load
        self.single = isinstance(parts, pa.Table)
        self.edges: pa.Table = None  # type: ignore[assignment]  (set by _add)
        self.spans: dict[int, tuple[int, int]] = {}
        self.bucket = np.zeros(0, dtype=np.int32)
        self.base = np.zeros(0, dtype=bool)
        self.taken = np.zeros(0, dtype=bool)  # the rows in the region so far
        self._add({0: parts} if self.single else parts)
        self.total = self.edges.num_rows if total is None else total
        self.node_ids: set[str] = set()
        self._firsts: dict[str, tuple[int, str]] = {}
        self._mentioned: set[str] = set()
        self._index_rows: dict[str, dict] = {}

    # -- buckets ------------------------------------------------------------------------------------

    def _add(self, parts: dict[int, pa.Table]) -> None:
        """Append the rows of newly read buckets (each bucket's rows stay contiguous)."""
        tables = [] if self.edges is None else [self.edges]
        at = 0 if self.edges is None else self.edges.num_rows
        extra_bucket, extra_base = [], []
        for b, table in sorted(parts.items()):
            if tables and table.schema != tables[0].schema:
                table = table.cast(tables[0].schema)
            tables.append(table)
            self.spans[b] = (at, at + table.num_rows)
            at += table.num_rows
            extra_bucket.append(np.full(table.num_rows, b, dtype=np.int32))
            extra_base.append(isin(table["derivation"], ["extracted"]))
        self.edges = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
        self.bucket = np.concatenate([self.bucket, *extra_bucket])
        self.base = np.concatenate([self.base, *extra_base])
        self.taken = np.concatenate([self.taken, np.zeros(at - len(self.taken), dtype=bool)])

    def need(self, buckets: Iterable[int]) -> None:
        """Read the buckets of ``buckets`` not read yet."""
        missing = {int(b) for b in buckets} - self.spans.keys()
        if missing and self._load is not None:
            self._add(self._load(missing))

    def need_all(self) -> None:
        self.need(range(self.count))

    def _own(self, node: str) -> int:
        """The bucket of ``node``'s merged out-edges (as :func:`edge_buckets` places them)."""
        return zlib.crc32(node.encode()) % self.count if self.count > 1 else 0

    def _rows(self, nodes: Iterable[str]) -> dict[str, dict]:
        """The index rows of ``nodes`` (as dicts; a node the index lacks is absent)."""
        assert self.index is not None
        wanted = sorted(set(nodes) - self._index_rows.keys())
        if wanted:
            at = pc.index_in(pa.array(wanted, pa.string()), value_set=self.index["id"])
            found = self.index.take(at.drop_null()).to_pylist() if at.null_count < len(at) else []
            self._index_rows.update((row["id"], row) for row in found)
        return {n: self._index_rows[n] for n in nodes if n in self._index_rows}

    def _need_at(self, nodes: Iterable[str], *, out: bool = False, into: bool = False, derived: bool = False) -> None:
        """Read the buckets the index lists for ``nodes``: their merged out-edges (``out``), the
        merged edges pointing at them (``into``), the derived edges with an input of theirs
        (``derived``). Without an index (or for a node it lacks) every bucket is read."""
        nodes = set(nodes)
        if self._load is None or not nodes:
            return
        if self.index is None:
            self.need_all()
            return
        rows = self._rows(nodes)
        if len(rows) < len(nodes):
            self.need_all()
            return
        wanted: set[int] = set()
        for n, row in rows.items():
            if out and row["has_out"]:
                wanted.add(self._own(n))
            if into:
                wanted.update(row["in_buckets"] or ())
            if derived:
                wanted.update(row["derived_buckets"] or ())
        self.need(wanted)

    # -- the region -----------------------------------------------------------------------------

    def hits(self, erased: pa.Array) -> pa.Table:
        """Merged edges an erased event is a source of or ended (their subject, relation, object
        and sources). The caller has read the buckets the contained ids' index lists for them."""
        mask = self.base & (list_hits(self.edges["sources"], erased) | isin(self.edges["ended_by"], erased))
        return keep(self.edges.select(["subject", "relation", "object", "sources"]), mask)

    def load(self, hit: pa.Table, erased: set[str]) -> pa.Table:
        """The region's edges for the keys of ``hit``: the merged edges of those (subject,
        relation) keys and all merged edges of their subjects, the derived edges built from the
        keys' edges, and their roll-up partners (merged edges of the keys' objects, or pointing at
        the subjects) — these only when a key's edges have a source or end that survives
        (``erased``: the erased ids): otherwise the keys lose every edge, and a removed edge
        builds no derived edge, so no partner is looked at."""
        keys = set(zip(hit["subject"].to_pylist(), hit["relation"].to_pylist()))
        subject_ids = {s for s, _ in keys}
        subjects = pa.array(sorted(subject_ids), pa.string())
        self._need_at(subject_ids, out=True, derived=True)
        e = self.edges
        own = self.base & isin(e["subject"], subjects)
        picked = keep(e.select(["subject", "relation", "fact_id", "object", "sources", "ended_by"]), own)
        in_keys = np.array([k in keys for k in zip(picked["subject"].to_pylist(), picked["relation"].to_pylist())],
                           dtype=bool)
        of_keys = picked.filter(pa.array(in_keys))
        key_ids = of_keys["fact_id"].combine_chunks()
        partners = np.zeros(e.num_rows, dtype=bool)
        surviving = {i for sources in of_keys["sources"].to_pylist() for i in sources} | \
            {i for i in of_keys["ended_by"].to_pylist() if i is not None}
        if surviving - erased:
            objects = pc.unique(of_keys["object"])
            self._need_at(subject_ids, into=True)
            self._need_at(plain_values(objects), out=True)
            e = self.edges
            own = self.base & isin(e["subject"], subjects)
            partners = self.base & (isin(e["subject"], objects) | isin(e["object"], subjects))
        derived = ~self.base & list_hits(e["inputs"], key_ids)
        return self._take(own | partners | derived)

    def pull_in(self, live: LiveFold, nodes: set[str]) -> None:
        """Merged edges pointing at ``nodes`` and every merged out-edge of their subjects."""
        self._need_at(nodes, into=True)
        e = self.edges
        pointing = self.base & isin(e["object"], nodes)
        subjects = pc.unique(keep(e.select(["subject"]), pointing)["subject"])
        self._need_at(plain_values(subjects), out=True)
        e = self.edges
        live.adopt_merged(self._decode(self._take(self.base & isin(e["subject"], subjects))))

    def first_mentions(self, nodes: set[str], erased: set[str]) -> dict[str, tuple[int, str]]:
        """Per node: the earliest surviving (seq, event id) source of its merged edges outside the
        region (the region's own edges the patch reads itself) — or, from the bucket index, its
        earliest one anywhere when that one survives (the same for every use: the patch takes
        the least of this and the region's own). Computed from the rows: the sources flattened
        once, each source filed under the node(s) of ``nodes`` its edge has at either end, then
        the least seq per node (no joins, no loop over nodes)."""
        self._mentioned = set(nodes)
        out: dict[str, tuple[int, str]] = {}
        if self.index is not None:
            for n, row in self._rows(nodes).items():
                if row["first_event"] is not None and row["first_event"] not in erased:
                    out[n] = (row["first_seq"], row["first_event"])
            self._need_at(set(nodes) - out.keys(), out=True, into=True)
        rest = set(nodes) - out.keys()
        rows = self._at(rest) if rest else None
        if rows is not None and rows.num_rows:
            out.update(self._least(rows, rest, erased))
        self._firsts = out
        return out

    def _least(self, rows: pa.Table, nodes: set[str], erased: set[str]) -> dict[str, tuple[int, str]]:
        wanted = pa.array(sorted(nodes), pa.string())
        lists = rows["sources"].combine_chunks()
        parents = pc.list_parent_indices(lists).to_numpy()
        ids = pc.list_flatten(lists)
        seqs = pc.list_flatten(rows["source_seqs"].combine_chunks()).to_numpy()
        alive = ~isin(ids, erased)
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
        return {wanted[int(node_of[j])].as_py(): (int(seq_of[j]), ids[int(item[j])].as_py()) for j in first}

    def outside_first(self, node: str) -> tuple[int, str] | None:
        return self._firsts.get(node)

    def outside_all(self, node: str) -> list[tuple[int, str]]:
        """Every (seq, event id) source of the merged edges at ``node`` outside the region."""
        self._need_at({node}, out=True, into=True)
        rows = self._at({node})
        out: list[tuple[int, str]] = []
        for seqs, ids in zip(rows["source_seqs"].to_pylist(), rows["sources"].to_pylist()):
            out.extend(zip(seqs, ids))
        return out

    def _at(self, nodes: set[str]) -> pa.Table:
        """The mention columns of the merged edges outside the region with an end in ``nodes``."""
        e = self.edges
        at = self.base & ~self.taken & (isin(e["subject"], nodes) | isin(e["object"], nodes))
        return keep(e.select(_MENTION_COLUMNS), at)

    def _take(self, mask: np.ndarray) -> pa.Table:
        """The rows of ``mask`` not in the region yet, which join it (with their end nodes)."""
        mask = mask & ~self.taken
        self.taken |= mask
        edges = keep(self.edges, mask)
        self.node_ids.update(edges["subject"].to_pylist())
        self.node_ids.update(edges["object"].to_pylist())
        return edges

    def _decode(self, edges: pa.Table) -> nx.MultiDiGraph:
        ends = set(edges["subject"].to_pylist()) | set(edges["object"].to_pylist())
        return decode_graph(plain(keep(self.nodes, isin(self.nodes["id"], ends))), plain(edges))

    def graph(self, edges: pa.Table, mentioned: Iterable[str]) -> nx.MultiDiGraph:
        self.node_ids.update(mentioned)
        return self._decode(edges)

    # -- the splice -----------------------------------------------------------------------------

    def splice(self, graph: nx.MultiDiGraph, count: int) -> Splice:
        """The snapshot with the region replaced by ``graph``.

        Edges of a bucketed snapshot: only the buckets holding a changed edge (removed, added, or
        with another value in any column) before or after, by number — rows kept from the
        snapshot stay in the bucket file they came from, the region's rows are placed by their
        keys, and the other buckets' rows are not copied at all. An older single-file snapshot:
        the whole edge table. With an index, the new index too (:meth:`_index_after`)."""
        nodes, edges = encode_graph(graph)
        keep_nodes = ~isin(self.nodes["id"], self.node_ids)
        nodes = pa.concat_tables([keep(self.nodes, keep_nodes).cast(nodes.schema), nodes])
        if self.single:
            whole = pa.concat_tables([keep(self.edges, ~self.taken).cast(edges.schema), edges])
            return Splice(nodes, whole, whole.num_rows)
        placed = edge_buckets(bucket_keys(edges, among=self._inputs_among(edges, ~self.taken)), count)
        placed = placed.to_numpy(zero_copy_only=False)
        self.need(placed)  # (a bucket that gains a row is rewritten: it must be at hand)
        region = np.flatnonzero(self.taken)
        old = keep(self.edges, self.taken).cast(edges.schema)  # (a take would combine the buckets' chunks)
        before = {r["fact_id"]: r for r in comparable(old).to_pylist()}  # (tens of rows)
        after = {r["fact_id"]: r for r in comparable(edges).to_pylist()}
        changed = {f for f in before.keys() | after.keys() if before.get(f) != after.get(f)}
        rewrite = {int(self.bucket[row]) for row, f in zip(region, before) if f in changed}
        rewrite |= {int(b) for b, f in zip(placed, after) if f in changed}
        out = {}
        for b in sorted(rewrite):
            lo, hi = self.spans[b]
            kept = cut(self.edges.slice(lo, hi - lo), np.flatnonzero(self.taken[lo:hi])).cast(edges.schema)
            out[b] = pa.concat_tables([kept, edges.filter(pa.array(placed == b))])
        index = self._index_after(edges, placed, nodes) if self.index is not None else None
        return Splice(nodes, out, self.total - int(self.taken.sum()) + edges.num_rows, index)

    def _index_after(self, edges: pa.Table, placed: np.ndarray, nodes: pa.Table) -> pa.Table:
        """The bucket index of the spliced snapshot: the region's nodes get their old bucket lists
        plus where the region's rows lie now (lists stay supersets), and their first mention —
        exact: for a node an erased event mentioned, the least of the region's own and the one
        :meth:`first_mentions` found (the surviving first from the index, or the least outside the
        region); for the others it did not change (only erased mentions go)."""
        assert self.index is not None
        fresh = small_node_index(edges, placed)
        touched = sorted(self.node_ids | fresh.keys())
        alive = isin(pa.array(touched, pa.string()), nodes["id"])  # (a node the patch dropped goes)
        touched_alive = [n for n, ok in zip(touched, alive.tolist()) if ok]
        old = self._rows(touched_alive)
        rows = []
        for n in touched_alive:
            o, f = old.get(n), fresh.get(n)
            row = dict(o) if o is not None else dict(f)
            if o is not None and f is not None:
                row["has_out"] = o["has_out"] or f["has_out"]
                for name in ("in_buckets", "derived_buckets"):
                    merged = sorted(set(o[name] or ()) | set(f[name] or ()))
                    row[name] = merged or None
            if n in self._mentioned:
                candidates = [c for c in (self._firsts.get(n),
                                          None if f is None or f["first_event"] is None
                                          else (f["first_seq"], f["first_event"])) if c is not None]
                least = min(candidates) if candidates else None
                row["first_seq"], row["first_event"] = least if least is not None else (None, None)
            rows.append(row)
        rest = keep(self.index, ~isin(self.index["id"], touched))
        return pa.concat_tables([rest, pa.Table.from_pylist(rows, schema=INDEX_SCHEMA)])

    def _inputs_among(self, edges: pa.Table, kept_rows: np.ndarray) -> pa.Table:
        """(fact_id, subject) of the spliced table's rows that :func:`bucket_keys` can meet as a
        first input of ``edges``: the ``kept_rows`` that are one, then ``edges``' own — the same
        answers as the whole spliced table, without hashing every fact id of the snapshot (a
        derived edge of the region is built from the region's edges: its inputs are its own)."""
        inputs = edges["inputs"].combine_chunks()
        offsets = inputs.offsets.to_numpy()
        starts = offsets[:-1][offsets[1:] > offsets[:-1]]
        firsts = pc.unique(inputs.values.take(pa.array(starts, pa.int64()))) if len(starts) else pa.array([], pa.string())
        own = edges.select(["fact_id", "subject"])
        if pc.all(pc.is_in(firsts, value_set=own["fact_id"])).as_py() is not False:
            return own  # (the usual case: no need to look through the kept rows' fact ids)
        kept = keep(self.edges.select(["fact_id", "subject"]), kept_rows & isin(self.edges["fact_id"], firsts))
        return pa.concat_tables([kept.cast(own.schema), own])


@dataclass(frozen=True)
class Splice:
    """What :meth:`Region.splice` hands the snapshot store: the nodes, the edges (the rewritten
    buckets by number, or an older snapshot's whole table), the edge count, and the new bucket
    index (None for an unindexed snapshot)."""

    nodes: pa.Table
    edges: dict[int, pa.Table] | pa.Table
    edge_count: int
    index: pa.Table | None = None


# -- row selection over Arrow columns -------------------------------------------------------------
# Rows are picked with boolean numpy masks over whole columns, so that only the few rows selected
# are ever turned into Python values.

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
