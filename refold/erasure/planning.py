"""What an erasure will remove (the read-only part of :mod:`refold.erasure.procedure`).

:func:`make_plan` gathers, without writing anything: the events to erase (tagged with the subject,
plus any extra ids the operator chose, e.g. untagged mentions from ``refold find``), how each goes
(tombstone or shredded key), the subject's keys, the extraction-cache rows built from those events
and the engines, models and hosts that produced them (read BEFORE any purge, for the out-of-scope
list), what derived stores that can preview report, and the current head. The plan is also what
the erasure journal stores, so a resumed erasure erases exactly what the first run planned.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.erasure.receipts import fields_as_json, list_receipts
from refold.fold.errors import StoreError
from refold.storage.delta.io import read_arrow, seq_spans
from refold.storage.derived import DerivedStore
from refold.storage.erased_ids import pseudonyms
from refold.storage.layout import Layout

#: What refold cannot reach, listed on every plan and receipt.
OUT_OF_SCOPE = (
    "backups, snapshots and replicas of the store made outside refold (file-system or volume "
    "snapshots, object-store versioning, copies of the folder)",
    "exports: anything read out of the store before the erasure (log exports, notebooks, query "
    "results, agent transcripts)",
    "memory of processes that read the events before the erasure",
    "free blocks of the disk: unlinked files are not overwritten (use full-disk encryption)",
)


@dataclass(frozen=True)
class RefoldOutcome:
    """What a refold reports for the receipt: the spec hash, a digest of the folded state and
    how many extraction (model) calls the refold made (None: not reported)."""

    spec_hash: str | None
    state_digest: str | None
    extraction_calls: int | None = None

    @classmethod
    def coerce(cls, value: Any) -> "RefoldOutcome":
        if isinstance(value, RefoldOutcome):
            return value
        if value is None or isinstance(value, str):
            return cls(None, value)
        if isinstance(value, Mapping):
            return cls(value.get("spec_hash"), value.get("state_digest"), value.get("extraction_calls"))
        return cls(getattr(value, "spec_hash", None), getattr(value, "state_digest", None),
                   getattr(value, "extraction_calls", None))


@dataclass(frozen=True)
class ErasurePlan:
    """The impact of erasing one subject (JSON-ready with :meth:`as_json`; no personal data)."""

    subject_id: str
    mode: str
    #: {"event_id", "seq", "commitment"} per event to erase, in seq order (the erasure's journal
    #: replaces each id by its pseudonym once the steps that need the ids are done)
    events: tuple[Mapping[str, Any], ...] = ()
    #: seqs that get a tombstone (all of them in delete mode; untagged extras in shred mode)
    tombstone_seqs: tuple[int, ...] = ()
    key_ids: tuple[str, ...] = ()
    registered: bool = False
    cache_rows: int = 0
    engines: tuple[Mapping[str, Any], ...] = ()
    derived: tuple[Mapping[str, Any], ...] = ()
    head: Mapping[str, Any] | None = None
    previous_erasure_id: str | None = None
    untagged: int = 0
    out_of_scope: tuple[str, ...] = field(default=OUT_OF_SCOPE)

    @property
    def event_ids(self) -> tuple[str, ...]:
        return tuple(e["event_id"] for e in self.events)

    @property
    def seq_ranges(self) -> list[tuple[int, int]]:
        return seq_ranges(e["seq"] for e in self.events)

    @property
    def nothing_to_do(self) -> bool:
        return not self.events and not self.key_ids and not self.registered

    def as_json(self) -> dict[str, Any]:
        out = fields_as_json(self)
        out["seq_ranges"] = [list(r) for r in self.seq_ranges]
        return out

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "ErasurePlan":
        names = {f.name for f in fields(cls)}
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items() if k in names}
        return cls(**kwargs)


def seq_ranges(seqs: Iterable[int]) -> list[tuple[int, int]]:
    """Contiguous inclusive ranges covering ``seqs``: [1, 2, 3, 7] → [(1, 3), (7, 7)]."""
    out: list[list[int]] = []
    for s in sorted(set(seqs)):
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [(a, b) for a, b in out]


def seq_predicate(seqs: Iterable[int]) -> str:
    """A Delta SQL predicate matching exactly ``seqs`` (compact for long runs)."""
    parts = [f"seq = {a}" if a == b else f"(seq >= {a} AND seq <= {b})" for a, b in seq_ranges(seqs)]
    if not parts:
        raise ValueError("no seqs")
    return " OR ".join(parts)


def cache_rows_from(layout: Layout, ids: Iterable[str]) -> pa.Table:
    """The extraction-cache rows built from any of ``ids`` (as the key, or quoted by the model
    request), with the columns a plan reports: ``event_id``, ``request_event_ids``, ``engine``,
    ``model_id``, ``host``. Empty when there is no cache table yet.

    Read through the process's shared handle of the cache table (the erasure's purges use it
    next, so it is loaded once), and matched with Arrow kernels: only the rows that hit become
    Python values (a dict per row of the whole cache cost ~20-30 ms at 20k events). A batch
    calls it once with every subject's events, then splits the hits with :func:`cache_impact`."""
    from refold.storage.cache.table import CACHE_SCHEMA, built_from
    from refold.storage.delta.handles import shared_table

    columns = ["event_id", "request_event_ids", "engine", "model_id", "host"]
    ids = set(ids)
    with shared_table(layout.extractions, layout.storage_options).view() as view:
        if view is None or not ids:
            return pa.schema([CACHE_SCHEMA.field(c) for c in columns]).empty_table()
        data = read_arrow(view, CACHE_SCHEMA, columns=columns)
    return data.filter(built_from(data, ids))


