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

import itertools
import operator
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from datetime import datetime

import networkx as nx

from refold.fold.merge import fact_id_of
from refold.fold.spec import FoldSpec, RollupRule


def _overlap(a: dict, b: dict) -> tuple[datetime, datetime | None] | None:
    start = max(a["valid_from"], b["valid_from"])
    end_a, end_b = a["valid_to"], b["valid_to"]
    end = end_b if end_a is None else end_a if end_b is None else min(end_a, end_b)
    if end is not None and end <= start:
        return None
    return start, end


def span(inputs: Sequence[dict]) -> tuple[datetime, datetime | None] | None:
    """The valid time :func:`derive` gives a derived edge over ``inputs`` (in its ``inputs``
    order): an inverse edge keeps its input's, a compose edge gets the overlap of both (None:
    they do not overlap, so there is no such edge). Only these attributes of a derived edge depend
    on its inputs' valid times, so when an input is only closed this is all that changes."""
    if len(inputs) == 1:
        return inputs[0]["valid_from"], inputs[0]["valid_to"]
    return _overlap(inputs[0], inputs[1])


def _derived(rule: RollupRule, u: str, v: str, inputs: list[dict], start, end) -> dict:
    # (the roll-up path of every fold: one and two inputs are spelled out; a dict display with
    # constant keys, and dict.fromkeys for the order-keeping unions)
    first = inputs[0]
    if len(inputs) == 1:
        ids = [first["fact_id"]]
        sources, seqs = list(dict.fromkeys(first["sources"])), list(dict.fromkeys(first["source_seqs"]))
        principals = list(first["source_principals"])
        recorded_seq, recorded_at, confidence = first["recorded_seq"], first["recorded_at"], first["confidence"]
    elif len(inputs) == 2:  # (list concatenation and two-argument max/min: no generators)
        second = inputs[1]
        ids = [first["fact_id"], second["fact_id"]]
        sources = list(dict.fromkeys(first["sources"] + second["sources"]))
        seqs = list(dict.fromkeys(first["source_seqs"] + second["source_seqs"]))
        principals = first["source_principals"] + second["source_principals"]
        recorded_seq = max(first["recorded_seq"], second["recorded_seq"])
        recorded_at = max(first["recorded_at"], second["recorded_at"])
        confidence = min(first["confidence"], second["confidence"])
    else:
        ids = [d["fact_id"] for d in inputs]
        sources = list(dict.fromkeys(item for d in inputs for item in d["sources"]))
        seqs = list(dict.fromkeys(item for d in inputs for item in d["source_seqs"]))
        principals = [p for d in inputs for p in d["source_principals"]]
        recorded_seq = max(d["recorded_seq"] for d in inputs)
        recorded_at = max(d["recorded_at"] for d in inputs)
        confidence = min(d["confidence"] for d in inputs)
    fid = fact_id_of("rollup", rule.name, *ids)
    return {"fact_id": fid, "tenant": first["tenant"], "subject": u, "relation": rule.output, "object": v,
            "valid_from": start, "valid_to": end, "recorded_seq": recorded_seq, "recorded_at": recorded_at,
            "sources": sources, "source_seqs": seqs, "source_principals": principals,
            "derivation": rule.name, "inputs": ids, "confidence": confidence,
            "superseded_by": None, "ended_by": None}


def derive(rules: Sequence[RollupRule], base: Iterable[dict], *,
           touching: Container[str] | None = None) -> list[dict]:
    """The derived edges (attribute dicts, sorted by fact id) that ``rules`` give over ``base``.

    ``base``: extracted edges' attribute dicts. The one implementation of the rules: a full
    roll-up passes every extracted edge, an incremental refresh only the changed ones and their
    partners, with ``touching`` (fact ids): then only derived edges with an input among them.
    """
    by_relation: dict[str, list[dict]] = {}
    for d in base:
        by_relation.setdefault(d["relation"], []).append(d)
    new_edges: list[dict] = []
    for rule in rules:
        if rule.kind == "inverse":
            for d in by_relation.get(rule.inputs[0], []):
                if touching is None or d["fact_id"] in touching:
                    new_edges.append(_derived(rule, d["object"], d["subject"], [d], d["valid_from"], d["valid_to"]))
        else:
            firsts, seconds = by_relation.get(rule.inputs[0], []), by_relation.get(rule.inputs[1], [])
            if touching is None:
                pairs = _joined(firsts, seconds)
            else:  # the pairs with a touching input, each once: (touching, any), (other, touching)
                pairs = itertools.chain(
                    _joined([d for d in firsts if d["fact_id"] in touching], seconds),
                    _joined([d for d in firsts if d["fact_id"] not in touching],
                            [d for d in seconds if d["fact_id"] in touching]))
            for first, second in pairs:
                when = _overlap(first, second)
                if when is not None:
                    new_edges.append(_derived(rule, first["subject"], second["object"], [first, second], *when))
    new_edges.sort(key=lambda d: d["fact_id"])  # deterministic insertion order
    return new_edges


def _joined(firsts: list[dict], seconds: list[dict]) -> Iterator[tuple[dict, dict]]:
    """(first, second) pairs where the first's object is the second's subject."""
    if not firsts or not seconds:
        return
    by_subject: dict[str, list[dict]] = {}
    for d in seconds:
        by_subject.setdefault(d["subject"], []).append(d)
    for first in firsts:
        for second in by_subject.get(first["object"], ()):
            yield first, second


_RECORD_ORDER = operator.itemgetter("recorded_seq", "fact_id")


def summarize(edges: Iterable[dict], name: Callable[[str], str]) -> tuple[dict[str, list[str]], list[str]]:
    """One entity's ``summary`` and ``summary_sources`` from its extracted out-edges.

    Current facts (open valid time) in record order, per relation the objects' names (``name``
    maps a node id to it), and the events behind them, each once.
    """
    current = [d for d in edges if d["valid_to"] is None]
    current.sort(key=_RECORD_ORDER)
    summary: dict[str, list[str]] = {}
    for d in current:
        summary.setdefault(d["relation"], []).append(name(d["object"]))
    # each source once, in first-seen order
    return summary, list(dict.fromkeys([s for d in current for s in d["sources"]]))


def apply_rollups(graph: nx.MultiDiGraph, spec: FoldSpec) -> int:
    """Add derived edges and node summaries to ``graph`` in place; return the derived edge count."""
    base = [d for _, _, d in graph.edges(data=True) if d["derivation"] == "extracted"]
    new_edges = derive(spec.rollups, base)
    for d in new_edges:
        if not graph.has_edge(d["subject"], d["object"], d["fact_id"]):
            graph.add_edge(d["subject"], d["object"], key=d["fact_id"], **d)
    by_subject: dict[str, list[dict]] = {}
    for d in base:
        by_subject.setdefault(d["subject"], []).append(d)
    name = dict(graph.nodes(data="name")).__getitem__
    for node, data in graph.nodes(data=True):
        mine = by_subject.get(node)
        data["summary"], data["summary_sources"] = summarize(mine, name) if mine else ({}, [])
    return len(new_edges)
