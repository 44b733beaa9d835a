"""Snapshot codec: a folded graph and its merge stats ⇄ Arrow tables (pure, no IO).

A snapshot stores the folded view: entity nodes (with their roll-up summaries) and every edge —
the merged (``extracted``) facts and the roll-up (derived) facts — with every attribute listed in
:mod:`refold.fold.merge`. Storing the roll-ups is what makes a load cheap: recomputing them costs
several times more than decoding them (measured at 20k events). Lists are Arrow list columns;
a node summary is a JSON object in a string column; datetimes are ``timestamp[us, UTC]`` plus an int32 column
of the UTC offset in seconds (``*_utcoffset``), so a time that came in as ``+02:00`` comes back
as ``+02:00`` and a decoded graph is equal attribute for attribute (``isoformat`` included) to
the one encoded. Row order is the graph's iteration order, so decoding reproduces node order,
adjacency order and key order.

The encoder refuses attributes it does not know (a newer merge added one): silently dropping it
would make a resumed fold differ from a full one. Bump :data:`FORMAT` when the columns change.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from itertools import chain
from operator import itemgetter

import networkx as nx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import StoreError
from .merge import MergeStats

FORMAT = "refold-snapshot/3"
#: Formats a store still reads: 2 lacks the bucket index (index.parquet and the contained ids'
#: buckets) that lets an erasure's patch read only the buckets it changes; it loads the same.
FORMATS = ("refold-snapshot/2", FORMAT)
TS = pa.timestamp("us", tz="UTC")
STR_LIST = pa.list_(pa.string())

#: Node attributes: the merge's, then the roll-ups' per-entity summary.
NODE_ATTRS = ("tenant", "name", "key", "aliases", "summary", "summary_sources")
NODE_SCHEMA = pa.schema([
    ("id", pa.string()), ("tenant", pa.string()), ("name", pa.string()), ("key", pa.string()),
    ("aliases", STR_LIST), ("summary", pa.string()), ("summary_sources", STR_LIST),
])

_TIMES = ("valid_from", "valid_to", "recorded_at")
EDGE_SCHEMA = pa.schema([
    ("fact_id", pa.string()), ("tenant", pa.string()), ("subject", pa.string()),
    ("relation", pa.string()), ("object", pa.string()),
    ("valid_from", TS), ("valid_to", TS), ("recorded_seq", pa.int64()), ("recorded_at", TS),
    ("sources", STR_LIST), ("source_seqs", pa.list_(pa.int64())),
    ("source_principals", pa.list_(STR_LIST)),
    ("derivation", pa.string()), ("inputs", STR_LIST), ("confidence", pa.float64()),
    ("superseded_by", pa.string()), ("ended_by", pa.string()),
    *[(f"{name}_utcoffset", pa.int32()) for name in _TIMES],
])
#: Edge attributes (the merge docstring's list); the edge key is ``fact_id``, its ends subject/object.
EDGE_ATTRS = tuple(name for name in EDGE_SCHEMA.names if not name.endswith("_utcoffset"))
#: String columns with few distinct values, best read from Parquet as Arrow dictionaries
#: (``pq.read_table(..., read_dictionary=...)``): decoding then skips building every string.
DICTIONARY_COLUMNS = {
    "nodes": ("tenant", "name", "key"),
    "edges": ("tenant", "subject", "relation", "object", "derivation", "superseded_by", "ended_by"),
}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ZONES: dict[int, timezone] = {0: timezone.utc}


def stats_to_json(stats: MergeStats) -> dict[str, int]:
    return {f.name: int(getattr(stats, f.name)) for f in fields(MergeStats)}


def stats_from_json(value: dict[str, int]) -> MergeStats:
    known = {f.name for f in fields(MergeStats)}
    return MergeStats(**{k: int(v) for k, v in value.items() if k in known})


def _offset(value: datetime | None) -> int | None:
    if value is None:
        return None
    delta = value.utcoffset()
    if delta is None:
        raise StoreError(f"cannot snapshot the naive datetime {value.isoformat()}: graph times must be "
                         "timezone-aware")
    return int(delta.total_seconds())


def _time_columns(values) -> tuple[pa.Array, pa.Array]:
    """(timestamps, UTC offsets) of aware datetimes (or None). Each distinct datetime object is
    converted once — Arrow's conversion of aware datetimes costs ~0.5 µs a value, and a decoded
    snapshot or a fold shares them between edges (an event's times) — and the rows take theirs."""
    at: dict[int, int] = {}
    distinct: list[datetime] = []
    rows: list[int | None] = []
    for value in values:
        if value is None:
            rows.append(None)
            continue
        i = at.get(id(value))
        if i is None:
            i = at[id(value)] = len(distinct)
            distinct.append(value)
        rows.append(i)
    fixed: dict[int, int] = {}  # zone object -> its offset, for zones whose offset never changes
    offsets: list[int | None] = []
    for value in distinct:
        zone = value.tzinfo
        off = fixed.get(id(zone))
        if off is None:
            off = _offset(value)
            if type(zone) is timezone or getattr(zone, "key", None) == "UTC":
                fixed[id(zone)] = off
        offsets.append(off)
    take = pa.array(rows, pa.int32())
    return pa.array(distinct, TS).take(take), pa.array(offsets, pa.int32()).take(take)


def _list_column(values, type_: pa.DataType) -> pa.Array:
    """A list column from Python lists: offsets and the flattened values, which pyarrow converts
    several times faster than a list of lists (a column with a None in it goes the plain way)."""
    if None in values:
        return pa.array(values, type_)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int32, count=len(values)), out=offsets[1:])
    flat = list(chain.from_iterable(values))
    inner = type_.value_type
    child = _list_column(flat, inner) if pa.types.is_list(inner) else pa.array(flat, inner)
    return pa.ListArray.from_arrays(pa.array(offsets), child)


