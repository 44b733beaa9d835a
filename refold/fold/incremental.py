"""Incremental projection (pure): state at n + events (n, m] = state at m.

:class:`LiveFold` holds a :class:`~refold.fold.merge.GraphBuilder` whose graph is also the
*view*: the merged edges plus the roll-up edges and node summaries. The merge records which edges
it made, corroborated or closed (``GraphBuilder.changes``), so :meth:`LiveFold.refresh` recomputes
roll-ups for just those edges and their rule partners — with :func:`~refold.fold.rollups.derive`,
the same function a full roll-up runs, so the rules have one implementation; an edge that was
only closed just shortens the derived edges built from it — and the summaries of just their
subjects (:func:`~refold.fold.rollups.summarize`). The result equals a fold from scratch,
attribute for attribute (property-tested).

The view is never handed out: :meth:`LiveFold.detached_graph` returns a copy that shares no
mutable object with it (the merge appends to ``sources`` and ``aliases`` lists in place).

``contained`` is the set of event ids whose data the state holds: every event whose extraction
gave facts or rejections, every event id a model request was built from, and every applied
retraction. A snapshot carries this set, and erasure purges any snapshot that contains an
erased event. Events outside it (empty extractions, system events) left no trace but the
``events`` counter, which a tombstone bumps the same way.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

import networkx as nx

from .events import Event
from .extract import Extraction
from .graph_objects import detached_copy, paused_gc
from .merge import GraphBuilder, MergeChanges, MergeStats
from .rollups import apply_rollups, derive, span, summarize
from .spec import FoldSpec

#: Above this share of touched subjects a refresh recomputes every roll-up instead (measured:
#: a partial refresh of a third of the subjects still cost well under a full one).
FULL_REFRESH_SHARE = 0.5


@dataclass
class LiveFold:
    """A fold that can be advanced event by event; see the module docstring."""

    spec: FoldSpec
    builder: GraphBuilder
    contained: set[str] = field(default_factory=set)
    #: link of the event at ``last_seq`` ("" before the first event)
    link: str = ""
    #: seq of the snapshot this fold was loaded from (-1: built from the start of the log)
    started_from: int = -1
    #: derived fact id → (its ends, its input fact ids)
    _derived: dict[str, tuple[tuple[str, str], tuple[str, ...]]] = field(default_factory=dict)
    #: input fact id → derived fact ids built from it
    _by_input: dict[str, set[str]] = field(default_factory=dict)
    _stale: bool = False
    #: built from the start: every roll-up is recomputed at the next refresh (no per-edge tracking;
    #: otherwise the merge records the edges it changes in ``builder.changes``)
    _rebuild: bool = False
    #: (node, leaving?) → relation → {fact id: attrs} of the merged edges of that relation leaving
    #: (entering) the node: the compose rules' partners, found without scanning every edge of a
    #: hub such as an employer
    _partners: dict[tuple[str, bool], dict[str, dict[str, dict]]] = field(default_factory=dict)

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def empty(cls, spec: FoldSpec) -> "LiveFold":
        return cls(spec=spec, builder=GraphBuilder(spec=spec, stats=MergeStats()), _rebuild=True)

    @classmethod
    def resume(cls, spec: FoldSpec, graph: nx.MultiDiGraph, stats: MergeStats, *, contained: Iterable[str],
               link: str, started_from: int) -> "LiveFold":
        """Resume from a graph of fresh objects (e.g. a decoded snapshot).

        A rolled-up graph (every node has a ``summary``: what :meth:`detached_graph` and snapshots
        hold) is taken as is; a merged-only graph is rolled up here. The merge's open-edge index is
        rebuilt from the merged edges only (as :meth:`GraphBuilder.from_graph` does for a merged
        graph), so a derived relation never takes part in supersession.
        """
        builder = GraphBuilder(spec=spec, graph=graph, stats=stats)
        live = cls(spec=spec, builder=builder, contained=set(contained), link=link, started_from=started_from)
        rolled_up = all("summary" in d for d in graph._node.values())
        # straight over networkx's adjacency dicts, in the graph's edge order (the views cost more
        # than the work here); the derived-edge indexes are filled as _remember does
        index, open_, derived, by_input = builder._edges, builder._open, live._derived, live._by_input
        for u, nbrs in graph._succ.items():
            for v, keydict in nbrs.items():
                ends = (u, v)
                for k, d in keydict.items():
                    if d["derivation"] == "extracted":
                        index[k] = ends
                        if d["valid_to"] is None:
                            bucket = open_.get((u, d["relation"]))
                            if bucket is None:
                                open_[(u, d["relation"])] = [k]
                            else:
                                bucket.append(k)
                    elif rolled_up:
                        inputs = tuple(d["inputs"])
                        derived[k] = (ends, inputs)
                        for i in inputs:
                            users = by_input.get(i)
                            if users is None:
                                by_input[i] = {k}
                            else:
                                users.add(k)
        if not rolled_up:
            live._full_rollups()
        builder.changes = MergeChanges()
        return live

    @property
    def last_seq(self) -> int:
        return self.builder.stats.last_seq

    @property
    def graph(self) -> nx.MultiDiGraph:
        """The live view (base + derived). Do not hand it out: see :meth:`detached_graph`."""
        return self.builder.graph

    # -- advancing ------------------------------------------------------------------------------

    def apply(self, event: Event, extraction: Extraction | None) -> None:
        """Apply one event (in log order) to the merged graph; roll-ups wait for :meth:`refresh`."""
        self.builder.apply(event, extraction)
        self.link = event.link
        if event.content is None or event.is_tombstone:
            return
        if not (event.kind == "retraction" and event.fact is not None):
            if extraction is None or not (extraction.facts or extraction.rejected):
                return  # it left no trace in the state
            if extraction.request is not None:
                self.contained.update(extraction.request.event_ids)
        self.contained.add(event.event_id)
        self._stale = True  # (which edges changed: the merge's change log, ``builder.changes``)

    def refresh(self) -> int:
        """Bring roll-ups and summaries up to date with what was applied; return the derived count."""
        if not self._stale:
            return len(self._derived)
        graph, changes, edges = self.graph, self.builder.changes, self.builder._edges
        # the edges the merge made or changed, and their subjects (whose summaries change)
        touched = {} if changes is None else {
            fid: edges[fid] for fid in (*changes.added, *changes.grown, *changes.closed)}
        subjects = {u for u, _ in touched.values()}
        # what a refresh makes all stays, and its working sets point into the whole graph: each
        # collector pass it triggered walked them (an organisation's move: ~6 ms, paused ~3.5-5)
        with paused_gc():
            if (self._rebuild or changes is None
                    or len(subjects) > FULL_REFRESH_SHARE * max(graph.number_of_nodes(), 1)):
                self._full_rollups()
            else:
                self._partial_rollups(subjects, touched)
                nodes = graph._node
                for fid in changes.added:  # a new node is an end of a new edge; objects get no summary
                    for n in edges[fid]:
                        data = nodes[n]
                        if "summary" not in data:
                            data["summary"], data["summary_sources"] = {}, []
        self.builder.changes = MergeChanges()
        self._stale = self._rebuild = False
        return len(self._derived)

    @property
    def derived_count(self) -> int:
        return self.refresh()

    @property
    def fact_count(self) -> int:
        return len(self.builder._edges)

    def detached_graph(self) -> nx.MultiDiGraph:
        """The current state (roll-ups included) as a graph that shares nothing with this fold."""
        self.refresh()
        return detached_copy(self.graph)

    # -- roll-ups -------------------------------------------------------------------------------

    def _remember(self, fid: str, ends: tuple[str, str], inputs: Iterable[str]) -> None:
        inputs = tuple(inputs)
        self._derived[fid] = (ends, inputs)
        by_input = self._by_input
        for i in inputs:
            users = by_input.get(i)
            if users is None:
                by_input[i] = {fid}
            else:
                users.add(fid)

    def _forget(self, fid: str) -> None:
        _, inputs = self._derived.pop(fid)
        for i in inputs:
            bucket = self._by_input.get(i)
            if bucket is not None:
                bucket.discard(fid)
                if not bucket:
                    del self._by_input[i]

    def _full_rollups(self) -> None:
        """Every roll-up from scratch. The derived-edge indexes and every compose partner list
        (:meth:`_partners_of`) are filled in the same pass over the edges: listing a hub's edges
        later cost ~0.3-0.6 ms per employer, in the first small fold after a full one."""
        partners = self._partners
        partners.clear()
        graph = self.graph
        old = [(u, v, k) for u, v, k, d in graph.edges(keys=True, data="derivation") if d != "extracted"]
        graph.remove_edges_from(old)
        self._derived.clear()
        self._by_input.clear()
        apply_rollups(graph, self.spec)
        compose = self._rule_specs[0].rollups
        firsts, seconds = {r.inputs[0] for r in compose}, {r.inputs[1] for r in compose}
        for u, nbrs in graph._succ.items():  # (the adjacency dicts: views cost more than the work)
            for v, keydict in nbrs.items():
                for k, d in keydict.items():
                    if d["derivation"] != "extracted":
                        self._remember(k, (u, v), d["inputs"])
                        continue
                    relation = d["relation"]
                    if relation in firsts:  # a partner of the second input's edges leaving v
                        partners.setdefault((v, False), {}).setdefault(relation, {})[k] = d
                    if relation in seconds:  # a partner of the first input's edges entering u
                        partners.setdefault((u, True), {}).setdefault(relation, {})[k] = d

    def _partial_rollups(self, subjects: set[str], touched: dict[str, tuple[str, str]]) -> None:
        """Roll-ups after merging: ``touched`` are the edges the merge recorded in
        ``builder.changes`` (made, corroborated or closed since the last refresh; fact id → ends),
        ``subjects`` their subjects, so no other edge of a subject is looked at."""
        changes, edges = self.builder.changes, self.builder._edges
        succ, partners = self.graph._succ, self._partners
        for fid in changes.added:  # partner lists kept from earlier refreshes gain the new edges
            u, v = edges[fid]
            d = succ[u][v][fid]
            for end in ((u, True), (v, False)):
                lists = partners.get(end)
                found = None if lists is None else lists.get(d["relation"])
                if found is not None:
                    found[fid] = d
        relations: dict[str, set[str]] = {}  # subject → relations of its changed edges
        for fid, (u, v) in touched.items():
            relations.setdefault(u, set()).add(succ[u][v][fid]["relation"])
        # an edge that was only closed keeps its sources: its derived edges change valid time only
        closed = changes.closed.difference(changes.added, changes.grown)
        self._refresh_rollups(subjects, touched, closed=closed, _merged_only=True, _relations=relations)

    def _partners_of(self, node: str, relation: str, leaving: bool, keep: bool) -> dict[str, dict]:
        """The merged edges of ``relation`` leaving (or entering) ``node``, by fact id.

        Kept between refreshes: the merge only ever adds edges (and changes attributes in place),
        and :meth:`_partial_rollups` files each edge it added (``builder.changes.added``) in the
        lists kept at its ends; any other change to the merged edges comes with a call of
        :meth:`_refresh_rollups` from outside, which drops them all and keeps none it finds
        (``keep``: the caller may not yet be done changing the graph, e.g. an erasure removes
        nodes afterwards).
        """
        mine = self._partners.get((node, leaving))
        found = None if mine is None else mine.get(relation)
        if found is None:
            adjacency = (self.graph._succ if leaving else self.graph._pred)[node]
            found = {k: d for keydict in adjacency.values() for k, d in keydict.items()
                     if d["relation"] == relation and d["derivation"] == "extracted"}
            if keep:
                self._partners.setdefault((node, leaving), {})[relation] = found
        return found

    def _refresh_rollups(self, subjects: set[str], touched: dict[str, tuple[str, str]],
                         removed: Iterable[str] = (), *, closed: Container[str] = (),
                         _merged_only: bool = False, _relations: dict[str, set[str]] | None = None) -> None:
        """Bring derived edges and summaries up to date after a change to the merged edges.

        ``subjects``: entities whose summaries are recomputed (every subject with a new, changed
        or removed merged edge); ``touched``: fact id → (u, v) of the merged edges that are new
        or changed (still in the graph); ``removed``: fact ids of merged edges taken out of the
        graph. Derived edges built from a touched or removed edge are recomputed from the touched
        edges and their compose-rule partners (a removed input leaves none) with
        :func:`~refold.fold.rollups.derive`, the rules' one implementation; ``_derived`` and
        ``_by_input`` follow. ``closed``: fact ids among ``touched`` whose only change is a
        shorter valid time (closed by a supersession or a retraction): a derived edge whose other
        inputs are unchanged keeps its dict and gets its valid time again from
        :func:`~refold.fold.rollups.span` (or goes, when its inputs no longer overlap) instead of
        being built again. (``_merged_only``: the merged edges changed only by :meth:`apply`
        since the last refresh; ``_relations``: then, per subject, the relations of its changed
        edges.)
        """
        if not _merged_only:  # edges were removed or replaced: no partner list is trusted
            self._partners.clear()
        graph = self.graph
        succ, pred = graph._succ, graph._pred  # the adjacency dicts (views cost more than the work)
        changed = {fid: succ[u][v][fid] for fid, (u, v) in touched.items() if fid not in closed}
        compose, others = self._rule_specs
        partners: dict[str, dict] = {}
        for rule in compose.rollups:
            first, second = rule.inputs
            # partners of (u, first, v) are (v, second, *); of (u, second, v) are (*, first, u)
            heads = {d["object"] for d in changed.values() if d["relation"] == first}
            tails = {d["subject"] for d in changed.values() if d["relation"] == second}
            for n in heads:
                partners.update(self._partners_of(n, second, True, _merged_only))
            for n in tails:
                partners.update(self._partners_of(n, first, False, _merged_only))
        # compose rules over the changed edges and their partners (a derived edge of two
        # partners alone is unchanged), the other rules over the changed edges alone
        fresh = {d["fact_id"]: d for d in derive(others.rollups, changed.values())} if changed else {}
        if changed and compose.rollups:
            partners.update(changed)
            fresh.update((d["fact_id"], d) for d in derive(compose.rollups, partners.values(), touching=changed))
        by_input = self._by_input
        stale: set[str] = set()
        for fid in (*changed, *removed):
            stale.update(by_input.get(fid, ()))
        narrowed: set[str] = set()
        for fid in touched:
            if fid in closed:
                narrowed.update(by_input.get(fid, ()))
        for fid in stale - fresh.keys():  # an input is gone, or the inputs no longer overlap
            self._drop(fid)
        edges = self.builder._edges
        for fid in narrowed.difference(stale, fresh):  # inputs only closed: the same edge, shorter
            (u, v), inputs = self._derived[fid]
            d = succ[u][v][fid]
            end = d["valid_to"]
            if end is not None:
                for i in inputs:
                    if i in closed:
                        a, b = edges[i]
                        if not end < succ[a][b][i]["valid_to"]:
                            break
                else:
                    continue  # it ended before the inputs closed now end: the same span (its end kept)
            when = span([succ[a][b][i] for i in inputs for a, b in (edges[i],)])
            if when is None:
                self._drop(fid)
            else:
                d["valid_from"], d["valid_to"] = when
        for fid, d in fresh.items():
            u, v = d["subject"], d["object"]  # ends of merged edges: both are nodes already
            keydict = succ[u].get(v)
            if keydict is None:  # as add_edge does, without copying the fresh dict
                keydict = succ[u][v] = pred[v][u] = {}
            elif fid in keydict:  # recomputed: the fresh dict takes its place (same key position;
                keydict[fid] = d  # nothing but the graph holds a derived edge's dict)
                continue
            keydict[fid] = d
            self._remember(fid, (u, v), d["inputs"])
        nodes = graph._node
        name = lambda n: nodes[n]["name"]  # noqa: E731
        open_ = self.builder._open
        for s in subjects:
            data = nodes.get(s)
            if data is None:
                continue
            if _relations is not None:
                # the open edges through the merge's index, for the relations the summary names
                # (every relation with an open edge at the last refresh) and those of the changed
                # edges: a subject's other edges are not looked at (an employer has hundreds of
                # derived employs edges)
                rels = {*data.get("summary", ()), *_relations.get(s, ())}
                current = [succ[s][edges[fid][1]][fid] for r in rels for fid in open_.get((s, r), ())]
            else:
                current = [d for keydict in succ[s].values() for d in keydict.values()
                           if d["valid_to"] is None and d["derivation"] == "extracted"]
            data["summary"], data["summary_sources"] = summarize(current, name)

    def _drop(self, fid: str) -> None:
        """Take derived edge ``fid`` out of the graph and the derived-edge indexes."""
        (u, v), _ = self._derived[fid]
        if self.graph.has_edge(u, v, fid):
            self.graph.remove_edge(u, v, key=fid)
        self._forget(fid)

    @property
    def _rule_specs(self) -> tuple[FoldSpec, FoldSpec]:
        """The spec restricted to its compose rules, and to its other rules."""
        specs = self.__dict__.get("_rule_specs_value")
        if specs is None:
            rules = self.spec.rollups
            specs = self.__dict__["_rule_specs_value"] = (
                self.spec.with_(rollups=tuple(r for r in rules if r.kind == "compose")),
                self.spec.with_(rollups=tuple(r for r in rules if r.kind != "compose")),
            )
        return specs

    def adopt_merged(self, part: nx.MultiDiGraph) -> None:
        """Take in merged edges held outside this fold's graph (an erasure patch works on a region
        of a snapshot and reads more of it on demand): ``part``'s nodes that the graph lacks are
        added, and each of its edges — all ``derivation == "extracted"``, none present yet — is
        added under its fact id and indexed for the merge (fact id → ends, open edges by (subject,
        relation)) as if it had been merged here. Attribute dicts are copied; roll-ups wait for the
        caller (``_refresh_rollups``)."""
        graph, index, open_ = self.graph, self.builder._edges, self.builder._open
        self._partners.clear()  # edges added outside apply(): no partner list is complete now
        for n, data in part.nodes(data=True):
            if n not in graph:
                graph.add_node(n, **data)
        for u, v, k, d in part.edges(keys=True, data=True):
            graph.add_edge(u, v, key=k, **d)
            index[k] = (u, v)
            if d["valid_to"] is None:
                open_.setdefault((u, d["relation"]), []).append(k)
