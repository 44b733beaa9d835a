"""Decision replay: what an agent's trace wrote and what it was shown, re-derivable from the log.

    mem.search("where does Alice live", k=5, tenant="acme", trace_id="run-42")  # recorded
    report = mem.trace("run-42", replay=True, embedder="hashing")
    report.ok            # every recorded read returns the same ids against its log prefix

A search made with a trace id appends one ``memory_read`` event to the log, after the answer was
computed: its content is a JSON :class:`ReadRecord` (the query, k, kind and filters, the tenant
and principal, the log position and table version the answer was computed at, the spec and
embedding model, and the ids returned). The event carries the trace id, the search's tenant, and
the data-subject ids of the events behind the returned items, so erasing a subject tombstones
every read that showed its data, like any other event of it. ``memory_read`` is a system kind:
it is never extracted and never embedded, so recording a read changes no fact and no search
answer; it only moves the head of the log.

:func:`trace` lists every event that carries a trace id, in log order. With ``replay``, each read
is answered again against the state of the log *as it stood* at the recorded table version (or
the recorded ``as_of``), under the recorded spec, and compared with the ids recorded then. The
state is the fold of that log prefix, so later writes never change a replayed answer; an erasure
since then removes the erased subject's items (and the reads that showed them).
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

import polars as pl
import pyarrow.compute as pc

from refold.fold.errors import NotFoundError, ValidationError
from refold.fold.events import KINDS, Event, validate_event
from refold.store import Store


__all__ = ["READ_KIND", "ReadRecord", "Replay", "TraceEntry", "TraceReport", "trace", "traced_search"]

READ_KIND = "memory_read"
READ_SOURCE = "refold:read"
RECORD_FORMAT = "refold-read/v1"
#: the embedder name the search uses when none is given (refold.search.embedders.get_embedder)
DEFAULT_EMBEDDER = "minilm"


@dataclass(frozen=True)
class ReadRecord:
    """One search as answered: everything needed to ask it again of the same log prefix."""

    query: str
    kind: str
    k: int
    ids: tuple[str, ...]
    last_seq: int
    log_version: int | None
    spec_hash: str
    model_id: str
    embedder: str | None = None
    tenant: str | None = None
    principal: str | None = None
    valid_at: str | None = None
    history: bool = False
    as_of: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["ids"] = list(self.ids)
        out["format"] = RECORD_FORMAT
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "ReadRecord":
        data = {k: v for k, v in value.items() if k in cls.__dataclass_fields__}
        data["ids"] = tuple(data.get("ids") or ())
        return cls(**data)


@dataclass(frozen=True)
class Replay:
    """A recorded read asked again: ``same`` when it returned the recorded ids in the same order."""

    same: bool
    ids: tuple[str, ...] = ()
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"same": self.same, "ids": list(self.ids), "error": self.error}


@dataclass(frozen=True)
class TraceEntry:
    """One event of a trace: a write (any kind but ``memory_read``) or a read (``read`` set).

    ``erased``: a shred-mode event whose key was destroyed; its kind, position and trace id are
    still stored in clear, its content (the read's record, the write's text) is gone.
    """

    seq: int
    event_id: str
    kind: str
    recorded_at: datetime
    tenant: str | None
    source: str | None
    content: str | None = None
    fact: dict[str, str] | None = None
    justification: str | None = None
    read: ReadRecord | None = None
    replay: Replay | None = None
    erased: bool = False

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seq": self.seq, "event_id": self.event_id, "kind": self.kind,
            "recorded_at": self.recorded_at.isoformat(), "tenant": self.tenant, "source": self.source,
            "erased": self.erased,
        }
        if self.read is not None:
            out["read"] = self.read.as_json()
        else:
            out.update(content=self.content, fact=self.fact, justification=self.justification)
        if self.replay is not None:
            out["replay"] = self.replay.as_json()
        return out


@dataclass(frozen=True)
class TraceReport:
    """Every event of one trace in log order; ``ok`` is false when a replayed read differed."""

    trace_id: str
    entries: tuple[TraceEntry, ...] = field(default_factory=tuple)
    replayed: bool = False

    @property
    def reads(self) -> tuple[TraceEntry, ...]:
        return tuple(e for e in self.entries if e.kind == READ_KIND)

    @property
    def writes(self) -> tuple[TraceEntry, ...]:
        return tuple(e for e in self.entries if e.kind != READ_KIND)

    @property
    def mismatches(self) -> tuple[TraceEntry, ...]:
        return tuple(e for e in self.reads if e.replay is not None and not e.replay.same)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def as_json(self) -> dict[str, Any]:
        return {"trace_id": self.trace_id, "replayed": self.replayed, "ok": self.ok,
                "reads": len(self.reads), "writes": len(self.writes),
                "mismatches": [e.event_id for e in self.mismatches],
                "entries": [e.as_json() for e in self.entries]}


# -- recording -------------------------------------------------------------------------------------


def traced_search(store: Store, text: str, *, trace_id: str, k: int = 5, tenant: str | None = None,
                  principal: str | None = None, as_of: int | str | datetime | None = None,
                  valid_at: str | datetime | None = None, kind: Literal["facts", "events"] = "facts",
                  history: bool = False, embedder: Any = None) -> pl.DataFrame:
    """:func:`refold.search.retriever.search`, then append the ``memory_read`` event that records it.

    The answer is computed first, against one retriever (one log position), and the record
    names that position; the event is appended after, so it is never part of the state it
    describes. Returns the same frame the untraced search would.
    """
    from refold.search.retriever import open_index

    if not isinstance(trace_id, str) or not trace_id.strip():
        raise ValidationError(f"trace_id must be a non-empty string, got {trace_id!r}")
    retriever = open_index(store, embedder=embedder, as_of=as_of, save=False)  # a read stores no index
    frame = retriever.search(text, k=k, kind=kind, tenant=tenant, principal=principal,
                             valid_at=valid_at, history=history)
    id_column = "fact_id" if kind == "facts" else "event_id"
    ids = tuple(frame[id_column].to_list())
    when = valid_at.isoformat() if isinstance(valid_at, datetime) else valid_at
    record = ReadRecord(
        query=text, kind=kind, k=k, ids=ids, last_seq=retriever.last_seq,
        log_version=_version_of(store, retriever.last_seq), spec_hash=retriever.report.spec_hash,
        model_id=retriever.report.model_id,
        embedder=embedder if isinstance(embedder, str) else (DEFAULT_EMBEDDER if embedder is None else None),
        tenant=tenant, principal=principal, valid_at=when, history=history,
        as_of=None if as_of is None else (as_of.isoformat() if isinstance(as_of, datetime) else str(as_of)),
    )
    sources = [s for row in frame["sources"].to_list() for s in row] if kind == "facts" else list(ids)
    event = validate_event({
        "kind": READ_KIND, "content": json.dumps(record.as_json(), sort_keys=True, ensure_ascii=False),
        "source": READ_SOURCE, "tenant": tenant or "default", "trace_id": trace_id,
        **({"subjects": subjects} if (subjects := _subjects_of(store, sources)) else {}),
        **({"principals": [principal]} if principal else {}),
    }, allowed_kinds=KINDS, max_content_bytes=store.max_content_bytes)
    store.log_store.append([event])
    return frame


def _version_of(store: Store, seq: int) -> int | None:
    """The table version of the event at ``seq``: the log as of that version is the prefix up to it."""
    if seq < 0:
        return None
    head = store.head()
    if head.seq == seq:
        return head.table_version
    rows = store.log_store.arrow(columns=["table_version"], prune=[{"seq": (seq, seq)}])
    return int(rows["table_version"][0].as_py()) if rows.num_rows else None


def _subjects_of(store: Store, event_ids: Sequence[str]) -> list[str]:
    """Data-subject ids tagged on ``event_ids`` (sorted): what erasure looks for in a read."""
    if not event_ids:
        return []
    ids = sorted(set(event_ids))
    # event ids are time-ordered, so per-id bounds skip most data files unread
    rows = store.log_store.arrow(columns=["subjects"], filter=pc.field("event_id").isin(ids),
                               prune=[{"event_id": (i, i)} for i in ids])
    return sorted({s for tags in rows["subjects"].to_pylist() for s in (tags or ())})


# -- the trace -------------------------------------------------------------------------------------


def trace(store: Store, trace_id: str, *, replay: bool = False, embedder: Any = None) -> TraceReport:
    """Every event carrying ``trace_id``, in log order; with ``replay``, each read asked again.

    ``embedder``: the embedder to replay with when the read recorded none by name (an embedder
    object was passed to the search); its ``model_id`` must match the recorded one. Raises
    :class:`NotFoundError` when no event carries the trace id (tombstones carry none; a shredded
    event keeps its trace id and is listed as ``erased``).
    """
    if not isinstance(trace_id, str) or not trace_id.strip():
        raise ValidationError(f"trace_id must be a non-empty string, got {trace_id!r}")
    every = store.events()
    events = [e for e in every if e.trace_id == trace_id]
    if not events:
        raise NotFoundError(f"no event carries trace id {trace_id!r} (tombstones carry none); "
                            "list trace ids with `refold log STORE`")
    entries = [_entry(e) for e in events]
    if replay:
        versions = _state_versions(every)
        entries = [replace(e, replay=_replay(store, e.read, embedder, versions)) if e.read is not None else e
                   for e in entries]
    return TraceReport(trace_id=trace_id, entries=tuple(entries), replayed=replay)


def _entry(e: Event) -> TraceEntry:
    read = None
    if e.kind == READ_KIND and e.content is not None:
        read = ReadRecord.from_json(json.loads(e.content))
    return TraceEntry(seq=e.seq, event_id=e.event_id, kind=e.kind, recorded_at=e.recorded_at, tenant=e.tenant,
                      source=e.source, content=None if read else e.content,
                      fact=e.fact.as_dict() if e.fact is not None else None,
                      justification=e.justification, read=read, erased=e.content is None)


def _state_versions(events: Sequence[Event]) -> list[tuple[int, int]]:
    """(seq, table version of the newest event at or before it that is not a read), per event.

    Reads change no state, so the prefix ending at a read's position and the prefix ending at the
    last event before it that is not a read fold to the same state: replays of the reads between
    two writes share one past index instead of building one each.
    """
    out, version = [], -1
    for e in events:
        if e.kind != READ_KIND:
            version = e.table_version
        out.append((e.seq, version))
    return out


def _replay(store: Store, read: ReadRecord, embedder: Any, versions: list[tuple[int, int]]) -> Replay:
    """Ask ``read`` again of the log prefix it was answered at, under its spec and model."""
    from refold.search.embedders import get_embedder
    from refold.fold.spec import FoldSpec
    from refold.search.retriever import open_index

    if read.last_seq < 0:
        return Replay(same=not read.ids, error=None if not read.ids else "the log was empty")
    # a store never folded explicitly searches under the default spec, which is not in the log
    spec = store.recorded_specs().get(read.spec_hash) or next(
        (s for s in (FoldSpec(),) if s.hash == read.spec_hash), None)
    if spec is None:
        return Replay(same=False, error=f"spec {read.spec_hash} is no longer recorded in the log")
    emb = get_embedder(embedder if embedder is not None else read.embedder) \
        if (embedder is not None or read.embedder) else None
    if emb is None:
        return Replay(same=False, error="the read used an embedder object; pass embedder= to replay it")
    if emb.model_id != read.model_id:
        return Replay(same=False, error=f"embedder {emb.model_id!r} is not the recorded {read.model_id!r}")
    as_of = read.as_of
    if as_of is None:
        at = bisect.bisect_right(versions, (read.last_seq, float("inf"))) - 1
        as_of = versions[at][1] if at >= 0 and versions[at][0] == read.last_seq else read.log_version
    retriever = open_index(store, embedder=emb, as_of=as_of, spec=spec)
    frame = retriever.search(read.query, k=read.k, kind=read.kind, tenant=read.tenant,  # type: ignore[arg-type]
                             principal=read.principal, valid_at=read.valid_at, history=read.history)
    ids = tuple(frame["fact_id" if read.kind == "facts" else "event_id"].to_list())
    return Replay(same=ids == read.ids, ids=ids)
