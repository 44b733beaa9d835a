"""The erasure procedure: remove (or crypto-shred) one data subject's events, purge everything
derived from them, refold, scan for residue, and write a receipt.

The package reads as the story it tells; this module is the procedure, each step's work lives in
the module named after it:

* :mod:`.planning` — what to erase (read-only: the ``--dry-run`` preview) and the journal that
  pins it, so a resumed erasure erases exactly what the first run planned;
* :mod:`.log_rewrite` — the erasure record appended to the log, then the tombstones;
* :mod:`.scrub` — physically removing what the rewritten log and the purged derived stores
  (``purge`` on each, see below) no longer reference: vacuum, orphans, old log entries;
* the refold is handed to the caller (``refold=``: :mod:`refold.erasure.verbs` supplies the store's);
* :mod:`.receipts` — the receipt, and :func:`~.receipts.verify_receipt` that checks one;
* :mod:`.batch` — many subjects in one pass of these steps (one erasure commit, one tombstone
  commit, one purge, refold and scan), a receipt each plus a batch summary.

:func:`plan` is read-only (the ``--dry-run`` preview). :func:`erase` runs these steps in order;
each is idempotent and recorded in a journal (``receipts/<erasure_id>.pending.json``: no content;
the erased events' ids, which a caller may have made personal, only until the scan step), so after a crash at any point — kill -9 included — calling :func:`erase` again for
the same subject resumes the pending erasure and completes it:

=================  =====================================================================
erasure_event      append an ``erasure`` event (no personal data) naming the erasure id
destroy_keys       shred mode: destroy the subject's keys (every event needing one is gone)
tombstones         replace each erased event's row by a tombstone in ONE Delta commit that
                   swaps the data files holding them for rewritten copies
                   (:mod:`.log_rewrite`; delete mode; in shred mode only for
                   extra, untagged events)
scrub_log          vacuum, orphan removal, checkpoint + log cleanup of the event table
purge              ``purge(event_ids)`` on every derived store (cache, index, state tables …;
                   the plan first calls ``preview(event_ids, seqs=...)`` on each that has it)
scrub_derived      the same scrub for every other Delta table under the store
epoch              bump the store's erasure epoch: every process drops what it cached
                   before this erasure (see :mod:`refold.storage.epoch`)
refold             rebuild derived state; the receipt keeps its spec hash and state digest
registry           remove the subject from ``subjects.json``
scan               the journal keeps only the pseudonyms of the erased ids from here on; then the
                   residue scan of every file for the subject's names and caller canaries
receipt            write ``receipts/<erasure_id>.json``, then drop the journal
=================  =====================================================================

Fault points (:mod:`refold.faults`): ``erasure.<step>`` is reached right after that step's work
and before the journal records it (the worst moment to be killed); ``erasure.scrub_log:vacuumed``
between the event table's vacuum and its log cleanup. The crash tests install a hook that kills
the process there; nothing else does.

A tombstone keeps ``seq``, ``recorded_at``, ``table_version``, ``commitment``, ``prev_link``
and ``link`` (so the chain still verifies) plus ``kind="tombstone"``, the ``erasure_id`` and, as
its ``event_id``, the keyed-hash pseudonym of the erased id (:mod:`refold.storage.erased_ids`:
an id may be personal data); every other column is NULL or empty.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from deltalake import CommitProperties
from deltalake.exceptions import CommitFailedError

from refold import faults
from refold.fold.errors import ErasureError
from refold.fold.events import NewEvent, new_event_id
from refold.storage.derived import DerivedStore
from refold.storage.erased_ids import pseudonyms
from refold.storage.layout import read_settings
from refold.storage.log.eventlog import EventLog
from refold.erasure.scan import scan_report
from refold.storage.log.schema import EVENTS_SCHEMA
from refold.storage.subjects import SubjectRegistry
from refold.erasure.planning import ErasurePlan, RefoldOutcome, load_journal, make_plan, pending_journal
from refold.erasure.log_rewrite import record_for, stage
from refold.erasure.scrub import delta_tables, scrub_table
from refold.erasure.receipts import Receipt, list_receipts

__all__ = ["STEPS", "ErasurePlan", "RefoldOutcome", "erase", "load_journal", "plan",
           "previous_erasures"]

_log = logging.getLogger(__name__)  # erasure ids, step names, counts, seconds: never a subject id or name

STEPS = ("erasure_event", "destroy_keys", "tombstones", "scrub_log", "purge", "scrub_derived",
         "epoch", "refold", "registry", "scan", "receipt")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


def _resolve(source, mode, keystore, registry):
    log: EventLog = getattr(source, "log_store", source)
    if mode is None:
        mode = getattr(source, "mode", None) or read_settings(log.layout).get("mode", "delete")
    if keystore is None and mode == "shred":
        from refold.storage.keys.select import open_keystore

        keystore = getattr(source, "key_store", None) or open_keystore(log.layout, read_settings(log.layout))
    if registry is None:
        registry = SubjectRegistry.of(log.layout)
    return log, mode, keystore, registry


def plan(source, subject_id: str, *, mode: str | None = None, keystore=None, registry=None,
         extra_event_ids: Iterable[str] = (), derived: Sequence[DerivedStore] = ()) -> ErasurePlan:
    """What erasing ``subject_id`` would remove; writes nothing (``source``: Memory or EventLog).

    Raises :class:`ErasureError` for a subject refold knows nothing about (no events, keys,
    registry entry, or earlier receipt).
    """
    log, mode, keystore, registry = _resolve(source, mode, keystore, registry)
    result = make_plan(log, subject_id, mode=mode, keystore=keystore, registry=registry,
                       extra_event_ids=extra_event_ids, derived=derived)
    if result.nothing_to_do and result.previous_erasure_id is None:
        _unknown(subject_id)
    return result


def _unknown(subject_id: str) -> None:
    raise ErasureError(
        f"unknown subject {subject_id!r}: no event is tagged with it, it has no key and no registry "
        "entry, and no earlier erasure names it; check the id with `refold subjects STORE` or "
        "`refold find STORE --subject ID`"
    )


def erase(source, subject_id: str, *, mode: str | None = None, keystore=None,
          derived: Sequence[DerivedStore] = (), refold: Callable[[], Any] | None = None,
          registry: SubjectRegistry | None = None, erasure_id: str | None = None,
          canaries: Iterable[str] = (), extra_event_ids: Iterable[str] = (),
          orphan_grace_hours: int = 1, notes: Sequence[str] = ()) -> Receipt:
    """Erase ``subject_id`` (see the module docstring); returns the written receipt.

    ``derived``: objects with ``purge(event_ids) -> PurgeResult`` (extraction cache, index,
    state tables), each idempotent in ``event_ids``: a rerun calls it again with the same ids. ``refold``: rebuilds derived state and returns a :class:`RefoldOutcome` or a digest
    string. ``canaries``: extra strings for the residue scan (never stored), matched as
    substrings like the subject's identifiers; its name and aliases match as whole words. A
    subject with nothing left to erase but an earlier receipt gets a ``noop`` receipt pointing to
    it. ``notes``: lines the receipt carries (kept in the journal, so a resumed run writes them too).
    """
    log, mode, keystore, registry = _resolve(source, mode, keystore, registry)
    layout = log.layout
    subject = registry.get(subject_id) if registry is not None else None
    # names and aliases match as whole words; identifiers (e-mails, phone numbers) and the
    # caller's canaries as substrings (see refold.erasure.scan)
    registered = subject.needles if subject else ()
    identifiers = set(subject.identifiers) if subject else set()
    names = [n for n in registered if n not in identifiers]
    exact = list(dict.fromkeys([*(n for n in registered if n in identifiers), *(c for c in canaries if c)]))
    journal = pending_journal(layout, subject_id)
    if journal is None:
        the_plan = make_plan(log, subject_id, mode=mode, keystore=keystore, registry=registry,
                             extra_event_ids=extra_event_ids, derived=derived)
        if the_plan.nothing_to_do:
            if the_plan.previous_erasure_id is None:
                _unknown(subject_id)
            return _noop(layout, the_plan, erasure_id)
        journal = {
            "format": "refold-erasure-journal/v1", "erasure_id": erasure_id or new_event_id(),
            "subject_id": subject_id, "mode": mode, "started_at": _now(),
            "head_before": log.head().as_json(), "plan": the_plan.as_json(),
            "done": [], "results": {}, "notes": list(notes),
        }
        _save(layout, journal)
    run = _Run(log, journal, keystore=keystore, derived=derived, refold=refold, registry=registry,
               names=names, canaries=exact, registry_needles=len(registered),
               orphan_grace_hours=orphan_grace_hours)
    return run.execute()


def _journal_key(erasure_id: str) -> str:
    return f"receipts/{erasure_id}.pending.json"


def _save(layout, journal: dict) -> None:
    layout.files().put_json(_journal_key(journal["erasure_id"]), journal)


def _noop(layout, the_plan: ErasurePlan, erasure_id: str | None) -> Receipt:
    now = _now()
    receipt = Receipt(
        erasure_id=erasure_id or new_event_id(), subject_id=the_plan.subject_id, mode=the_plan.mode,
        status="noop", started_at=now, completed_at=now, head_before=the_plan.head,
        head_after=the_plan.head, previous_erasure_id=the_plan.previous_erasure_id,
        notes=(f"nothing left to erase: subject already erased by {the_plan.previous_erasure_id}",),
    )
    receipt.write(layout)
    return receipt


class _Run:
    """One pass over the steps of a journal (fresh or resumed)."""

    def __init__(self, log: EventLog, journal: dict, *, keystore, derived, refold, registry,
                 names, canaries, registry_needles, orphan_grace_hours):
        self.log, self.journal = log, journal
        self.layout = log.layout
        self.keystore, self.derived, self.refold, self.registry = keystore, list(derived), refold, registry
        self.names, self.canaries = list(names), list(canaries)
        self.needles = list(dict.fromkeys([*self.names, *self.canaries]))  # as the scan orders them
        self.registry_needles = registry_needles
        self.grace = orphan_grace_hours
        self.plan = ErasurePlan.from_json(journal["plan"])
        self.erasure_id: str = journal["erasure_id"]
        #: seq → erasure id of its tombstone when it is not this run's (a batch: one per subject)
        self.erasure_of: dict[int, str] | None = None

    def execute(self) -> Receipt:
        started = time.perf_counter()
        done = self.journal["done"]
        _log.info("erasure %s: %s mode, %d events%s", self.erasure_id, self.plan.mode, len(self.plan.events),
                  f", resuming after {done[-1]}" if done else "")
        for step in STEPS:
            if step in self.journal["done"]:
                continue
            step_started = time.perf_counter()
            if step == "receipt":  # (the receipt's own write is not among the timings it reports)
                self.journal.setdefault("timings", {})["total"] = round(
                    sum(v for k, v in self.journal.get("timings", {}).items() if k != "total"), 3)
            result = getattr(self, f"_{step}")()
            seconds = time.perf_counter() - step_started
            self.journal.setdefault("timings", {})[step] = round(seconds, 3)
            _log.info("erasure %s: %s in %.3fs", self.erasure_id, step, seconds)
            faults.point(f"erasure.{step}")
            if step == "receipt":
                self.layout.files().delete(_journal_key(self.erasure_id))
                _log.info("erasure %s: done in %.3fs", self.erasure_id, time.perf_counter() - started)
                return result
            self.journal["results"][step] = result
            self.journal["done"].append(step)
            _save(self.layout, self.journal)
        raise ErasureError("erasure journal is inconsistent: every step done but no receipt")  # pragma: no cover

    # -- steps ------------------------------------------------------------------------------------

    def _erasure_event(self) -> dict:
        eid = self.erasure_id
        # NewEvent has no erasure_id field; the log's protector hook sets stored columns before
        # sealing, so a log whose protector sets just that column appends the event in clear
        # (no personal data, readable without keys) with the id inside its commitment. Its event
        # id is the erasure id, so a rerun after a crash finds it instead of appending it again.
        system = EventLog(self.layout, storage_options=self.log.storage_options,
                          protector=lambda batch: {"erasure_id": [eid] * len(batch)})
        # its content is the erasure record: the events the tombstone step will replace, as they
        # stand now, so that verify accepts exactly those tombstones and no others; it names them
        # by their ids' pseudonyms, as the tombstones will (a caller's id may be personal data)
        record = record_for(self.log, eid, self.plan.tombstone_seqs,
                            {e["seq"]: e["commitment"] for e in self.plan.events},
                            pseudonym=pseudonyms(self.layout.root, create=True, files=self.layout.files()),
                            shredded=[e["seq"] for e in self.plan.events] if self.plan.mode == "shred" else ())
        (seq,) = system.append([NewEvent(kind="erasure", content=record.content(),
                                         source="refold:erasure", event_id=eid)])
        self._publish_record_head([eid], seqs=[seq])
        return {"seq": seq}

    def _publish_record_head(self, erasure_ids: Sequence[str], *, seqs: Sequence[int] | None = None) -> None:
        """Publish the head that the erasure record's commit made, unless a published head
        already covers it. The append publishes it right after its commit; a run killed in
        between left none, and ``verify`` would then take each tombstone that the record
        vouches for as erased by a forged erasure appended after the newest published head. So
        whichever run gets here publishes it (a rerun's append finds the record and commits
        nothing). ``seqs``: the records' log positions when known, so only their files are read."""
        from refold.storage.log.heads import Head, store_published_head

        records = self.log.events_by_id(None, list(erasure_ids), seqs=seqs)  # (seqs: only their files)
        if not records:
            raise ErasureError("the erasure record is not in the log after its append; run `refold verify`")
        last = max(records, key=lambda e: e.seq)
        published = store_published_head(self.layout)
        if published is not None and published.seq >= last.seq:
            return
        self.log.publish_head(Head(last.seq, last.link, last.recorded_at.astimezone(timezone.utc),
                                   last.table_version))

    def _destroy_keys(self) -> dict:
        planned = list(self.plan.key_ids)
        if self.keystore is None:
            return {"destroyed": planned}
        now = self.keystore.destroy(self.plan.subject_id, erasure_id=self.erasure_id)
        # what the key store did (key files deleted; with KMS: wrapped keys deleted and the KMS
        # key deletions scheduled, with their dates), recorded durably by the store itself
        how = self.keystore.destruction(self.plan.subject_id)
        return {"destroyed": sorted(set(planned) | set(now)), "key_store": dict(how or {})}

    def _tombstones(self) -> dict:
        seqs = set(self.plan.tombstone_seqs)
        if not seqs:
            return {"tombstoned": 0, "removed_files": []}
        expected = {e["seq"]: e["commitment"] for e in self.plan.events}
        # local appenders take turns on the log's host lock: holding it keeps a stream of small
        # appends from starving this larger read-rewrite commit (the compare-and-commit below is
        # what keeps it correct, also against writers on other hosts)
        turn = getattr(self.log, "_writer_turn", None)
        with turn() if turn is not None else contextlib.nullcontext():
            return self._commit_tombstones(seqs, expected)

    def _commit_tombstones(self, seqs: set[int], expected: dict[int, str]) -> dict:
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

        pseudonym = pseudonyms(self.layout.root, create=True, files=self.layout.files())

        def commit() -> dict:
            dt = self.log.table()
            staged = stage(dt, self.layout.events, seqs, erasure_id=self.erasure_id, pseudonym=pseudonym,
                           expected=expected, erasure_of=self.erasure_of)
            if not staged.adds:
                return {"tombstoned": 0, "removed_files": []}
            try:
                # one transaction: the rewritten files in, the old ones out (compare-and-commit:
                # no rebase over a commit that landed after dt's version)
                dt.create_write_transaction(staged.actions, mode="append", schema=EVENTS_SCHEMA,
                                            commit_properties=CommitProperties(max_commit_retries=0))
            except CommitFailedError:
                staged.discard()
                raise
            return {"tombstoned": len(staged.erased), "table_version": self.log.table().version(),
                    "removed_files": [_rel(self.layout.events, p) for p in staged.removed_paths]}

        try:  # a writer landed first: re-read and stage again, 20 ms more wait each time
            return Retrying(retry=retry_if_exception_type(CommitFailedError), stop=stop_after_attempt(50),
                            wait=wait_incrementing(start=0.02, increment=0.02), reraise=True)(commit)
        except CommitFailedError:
            raise ErasureError("tombstone commit kept conflicting with writers; rerun the erasure") from None

    def _scrub_log(self) -> dict:
        if not self.plan.tombstone_seqs:
            return {}
        return scrub_table(self.layout.events, erased_ids=self.plan.event_ids,
                           orphan_grace_hours=self.grace, storage_options=self.log.storage_options,
                           after_vacuum=lambda: faults.point("erasure.scrub_log:vacuumed"),
                           hold=getattr(self.log, "_writer_turn", None))

    def _purge(self) -> dict:
        done: dict = self.journal["results"].setdefault("purge_partial", {})
        for i, store in enumerate(self.derived):
            key = f"{i}:{type(store).__name__}"
            if key in done:
                continue
            r = store.purge(list(self.plan.event_ids))
            done[key] = {"store": r.store, "rows": r.rows, "detail": list(r.detail)}
            _save(self.layout, self.journal)
        return {"stores": [done[k] for k in sorted(done)]}

    def _scrub_derived(self) -> dict:
        out = {}
        local = self.layout.is_local
        events = Path(self.layout.events).resolve() if local else self.layout.events
        for table in delta_tables(self.layout.root, files=self.layout.files()):
            if (table.resolve() if local else table) == events:
                continue
            out[_rel(self.layout.root, str(table))] = scrub_table(
                table, erased_ids=self.plan.event_ids, orphan_grace_hours=self.grace,
                storage_options=self.log.storage_options)
        return out

    def _epoch(self) -> dict:
        # after the last rewrite readers could see (log, keys, state tables, index), before the
        # refold: the refold itself must not resume from this process's pre-erasure caches
        from refold.storage.epoch import bump_epoch

        return {"epoch": bump_epoch(self.layout, self.erasure_id)}

    def _refold(self) -> dict:
        if self.refold is None:
            return {"spec_hash": None, "state_digest": None}
        outcome = RefoldOutcome.coerce(self.refold())
        return {"spec_hash": outcome.spec_hash, "state_digest": outcome.state_digest,
                "extraction_calls": outcome.extraction_calls}

    def _registry(self) -> dict:
        removed = self.registry.remove(self.plan.subject_id) if self.registry is not None else False
        return {"removed": removed}

    def _forget_ids(self) -> None:
        """From here on the journal names the erased events by their ids' pseudonyms: every
        step that needed the ids (tombstones, purges, refold) is done, and the scan that
        follows reads the journal too."""
        pseudonym = pseudonyms(self.layout.root, create=True, files=self.layout.files())
        plan = self.journal["plan"]
        events = [{**e, "event_id": pseudonym(e["event_id"])} for e in plan["events"]]
        if events != plan["events"]:
            plan["events"] = events
            self.plan = ErasurePlan.from_json(plan)
            _save(self.layout, self.journal)

    def _scan(self) -> dict:
        self._forget_ids()
        if not self.needles:
            return {"needles": 0, "hits": [], "files": None,
                    "note": "no needles: the subject has no registry entry and no canaries were given"}
        versions = self._old_versions()
        report = scan_report(self.layout.root, self.names, canaries=self.canaries,
                             storage_options=self.log.storage_options)
        out = report.as_json(include_needles=False)
        if versions is not None:
            out["old_versions"] = versions
        out["registry_needles"] = self.registry_needles
        out["caller_needles"] = len(self.needles) - self.registry_needles
        return out

    def _old_versions(self) -> dict | None:
        """On a versioned bucket: delete every old object version under the store (the old
        copies of what this erasure rewrote or deleted: log files, commits, the registry…), or
        record why not. None for a store without versions."""
        if self.layout.is_local:
            return None
        from refold.fold.errors import StoreError

        from refold.storage.files.versions import delete_old_versions, versioning

        try:
            if versioning(self.layout.root, self.log.storage_options) is None:
                return None
            return {"removed": delete_old_versions(self.layout.root, self.log.storage_options)}
        except StoreError as exc:
            return {"removed": 0, "error": str(exc)}

    def _receipt(self) -> Receipt:
        self._forget_ids()
        j, res = self.journal, self.journal["results"]
        removed, delta = removed_and_delta(res)
        notes = list(j.get("notes", ()))
        if res.get("scan", {}).get("old_versions", {}).get("error"):
            notes.append("old object versions under the store could not be deleted: "
                         + res["scan"]["old_versions"]["error"])
        if self.plan.registered and not self.registry_needles:
            notes.append("the registry entry was removed before a crash; the resumed run scanned only "
                         "for caller canaries")
        tombstoned = set(self.plan.tombstone_seqs)
        receipt = Receipt(
            erasure_id=self.erasure_id, subject_id=self.plan.subject_id, mode=self.plan.mode,
            status="erased", started_at=j["started_at"], completed_at=_now(),
            head_before=j["head_before"], head_after=self.log.head().as_json(),
            events=tuple({**e, "how": "tombstone" if e["seq"] in tombstoned else "shredded"}
                         for e in self.plan.events),
            destroyed_key_ids=tuple(res.get("destroy_keys", {}).get("destroyed", ())),
            key_store=res.get("destroy_keys", {}).get("key_store", {}),
            erasure_event_seq=res.get("erasure_event", {}).get("seq"),
            purged=tuple(res.get("purge", {}).get("stores", ())),
            removed_files=tuple(sorted(set(removed))), delta=delta,
            spec_hash=res.get("refold", {}).get("spec_hash"),
            state_digest=res.get("refold", {}).get("state_digest"),
            extraction_calls=res.get("refold", {}).get("extraction_calls"),
            scan=res.get("scan", {}), engines=self.plan.engines, out_of_scope=self.plan.out_of_scope,
            notes=tuple(notes), timings={k: v for k, v in j.get("timings", {}).items() if k != "receipt"},
        )
        receipt.write(self.layout)
        return receipt


