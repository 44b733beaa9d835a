"""Incremental projection (pure): state at n + events (n, m] = state at m.

:class:`LiveFold` holds a :class:`~refold.fold.merge.GraphBuilder` whose graph is also the
*view*: the merged edges plus the roll-up edges and node summaries. Applying more events touches
only the edges of the subjects those events state facts about (supersession, corroboration and
retraction all act on edges of the fact's own subject), so :meth:`LiveFold.refresh` recomputes
roll-ups for just those edges and their rule partners — with :func:`~refold.fold.rollups.apply_rollups`
itself, on a small subgraph, so the rules have one implementation — and the summaries of just
those subjects. The result equals a fold from scratch, attribute for attribute (property-tested).

The view is never handed out: :meth:`LiveFold.detached_graph` returns a copy that shares no
mutable object with it (the merge appends to ``sources`` and ``aliases`` lists in place).

``contained`` is the set of event ids whose data the state holds: every event whose extraction
gave facts or rejections, every event id a model request was built from, and every applied
retraction. A snapshot carries this set, and erasure purges any snapshot that contains an
erased event. Events outside it (empty extractions, system events) left no trace but the
``events`` counter, which a tombstone bumps the same way.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import networkx as nx

from .entities import node_id
from .events import Event
from .extract import Extraction
from .merge import GraphBuilder, MergeStats
from .rollups import apply_rollups
from .spec import FoldSpec

#: Above this share of touched subjects a refresh recomputes every roll-up instead (measured:
#: a partial refresh of a third of the subjects still cost well under a full one).
FULL_REFRESH_SHARE = 0.5


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while building a large graph.

    Building 20k edges allocates a few hundred thousand long-lived objects; the collector's full
    passes over them doubled the time of a snapshot load or a full fold (measured). Reference
    counting still frees everything acyclic; the previous setting is restored on exit.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _copy_value(value):
    if type(value) is list:
        return [list(v) if type(v) is list else v for v in value]
    if type(value) is dict:
        return {k: _copy_value(v) for k, v in value.items()}
    return value


def detached_copy(graph: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """A copy of ``graph`` whose attribute dicts, lists and nested lists are all new objects."""
    out = nx.MultiDiGraph()
    out.add_nodes_from((n, {k: _copy_value(v) for k, v in d.items()}) for n, d in graph.nodes(data=True))
    out.add_edges_from((u, v, k, {a: _copy_value(b) for a, b in d.items()})
                       for u, v, k, d in graph.edges(keys=True, data=True))
    return out


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
    _touched: set[str] = field(default_factory=set)
    _new_nodes: set[str] = field(default_factory=set)
    _stale: bool = False
    #: built from the start: every roll-up is recomputed at the next refresh (no per-edge tracking)
    _rebuild: bool = False
    #: last_seq at the previous refresh, and the ids of the events applied since
    _since: int = -1
    _tail_ids: set[str] = field(default_factory=set)

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
        rolled_up = all("summary" in d for _, d in graph.nodes(data=True))
        for u, v, k, d in graph.edges(keys=True, data=True):
            if d["derivation"] == "extracted":
                builder._edges[k] = (u, v)
                if d["valid_to"] is None:
                    builder._open.setdefault((u, d["relation"]), []).append(k)
            elif rolled_up:
                live._remember(k, (u, v), d["inputs"])
        if not rolled_up:
            live._full_rollups()
        live._since = live.last_seq
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
        touched: list[tuple[str, str]] = []
        if event.kind == "retraction" and event.fact is not None:
            touched.append((event.fact.subject, event.fact.object))
        elif extraction is not None and (extraction.facts or extraction.rejected):
            touched.extend((f.subject, f.object) for f in extraction.facts)
            if extraction.request is not None:
                self.contained.update(extraction.request.event_ids)
        else:
            return
        self.contained.add(event.event_id)
        self._stale = True
        if self._rebuild:
            return
        self._tail_ids.add(event.event_id)
        for subject, obj in touched:
            s, o = node_id(event.tenant, subject), node_id(event.tenant, obj)
            self._touched.add(s)
            self._new_nodes.update((s, o))

    def refresh(self) -> int:
        """Bring roll-ups and summaries up to date with what was applied; return the derived count."""
        if not self._stale:
            self._since = self.last_seq
            return len(self._derived)
        graph = self.graph
        subjects = {s for s in self._touched if s in graph}
        if self._rebuild or len(subjects) > FULL_REFRESH_SHARE * max(graph.number_of_nodes(), 1):
            self._full_rollups()
        else:
            self._partial_rollups(subjects)
            for n in self._new_nodes:
                data = graph.nodes.get(n)
                if data is not None and "summary" not in data:
                    data["summary"], data["summary_sources"] = {}, []
        self._touched.clear()
        self._new_nodes.clear()
        self._tail_ids.clear()
        self._since = self.last_seq
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
        for i in inputs:
            self._by_input.setdefault(i, set()).add(fid)

    def _forget(self, fid: str) -> None:
        _, inputs = self._derived.pop(fid)
        for i in inputs:
            bucket = self._by_input.get(i)
            if bucket is not None:
                bucket.discard(fid)
                if not bucket:
                    del self._by_input[i]

    def _full_rollups(self) -> None:
        graph = self.graph
        old = [(u, v, k) for u, v, k, d in graph.edges(keys=True, data="derivation") if d != "extracted"]
        graph.remove_edges_from(old)
        self._derived.clear()
        self._by_input.clear()
        apply_rollups(graph, self.spec)
        for u, v, k, d in graph.edges(keys=True, data=True):
            if d["derivation"] != "extracted":
                self._remember(k, (u, v), d["inputs"])

    def _partial_rollups(self, subjects: set[str]) -> None:
        graph = self.graph
        base = lambda d: d["derivation"] == "extracted"  # noqa: E731
        # every merged edge of the touched subjects (their summaries are recomputed from all of
        # them), and among those the ones that changed since the last refresh: new or corroborated
        # (a source seq after it) or closed by one of the events applied since
        own = {k: (u, v) for s in subjects for u, v, k, d in graph.out_edges(s, keys=True, data=True)
               if base(d)}
        since, tail_ids = self._since, self._tail_ids
        touched = {}
        for k, (u, v) in own.items():
            d = graph.edges[u, v, k]
            if d["source_seqs"][-1] > since or d["ended_by"] in tail_ids:
                touched[k] = (u, v)
        partners: dict[str, tuple[str, str]] = {}
        for rule in self.spec.rollups:
            if rule.kind != "compose":
                continue
            first, second = rule.inputs
            relations = {fid: graph.edges[u, v, fid]["relation"] for fid, (u, v) in touched.items()}
            # partners of (u, first, v) are (v, second, *); of (u, second, v) are (*, first, u)
            heads = {v for fid, (u, v) in touched.items() if relations[fid] == first}
            tails = {u for fid, (u, v) in touched.items() if relations[fid] == second}
            for n in heads:
                for a, b, k, d in graph.out_edges(n, keys=True, data=True):
                    if d["relation"] == second and base(d):
                        partners[k] = (a, b)
            for n in tails:
                for a, b, k, d in graph.in_edges(n, keys=True, data=True):
                    if d["relation"] == first and base(d):
                        partners[k] = (a, b)
        # compose rules over the changed edges and their partners, the other rules over the changed
        # edges alone (a partner's own inverse is unchanged), summaries over all own edges
        compose, others, _ = self._rule_specs
        fresh = {}
        for spec, edges in ((compose, {**partners, **touched}), (others, touched)):
            if spec.rollups and edges:
                sub = self._subgraph(edges)
                apply_rollups(sub, spec)
                fresh.update((k, (u, v, d)) for u, v, k, d in sub.edges(keys=True, data=True)
                             if not base(d) and not touched.keys().isdisjoint(d["inputs"]))
        summaries = self._subgraph(own)
        apply_rollups(summaries, self._summary_spec)
        stale = set().union(*(self._by_input.get(fid, ()) for fid in touched)) if touched else set()
        for fid in stale - fresh.keys():  # their inputs no longer overlap in valid time
            (u, v), _ = self._derived[fid]
            graph.remove_edge(u, v, key=fid)
            self._forget(fid)
        for fid, (u, v, d) in fresh.items():
            if graph.has_edge(u, v, fid):
                graph.edges[u, v, fid].clear()
                graph.edges[u, v, fid].update(d)
            else:
                graph.add_edge(u, v, key=fid, **d)
                self._remember(fid, (u, v), d["inputs"])
        for s in subjects:
            mine = summaries.nodes[s] if s in summaries else {}
            graph.nodes[s]["summary"] = mine.get("summary", {})
            graph.nodes[s]["summary_sources"] = mine.get("summary_sources", [])

    def _subgraph(self, edges: dict[str, tuple[str, str]]) -> nx.MultiDiGraph:
        """A scratch graph of ``edges`` (shallow copies) and their end nodes' names, for the rules."""
        graph, sub = self.graph, nx.MultiDiGraph()
        for fid, (u, v) in edges.items():
            for n in (u, v):
                if n not in sub:
                    sub.add_node(n, **{a: graph.nodes[n][a] for a in ("tenant", "name", "key")})
            sub.add_edge(u, v, key=fid, **graph.edges[u, v, fid])
        return sub

    @property
    def _summary_spec(self) -> FoldSpec:
        """The spec without roll-up rules: :func:`apply_rollups` then only writes node summaries."""
        return self._rule_specs[2]

    @property
    def _rule_specs(self) -> tuple[FoldSpec, FoldSpec, FoldSpec]:
        """The spec restricted to its compose rules, to its other rules, and to no rule."""
        specs = self.__dict__.get("_rule_specs_value")
        if specs is None:
            rules = self.spec.rollups
            specs = self.__dict__["_rule_specs_value"] = (
                self.spec.with_(rollups=tuple(r for r in rules if r.kind == "compose")),
                self.spec.with_(rollups=tuple(r for r in rules if r.kind != "compose")),
                self.spec.with_(rollups=()),
            )
        return specs
