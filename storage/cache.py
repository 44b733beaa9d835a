"""The extraction cache: a Delta table keyed by (event_id, spec_hash).

A fold never extracts the same key twice: it asks :meth:`ExtractionCache.missing`, extracts only
those events, and :meth:`ExtractionCache.put` them. ``put`` is idempotent (a Delta MERGE that only
inserts keys not already present), so a retried or duplicated batch from a Ray worker adds no
duplicate rows. Rows keep the raw model output, the parsed facts, rejected outputs with reasons,
the exact request, token counts, timing and which engine/host ran it. It is derived data: erasure
purges rows whose event, or whose request's events, were erased.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from refold.fold.errors import StoreError
from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection
from .delta_io import read_arrow
from .layout import Layout

CACHE_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("spec_hash", pa.string()),
        ("seq", pa.int64()),
        ("facts", pa.string()),
        ("request_id", pa.string()),
        ("request_event_ids", pa.list_(pa.string())),
        ("request", pa.string()),
        ("raw_output", pa.string()),
        ("rejected", pa.string()),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
        ("latency_ms", pa.float64()),
        ("model_id", pa.string()),
        ("engine", pa.string()),
        ("host", pa.string()),
        ("meta", pa.string()),
        ("created_at", pa.timestamp("us", tz="UTC")),
    ]
)
_CONFIG = {
    # statistics only on keys: facts, requests and outputs quote personal data
    "delta.dataSkippingStatsColumns": "event_id,spec_hash,seq",
    "delta.enableChangeDataFeed": "false",
    "delta.enableDeletionVectors": "false",
}


@dataclass(frozen=True)
class PurgeResult:
    """What a purge removed from one derived store."""

    store: str
    rows: int
    detail: tuple[str, ...] = ()


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _facts_json(facts: Iterable[ExtractedFact]) -> str:
    return json.dumps([
        {"subject": f.subject, "relation": f.relation, "object": f.object,
         "valid_from": _iso(f.valid_from), "valid_to": _iso(f.valid_to), "confidence": f.confidence}
        for f in facts
    ], ensure_ascii=False)


def _facts_from_json(text: str) -> tuple[ExtractedFact, ...]:
    out = []
    for f in json.loads(text or "[]"):
        out.append(ExtractedFact(
            subject=f["subject"], relation=f["relation"], object=f["object"],
            valid_from=datetime.fromisoformat(f["valid_from"]) if f.get("valid_from") else None,
            valid_to=datetime.fromisoformat(f["valid_to"]) if f.get("valid_to") else None,
            confidence=f.get("confidence", 1.0),
        ))
    return tuple(out)


class ExtractionCache:
    """The cache table of one store (created on first use)."""

    def __init__(self, layout: Layout, *, storage_options: dict[str, str] | None = None):
        self.path = layout.extractions
        self.storage_options = storage_options

    def _table(self) -> DeltaTable | None:
        try:
            return DeltaTable(self.path, storage_options=self.storage_options)
        except TableNotFoundError:
            return None

    def _ensure(self) -> DeltaTable:
        dt = self._table()
        if dt is None:
            try:
                DeltaTable.create(self.path, CACHE_SCHEMA, configuration=_CONFIG,
                                  storage_options=self.storage_options, name="refold_extractions")
            except Exception:  # noqa: BLE001 - a racing creator won; use its table
                pass
            dt = self._table()
            if dt is None:
                raise StoreError(f"cannot create the extraction cache at {self.path}")
        return dt

    # -- reading ----------------------------------------------------------------------------------

    def keys(self, spec_hash: str) -> set[str]:
        """Event ids with a cached extraction under ``spec_hash``."""
        dt = self._table()
        if dt is None:
            return set()
        rows = read_arrow(dt, CACHE_SCHEMA, columns=["event_id"], filter=pc.field("spec_hash") == spec_hash)
        return set(rows["event_id"].to_pylist())

    def missing(self, spec_hash: str, event_ids: Sequence[str]) -> list[str]:
        """The ids of ``event_ids`` (order kept) with no cached extraction under ``spec_hash``."""
        have = self.keys(spec_hash)
        return [e for e in event_ids if e not in have]

    def get(self, spec_hash: str, event_ids: Iterable[str] | None = None) -> dict[str, Extraction]:
        """Cached extractions by event id (all of the spec's, or only ``event_ids``)."""
        dt = self._table()
        if dt is None:
            return {}
        flt = pc.field("spec_hash") == spec_hash
        if event_ids is not None:
            flt = flt & pc.field("event_id").isin(list(event_ids))
        rows = read_arrow(dt, CACHE_SCHEMA, filter=flt).to_pylist()
        return {r["event_id"]: _row_to_extraction(r) for r in rows}

    def frame(self):
        """The whole cache as a polars DataFrame (for audits and notebooks)."""
        import polars as pl

        dt = self._table()
        return pl.from_arrow(read_arrow(dt, CACHE_SCHEMA) if dt else CACHE_SCHEMA.empty_table())

    # -- writing ----------------------------------------------------------------------------------

    def put(self, extractions: Sequence[Extraction], *, seqs: dict[str, int] | None = None,
            max_attempts: int = 50) -> int:
        """Insert extractions whose key is not cached yet; return the number of rows inserted."""
        if not extractions:
            return 0
        unique = {(x.event_id, x.spec_hash): x for x in extractions}
        table = _to_table(list(unique.values()), seqs or {})
        for attempt in range(max_attempts):
            dt = self._ensure()
            try:
                result = (
                    dt.merge(table, predicate="t.event_id = s.event_id AND t.spec_hash = s.spec_hash",
                             source_alias="s", target_alias="t",
                             commit_properties=CommitProperties(max_commit_retries=0))
                    .when_not_matched_insert_all()
                    .execute()
                )
                return int(result.get("num_target_rows_inserted", 0))
            except CommitFailedError:
                time.sleep(random.uniform(0, min(0.05 * (attempt + 1), 0.5)))
        raise StoreError(f"extraction cache: gave up after {max_attempts} commit conflicts; retry")

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        """Delete rows built from any of ``event_ids`` (as the key or inside the request)."""
        ids = sorted(set(event_ids))
        dt = self._table()
        if dt is None or not ids:
            return PurgeResult("extractions", 0)
        data = read_arrow(dt, CACHE_SCHEMA, columns=["event_id", "spec_hash", "request_event_ids"])
        hit = set()
        wanted = set(ids)
        for eid, spec, req in zip(data["event_id"].to_pylist(), data["spec_hash"].to_pylist(),
                                  data["request_event_ids"].to_pylist()):
            if eid in wanted or (req and wanted.intersection(req)):
                hit.add(eid)
        if not hit:
            return PurgeResult("extractions", 0)
        quoted = ", ".join("'" + e.replace("'", "''") + "'" for e in sorted(hit))
        for attempt in range(50):
            try:
                metrics = dt.delete(f"event_id IN ({quoted})")
                return PurgeResult("extractions", int(metrics.get("num_deleted_rows", 0)))
            except CommitFailedError:
                time.sleep(random.uniform(0, 0.2))
                dt = self._table()
        raise StoreError("extraction cache purge kept conflicting with writers; retry the erasure")


def _to_table(extractions: Sequence[Extraction], seqs: dict[str, int]) -> pa.Table:
    now = datetime.now(timezone.utc)
    rows = []
    for x in extractions:
        rows.append({
            "event_id": x.event_id,
            "spec_hash": x.spec_hash,
            "seq": seqs.get(x.event_id),
            "facts": _facts_json(x.facts),
            "request_id": x.request.request_id if x.request else None,
            "request_event_ids": list(x.request.event_ids) if x.request else [],
            "request": x.request.payload if x.request else None,
            "raw_output": x.raw_output,
            "rejected": json.dumps([{"reason": r.reason, "detail": r.detail} for r in x.rejected],
                                   ensure_ascii=False),
            "tokens_in": x.tokens_in,
            "tokens_out": x.tokens_out,
            "latency_ms": x.latency_ms,
            "model_id": x.model_id,
            "engine": x.engine,
            "host": x.host,
            "meta": json.dumps(dict(x.meta), sort_keys=True, default=str),
            "created_at": now,
        })
    return pa.Table.from_pylist(rows, schema=CACHE_SCHEMA)


def _row_to_extraction(r: dict) -> Extraction:
    request = None
    if r["request"] is not None:
        request = ModelRequest(event_ids=tuple(r["request_event_ids"] or ()), payload=r["request"])
    return Extraction(
        event_id=r["event_id"], spec_hash=r["spec_hash"], facts=_facts_from_json(r["facts"]),
        request=request, raw_output=r["raw_output"],
        rejected=tuple(Rejection(**d) for d in json.loads(r["rejected"] or "[]")),
        tokens_in=r["tokens_in"] or 0, tokens_out=r["tokens_out"] or 0,
        latency_ms=r["latency_ms"] or 0.0, model_id=r["model_id"], engine=r["engine"] or "rules",
        host=r["host"], meta=tuple(sorted(json.loads(r["meta"] or "{}").items())),
    )
