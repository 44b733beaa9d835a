"""Rows of the extraction cache table: its schema, and the conversions between a row and an
:class:`~refold.fold.extract.Extraction` (or the merge-only :class:`CachedFacts`)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from json.encoder import encode_basestring as _string  # the encoder's own, with ensure_ascii=False

from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection

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

@dataclass(frozen=True)
class CachedFacts:
    """The part of a cached extraction a merge reads (``ExtractionCache.facts``): its facts,
    its rejections, and the events its model request was built from (None: no model request)."""

    event_id: str
    spec_hash: str
    facts: tuple[ExtractedFact, ...]
    rejected: tuple[Rejection, ...] = ()
    request_event_ids: tuple[str, ...] | None = None


#: the columns ``ExtractionCache.facts`` reads (``request_id`` is set exactly when a request is)
FACT_COLUMNS = ("event_id", "spec_hash", "facts", "request_id", "request_event_ids", "rejected")


def facts_by_id(rows: pa.Table) -> dict[str, CachedFacts]:
    """:class:`CachedFacts` by event id from rows holding :data:`FACT_COLUMNS`."""
    out = {}
    for eid, spec, facts, req_id, req_ids, rejected in zip(*(rows[c].to_pylist() for c in FACT_COLUMNS)):
        out[eid] = CachedFacts(
            event_id=eid, spec_hash=spec, facts=_facts_from_json(facts),
            rejected=tuple(Rejection(**d) for d in json.loads(rejected or "[]")),
            request_event_ids=None if req_id is None else tuple(req_ids or ()))
    return out


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


# json.dumps with any option builds a new encoder per call; a cache write encodes 2-3 values per
# row, so the encoders are built once (same output as json.dumps with these options)
_TEXT_JSON = json.JSONEncoder(ensure_ascii=False).encode
_META_JSON = json.JSONEncoder(sort_keys=True, default=str).encode


def _facts_json(facts: Iterable[ExtractedFact]) -> str:
    """The ``facts`` column's JSON: a list of objects with the keys below, in this order."""
    facts = tuple(facts)
    fast = _facts_json_spelled(facts)
    return fast if fast is not None else _TEXT_JSON([
        {"subject": f.subject, "relation": f.relation, "object": f.object,
         "valid_from": _iso(f.valid_from), "valid_to": _iso(f.valid_to), "confidence": f.confidence}
        for f in facts
    ])


def _facts_json_spelled(facts: tuple[ExtractedFact, ...]) -> str | None:
    """The same text as the encoder gives (its separators, its string escaping: the encoder's own
    ``encode_basestring``; ``float.__repr__``; ISO times need no escaping), spelled out for the
    usual values: a cache write of 200 events spent ~0.8 ms in the encoder (building a dict and
    an encoder pass per fact) and ~0.25 ms this way. None (use the encoder) for anything else:
    a string subclass, a confidence that is not a finite float, a time that is not a datetime."""
    parts = []
    for f in facts:
        subject, relation, obj, start, end, confidence = (
            f.subject, f.relation, f.object, f.valid_from, f.valid_to, f.confidence)
        if (type(subject) is not str or type(relation) is not str or type(obj) is not str
                or type(confidence) is not float or not math.isfinite(confidence)
                or not (start is None or isinstance(start, datetime))
                or not (end is None or isinstance(end, datetime))):
            return None
        parts.append(
            '{"subject": ' + _string(subject) + ', "relation": ' + _string(relation)
            + ', "object": ' + _string(obj)
            + ', "valid_from": ' + ("null" if start is None else '"' + start.isoformat() + '"')
            + ', "valid_to": ' + ("null" if end is None else '"' + end.isoformat() + '"')
            + ', "confidence": ' + repr(confidence) + "}")
    return "[" + ", ".join(parts) + "]"


@functools.lru_cache(maxsize=4096)
def _meta_json_of(meta: tuple) -> str:
    return _META_JSON(dict(meta))


def _meta_json(meta: tuple) -> str:
    """The ``meta`` column's JSON (keys sorted). Rows repeat a few metas (a rule extractor's
    pattern names and speakers): each distinct one made only of strings is encoded once (only
    those: 1 == 1.0 == True would share a cache entry, and they encode differently)."""
    if not meta:
        return "{}"
    if all(type(k) is str and (type(v) is str or (type(v) is tuple and all(type(i) is str for i in v)))
           for k, v in meta):
        return _meta_json_of(meta)
    return _META_JSON(dict(meta))


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


def _to_table(extractions: Sequence[Extraction], seqs: dict[str, int]) -> pa.Table:
    """Cache rows for ``extractions``, built column by column (a dict per row cost more)."""
    requests = [x.request for x in extractions]
    columns = {
        "event_id": [x.event_id for x in extractions],
        "spec_hash": [x.spec_hash for x in extractions],
        "seq": [seqs.get(x.event_id) for x in extractions],
        "facts": [_facts_json(x.facts) for x in extractions],
        "request_id": [r.request_id if r else None for r in requests],
        "request_event_ids": [list(r.event_ids) if r else [] for r in requests],
        "request": [r.payload if r else None for r in requests],
        "raw_output": [x.raw_output for x in extractions],
        "rejected": [_TEXT_JSON([{"reason": r.reason, "detail": r.detail} for r in x.rejected])
                     if x.rejected else "[]" for x in extractions],
        "tokens_in": [x.tokens_in for x in extractions],
        "tokens_out": [x.tokens_out for x in extractions],
        "latency_ms": [x.latency_ms for x in extractions],
        "model_id": [x.model_id for x in extractions],
        "engine": [x.engine for x in extractions],
        "host": [x.host for x in extractions],
        "meta": [_meta_json(x.meta) for x in extractions],
        "created_at": [datetime.now(timezone.utc)] * len(extractions),
    }
    return pa.table([pa.array(columns[f.name], f.type) for f in CACHE_SCHEMA], schema=CACHE_SCHEMA)


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