def cache_impact(rows: pa.Table, ids: Iterable[str]) -> tuple[int, tuple[dict, ...]]:
    """How many of the cache ``rows`` (from :func:`cache_rows_from`) were built from ``ids``, and
    the (engine, model, host) that made them, counted per triple in a stable order."""
    from refold.storage.cache.table import built_from

    ids = set(ids)
    if not ids or not rows.num_rows:
        return 0, ()
    hit = rows.filter(built_from(rows, ids)).select(["engine", "model_id", "host"])
    engines: dict[tuple[str, str, str], int] = {}
    for e, m, h in zip(*(hit[c].to_pylist() for c in ("engine", "model_id", "host"))):
        key = (e or "", m or "", h or "")
        engines[key] = engines.get(key, 0) + 1
    return hit.num_rows, tuple({"engine": e, "model_id": m or None, "host": h or None, "events": n}
                               for (e, m, h), n in sorted(engines.items()))


@dataclass(frozen=True)
class SharedReads:
    """What the plans of one batch share, read once for all its subjects (with a per-subject
    read each, planning 100 subjects at a million events cost ~17 s, two thirds of the batch):
    the cache rows built from any event a plan may name, each subject's latest ``erased``
    receipt, and the log's head."""

    cache: pa.Table
    previous: Mapping[str, str]
    head: Mapping[str, Any]

    @classmethod
    def read(cls, log, rows: Sequence[Mapping[str, Any]]) -> "SharedReads":
        """For plans naming events among ``rows`` (each with an ``event_id``)."""
        previous: dict[str, str] = {}
        for r in list_receipts(log.layout):  # in erasure order: the last one wins
            if r.status == "erased" and r.subject_id:
                previous[r.subject_id] = r.erasure_id
        return cls(cache=cache_rows_from(log.layout, (r["event_id"] for r in rows)),
                   previous=previous, head=log.head().as_json())


