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
import polars as pl

from refold.fold.rollups import span

__all__ = ["CLOSER_COLUMNS", "closer_frame", "closer_readers", "edge_map", "may_read", "reader_view"]

#: who may see what closed a fact, for the facts whose closer is restricted (the rest: nobody is kept out)
CLOSER_COLUMNS = {"fact_id": pl.Utf8, "closer_restricted": pl.Boolean, "closer_readers": pl.List(pl.Utf8)}


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


def closer_frame(rows: pl.DataFrame, retraction_principals: Mapping[str, Sequence[str]]) -> pl.DataFrame:
    """:func:`closer_readers` of a whole state held as fact rows (``fact_id``, ``derivation``,
    ``subject``, ``relation``, ``valid_from``, ``valid_to``, ``superseded_by``, ``ended_by``,
    ``source_principals``, ``inputs``), in polars: the facts whose closer is restricted, as
    (``fact_id``, ``closer_restricted`` True, ``closer_readers`` sorted). Only restricted facts
    and closings are handled in Python, so a state where few are costs about a join. A derived
    fact's inputs are looked up among the extracted facts' closers (a roll-up over another
    roll-up's output is not; the merge gives roll-ups merged inputs)."""
    open_to_all = pl.col("source_principals").list.eval(pl.element().list.len() == 0).list.all()
    restricted = rows.filter(~open_to_all)
    access = {fid: _readers(lists)[1] for fid, lists in zip(restricted["fact_id"].to_list(),
                                                           restricted["source_principals"].to_list())}
    ext = rows.filter(pl.col("derivation") == "extracted").with_columns(
        pl.col("fact_id").is_in(pl.Series(list(access), dtype=pl.Utf8).implode()).alias("_restricted"))
    closed = ext.filter(pl.col("valid_to").is_not_null())
    by_supersession = pl.col("superseded_by").is_in(rows["fact_id"].implode())
    found: dict[str, frozenset[str]] = {}
    # a superseding fact: restricted when its own sources are
    for fid, by in closed.filter(by_supersession).select("fact_id", "superseded_by").iter_rows():
        if by in access:
            found[fid] = access[by]
    # a retraction: restricted when its event names principals
    named = sorted(e for e, p in retraction_principals.items() if p)
    ended = closed.filter(~by_supersession.fill_null(False) & pl.col("ended_by").is_in(named))
    for fid, by in ended.select("fact_id", "ended_by").iter_rows():
        found[fid] = frozenset(retraction_principals[by])
    # a fact that begins where this one ends: restricted when every one of them is (not this one)
    rest = closed.filter(~by_supersession.fill_null(False) & pl.col("ended_by").is_null())
    starts = ext.group_by("subject", "relation", "valid_from").agg(
        pl.len().alias("_n"), pl.col("_restricted").sum().alias("_r"))
    rest = rest.join(starts.rename({"valid_from": "valid_to"}), on=["subject", "relation", "valid_to"], how="inner")
    rest = rest.with_columns(((pl.col("valid_from") == pl.col("valid_to")).cast(pl.Int64)).alias("_self"))
    rest = rest.filter((pl.col("_n") - pl.col("_self") > 0)
                       & (pl.col("_r") - pl.col("_self") * pl.col("_restricted").cast(pl.Int64)
                          == pl.col("_n") - pl.col("_self")))
    if rest.height:
        members = ext.filter(pl.col("_restricted")).join(
            rest.select("subject", "relation", pl.col("valid_to").alias("valid_from")).unique(),
            on=["subject", "relation", "valid_from"], how="semi")
        groups: dict[tuple, list[str]] = {}
        for fid, subj, rel, start in members.select("fact_id", "subject", "relation", "valid_from").iter_rows():
            groups.setdefault((subj, rel, start), []).append(fid)
        for fid, subj, rel, end in rest.select("fact_id", "subject", "relation", "valid_to").iter_rows():
            others = [o for o in groups.get((subj, rel, end), ()) if o != fid]
            found[fid] = frozenset().union(*(access[o] for o in others))
    # a derived fact: restricted when a closed input's closer is, readers the intersection
    derived = rows.filter((pl.col("derivation") != "extracted") & pl.col("valid_to").is_not_null())
    if found and derived.height:
        hit = derived.select("fact_id", "inputs").explode("inputs").filter(
            pl.col("inputs").is_in(pl.Series(list(found), dtype=pl.Utf8).implode()))
        per: dict[str, list[frozenset[str]]] = {}
        for fid, i in hit.iter_rows():
            per.setdefault(fid, []).append(found[i])
        found.update({fid: frozenset.intersection(*sets) for fid, sets in per.items()})
    return pl.DataFrame([(fid, True, sorted(r)) for fid, r in found.items()], schema=CLOSER_COLUMNS, orient="row")


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