_LISTS = {"sources", "source_seqs", "source_principals", "inputs"}


def encode_graph(graph: nx.MultiDiGraph) -> tuple[pa.Table, pa.Table]:
    """A rolled-up graph's nodes and edges (merged and derived) as (nodes, edges) Arrow tables."""
    node_cols: dict[str, list] = {name: [] for name in NODE_SCHEMA.names}
    for nid, data in graph.nodes(data=True):
        if data.keys() != set(NODE_ATTRS):
            raise StoreError(
                f"snapshot codec {FORMAT}: node {nid} has attributes {sorted(data)}, expected {list(NODE_ATTRS)} "
                "(a rolled-up graph; update refold.fold.snapshot_codec if the merge changed)")
        node_cols["id"].append(nid)
        for name in NODE_ATTRS:
            value = data[name]
            node_cols[name].append(json.dumps(value, ensure_ascii=False) if name == "summary" else value)
    # one tuple of attribute values per edge (itemgetter: in C), transposed into columns by zip
    row_of = itemgetter(*EDGE_ATTRS)
    width = len(EDGE_ATTRS)
    rows = []
    for u, nbrs in graph._succ.items():
        for v, keydict in nbrs.items():
            for key, data in keydict.items():
                try:
                    row = row_of(data)
                except KeyError:
                    row = None
                if row is None or len(data) != width:
                    raise StoreError(
                        f"snapshot codec {FORMAT}: edge {key} has attributes {sorted(set(data) ^ set(EDGE_ATTRS))} "
                        "it does not expect; update refold.fold.snapshot_codec with the merge")
                if row[0] != key or row[2] != u or row[4] != v:
                    raise StoreError(f"snapshot codec: edge {key} is not stored as (subject, object, fact_id)")
                rows.append(row)
    columns = dict(zip(EDGE_ATTRS, zip(*rows))) if rows else {name: () for name in EDGE_ATTRS}
    arrays: dict[str, pa.Array] = {}
    for field in EDGE_SCHEMA:
        name = field.name
        if name.endswith("_utcoffset"):
            continue
        if name in _TIMES:
            arrays[name], arrays[f"{name}_utcoffset"] = _time_columns(columns[name])
        elif name in _LISTS:
            arrays[name] = _list_column(columns[name], field.type)
        else:
            arrays[name] = pa.array(columns[name], field.type)
    nodes = pa.table([pa.array(node_cols[f.name], f.type) for f in NODE_SCHEMA], schema=NODE_SCHEMA)
    edges = pa.table([arrays[f.name] for f in EDGE_SCHEMA], schema=EDGE_SCHEMA)
    return nodes, edges


# -- decoding (the load path: column-wise, with repeated values converted once) ------------------


