"""Roll-ups: passes over the merged graph that derive relations from facts (pure).

Rule kinds (declared in the spec, see :class:`refold.fold.spec.RollupRule`):

* ``inverse``  (a, r, b)              ⇒ (b, out, a), same validity;
* ``compose``  (a, r1, b), (b, r2, c) ⇒ (a, out, c), valid over the overlap of both inputs.

A derived edge's ``sources`` is the union of its inputs' sources and ``inputs`` lists the input
fact ids, so lineage reaches the events; because the graph is rebuilt from the log, a derived edge
disappears as soon as any of its inputs does. Per-entity summaries (current facts per relation,
with the events behind them) are written to each node's ``summary`` and ``summary_sources``.
Roll-ups read only extracted edges, so derived facts never feed other rules (no fixpoint needed).
"""

from __future__ import annotations

from datetime import datetime

import networkx as nx

from .merge import fact_id_of
from .spec import FoldSpec, RollupRule


def _overlap(a: dict, b: dict) -> tuple[datetime, datetime | None] | None:
    start = max(a["valid_from"], b["valid_from"])
    ends = [e for e in (a["valid_to"], b["valid_to"]) if e is not None]
    end = min(ends) if ends else None
    if end is not None and end <= start:
        return None
    return start, end


def _union(*lists: list) -> list:
    out: list = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


def _derived(rule: RollupRule, u: str, v: str, inputs: list[dict], start, end) -> dict:
    fid = fact_id_of("rollup", rule.name, *[d["fact_id"] for d in inputs])
    sources = _union(*[d["sources"] for d in inputs])
    seqs = _union(*[d["source_seqs"] for d in inputs])
    principals = []
    for d in inputs:
        principals.extend(d["source_principals"])
    return dict(
        key=fid, fact_id=fid, tenant=inputs[0]["tenant"], subject=u, relation=rule.output, object=v,
        valid_from=start, valid_to=end, recorded_seq=max(d["recorded_seq"] for d in inputs),
        recorded_at=max(d["recorded_at"] for d in inputs), sources=sources, source_seqs=seqs,
        source_principals=principals, derivation=rule.name,
        inputs=[d["fact_id"] for d in inputs], confidence=min(d["confidence"] for d in inputs),
        superseded_by=None, ended_by=None,
    )


def apply_rollups(graph: nx.MultiDiGraph, spec: FoldSpec) -> int:
    """Add derived edges and node summaries to ``graph`` in place; return the derived edge count."""
    base = [d for _, _, d in graph.edges(data=True) if d["derivation"] == "extracted"]
    by_relation: dict[str, list[dict]] = {}
    for d in base:
        by_relation.setdefault(d["relation"], []).append(d)
    new_edges: list[dict] = []
    for rule in spec.rollups:
        if rule.kind == "inverse":
            for d in by_relation.get(rule.inputs[0], []):
                new_edges.append(_derived(rule, d["object"], d["subject"], [d], d["valid_from"], d["valid_to"]))
        else:
            seconds: dict[str, list[dict]] = {}
            for d in by_relation.get(rule.inputs[1], []):
                seconds.setdefault(d["subject"], []).append(d)
            for first in by_relation.get(rule.inputs[0], []):
                for second in seconds.get(first["object"], []):
                    span = _overlap(first, second)
                    if span is not None:
                        new_edges.append(_derived(rule, first["subject"], second["object"],
                                                  [first, second], *span))
    new_edges.sort(key=lambda d: d["fact_id"])  # deterministic insertion order
    for d in new_edges:
        if not graph.has_edge(d["subject"], d["object"], d["fact_id"]):
            graph.add_edge(d["subject"], d["object"], **d)
    _summaries(graph, base)
    return len(new_edges)


def _summaries(graph: nx.MultiDiGraph, base: list[dict]) -> None:
    summary: dict[str, dict[str, list[str]]] = {}
    sources: dict[str, list[str]] = {}
    for d in sorted(base, key=lambda d: (d["recorded_seq"], d["fact_id"])):
        if d["valid_to"] is not None:
            continue
        obj = graph.nodes[d["object"]]["name"]
        summary.setdefault(d["subject"], {}).setdefault(d["relation"], []).append(obj)
        bucket = sources.setdefault(d["subject"], [])
        for s in d["sources"]:
            if s not in bucket:
                bucket.append(s)
    for node, data in graph.nodes(data=True):
        data["summary"] = summary.get(node, {})
        data["summary_sources"] = sources.get(node, [])