def _engine_note(engines: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    notes = []
    for e in engines:
        if e["engine"] == "rules":
            continue  # rules run inside refold: no text left the process
        notes.append(f"model engine {e['engine']!r} (model {e['model_id']}, host {e['host'] or 'unknown'}) "
                     f"processed {e['events']} request(s) built from the erased events: its logs and caches")
    return tuple(notes)


#: the log columns a plan reads
PLAN_COLUMNS = ["seq", "event_id", "kind", "subjects", "key_ids", "commitment", "cipher"]


def plan_rows(log, subject_ids: Sequence[str], *, key_ids: Iterable[str] = (),
              extras: bool = False) -> list[dict[str, Any]]:
    """The log's :data:`PLAN_COLUMNS` rows a plan for ``subject_ids`` can act on, as dicts: the
    events tagged with one of them and the encrypted events under one of ``key_ids`` (the
    subjects' live keys: those decide what a destruction shreds), plus, with ``extras``, every
    event (an extra event id may name any). The plan's loop would pass over the others; reading
    them into Python cost seconds at a million events (in shred mode every event is encrypted)."""
    import polars as pl

    if extras:
        table = pl.from_arrow(log.arrow(columns=PLAN_COLUMNS))
    else:
        # two reads: the small list columns of every event find the seqs; the plan's columns
        # (commitments, ciphertext) are read only from the files holding those seqs
        seqs = _seqs_tagged(log.arrow(columns=["subjects", "key_ids"]), subject_ids, key_ids)
        if not seqs:
            return []
        table = pl.from_arrow(log.arrow(columns=PLAN_COLUMNS, filter=pc.field("seq").isin(seqs),
                                        prune=[{"seq": span} for span in seq_spans(seqs)]))
    if not extras and table.height:
        wanted = pl.Series(sorted(set(subject_ids)), dtype=pl.Utf8).implode()
        tagged = pl.col("subjects").list.eval(pl.element().is_in(wanted)).list.any().fill_null(False)
        keys = pl.Series(sorted(set(key_ids)), dtype=pl.Utf8).implode()
        under = pl.col("key_ids").list.eval(pl.element().is_in(keys)).list.any().fill_null(False)
        table = table.filter(tagged | (pl.col("cipher").is_not_null() & under))
    return table.to_dicts()


def _seqs_tagged(rows: pa.Table, subject_ids: Sequence[str], key_ids: Iterable[str]) -> list[int]:
    """Seqs of the ``rows`` (columns seq, subjects, key_ids) tagged with one of ``subject_ids`` or
    under one of ``key_ids`` (Arrow kernels: no Python loop over the log)."""
    hit = np.zeros(rows.num_rows, dtype=bool)
    for column, wanted in (("subjects", subject_ids), ("key_ids", key_ids)):
        values = pa.array(sorted(set(wanted)), pa.string())
        if not len(values) or not rows.num_rows:
            continue
        lists = rows[column].combine_chunks()
        parents = pc.list_parent_indices(lists).filter(pc.is_in(pc.list_flatten(lists), value_set=values))
        hit[parents.to_numpy()] = True
    return [int(s) for s in np.asarray(rows["seq"])[hit]]


def make_plan(log, subject_id: str, *, mode: str, keystore=None, registry=None,
              extra_event_ids: Iterable[str] = (), derived: Sequence[DerivedStore] = (),
              rows: Sequence[Mapping[str, Any]] | None = None,
              shared: SharedReads | None = None) -> ErasurePlan:
    """Build the plan (see the module docstring); reads, never writes. ``rows`` (the log's
    :data:`PLAN_COLUMNS` as dicts) and ``shared`` (:class:`SharedReads` of those rows): read once
    by a caller planning many subjects."""
    if not isinstance(subject_id, str) or not subject_id:
        raise StoreError("a subject id must be a non-empty string")
    extras = set(extra_event_ids)
    # an extra erased before is a tombstone under its id's pseudonym
    key = pseudonyms(log.layout.root, files=log.layout.files()) if extras else None
    erased_extras = key.of(extras) if key is not None else {}
    key_ids = tuple(keystore.key_ids(subject_id)) if keystore is not None else ()
    if rows is None:
        rows = plan_rows(log, [subject_id], key_ids=key_ids, extras=bool(extras))
    live = set(key_ids)
    events, tomb, untagged = [], [], 0
    found_extras = set()
    known: dict[str, bool] = {}

    def _exists(key_id: str) -> bool:
        if key_id not in known:
            known[key_id] = keystore is not None and keystore.exists(key_id)
        return known[key_id]

    for r in rows:
        if r["kind"] in ("tombstone", "erasure"):
            # an extra already erased is simply done
            found_extras.add(erased_extras.get(r["event_id"], r["event_id"]))
            continue
        extra = r["event_id"] in extras
        if extra:
            found_extras.add(r["event_id"])
        if r["cipher"] and not all(_exists(k) for k in r["key_ids"] or ()):
            continue  # a key is gone: this event is shredded already
        tagged = subject_id in (r["subjects"] or ())
        shreddable = bool(r["cipher"]) and bool(live.intersection(r["key_ids"] or ()))
        if not (tagged or extra or shreddable):
            continue
        if not tagged:
            untagged += 1
        events.append({"event_id": r["event_id"], "seq": r["seq"], "commitment": r["commitment"]})
        if mode == "delete" or not shreddable:
            tomb.append(r["seq"])
    missing = extras - found_extras
    if missing:
        raise StoreError(f"extra event id(s) not in the log (or already erased): {sorted(missing)[:5]}")
    ids = {e["event_id"] for e in events}
    if shared is None:  # one subject: read what its own events need
        shared = SharedReads.read(log, events)
    cache_rows, engines = cache_impact(shared.cache, ids)
    previews = []
    for store in derived:
        preview = getattr(store, "preview", None)
        if preview is not None and ids:
            # every derived store's preview takes the ids and their log positions
            seq_of = {e["event_id"]: e["seq"] for e in events}
            r = preview(sorted(ids), seqs=[seq_of[i] for i in sorted(ids)])
            previews.append({"store": r.store, "rows": r.rows, "detail": list(r.detail)})
    registered = registry is not None and subject_id in registry
    scope = list(OUT_OF_SCOPE) + list(_engine_note(engines))
    if mode == "shred":
        scope.append("ciphertext of shredded events stays in the log and in every copy of it; "
                     "it cannot be read without the destroyed keys")
        if any(s not in tomb for s in (e["seq"] for e in events)):
            scope.append("the event ids of shredded events stay in clear in the log (ids are not "
                         "encrypted): in a shred-mode store, use ids that carry nothing")
    return ErasurePlan(
        subject_id=subject_id, mode=mode, events=tuple(events), tombstone_seqs=tuple(tomb),
        key_ids=key_ids, registered=registered, cache_rows=cache_rows, engines=engines,
        derived=tuple(previews), head=shared.head,
        previous_erasure_id=shared.previous.get(subject_id), untagged=untagged,
        out_of_scope=tuple(scope),
    )


def pending_journal(layout: Layout, subject_id: str) -> dict | None:
    """The journal of an unfinished erasure of ``subject_id``, if a run was interrupted."""
    files = layout.files()
    for key in files.list("receipts"):
        if key.count("/") != 1 or not key.endswith(".pending.json"):
            continue
        data = files.get(key)
        journal = None if data is None else parse_journal(files.url(key), data)
        if journal is not None and journal.get("subject_id") == subject_id:
            return journal
    return None


def load_journal(path: str | Path) -> dict:
    return parse_journal(str(path), Path(path).read_bytes())


def parse_journal(where: str, data: bytes) -> dict:
    try:
        return json.loads(data)
    except ValueError as exc:
        raise StoreError(f"erasure journal {where} is damaged ({exc}); inspect it before rerunning") from exc
