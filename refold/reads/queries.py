"""Reading the state tables: fact listings with partition pruning, and networkx views.

A read of one subject opens only the buckets that can hold it (one per tenant); a graph is a
*view* built for what the caller asks (a subject's neighbourhood to a depth, a tenant, a time),
never the whole state unless asked for. Every query reads the tables at a tag and applies the
read overlay of the events after it (:class:`~refold.reads.overlay.StateOverlay`; None: none);
compose roll-ups are not stored: each read derives those of what it reads, from the overlaid
rows (:mod:`refold.reads.rollups`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import networkx as nx
import polars as pl

from refold.fold.entities import entity_key
from refold.fold.merge import node_id
from refold.fold.partition import FACT_SCHEMA, bucket_of, derive_for_subjects
from refold.fold.queries import FACT_COLUMNS
from refold.reads.rollups import derived_here as find_derived_here
from refold.reads.rollups import find_derived, input_relations, rollups_of, rules_of, with_rollups
from refold.storage.state import StateStore, StateTag, among

if TYPE_CHECKING:
    from refold.reads.overlay import StateOverlay

__all__ = ["facts_from_state", "facts_sourced_from", "graph_view", "lineage_view", "neighbourhood"]


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
        names.update({n: e["name"] for n, e in overlay.entities.items() if n in nodes})
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
               tenant: str | None = None, valid_at: datetime | None = None, principal: str | None = None,
               retraction_principals=None) -> nx.MultiDiGraph:
    """A networkx MultiDiGraph (the reference fold's node and edge attributes, edges keyed by
    fact id) of ``subject``'s neighbourhood to ``depth`` hops along out-edges (None: the whole
    state, or a tenant's), keeping facts valid at ``valid_at`` when given. With ``principal``,
    as that principal may see it (:func:`_scoped`; ``retraction_principals``: see
    :func:`refold.fold.scoping.reader_view`): the neighbourhood of the scoped state."""
    df, complete = _view_rows(store, tag, overlay, subject=subject, depth=depth, tenant=tenant)
    if principal is not None:
        graph = _scoped(store, tag, overlay, df, complete, principal, retraction_principals)
        return neighbourhood(graph, subject=subject, depth=depth, tenant=tenant, valid_at=valid_at)
    if valid_at is not None and df.height:
        df = df.filter((pl.col("valid_from") <= valid_at)
                       & (pl.col("valid_to").is_null() | (pl.col("valid_to") > valid_at)))
    return _graph(store, tag, overlay, df.to_dicts() if df.height else [])


def facts_sourced_from(store: StateStore, tag: StateTag, overlay: "StateOverlay | None",
                       event_ids: Iterable[str]) -> pl.DataFrame:
    """Every fact of the state with a source among ``event_ids``: stored rows, and compose
    roll-ups with their history (what the graph engine's whole graph holds; an erasure's dry
    run counts them). Reads the buckets of the nodes the events' items name (the ``items``
    table, by event id). A roll-up carries an erased source only through an input, so only the
    pairs with a sourced input are derived: a sourced first input with its object's partners,
    and a sourced second input with the first-input rows that point at its subject (one scan
    of those relations)."""
    ids = sorted(set(event_ids))
    hit = store.read("items", columns=["subject_node", "object_node"], filter=among("event_id", ids)) \
        if ids else None
    nodes = set(hit["subject_node"].to_pylist()) | set(hit["object_node"].to_pylist()) if hit is not None else set()
    sourced = pl.col("sources").list.eval(pl.element().is_in(ids)).list.any()
    if overlay is not None and overlay.rows.height:  # (events after the tag: their rows are the overlay's)
        newer = overlay.rows.filter(sourced)
        nodes |= set(newer["subject"].to_list()) | set(newer["object"].to_list())
    if not nodes:
        return pl.from_arrow(FACT_SCHEMA.empty_table())
    rows = _rows(store, tag, overlay, nodes=sorted(nodes), relation=None, tenant=None).filter(sourced)
    rules = rules_of(tag)
    merged = rows.filter(pl.col("layer") == "merged")
    frames = [rows]
    if rules and merged.height:
        firsts = {r.inputs[0] for r in rules}
        heads = merged.filter(pl.col("relation").is_in(sorted(firsts)))
        if heads.height:
            frames.append(rollups_of(store, tag, heads, subjects=set(heads["subject"].to_list()), overlay=overlay,
                                     remember=False))
        partners = merged.filter(pl.col("relation").is_in(sorted({r.inputs[1] for r in rules})))
        if partners.height:
            targets = pl.Series(sorted(set(partners["subject"].to_list())), dtype=pl.Utf8).implode()
            pointing = _rows(store, tag, overlay, nodes=None, relation=firsts, tenant=None).filter(
                (pl.col("layer") == "merged") & pl.col("object").is_in(targets))
            derived = derive_for_subjects(rules, pointing, partners, set(pointing["subject"].to_list()),
                                          buckets=tag.buckets)
            frames.append(derived.select(rows.columns).cast(rows.schema))
    return pl.concat(frames).filter(sourced).unique("fact_id", keep="first", maintain_order=True)


def _view_rows(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", *, subject: str | None,
               depth: int, tenant: str | None) -> tuple[pl.DataFrame, set[str] | None]:
    """(the rows of :func:`graph_view`'s view, the nodes whose rows it holds all of; None: all)."""
    if subject is None:
        df = with_rollups(store, tag, _rows(store, tag, overlay, nodes=None, relation=None, tenant=tenant),
                          subjects=None, overlay=overlay)
        return df, None
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
    return (pl.concat(frames) if frames else pl.DataFrame()), seen


def _graph(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", rows: list[dict[str, Any]]
           ) -> nx.MultiDiGraph:
    """``rows`` (fact rows) as a graph: edges keyed by fact id, nodes with their entities' attributes."""
    graph = nx.MultiDiGraph()
    nodes = {r["subject"] for r in rows} | {r["object"] for r in rows}
    ents = _entities(store, tag, nodes, overlay)
    for n in sorted(nodes):
        graph.add_node(n, **ents.get(n, {}))
    for r in rows:
        graph.add_edge(r["subject"], r["object"], key=r["fact_id"], **{k: r[k] for k in _EDGE_KEYS})
    return graph


def _scoped(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", df: pl.DataFrame,
            complete: set[str] | None, principal: str, retraction_principals) -> nx.MultiDiGraph:
    """The facts of ``df`` as ``principal`` may see them, as a scoped view of the whole state has
    them (:func:`refold.fold.scoping.reader_view`). What decides a fact's visibility is a
    derived fact's inputs (recursively) and, for a closed fact, the rows of its subject and
    relation (the fact that superseded it, one that begins where it ends): those ``df`` lacks
    are read (by id, then by subject and relation, with bucket pruning; ``complete``: nodes whose
    rows ``df`` holds all of, None: every node), the whole is scoped, and only ``df``'s facts are
    kept."""
    from refold.fold.scoping import reader_view

    if df.height == 0:
        return nx.MultiDiGraph()
    rows = _with_inputs(store, tag, overlay, df)
    if complete is not None:
        closed = rows.filter(pl.col("valid_to").is_not_null() & (pl.col("derivation") == "extracted"))
        subjects = set(closed["subject"].to_list()) - complete
        if subjects:
            extra = _rows(store, tag, overlay, nodes=sorted(subjects), relation=set(closed["relation"].to_list()),
                          tenant=None)
            extra = extra.filter(~pl.col("fact_id").is_in(rows["fact_id"].implode()))
            rows = pl.concat([rows, extra.select(rows.columns).cast(rows.schema)])
    view = reader_view(_graph(store, tag, overlay, rows.to_dicts()), principal, retraction_principals)
    wanted = set(df["fact_id"].to_list())
    return nx.MultiDiGraph(view.edge_subgraph([(u, v, k) for u, v, k in view.edges(keys=True) if k in wanted]))


def _with_inputs(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", df: pl.DataFrame, *,
                 wanted: set[str] | None = None) -> pl.DataFrame:
    """``df`` and, recursively, the facts ``wanted`` (default: the inputs of ``df``'s derived
    facts) and those they were derived from. Each level is one filtered read by id: of the
    buckets of the inputs' subjects (``input_subjects``) where the facts that name them say,
    else of every bucket (a fact id names no bucket); then compose roll-ups, which no stored row
    holds, are derived from their inputs (remembered by the read that returned them, or
    searched for in their join)."""
    frames, seen = [df], set(df["fact_id"].to_list())
    buckets = _input_buckets(df, tag) if wanted is None else None
    if wanted is None:
        wanted = {i for ids in df["inputs"].to_list() for i in ids or ()}
    wanted = wanted - seen
    while wanted:
        seen |= wanted
        unstored = find_derived_here(wanted)  # compose roll-ups: never stored, not looked for
        stored = wanted - unstored
        # inputs are merged facts, unless a rule derives from a derived relation: of the buckets
        # named, that layer (an organisation's holds its staff's inverse roll-ups) is read only
        # for the rest; with no buckets named, both layers in one read of every bucket
        first = None if buckets is None else "merged"
        where = buckets if buckets is not None or not stored else _id_buckets(store, tag, stored)
        found = pl.from_arrow(store.read("facts", version=tag.facts_version, filter=among("fact_id", stored),
                                         buckets=where, layer=first)) if stored and where else df.head(0)
        if overlay is not None:
            found = overlay.apply(found, fact_ids=stored)
        missing = stored - set(found["fact_id"].to_list())
        if missing and first is not None:
            found = pl.concat([found, pl.from_arrow(store.read(
                "facts", version=tag.facts_version, filter=among("fact_id", missing), buckets=buckets,
                layer="derived")).select(found.columns).cast(found.schema)])
            missing = stored - set(found["fact_id"].to_list())
        missing |= unstored
        if missing and tag.rollups:  # a compose roll-up: derived when read, not stored
            derived = find_derived(store, tag, missing, overlay)
            if derived.height:
                found = pl.concat([found, derived.select(found.columns).cast(found.schema)])
        frames.append(found.select(df.columns).cast(df.schema))
        wanted = {i for ids in found["inputs"].to_list() for i in ids or ()} - seen
        buckets = _input_buckets(found, tag)
    return pl.concat(frames)


def _id_buckets(store: StateStore, tag: StateTag, fact_ids: set[str]) -> set[int]:
    """The buckets whose stored rows (either layer) hold one of ``fact_ids`` (a fact id names no
    bucket): one read of the id column alone, so the whole rows are then read from those
    buckets only (an id of no stored row, a compose roll-up, reads no rows at all)."""
    hit = store.read("facts", version=tag.facts_version, columns=["fact_id", "bucket"], filter=among("fact_id", fact_ids))
    return set(hit["bucket"].to_pylist())


def _input_buckets(df: pl.DataFrame, tag: StateTag) -> set[int] | None:
    """The buckets of the subjects of ``df``'s derived facts' inputs (None: every bucket, where a
    derived fact does not name them)."""
    derived = df.filter(pl.col("inputs").list.len() > 0)
    subjects = derived["input_subjects"].to_list()
    if any(not s for s in subjects):
        return None
    return {bucket_of(n, tag.buckets) for names in subjects for n in names}


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
        found.update({n: e for n, e in overlay.entities.items() if n in nodes})
    return found


def lineage_view(store: StateStore, tag: StateTag, overlay: "StateOverlay | None", fact_id: str, *,
                 principal: str | None = None, retraction_principals=None) -> nx.MultiDiGraph:
    """A graph of ``fact_id`` and, recursively, the facts it was derived from (what ``why``
    walks); with ``principal``, as that principal may see them (see :func:`graph_view`)."""
    rows = _with_inputs(store, tag, overlay, pl.from_arrow(FACT_SCHEMA.empty_table()), wanted={fact_id})
    if principal is not None:
        return _scoped(store, tag, overlay, rows, set(), principal, retraction_principals)
    return _graph(store, tag, overlay, rows.to_dicts())


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