def removed_and_delta(res: dict) -> tuple[list[str], dict]:
    """From a journal's step results: the files removed (relative to the store root) and, per
    Delta table, its checkpoint and log cleanup."""
    removed = [f"events/{f}" for f in res.get("tombstones", {}).get("removed_files", [])]
    delta = {}
    if res.get("scrub_log"):
        removed += [f"events/{f}" for f in res["scrub_log"]["removed"]]
        delta["events"] = _delta_summary(res["scrub_log"])
    for table, info in res.get("scrub_derived", {}).items():
        removed += [f"{table}/{f}" for f in info["removed"]]
        delta[table] = _delta_summary(info)
    return removed, delta


def _delta_summary(info: dict) -> dict:
    return {"checkpoint_version": info.get("checkpoint_version"),
            "log_files_removed": info.get("log_files_removed", 0),
            "data_files_removed": len(info.get("removed", []))}


def _rel(base: str, uri: str) -> str:
    if "://" in base and not base.startswith("file://"):  # an object store: a key under the root
        return uri.removeprefix(base.rstrip("/") + "/")
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    try:
        return Path(path).resolve().relative_to(Path(base).resolve()).as_posix()
    except ValueError:
        return path


def previous_erasures(layout, subject_id: str) -> list[Receipt]:
    """Completed (non-noop) receipts for ``subject_id``, oldest first."""
    return [r for r in list_receipts(layout) if r.subject_id == subject_id and r.status == "erased"]

