"""Snapshot codec: a merged (pre-roll-up) graph and its merge stats ⇄ Arrow tables (pure, no IO).

A snapshot stores only what the merge built — entity nodes and ``extracted`` edges with every
attribute listed in :mod:`refold.fold.merge` — because roll-ups and node summaries are recomputed
from it. Lists are Arrow list columns; datetimes are ``timestamp[us, UTC]`` plus an int32 column
of the UTC offset in seconds (``*_utcoffset``), so a time that came in as ``+02:00`` comes back
as ``+02:00`` and a decoded graph is equal attribute for attribute (``isoformat`` included) to
the one encoded. Row order is the graph's iteration order, so decoding reproduces node order,
adjacency order and key order.

The encoder refuses attributes it does not know (a newer merge added one): silently dropping it
would make a resumed fold differ from a full one. Bump :data:`FORMAT` when the columns change.
"""

from __future__ import annotations

from dataclasses import fields
from datetime import datetime, timedelta, timezone

import networkx as nx
import pyarrow as pa
import pyarrow.compute as pc

from .errors import StoreError
from .merge import MergeStats

FORMAT = "refold-snapshot/1"
TS = pa.timestamp("us", tz="UTC")
STR_LIST = pa.list_(pa.string())

#: Node attributes the merge writes (``summary``/``summary_sources`` are roll-up output, not stored).
NODE_ATTRS = ("tenant", "name", "key", "aliases")
VIEW_NODE_ATTRS = frozenset({"summary", "summary_sources"})
NODE_SCHEMA = pa.schema([
    ("id", pa.string()), ("tenant", pa.string()), ("name", pa.string()), ("key", pa.string()),
    ("aliases", STR_LIST),
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


def encode_graph(graph: nx.MultiDiGraph) -> tuple[pa.Table, pa.Table]:
    """The graph's entity nodes and ``extracted`` edges as (nodes, edges) Arrow tables.

    Derived (roll-up) edges and node summaries are skipped: they are recomputed on load.
    """
    node_cols: dict[str, list] = {name: [] for name in NODE_SCHEMA.names}
    for nid, data in graph.nodes(data=True):
        unknown = set(data) - set(NODE_ATTRS) - VIEW_NODE_ATTRS
        if unknown:
            raise StoreError(f"snapshot codec {FORMAT} does not know node attribute(s) {sorted(unknown)}; "
                             "update refold.fold.snapshot_codec with the merge")
        node_cols["id"].append(nid)
        for name in NODE_ATTRS:
            node_cols[name].append(data[name])
    edge_cols: dict[str, list] = {name: [] for name in EDGE_SCHEMA.names}
    known = set(EDGE_ATTRS)
    for u, v, key, data in graph.edges(keys=True, data=True):
        if data["derivation"] != "extracted":
            continue
        if data.keys() != known:
            raise StoreError(
                f"snapshot codec {FORMAT}: edge {key} has attributes {sorted(set(data) ^ known)} it does "
                "not expect; update refold.fold.snapshot_codec with the merge")
        if (u, v, key) != (data["subject"], data["object"], data["fact_id"]):
            raise StoreError(f"snapshot codec: edge {key} is not stored as (subject, object, fact_id)")
        for name in EDGE_ATTRS:
            edge_cols[name].append(data[name])
        for name in _TIMES:
            edge_cols[f"{name}_utcoffset"].append(_offset(data[name]))
    nodes = pa.table([pa.array(node_cols[f.name], f.type) for f in NODE_SCHEMA], schema=NODE_SCHEMA)
    edges = pa.table([pa.array(edge_cols[f.name], f.type) for f in EDGE_SCHEMA], schema=EDGE_SCHEMA)
    return nodes, edges


# -- decoding (the load path: column-wise, with repeated values converted once) ------------------


def _strings(column: pa.ChunkedArray | pa.Array) -> list:
    """Python values of a string column; converting each distinct value once keeps it fast."""
    encoded = pc.dictionary_encode(column)
    chunks = encoded.chunks if isinstance(encoded, pa.ChunkedArray) else [encoded]
    out: list = []
    for chunk in chunks:
        values = chunk.dictionary.to_pylist()
        out.extend(None if i is None else values[i] for i in chunk.indices.to_pylist())
    return out


def _times(table: pa.Table, name: str) -> list[datetime | None]:
    micros = pc.cast(table[name], pa.int64())
    offsets = table[f"{name}_utcoffset"].to_pylist()
    seen: dict[tuple[int, int], datetime] = {}
    out: list[datetime | None] = []
    for us, off in zip(micros.to_pylist(), offsets):
        if us is None:
            out.append(None)
            continue
        value = seen.get((us, off))
        if value is None:
            zone = _ZONES.get(off)
            if zone is None:
                zone = _ZONES.setdefault(off, timezone(timedelta(seconds=off)))
            value = (_EPOCH + timedelta(microseconds=us)).astimezone(zone) if off else _EPOCH + timedelta(
                microseconds=us)
            seen[(us, off)] = value
        out.append(value)
    return out


def _lists(column: pa.ChunkedArray, *, inner: bool = False) -> list:
    """Python lists of a list column (fresh list objects: the merge mutates them in place)."""
    out: list = []
    for chunk in column.chunks:
        if inner:
            out.extend(chunk.to_pylist())
            continue
        offsets = chunk.offsets.to_pylist()
        flat = chunk.values.to_pylist()
        valid = chunk.is_valid().to_pylist() if chunk.null_count else None
        for i in range(len(chunk)):
            out.append(flat[offsets[i]:offsets[i + 1]] if valid is None or valid[i] else [])
    return out


def decode_graph(nodes: pa.Table, edges: pa.Table) -> nx.MultiDiGraph:
    """A fresh graph from :func:`encode_graph`'s tables; no object is shared with the tables or
    with any other graph, so the merge may resume on it."""
    if nodes.schema.names != NODE_SCHEMA.names or edges.schema.names != EDGE_SCHEMA.names:
        raise StoreError(f"snapshot tables do not have the {FORMAT} columns; the snapshot is from another "
                         "refold version: delete it (refold rebuilds it) or fold with --full")
    graph = nx.MultiDiGraph()
    ids, tenants, names, keys = (_strings(nodes[c]) for c in ("id", "tenant", "name", "key"))
    aliases = _lists(nodes["aliases"])
    graph.add_nodes_from(
        (nid, {"tenant": t, "name": n, "key": k, "aliases": a})
        for nid, t, n, k, a in zip(ids, tenants, names, keys, aliases)
    )
    cols: dict[str, list] = {}
    for name in ("fact_id", "tenant", "subject", "relation", "object", "derivation", "superseded_by",
                 "ended_by"):
        cols[name] = _strings(edges[name])
    for name in _TIMES:
        cols[name] = _times(edges, name)
    cols["recorded_seq"] = edges["recorded_seq"].to_pylist()
    cols["confidence"] = edges["confidence"].to_pylist()
    for name in ("sources", "source_seqs", "inputs"):
        cols[name] = _lists(edges[name])
    cols["source_principals"] = _lists(edges["source_principals"], inner=True)
    rows = zip(*(cols[name] for name in EDGE_ATTRS))
    graph.add_edges_from(
        (values[2], values[4], values[0], dict(zip(EDGE_ATTRS, values))) for values in rows
    )
    return graph
