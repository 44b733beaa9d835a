"""Helpers for fold tests: event builders and a canonical dump of a folded graph."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import networkx as nx

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)


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
