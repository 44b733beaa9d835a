"""Helpers for fold tests: event builders, a canonical dump of a folded graph, and the oracle:
the reference fold (:mod:`refold.fold.reference`) of a store's log, to hold the state tables'
answers to."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import networkx as nx
import polars as pl

from refold.fold.events import Event
from refold.fold.extract import Extraction
from refold.fold.extractors.rules import RulesExtractor
from refold.fold.queries import fact_rows, facts_frame
from refold.fold.reference import ReferenceState, reference_fold
from refold.fold.spec import FoldSpec
from refold.fold.stated import stated_extraction

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
#: the kinds the fold extracts (refold.fold.extract.EXTRACTABLE, restated: the oracle imports no product path)
EXTRACTABLE = frozenset({"observation", "document", "chat_turn", "memory_written", "tool_call"})


def fact_event(subject: str, relation: str, obj: str, *, day: int | None = None, tenant: str = "default",
               event_id: str | None = None, subjects: list[str] | None = None, **extra) -> dict:
    """A memory_written event in the JSONL input format."""
    event = {
        "kind": "memory_written",
        "content": f"{subject} {relation.replace('_', ' ')} {obj}.",
        "source": "tool#write_memory",
        "tenant": tenant,
        "fact": {"subject": subject, "relation": relation, "object": obj},
        "justification": f"test statement about {subject}",
    }
    if day is not None:
        event["valid_from"] = (T0 + timedelta(days=day)).isoformat()
    if event_id:
        event["event_id"] = event_id
    if subjects:
        event["subjects"] = subjects
    event.update(extra)
    return event


def _plain(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    return value


def canonical_graph(graph: nx.MultiDiGraph) -> str:
    """A byte-stable JSON of nodes and edges with all attributes (for equality checks)."""
    nodes = sorted((n, _plain(d)) for n, d in graph.nodes(data=True))
    edges = sorted((u, v, k, _plain(d)) for u, v, k, d in graph.edges(keys=True, data=True))
    return json.dumps({"nodes": nodes, "edges": edges}, sort_keys=True)


def canonical_edges(graph: nx.MultiDiGraph) -> str:
    """Like :func:`canonical_graph`, but of the nodes only their names: what a read through the
    overlay of events no fold merged yet must already answer (the overlay leaves entity
    summaries and aliases to the next fold, docs/state.md "Reads")."""
    nodes = sorted((n, d["name"]) for n, d in graph.nodes(data=True))
    edges = sorted((u, v, k, _plain(d)) for u, v, k, d in graph.edges(keys=True, data=True))
    return json.dumps({"nodes": nodes, "edges": edges}, sort_keys=True)


# -- the oracle: the reference fold of a store's log ----------------------------------------------

def extractions_for(spec: FoldSpec, events: Sequence[Event],
                    cached: Mapping[str, Extraction] | None = None) -> dict[str, Extraction]:
    """Extractions of ``events`` by id: ``cached`` rows first, the others as a read makes them
    without a model (the rules extractor under a rules spec, else a ``memory_written`` event's
    stated fact); an event needing a model with no cached row gets none (it is pending)."""
    out = dict(cached or {})
    wanted = [e for e in events if e.kind in EXTRACTABLE and e.content is not None and e.event_id not in out]
    if spec.extractor == "rules":
        out.update((x.event_id, x) for x in RulesExtractor().extract(wanted, spec))
    else:
        out.update((e.event_id, x) for e in wanted if (x := stated_extraction(e, spec)) is not None)
    return out


def reference_of(mem, *, as_of: Any = None, events: Iterable[Event] | None = None,
                 spec: FoldSpec | None = None) -> ReferenceState:
    """The reference fold of ``mem``'s log (as it stood at ``as_of``; or of ``events``, stored
    events of ``mem`` in log order) under ``spec`` (default: the current spec), with the cached
    extractions and those a read makes without a model (:func:`extractions_for`)."""
    spec = spec or mem.current_spec()
    events = mem.events(as_of=as_of) if events is None else list(events)
    cached = mem.cache.get(spec.hash, [e.event_id for e in events])
    return reference_fold(spec, events, extractions_for(spec, events, cached))


def reference_facts(state: ReferenceState | nx.MultiDiGraph, **filters: Any) -> pl.DataFrame:
    """What ``Memory.facts(**filters)`` must answer, from a reference fold (or a graph)."""
    graph = state.graph if isinstance(state, ReferenceState) else state
    return facts_frame(fact_rows(graph, **filters))


def without_subjects(events: Iterable[Event], subjects: Iterable[str]) -> list[Event]:
    """``events`` less those naming any of the data ``subjects`` (what erasing them removes)."""
    gone = set(subjects)
    return [e for e in events if not gone & set(e.subjects or ())]
