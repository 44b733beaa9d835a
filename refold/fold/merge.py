"""Merge: apply extractions in log order to a networkx MultiDiGraph (pure, no IO).

Nodes are entities (see :mod:`refold.fold.entities`): attributes ``tenant``, ``name``, ``aliases``.
Edges are facts keyed by a stable ``fact_id`` with attributes::

    fact_id, tenant, subject, relation, object            what is believed
    valid_from, valid_to                                  valid time (None = open)
    recorded_seq, recorded_at                             record time of the first source event
    sources (event ids), source_seqs, source_principals   provenance
    derivation ("extracted" or a roll-up rule name), inputs (fact ids, derived edges only)
    confidence, superseded_by, ended_by (event id that closed it)

Rules (documented in the README):

* **Valid time** of a fact: the fact's own ``valid_from``, else the event's, else its record time.
* **Corroboration**: the same (subject, relation, object) while an edge for it is open adds the
  event to that edge's sources instead of making a new edge (``stats.corroborations`` counts
  the sources so added; an event repeating its own fact adds nothing).
* **Supersession** (single-valued relations): a new value closes every open edge of the same
  (subject, relation) with ``valid_to`` = the new fact's valid_from; the old edge stays in
  history. If the new fact's valid_from is *earlier* than the open edge's, the new fact is history
  and is itself closed at the open edge's valid_from. Conflicts between ingestion paths are thus
  decided by log order and stated valid time, never by which store write came last.
* **Retraction** events close the matching open edge at the retraction's valid time.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import networkx as nx

from refold.fold.entities import entity_key as _entity_key
from refold.fold.entities import node_id as _node_id
from refold.fold.events import Event
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.spec import FoldSpec

MUTATING_KINDS = frozenset({"retraction"})

# pure functions of a name that a fold asks again and again for the same few names (Unicode
# normalisation and two regexes each)
entity_key = functools.lru_cache(maxsize=1 << 16)(_entity_key)
node_id = functools.lru_cache(maxsize=1 << 16)(_node_id)


def fact_id_of(*parts: str) -> str:
    return "f_" + hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


@dataclass
class MergeStats:
    events: int = 0
    facts_in: int = 0
    edges: int = 0
    corroborations: int = 0
    supersessions: int = 0
    retractions: int = 0
    rejected: int = 0
    last_seq: int = -1


@dataclass
class MergeChanges:
    """The merged edges :meth:`GraphBuilder.apply` changed, by fact id, since this log was made
    (kept only where a caller asks for it: ``GraphBuilder.changes``). An incremental roll-up
    refresh reads it instead of every edge of the subjects it touched."""

    #: edges it made
    added: set[str] = field(default_factory=set)
    #: corroborated edges: a source added (and the confidence raised to the highest)
    grown: set[str] = field(default_factory=set)
    #: edges it closed (supersession, retraction): ``valid_to``, ``superseded_by``, ``ended_by`` set
    closed: set[str] = field(default_factory=set)


@dataclass
class GraphBuilder:
    """Folds (event, extraction) pairs, in log order, into a graph. Call :meth:`apply` per event."""

    spec: FoldSpec
    graph: nx.MultiDiGraph = field(default_factory=nx.MultiDiGraph)
    stats: MergeStats = field(default_factory=MergeStats)
    #: (subject node, relation) → fact ids of open edges; rebuilt from the graph on load
    _open: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    _edges: dict[str, tuple[str, str]] = field(default_factory=dict)
    #: relation as stated → (canonical relation, single-valued?) under ``spec``
    _relations: dict[str, tuple[str, bool]] = field(default_factory=dict)
    #: when set, :meth:`apply` records in it every merged edge it makes or changes
    changes: MergeChanges | None = None

    def _relation(self, stated: str) -> tuple[str, bool]:
        known = self._relations.get(stated)
        if known is None:
            relation = self.spec.canonical_relation(stated)
            known = self._relations[stated] = (relation, self.spec.is_single_valued(relation))
        return known

    @classmethod
    def from_graph(cls, spec: FoldSpec, graph: nx.MultiDiGraph, stats: MergeStats) -> "GraphBuilder":
        """Resume from a base graph (a snapshot): rebuilds the open-edge index."""
        builder = cls(spec=spec, graph=graph, stats=stats)
        for u, v, key, data in graph.edges(keys=True, data=True):
            builder._edges[key] = (u, v)
            if data["valid_to"] is None:
                builder._open.setdefault((u, data["relation"]), []).append(key)
        return builder

    # -- applying -------------------------------------------------------------------------------

    def apply(self, event: Event, extraction: Extraction | None) -> None:
        if event.seq <= self.stats.last_seq:
            raise ValueError(f"events must be applied in log order: seq {event.seq} after {self.stats.last_seq}")
        self.stats.events += 1
        self.stats.last_seq = event.seq
        if event.content is None or event.is_tombstone:
            return  # erased (or undecryptable): contributes nothing
        if event.kind == "retraction" and event.fact is not None:
            self._retract(event)
            return
        if extraction is None:
            return
        self.stats.rejected += len(extraction.rejected)
        for fact in extraction.facts:
            self.stats.facts_in += 1
            self._add(event, fact)

    def _node(self, tenant: str, name: str) -> str:
        nid = node_id(tenant, name)
        data = self.graph.nodes.get(nid)  # (the node's own attribute dict)
        if data is None:
            self.graph.add_node(nid, tenant=tenant, name=name.strip(), key=entity_key(name), aliases=[])
        else:
            surface = name.strip()
            if surface != data["name"] and surface not in data["aliases"]:
                data["aliases"].append(surface)
        return nid

    def _add(self, event: Event, fact: ExtractedFact) -> None:
        relation, single_valued = self._relation(fact.relation)
        if not entity_key(fact.subject) or not entity_key(fact.object) or not relation:
            self.stats.rejected += 1
            return
        s = self._node(event.tenant, fact.subject)
        o = self._node(event.tenant, fact.object)
        start = fact.valid_from or event.valid_from or event.recorded_at
        end = fact.valid_to or event.valid_to
        open_ids = self._open.get((s, relation), [])
        for fid in open_ids:
            u, v = self._edges[fid]
            if v == o:  # corroboration of an open edge
                data = self.graph.edges[u, v, fid]
                if event.event_id not in data["sources"]:
                    data["sources"].append(event.event_id)
                    data["source_seqs"].append(event.seq)
                    data["source_principals"].append(list(event.principals))
                    data["confidence"] = max(data["confidence"], fact.confidence)
                    # counted per added source, so the count is a function of the graph
                    # (sum of len(sources) - 1): an erasure can subtract what it removes
                    self.stats.corroborations += 1
                    if self.changes is not None:
                        self.changes.grown.add(fid)
                return
        fid = fact_id_of(event.tenant, s, relation, o, event.event_id)
        if fid in self._edges:  # the same event stated the same fact twice
            return
        new_open = end is None
        if single_valued and end is None:
            for old in list(open_ids):
                u, v = self._edges[old]
                data = self.graph.edges[u, v, old]
                if start < data["valid_from"]:
                    # the new fact describes the past: it ends where the current one begins
                    end = data["valid_from"] if end is None else min(end, data["valid_from"])
                    new_open = False
                    continue
                data["valid_to"] = start
                data["superseded_by"] = fid
                data["ended_by"] = event.event_id
                open_ids.remove(old)
                self.stats.supersessions += 1
                if self.changes is not None:
                    self.changes.closed.add(old)
        self.graph.add_edge(
            s, o, key=fid, fact_id=fid, tenant=event.tenant, subject=s, relation=relation, object=o,
            valid_from=start, valid_to=end, recorded_seq=event.seq, recorded_at=event.recorded_at,
            sources=[event.event_id], source_seqs=[event.seq],
            source_principals=[list(event.principals)], derivation="extracted", inputs=[],
            confidence=fact.confidence, superseded_by=None, ended_by=None,
        )
        self._edges[fid] = (s, o)
        self.stats.edges += 1
        if self.changes is not None:
            self.changes.added.add(fid)
        if new_open and end is None:
            self._open.setdefault((s, relation), []).append(fid)

    def _retract(self, event: Event) -> None:
        fact = event.fact
        assert fact is not None
        s, o = node_id(event.tenant, fact.subject), node_id(event.tenant, fact.object)
        relation = self._relation(fact.relation)[0]
        when = event.valid_from or event.recorded_at
        for fid in list(self._open.get((s, relation), [])):
            u, v = self._edges[fid]
            if v == o:
                data = self.graph.edges[u, v, fid]
                data["valid_to"] = when
                data["ended_by"] = event.event_id
                self._open[(s, relation)].remove(fid)
                self.stats.retractions += 1
                if self.changes is not None:
                    self.changes.closed.add(fid)


def merge(spec: FoldSpec, pairs: Iterable[tuple[Event, Extraction | None]]) -> GraphBuilder:
    """Fold ``(event, extraction)`` pairs (in log order) into a new graph."""
    builder = GraphBuilder(spec=spec)
    for event, extraction in pairs:
        builder.apply(event, extraction)
    return builder


def is_current(data: dict, *, valid_at: datetime | None = None) -> bool:
    """Open now (``valid_to`` None), or valid at ``valid_at`` when given."""
    if valid_at is None:
        return data["valid_to"] is None
    return data["valid_from"] <= valid_at and (data["valid_to"] is None or valid_at < data["valid_to"])
