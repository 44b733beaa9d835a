"""Decremental erasure (pure): the fold of a log without some events, from the fold with them.

Given a :class:`~refold.fold.incremental.LiveFold` at seq n that holds some erased events E, make it
equal, attribute for attribute, to a fold from scratch of the same log with E tombstoned — without
replaying the log. What E can have changed, and how each part is recomputed:

* **facts.** K = the (subject node, relation) keys of every merged edge that an event of E is a
  source of or ended. The merge acts on one key at a time (corroboration, supersession and
  retraction look only at the open edges of the fact's own subject and relation), so the edges of
  K are merged again from the surviving events that touched K — their sources, the events that
  ended them, and the log's retractions of K — in log order, with only their facts of K. Every
  other merged edge is unchanged.
* **entities.** A node E mentioned disappears when no merged edge touches it any more. Its name
  (first surface form in log order) and aliases (later ones) are recomputed from the surviving
  mentions when an erased mention could have given one of them.
* **roll-ups** of the changed edges and their rule partners, the summaries of K's subjects and of
  the subjects whose current facts point at a renamed node.
* **counters.** The facts and rejections of E's extractions are subtracted; K's edge,
  corroboration, supersession and retraction counts are recounted (each is a function of K's
  edges, see :mod:`refold.fold.merge`).

IO is the caller's, through :class:`Inputs`: the surviving events and their cached extractions.
The state may hold only a *region* of the full graph (the caller loads from a columnar snapshot
what K and the mentioned nodes need, see :func:`region_needs`); then ``outside_mentions`` and
``pull_in`` reach the rest. Property-tested against a fold from scratch (tests/test_erasure_decremental.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from .entities import entity_key, node_id
from .errors import RefoldError
from .events import Event
from .extract import ExtractedFact, Extraction
from .incremental import LiveFold
from .merge import GraphBuilder
from .spec import FoldSpec


class CachedExtraction(Protocol):
    """What the patch reads of a cached extraction: an :class:`~refold.fold.extract.Extraction`,
    or the lighter record the cache reads for merges (``refold.storage.cache.CachedFacts``)."""

    event_id: str
    spec_hash: str
    facts: tuple[ExtractedFact, ...]
    rejected: tuple


class NotDecremental(RefoldError):
    """The state cannot be patched (an input is missing); fold from a snapshot or the start instead."""


@dataclass
class Inputs:
    """What the patch reads besides the state (the caller's IO)."""

    #: surviving events by id (a subset of the ids asked for is fine only for ids not in the log)
    events: Callable[[set[str]], Mapping[str, Event]]
    #: cached extractions by event id
    extractions: Callable[[set[str]], Mapping[str, CachedExtraction]]
    #: surviving retraction events with seq <= the given seq
    retractions: Callable[[int], Iterable[Event]]
    #: the earliest (seq, event id) source of the merged edges at a node that lie outside the
    #: state (region mode), or None; and all of them (asked only when a name must be recomputed)
    outside_first: Callable[[str], tuple[int, str] | None] = lambda node: None
    outside_all: Callable[[str], Iterable[tuple[int, str]]] = lambda node: ()
    #: bring every merged edge pointing at these nodes, and its subject's merged out-edges, into
    #: the state (region mode; a whole state has them already)
    pull_in: Callable[[LiveFold, set[str]], None] = lambda live, nodes: None


@dataclass(frozen=True)
class Patch:
    """What :func:`remove_events` changed."""

    events: int = 0  # erased events the state held
    keys: int = 0  # (subject, relation) keys re-merged
    edges_before: int = 0  # merged edges of those keys before …
    edges_after: int = 0  # … and after
    nodes_removed: int = 0
    nodes_renamed: int = 0
    survivors: int = 0  # surviving events re-merged


def accepted(spec: FoldSpec, tenant: str, facts: Iterable[ExtractedFact]
             ) -> Iterator[tuple[ExtractedFact, str, str, str]]:
    """(fact, subject node, object node, canonical relation) for the facts the merge accepts."""
    for f in facts:
        relation = spec.canonical_relation(f.relation)
        if entity_key(f.subject) and entity_key(f.object) and relation:
            yield f, node_id(tenant, f.subject), node_id(tenant, f.object), relation


def _is_base(d: dict) -> bool:
    return d["derivation"] == "extracted"


def hit_edges(live: LiveFold, erased: set[str]) -> dict[str, tuple[str, str]]:
    """Merged edges an erased event is a source of or ended."""
    graph = live.graph
    out = {}
    for fid, (u, v) in live.builder._edges.items():
        d = graph.edges[u, v, fid]
        if d["ended_by"] in erased or not erased.isdisjoint(d["sources"]):
            out[fid] = (u, v)
    return out


def remove_events(live: LiveFold, erased_ids: Iterable[str], erased_extractions: Mapping[str, CachedExtraction],
                  inputs: Inputs) -> Patch:
    """Remove ``erased_ids`` from ``live`` in place (see the module docstring); return what changed.

    ``erased_extractions``: the cached extraction of every erased event that has one (read before
    the erasure purges them; an erased event without one contributed no facts: retractions,
    system events). Raises :class:`NotDecremental` when a surviving input is missing; ``live`` may
    then be half-patched and must be dropped.
    """
    live.refresh()
    erased = set(erased_ids) & live.contained
    if not erased:
        return Patch()
    spec, graph, builder = live.spec, live.graph, live.builder

    hit = hit_edges(live, erased)
    keys = {(u, graph.edges[u, v, fid]["relation"]) for fid, (u, v) in hit.items()}
    subjects = {u for u, _ in keys}
    old = {fid: (u, v) for u in subjects for _, v, fid, d in graph.out_edges(u, keys=True, data=True)
           if _is_base(d) and (u, d["relation"]) in keys}
    old_data = {fid: graph.edges[u, v, fid] for fid, (u, v) in old.items()}
    tenant_of: dict[str, str] = {}
    erased_at: dict[str, int] = {}  # mentioned node -> seq of its earliest erased mention
    for fid, (u, v) in hit.items():
        d = graph.edges[u, v, fid]
        for eid, seq in zip(d["sources"], d["source_seqs"]):
            if eid in erased:
                tenant_of[eid] = d["tenant"]
                for n in (u, v):
                    erased_at[n] = min(seq, erased_at.get(n, seq))

    scratch, survivors = _remerge(spec, keys, old_data.values(), erased, inputs, live.last_seq)

    # swap the edges of K
    for fid, (u, v) in old.items():
        graph.remove_edge(u, v, key=fid)
        del builder._edges[fid]
    for key in keys:
        builder._open.pop(key, None)
    for fid, (u, v) in scratch._edges.items():
        graph.add_edge(u, v, key=fid, **scratch.graph.edges[u, v, fid])
        builder._edges[fid] = (u, v)
    for key, fids in scratch._open.items():
        if fids:
            builder._open[key] = list(fids)

    _recount(builder.stats, scratch.stats, old_data.values(), erased, erased_extractions, spec, tenant_of)
    drop, renamed = _entities(live, erased_at, erased, erased_extractions, tenant_of, inputs)
    summary_subjects = set(subjects)
    if renamed:
        inputs.pull_in(live, renamed)
        summary_subjects |= {u for n in renamed for u, _, d in graph.in_edges(n, data=True)
                             if _is_base(d) and d["valid_to"] is None}
    live._refresh_rollups({s for s in summary_subjects if s in graph}, dict(scratch._edges),
                          set(old) - scratch._edges.keys())
    graph.remove_nodes_from(drop)
    live.contained -= erased
    return Patch(events=len(erased), keys=len(keys), edges_before=len(old), edges_after=len(scratch._edges),
                 nodes_removed=len(drop), nodes_renamed=len(renamed), survivors=survivors)


def _remerge(spec: FoldSpec, keys: set[tuple[str, str]], old: Iterable[dict], erased: set[str],
             inputs: Inputs, until: int) -> tuple[GraphBuilder, int]:
    """K's edges merged again from the surviving events that touched K (a scratch builder)."""
    ids: set[str] = set()
    for d in old:
        ids.update(d["sources"])
        if d["ended_by"]:
            ids.add(d["ended_by"])
    ids -= erased
    events: dict[str, Event] = {}
    for r in inputs.retractions(until):
        if r.event_id not in erased and r.fact is not None and \
                (node_id(r.tenant, r.fact.subject), spec.canonical_relation(r.fact.relation)) in keys:
            events[r.event_id] = r
    wanted = ids - events.keys()
    found = inputs.events(wanted) if wanted else {}
    if wanted - found.keys():
        raise NotDecremental(f"{len(wanted - found.keys())} surviving source event(s) are not in the log")
    events.update(found)
    need = {eid for eid, e in events.items() if e.kind != "retraction"}
    extractions = inputs.extractions(need) if need else {}
    if need - extractions.keys():
        raise NotDecremental(f"{len(need - extractions.keys())} surviving source event(s) have no cached extraction")
    scratch = GraphBuilder(spec=spec)
    for e in sorted(events.values(), key=lambda e: e.seq):
        if e.kind == "retraction":
            scratch.apply(e, None)
            continue
        x = extractions[e.event_id]
        facts = tuple(f for f, s, _, r in accepted(spec, e.tenant, x.facts) if (s, r) in keys)
        scratch.apply(e, Extraction(event_id=e.event_id, spec_hash=x.spec_hash, facts=facts))
    return scratch, len(events)


def _recount(stats, fresh, old: Iterable[dict], erased: set[str], erased_extractions: Mapping[str, CachedExtraction],
             spec: FoldSpec, tenant_of: Mapping[str, str]) -> None:
    old = list(old)
    stats.edges += fresh.edges - len(old)
    stats.corroborations += fresh.corroborations - sum(len(d["sources"]) - 1 for d in old)
    stats.supersessions += fresh.supersessions - sum(d["superseded_by"] is not None for d in old)
    stats.retractions += fresh.retractions - sum(
        d["ended_by"] is not None and d["superseded_by"] is None for d in old)
    for eid in erased:
        x = erased_extractions.get(eid)
        if x is None:
            continue
        kept = sum(1 for _ in accepted(spec, tenant_of.get(eid, ""), x.facts))
        stats.facts_in -= len(x.facts)
        stats.rejected -= len(x.rejected) + len(x.facts) - kept


def _surfaces(spec: FoldSpec, tenant: str, facts: Iterable[ExtractedFact], node: str) -> Iterator[str]:
    """The surface forms naming ``node``, in the order the merge meets them."""
    for f, s, o, _ in accepted(spec, tenant, facts):
        if s == node:
            yield f.subject.strip()
        if o == node:
            yield f.object.strip()


def _entities(live: LiveFold, erased_at: Mapping[str, int], erased: set[str], erased_extractions, tenant_of,
              inputs: Inputs) -> tuple[list[str], set[str]]:
    """(nodes to drop, renamed nodes); names and aliases are fixed in place. ``erased_at``: each
    mentioned node's earliest erased mention (seq)."""
    graph, spec = live.graph, live.spec
    drop, renamed, check = [], set(), {}
    # each erased fact's surface forms by the node they name, once (not per node: that was
    # nodes x erased events of the same entity-key work)
    surfaces: dict[str, set[str]] = {}
    for eid in erased:
        if eid in tenant_of and eid in erased_extractions:
            for f, s, o, _ in accepted(spec, tenant_of[eid], erased_extractions[eid].facts):
                surfaces.setdefault(s, set()).add(f.subject.strip())
                surfaces.setdefault(o, set()).add(f.object.strip())
    for n, erased_first in erased_at.items():
        if n not in graph:
            continue
        inside = _mentions(graph, n)
        outside = inputs.outside_first(n)
        if not inside and outside is None:
            drop.append(n)
            continue
        data = graph.nodes[n]
        gone = surfaces.get(n, set())
        if not gone:
            continue
        # erased mentions with the name only: unchanged if the first surviving mention says it too
        first = min([*([min(inside)] if inside else []), *([outside] if outside else [])])
        full = not gone.isdisjoint(data["aliases"])
        if not full and first[0] < erased_first:
            # ... which it does when it came before every erased mention: the name is the first
            # surface in log order, so it was that mention's (no cache read needed to know)
            continue
        check[n] = (first[1], full, inside)
    if not check:
        return drop, renamed
    found = dict(inputs.extractions({first for first, full, _ in check.values() if not full}))
    for n, (first, full, inside) in check.items():
        data = graph.nodes[n]
        tenant = data["tenant"]
        if not full:
            if first not in found:
                raise NotDecremental(f"event {first} has no cached extraction")
            if next(_surfaces(spec, tenant, found[first].facts, n), None) == data["name"]:
                continue
        mentions = sorted(inside | set(inputs.outside_all(n)))
        wanted = {eid for _, eid in mentions} - found.keys()
        if wanted:
            found.update(inputs.extractions(wanted))
        name, aliases = None, []
        for _, eid in mentions:
            if eid not in found:
                raise NotDecremental(f"event {eid} has no cached extraction")
            for surface in _surfaces(spec, tenant, found[eid].facts, n):
                if name is None:
                    name = surface
                elif surface != name and surface not in aliases:
                    aliases.append(surface)
        if name != data["name"]:
            renamed.add(n)
        data["name"], data["aliases"] = name, aliases
    return drop, renamed


def _mentions(graph, node: str) -> set[tuple[int, str]]:
    """(seq, event id) of every source of a merged edge at ``node`` (each mentioned it)."""
    out: set[tuple[int, str]] = set()
    for edges in (graph.out_edges(node, data=True), graph.in_edges(node, data=True)):
        for _, _, d in edges:
            if _is_base(d):
                out.update(zip(d["source_seqs"], d["sources"]))
    return out
