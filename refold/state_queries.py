"""Reading the state tables: fact listings with partition pruning, and networkx views.

A read of one subject opens only the buckets that can hold it (one per tenant); a graph is a
*view* built for what the caller asks (a subject's neighbourhood to a depth, a tenant, a time),
never the whole state unless asked for. Every query reads the tables at a tag and applies the
read overlay of the events after it (:class:`~refold.state_overlay.StateOverlay`; None: none);
compose roll-ups are not stored: each read derives those of what it reads, from the overlaid
rows (:mod:`refold.state_rollups`).
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import networkx as nx
import polars as pl

from refold.fold.entities import entity_key
from refold.fold.merge import node_id
from refold.fold.partition import bucket_of
from refold.fold.queries import FACT_COLUMNS
from refold.state_rollups import find_derived, input_relations, with_rollups
from refold.storage.state import StateStore, StateTag, among

if TYPE_CHECKING:
    from refold.state_overlay import StateOverlay

__all__ = ["facts_from_state", "graph_view", "lineage_view", "neighbourhood"]


def _subject_nodes(tag: StateTag, subject: str, tenant: str | None) -> list[str]:
    tenants = [tenant] if tenant is not None else list(tag.tenants)
    return sorted({node_id(t, subject) for t in tenants})


def _names(store: StateStore, tag: StateTag, nodes: set[str], overlay: "StateOverlay | None") -> dict[str, str]:
    if not nodes:
        return {}
    rows = store.read("entities", version=tag.entities_version, columns=["node", "name"],
                      buckets={bucket_of(n, tag.buckets) for n in nodes},
                      filter=among("node", nodes))
    names = dict(zip(rows["node"].to_pylist(), rows["name"].to_pylist()))
    if overlay is not None:
        names.update({n: overlay.names[n][1] for n in nodes - names.keys() if n in overlay.names})
    return names


def _rows(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", *, nodes: list[str] | None,
          relation: str | set[str] | None, tenant: str | None) -> pl.DataFrame:
    expr = None
    buckets = None
    if nodes is not None:
        buckets = {bucket_of(n, tag.buckets) for n in nodes}
        expr = among("subject", nodes)
    if isinstance(relation, set):
        wanted = among("relation", relation)
    else:
        wanted = among("relation", [relation]) if relation else None
    for extra in ([wanted] if wanted is not None else []) + \
                 ([among("tenant", [tenant])] if tenant is not None else []):
        expr = extra if expr is None else expr & extra
    df = pl.from_arrow(store.read("facts", buckets=buckets, filter=expr, version=tag.facts_version))
    return df if overlay is None else overlay.apply(df, nodes=nodes, relation=relation, tenant=tenant)


def facts_from_state(store: StateStore, tag: StateTag, overlay: "StateOverlay | None" = None, *, subject: str | None = None,
                     relation: str | None = None, valid_at: datetime | None = None,
                     tenant: str | None = None, current_only: bool = False) -> pl.DataFrame:
    """Facts as :func:`refold.fold.queries.facts_frame` lists them, read from the state tables
    (``relation`` canonical). With ``subject``, only its buckets are read."""
    if subject is not None and not entity_key(subject):
        return pl.DataFrame(schema=FACT_COLUMNS)
    nodes = _subject_nodes(tag, subject, tenant) if subject is not None else None
    df = _rows(store, tag, overlay, nodes=nodes, relation=input_relations(tag, relation), tenant=tenant)
    # a roll-up's validity is the intersection of its inputs': it is valid at t (or open) exactly
    # when both inputs are, so filtering the inputs first derives only the rows asked for (a
    # whole-state current read no longer derives every closed row of the history)
    if valid_at is not None:
        df = df.filter((pl.col("valid_from") <= valid_at)
                       & (pl.col("valid_to").is_null() | (pl.col("valid_to") > valid_at)))
    if current_only:
        df = df.filter(pl.col("valid_to").is_null())
    df = with_rollups(store, tag, df, subjects=nodes, overlay=overlay)
    if relation is not None:
        df = df.filter(pl.col("relation") == relation)
    if valid_at is not None:  # (again for the partners a subject's roll-ups read)
        df = df.filter((pl.col("valid_from") <= valid_at)
                       & (pl.col("valid_to").is_null() | (pl.col("valid_to") > valid_at)))
    if current_only:
        df = df.filter(pl.col("valid_to").is_null())
    if df.height == 0:
        return pl.DataFrame(schema=FACT_COLUMNS)
    names = _names(store, tag, set(df["subject"].to_list()) | set(df["object"].to_list()), overlay)
    df = df.with_columns(
        pl.col("subject").replace_strict(names, return_dtype=pl.Utf8),
        pl.col("object").replace_strict(names, return_dtype=pl.Utf8),
        pl.col("valid_to").is_null().alias("current"),
    )
    return df.sort(["recorded_seq", "fact_id"]).select(list(FACT_COLUMNS)).cast(FACT_COLUMNS)


_EDGE_KEYS = ("fact_id", "tenant", "subject", "relation", "object", "valid_from", "valid_to", "recorded_seq",
              "recorded_at", "sources", "source_seqs", "source_principals", "derivation", "inputs", "confidence",
              "superseded_by", "ended_by")


def graph_view(store: StateStore, tag: StateTag, overlay: "StateOverlay | None" = None, *, subject: str | None = None, depth: int = 1,
               tenant: str | None = None, valid_at: datetime | None = None) -> nx.MultiDiGraph:
    """A networkx MultiDiGraph (the reference fold's node and edge attributes, edges keyed by
    fact id) of ``subject``'s neighbourhood to ``depth`` hops along out-edges (None: the whole
    state, or a tenant's), keeping facts valid at ``valid_at`` when given."""
    graph = nx.MultiDiGraph()
    if subject is None:
        frames = [with_rollups(store, tag, _rows(store, tag, overlay, nodes=None, relation=None, tenant=tenant),
                               subjects=None, overlay=overlay)]
    else:
        frontier, seen, frames = set(_subject_nodes(tag, subject, tenant)), set(), []
        for _ in range(max(depth, 1)):
            frontier -= seen
            if not frontier:
                break
            seen |= frontier
            df = _rows(store, tag, overlay, nodes=sorted(frontier), relation=None, tenant=tenant)
            df = with_rollups(store, tag, df, subjects=frontier, overlay=overlay)
            frames.append(df)
            frontier = set(df["object"].to_list())
    df = pl.concat(frames) if frames else pl.DataFrame()
    if valid_at is not None and df.height:
        df = df.filter((pl.col("valid_from") <= valid_at)
                       & (pl.col("valid_to").is_null() | (pl.col("valid_to") > valid_at)))
    rows = df.to_dicts() if df.height else []
    nodes = {r["subject"] for r in rows} | {r["object"] for r in rows}
    ents = _entities(store, tag, nodes, overlay)
    for n in sorted(nodes):
        graph.add_node(n, **ents.get(n, {}))
    for r in rows:
        graph.add_edge(r["subject"], r["object"], key=r["fact_id"], **{k: r[k] for k in _EDGE_KEYS})
    return graph


