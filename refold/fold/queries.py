"""Queries over a folded graph (pure): fact listings and "why do you believe this?"."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

import networkx as nx
import polars as pl

from refold.fold.entities import entity_key
from refold.fold.errors import NotFoundError
from refold.fold.events import Event
from refold.fold.merge import is_current

FACT_COLUMNS = {
    "fact_id": pl.Utf8, "tenant": pl.Utf8, "subject": pl.Utf8, "relation": pl.Utf8, "object": pl.Utf8,
    "valid_from": pl.Datetime("us", "UTC"), "valid_to": pl.Datetime("us", "UTC"), "current": pl.Boolean,
    "derivation": pl.Utf8, "confidence": pl.Float64, "recorded_seq": pl.Int64,
    "sources": pl.List(pl.Utf8),
}


def fact_rows(graph: nx.MultiDiGraph, *, subject: str | None = None, relation: str | None = None,
              valid_at: datetime | None = None, tenant: str | None = None,
              current_only: bool = False) -> list[dict[str, Any]]:
    """Facts (edges) as plain dicts, ordered by (recorded_seq, fact_id).

    ``subject`` matches an entity's name or alias (normalised); ``valid_at`` keeps facts valid at
    that time; ``current_only`` keeps open facts.
    """
    want = entity_key(subject) if subject else None
    names = graph.nodes
    rows = []
    for _, _, d in graph.edges(data=True):
        if tenant is not None and d["tenant"] != tenant:
            continue
        if relation is not None and d["relation"] != relation:
            continue
        if want is not None and names[d["subject"]]["key"] != want and not any(
            entity_key(a) == want for a in names[d["subject"]]["aliases"]
        ):
            continue
        if valid_at is not None and not is_current(d, valid_at=valid_at):
            continue
        if current_only and d["valid_to"] is not None:
            continue
        rows.append({
            "fact_id": d["fact_id"], "tenant": d["tenant"], "subject": names[d["subject"]]["name"],
            "relation": d["relation"], "object": names[d["object"]]["name"],
            "valid_from": d["valid_from"], "valid_to": d["valid_to"], "current": d["valid_to"] is None,
            "derivation": d["derivation"], "confidence": float(d["confidence"]),
            "recorded_seq": d["recorded_seq"], "sources": list(d["sources"]),
        })
    rows.sort(key=lambda r: (r["recorded_seq"], r["fact_id"]))
    return rows


def facts_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=FACT_COLUMNS)


def find_edge(graph: nx.MultiDiGraph, fact_id: str) -> dict[str, Any]:
    for _, _, key, d in graph.edges(keys=True, data=True):
        if key == fact_id:
            return d
    raise NotFoundError(
        f"no fact with id {fact_id!r} in the folded state; list ids with `refold facts STORE`"
    )


def _quote(event: Event, needle: str, width: int = 240) -> str:
    text = event.content or ""
    at = text.casefold().find(needle.casefold()) if needle else -1
    if at < 0 or len(text) <= width:
        return text[:width] + ("…" if len(text) > width else "")
    start = max(0, at - width // 3)
    return ("…" if start else "") + text[start:start + width] + ("…" if start + width < len(text) else "")


def why(graph: nx.MultiDiGraph, fact_id: str, events: Callable[[Iterable[str]], dict[str, Event]]) -> dict[str, Any]:
    """The chain from a fact (or derived fact) down to its source events.

    ``events`` looks events up by id (the log). Derived facts list their ``inputs`` recursively.
    """
    d = find_edge(graph, fact_id)
    names = graph.nodes
    obj = names[d["object"]]["name"]
    found = events(d["sources"])
    out: dict[str, Any] = {
        "fact_id": fact_id,
        "fact": {"subject": names[d["subject"]]["name"], "relation": d["relation"], "object": obj},
        "tenant": d["tenant"],
        "valid_from": d["valid_from"], "valid_to": d["valid_to"],
        "derivation": d["derivation"], "confidence": d["confidence"],
        "superseded_by": d["superseded_by"], "ended_by": d["ended_by"],
        "events": [],
    }
    for eid in d["sources"]:
        e = found.get(eid)
        if e is None:
            out["events"].append({"event_id": eid, "missing": True})
            continue
        out["events"].append({
            "seq": e.seq, "event_id": e.event_id, "kind": e.kind, "source": e.source,
            "recorded_at": e.recorded_at, "ingestion_run": e.ingestion_run, "trace_id": e.trace_id,
            "justification": e.justification, "quote": _quote(e, obj),
        })
    if d["inputs"]:
        out["inputs"] = [why(graph, i, events) for i in d["inputs"]]
    return out