def _expand(column: pa.ChunkedArray | pa.Array, convert=None) -> list:
    """Python values of a dictionary-encoded column, each distinct value converted once
    (``convert`` maps the dictionary's Python values); a null is None. Rows share the objects:
    only immutable values (strings, datetimes) come this way."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    out: list = []
    for chunk in chunks:
        values = chunk.dictionary.to_pylist()
        if convert is not None:
            values = [convert(v) for v in values]
        indices = chunk.indices
        if indices.null_count:
            values.append(None)
            indices = pc.fill_null(indices, len(values) - 1)
        # an object array's take + tolist: the row-to-value lookup in C (about half the time of
        # mapping list.__getitem__ over the indices as Python ints)
        table = np.empty(len(values), dtype=object)
        table[:] = values
        out.extend(table[indices.to_numpy()].tolist())
    return out


def _strings(column: pa.ChunkedArray | pa.Array) -> list:
    """Python values of a string column; converting each distinct value once keeps it fast (and
    a value repeated over many rows is one object). The column may already be dictionary-encoded
    (read so from Parquet: see :data:`DICTIONARY_COLUMNS`)."""
    return _expand(column if pa.types.is_dictionary(column.type) else pc.dictionary_encode(column))


def _utc(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _times(table: pa.Table, name: str) -> list[datetime | None]:
    micros = pc.cast(table[name], pa.int64())
    offsets = table[f"{name}_utcoffset"]
    if not pc.any(pc.fill_null(pc.not_equal(offsets, 0), False)).as_py():
        # all UTC (the usual case): convert each distinct instant once
        return _expand(pc.dictionary_encode(micros), _utc)
    seen: dict[tuple[int, int], datetime] = {}
    out = []
    for us, off in zip(micros.to_pylist(), offsets.to_pylist()):
        if us is None:
            out.append(None)
            continue
        value = seen.get((us, off))
        if value is None:
            zone = _ZONES.get(off)
            if zone is None:
                zone = _ZONES.setdefault(off, timezone(timedelta(seconds=off)))
            value = _EPOCH + timedelta(microseconds=us)
            if off:
                value = value.astimezone(zone)
            seen[(us, off)] = value
        out.append(value)
    return out


def _lists(column: pa.ChunkedArray) -> list:
    """Python lists of a list column: fresh list objects (the merge appends to them in place)."""
    values = column.to_pylist()
    return [[] if value is None else value for value in values] if column.null_count else values


#: The order decode_graph's edge loop unpacks the columns in.
_EDGE_ORDER = ("fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
               "recorded_at", "sources", "source_seqs", "source_principals", "derivation", "inputs",
               "confidence", "superseded_by", "ended_by")
assert EDGE_ATTRS == _EDGE_ORDER, "update decode_graph's edge loop with EDGE_SCHEMA"


def decode_graph(nodes: pa.Table, edges: pa.Table) -> nx.MultiDiGraph:
    """A fresh graph from :func:`encode_graph`'s tables; no object is shared with the tables or
    with any other graph, so the merge may resume on it."""
    if nodes.schema.names != NODE_SCHEMA.names or edges.schema.names != EDGE_SCHEMA.names:
        raise StoreError(f"snapshot tables do not have the {FORMAT} columns; the snapshot is from another "
                         "refold version: delete it (refold rebuilds it) or fold with --full")
    graph = nx.MultiDiGraph()
    ids = nodes["id"].to_pylist()
    tenants, names, keys = (_strings(nodes[c]) for c in ("tenant", "name", "key"))
    aliases, summary_sources = _lists(nodes["aliases"]), _lists(nodes["summary_sources"])
    # one parse for every summary (one fresh dict per node); a JSON object per row, never null
    summaries = json.loads("[" + ",".join(nodes["summary"].to_pylist()) + "]") if nodes.num_rows else []
    # Fill networkx's dicts directly (the structure its docs give for subclasses: _node[n] is the
    # attribute dict, and for a MultiDiGraph _succ[u][v] and _pred[v][u] are the same {key:
    # attributes} dict); add_nodes_from/add_edges_from copy and check per item, which was the
    # largest part of a load.
    node, succ, pred = graph._node, graph._succ, graph._pred
    for nid, t, n, k, a, m, ss in zip(ids, tenants, names, keys, aliases, summaries, summary_sources):
        node[nid] = {"tenant": t, "name": n, "key": k, "aliases": a, "summary": m, "summary_sources": ss}
        succ[nid] = {}
        pred[nid] = {}
    cols: dict[str, list] = {"fact_id": edges["fact_id"].to_pylist()}  # unique: no dictionary pass
    for name in ("tenant", "subject", "relation", "object", "derivation", "superseded_by", "ended_by"):
        cols[name] = _strings(edges[name])
    for name in _TIMES:
        cols[name] = _times(edges, name)
    cols["recorded_seq"] = edges["recorded_seq"].to_pylist()
    cols["confidence"] = edges["confidence"].to_pylist()
    for name in ("sources", "source_seqs", "inputs", "source_principals"):
        cols[name] = _lists(edges[name])
    # One pass builds each edge's attribute dict (a dict display with constant keys: about twice
    # as fast as filling it attribute by attribute, and no function call per edge) and files it
    # in the adjacency; this is most of a load.
    try:
        for (fact_id, tenant, subject, relation, object, valid_from, valid_to, recorded_seq,  # noqa: A001
             recorded_at, sources, source_seqs, source_principals, derivation, inputs, confidence,
             superseded_by, ended_by) in zip(*(cols[name] for name in EDGE_ATTRS)):
            nbrs = succ[subject]
            keydict = nbrs.get(object)
            if keydict is None:
                keydict = nbrs[object] = {}
                pred[object][subject] = keydict
            keydict[fact_id] = {
                "fact_id": fact_id, "tenant": tenant, "subject": subject, "relation": relation,
                "object": object, "valid_from": valid_from, "valid_to": valid_to,
                "recorded_seq": recorded_seq, "recorded_at": recorded_at, "sources": sources,
                "source_seqs": source_seqs, "source_principals": source_principals,
                "derivation": derivation, "inputs": inputs, "confidence": confidence,
                "superseded_by": superseded_by, "ended_by": ended_by}
    except KeyError as exc:
        raise StoreError(f"snapshot edges name node {exc} that its node table lacks; the snapshot is "
                         "damaged: delete it (refold rebuilds it)") from None
    return graph


# -- digest (what an erasure receipt records of the folded state) -------------------------------


def _plain(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def _feed(digest, array: pa.Array) -> None:
    """Hash one column value by value: a validity byte per row, then per type the int64 byte
    lengths and the concatenated UTF-8 of strings, the int64 (timestamps: microseconds) or
    float64 values (little-endian, 0 for a null), or the int64 lengths of lists followed by their
    flattened values. Every part is preceded by its byte length."""
    def put(data) -> None:
        data = memoryview(data).cast("B")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    kind = array.type
    put(np.asarray(pc.is_valid(array), dtype=np.uint8) if array.null_count else np.ones(len(array), np.uint8))
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        filled = pc.fill_null(array, "").cast(pa.large_string())
        put(pc.binary_length(filled).to_numpy().astype("<i8"))
        offsets = np.frombuffer(filled.buffers()[1], dtype="<i8")[filled.offset:filled.offset + len(filled) + 1]
        put(filled.buffers()[2][int(offsets[0]):int(offsets[-1])] if len(filled) else b"")
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        put(pc.fill_null(pc.list_value_length(array), 0).to_numpy().astype("<i8"))
        _feed(digest, pc.list_flatten(array))
    elif pa.types.is_timestamp(kind) or pa.types.is_integer(kind):
        put(pc.fill_null(array.cast(pa.int64()), 0).to_numpy().astype("<i8"))
    elif pa.types.is_floating(kind):
        put(pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy().astype("<f8"))
    else:
        raise StoreError(f"snapshot codec: no digest for a {kind} column")


def feed_rows(digest, label: str, table: pa.Table) -> None:
    """Hash ``table`` as it stands (row order included) into ``digest``: its label and row
    count, then every column with its name and type, value by value (:func:`_feed`)."""
    digest.update(f"{label}\0{table.num_rows}\0".encode())
    for field in table.schema:
        digest.update(f"{field.name}\0{field.type}\0".encode())
        _feed(digest, _plain(table[field.name]))


def table_digest(nodes: pa.Table, edges: pa.Table) -> str:
    """SHA-256 (hex) of a folded state in its snapshot encoding (:func:`encode_graph`), whatever
    the row order, chunking or dictionary encoding of the tables.

    Nodes are taken in id order and edges in (subject, object, fact_id) order; node summaries are
    re-serialized as JSON with sorted keys (a summary's key order is not part of the state); then
    every column of nodes, then of edges, in schema order, is hashed with its name and type
    (:func:`_feed`). Two states digest equal exactly when every node and edge attribute is equal
    (times with their UTC offsets), as :func:`decode_graph` would rebuild them.
    """
    if nodes.schema.names != NODE_SCHEMA.names or edges.schema.names != EDGE_SCHEMA.names:
        raise StoreError(f"cannot digest tables without the {FORMAT} columns")
    digest = hashlib.sha256(FORMAT.encode())
    for name, table, schema, order in (("nodes", nodes, NODE_SCHEMA, ("id",)),
                                       ("edges", edges, EDGE_SCHEMA, ("subject", "object", "fact_id"))):
        flat = pa.table({field.name: _plain(table[field.name]).cast(field.type) for field in schema})
        take = pc.sort_indices(flat, sort_keys=[(key, "ascending") for key in order])
        flat = flat.take(take)
        if name == "nodes":
            summaries = flat["summary"].to_pylist()
            canonical = [None if s is None else json.dumps(json.loads(s), sort_keys=True, ensure_ascii=False)
                         for s in summaries]
            flat = flat.set_column(flat.schema.get_field_index("summary"), "summary", pa.array(canonical, pa.string()))
        digest.update(f"{name}\0{flat.num_rows}\0".encode())
        for field in schema:
            digest.update(f"{field.name}\0{field.type}\0".encode())
            _feed(digest, _plain(flat[field.name]))
    return digest.hexdigest()