def _entities(store: StateStore, tag: StateTag, nodes: set[str],
              overlay: "StateOverlay | None") -> dict[str, dict[str, Any]]:
    if not nodes:
        return {}
    rows = store.read("entities", version=tag.entities_version,
                      buckets={bucket_of(n, tag.buckets) for n in nodes},
                      filter=among("node", nodes)).to_pylist()
    found = {r["node"]: {"tenant": r["tenant"], "name": r["name"], "key": r["key"], "aliases": r["aliases"],
                         "summary": json.loads(r["summary"]), "summary_sources": r["summary_sources"]}
             for r in rows}
    if overlay is not None:
        found.update({n: e for n in nodes - found.keys() if (e := overlay.entity(n)) is not None})
    return found


def lineage_view(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", fact_id: str
                 ) -> nx.MultiDiGraph:
    """A graph of ``fact_id`` and, recursively, the facts it was derived from (what ``why``
    walks). A fact id names no bucket, so each level is one filtered read of every bucket."""
    frames, wanted, seen = [], {fact_id}, set()
    while wanted:
        seen |= wanted
        df = pl.from_arrow(store.read("facts", version=tag.facts_version,
                                      filter=among("fact_id", wanted)))
        if overlay is not None:
            df = overlay.apply(df, fact_ids=wanted)
        missing = wanted - set(df["fact_id"].to_list())
        if missing and tag.rollups:  # a compose roll-up: derived when read, not stored
            derived = find_derived(store, tag, missing, overlay)
            if derived.height:
                df = pl.concat([df, derived.select(df.columns).cast(df.schema)])
        frames.append(df)
        wanted = {i for ids in df["inputs"].to_list() for i in ids} - seen
    rows = pl.concat(frames).to_dicts()
    graph = nx.MultiDiGraph()
    nodes = {r["subject"] for r in rows} | {r["object"] for r in rows}
    for n, attrs in sorted(_entities(store, tag, nodes, overlay).items()):
        graph.add_node(n, **attrs)
    for r in rows:
        graph.add_edge(r["subject"], r["object"], key=r["fact_id"], **{k: r[k] for k in _EDGE_KEYS})
    return graph


def neighbourhood(graph: nx.MultiDiGraph, *, subject: str | None = None, depth: int = 1,
                  tenant: str | None = None, valid_at: datetime | None = None) -> nx.MultiDiGraph:
    """The same view as :func:`graph_view`, cut from a whole folded graph (the graph engine)."""
    keep = []
    for u, v, k, d in graph.edges(keys=True, data=True):
        if tenant is not None and d["tenant"] != tenant:
            continue
        if valid_at is not None and not (d["valid_from"] <= valid_at and (d["valid_to"] is None
                                                                          or valid_at < d["valid_to"])):
            continue
        keep.append((u, v, k))
    view = graph.edge_subgraph(keep)
    if subject is not None:
        want = entity_key(subject)
        frontier = {n for n, d in view.nodes(data=True) if d.get("key") == want
                    and (tenant is None or d.get("tenant") == tenant)}
        reached: set[str] = set()
        for _ in range(max(depth, 1)):
            frontier -= reached
            reached |= frontier
            frontier = {v for u in frontier for v in view.successors(u)}
        edges = [(u, v, k) for u, v, k in view.edges(keys=True) if u in reached]
        view = view.edge_subgraph(edges)
    return nx.MultiDiGraph(view)
