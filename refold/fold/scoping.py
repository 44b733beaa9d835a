"""What a principal may see of a folded graph (pure): the reader's view of facts and their closings.

An event's ``principals`` list says who may read it (empty: everyone in its tenant). A fact is
visible to a principal when *every* source event is. Hiding the restricted facts is not enough:
a public fact that a restricted fact superseded (or a restricted retraction ended) carries the
traces of its closer — ``valid_to`` (the restricted fact's start), ``superseded_by`` (its id),
``ended_by`` (its event) — and ``why`` would print them.

The rule: **a fact closed by something the reader may not see is, for that reader, still open**
(``valid_to``, ``superseded_by`` and ``ended_by`` cleared). Showing it open was chosen over
showing it closed with the closing fields blanked: a closed-but-unexplained fact still tells the
reader that something they may not see happened at about that time (it drops out of "current"
answers), while the open fact is exactly what the reader would believe from what they may read.
What a closer is:

* ``superseded_by`` set: that fact (visible or not by its own sources);
* else ``ended_by`` set: that retraction event (its principals, looked up in the log);
* else a ``valid_to`` equal to the start of a fact of the same (subject, relation) — a fact
  about the past is ended where the open one begins — that start's facts, when none of them
  is visible. (A stated end that happens to coincide with a hidden fact's start is shown open
  too: on that tie the rule errs towards hiding.)

The view is not a refold of the events the reader may read: when a visible fact follows the
hidden closer (Oslo; Rome, restricted; Paris), both Oslo and Paris show as open. Chasing the chain
would be more faithful but depends on the reader, which the search index's per-fact metadata
(:func:`closer_readers`) cannot express, and facts, ``why`` and search must agree.

Derived facts (roll-ups) are visible when all their inputs are; their valid time is recomputed
from the reader's view of their inputs (:func:`refold.fold.rollups.span`). Entity names and
aliases are not scoped (a surface form first seen in a restricted event stays the entity's name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import networkx as nx

from .rollups import span

__all__ = ["closer_readers", "edge_map", "may_read", "reader_view"]


def may_read(principal_lists: Iterable[Sequence[str]], principal: str | None) -> bool:
    """Whether ``principal`` may read an item built from events with these principals lists
    (None: no principal filter, everything is readable)."""
    return principal is None or all(not p or principal in p for p in principal_lists)


def _readers(principal_lists: Iterable[Sequence[str]]) -> tuple[bool, frozenset[str]]:
    readers: set[str] | None = None
    for plist in principal_lists:
        if plist:
            readers = set(plist) if readers is None else readers & set(plist)
    return readers is not None, frozenset(readers or ())


def edge_map(graph: nx.MultiDiGraph) -> dict[str, dict[str, Any]]:
    """A folded graph's facts by id: the edges' attribute dicts (shared, not copied)."""
    return {k: d for _, _, k, d in graph.edges(keys=True, data=True)}


def closer_readers(edges: Mapping[str, Mapping[str, Any]], retraction_principals: Mapping[str, Sequence[str]]
                   ) -> dict[str, tuple[bool, frozenset[str]]]:
    """For every closed fact of a whole state (``edges``: facts by id, as :func:`edge_map` has
    them, or the state tables' rows): ``(restricted, readers)`` of what closed it (see the
    module docstring); ``restricted`` False means everyone who may read the fact may see its
    closing. ``retraction_principals``: principals of the retraction events named by
    ``ended_by`` (an event missing there counts as readable: it was erased, and erasure refolds).

    Derived facts: restricted when any closed input's closer is, readers the intersection.
    Facts missing from the answer have an unrestricted closer (or none)."""
    starts: dict[tuple[str, str, Any], list[dict]] = {}
    for d in edges.values():
        if d["derivation"] == "extracted":
            starts.setdefault((d["subject"], d["relation"], d["valid_from"]), []).append(d)
    out: dict[str, tuple[bool, frozenset[str]]] = {}
    for fid, d in edges.items():
        if d["derivation"] != "extracted" or d["valid_to"] is None:
            continue
        if d["superseded_by"] is not None and d["superseded_by"] in edges:
            out[fid] = _readers(edges[d["superseded_by"]]["source_principals"])
        elif d["ended_by"] is not None:
            out[fid] = _readers([retraction_principals.get(d["ended_by"], ())])
        else:
            others = [o for o in starts.get((d["subject"], d["relation"], d["valid_to"]), ()) if o is not d]
            if others:
                # visible to a reader who may read any one of them: intersect per fact, unite
                per = [_readers(o["source_principals"]) for o in others]
                if all(restricted for restricted, _ in per):
                    out[fid] = (True, frozenset().union(*(r for _, r in per)))
    for fid, d in edges.items():
        if d["derivation"] == "extracted" or d["valid_to"] is None:
            continue
        closed = [out[i] for i in d["inputs"] if i in out]
        if any(restricted for restricted, _ in closed):
            readers = [r for restricted, r in closed if restricted]
            out[fid] = (True, frozenset.intersection(*readers))
    return out


def reader_view(graph: nx.MultiDiGraph, principal: str | None,
                retraction_principals: Mapping[str, Sequence[str]] | Callable[[], Mapping[str, Sequence[str]]]
                ) -> nx.MultiDiGraph:
    """The graph as ``principal`` may see it (None: ``graph`` itself): only visible facts and
    the entities they touch, each fact closed by something the principal may not see reopened,
    derived facts' valid time recomputed from their inputs as seen. Attribute dicts that do not
    change are shared with ``graph``: treat the view as read-only."""
    if principal is None:
        return graph
    if callable(retraction_principals):  # (a read of the log: only when a retraction ended a fact here)
        ended = any(d["ended_by"] is not None for _, _, d in graph.edges(data=True))
        retraction_principals = retraction_principals() if ended else {}
    closers = closer_readers(edge_map(graph), retraction_principals)
    view = nx.MultiDiGraph()
    seen: dict[str, dict] = {}
    derived = []
    for u, v, k, d in graph.edges(keys=True, data=True):
        if not may_read(d["source_principals"], principal):
            continue
        if d["derivation"] != "extracted":
            derived.append((u, v, k, d))
            continue
        closer = closers.get(k)
        if closer is not None and closer[0] and principal not in closer[1]:
            d = {**d, "valid_to": None, "superseded_by": None, "ended_by": None}
        seen[k] = d
        _add(view, graph, u, v, k, d)
    for u, v, k, d in derived:
        inputs = [seen.get(i) for i in d["inputs"]]
        if any(i is None for i in inputs):
            continue  # an input the reader may not see (its sources are the derived fact's too)
        when = span(inputs)  # type: ignore[arg-type]
        if when is None:
            continue
        if when != (d["valid_from"], d["valid_to"]):
            d = {**d, "valid_from": when[0], "valid_to": when[1]}
        _add(view, graph, u, v, k, d)
    return view


def _add(view: nx.MultiDiGraph, graph: nx.MultiDiGraph, u: str, v: str, k: str, d: dict) -> None:
    for n in (u, v):
        if n not in view:
            view.add_node(n, **graph.nodes[n])
    view.add_edge(u, v, key=k, **d)
