"""Erasure backfill: many subjects erased in one pass of the procedure.

:func:`erase_batch` runs the steps of :mod:`refold.erasure.procedure` once for all subjects:

* planning: each subject's plan as a single erasure makes it; an event tagged with two erased
  subjects is erased once (its tombstone names the first subject's erasure, in the order given)
  and listed in every receipt that covers it (the other receipts name that erasure on it);
* ``erasure_event``: one erasure event per subject (each with its own erasure id and the record
  vouching for the tombstones it owns), all in ONE log commit;
* ``destroy_keys`` (shred mode): every subject's keys in one step; ``tombstones``: ONE commit;
* one purge of each derived store with the union of the erased ids, one scrub of the log and of
  every derived table, one epoch bump, one refold, one registry update;
* ``scan``: ONE residue scan for every subject's names and canaries; each hit is attributed to
  the subject whose needle matched;
* ``receipt``: one receipt per subject (``receipts/<erasure_id>.json``, verifiable alone by
  :func:`~.receipts.verify_receipt`) and the batch summary ``receipts/batches/<batch_id>.json``
  (subjects, receipt ids, totals, per-step timings, extraction calls; no personal data beyond the
  opaque subject ids the receipts hold too).

The batch journal is ``receipts/batch-<batch_id>.pending.json``; the batch reaches the same fault
points (:mod:`refold.faults`, ``erasure.<step>``) after each step as a single erasure does. Calling
:func:`erase_batch` again with the same subjects (in any order) resumes the pending batch.
A subject with nothing left to erase but an earlier receipt gets a ``noop`` receipt; an unknown
subject stops the batch before anything is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from refold.fold.errors import ErasureError, StoreError
from refold.fold.events import NewEvent, new_event_id
from refold.storage.erased_ids import pseudonyms
from refold.storage.log.eventlog import EventLog
from refold.erasure.scan import scan_report
from refold.storage.subjects import SubjectRegistry
from refold.erasure.procedure import STEPS, _noop, _now, _resolve, _Run, _save, removed_and_delta
from refold.erasure.log_rewrite import kept_rows, record_for
from refold.erasure.planning import ErasurePlan, SharedReads, make_plan, parse_journal, plan_rows
from refold.erasure.receipts import Receipt

__all__ = ["BatchResult", "erase_batch", "plan_batch", "summary_path"]

JOURNAL_FORMAT = "refold-erasure-batch-journal/v1"
_log = logging.getLogger(__name__)  # batch ids, counts, seconds: never a subject id or name
SUMMARY_FORMAT = "refold-erasure-batch/v1"


@dataclass(frozen=True)
class BatchResult:
    """What :func:`erase_batch` returns: the batch id, a receipt per subject (in the order
    given), the summary written to :func:`summary_path`, and (``skip_unknown``) the subjects
    left out because refold knows nothing about them."""

    batch_id: str
    receipts: tuple[Receipt, ...]
    summary: Mapping[str, Any] = field(default_factory=dict)
    unknown: tuple[str, ...] = ()


def _summary_key(batch_id: str) -> str:
    return f"receipts/batches/{batch_id}.json"


def summary_path(layout, batch_id: str) -> str:
    """Where the batch summary is (a local path, or an object URL on object storage)."""
    return layout.files().url(_summary_key(batch_id))


def _journals(layout) -> list[tuple[str, dict]]:
    """(name, journal) of every interrupted erasure's journal (``receipts/*.pending.json``)."""
    files = layout.files()
    found = []
    for key in files.list("receipts"):
        if key.count("/") != 1 or not key.endswith(".pending.json"):
            continue
        data = files.get(key)
        if data is not None:
            found.append((key.split("/", 1)[1], parse_journal(files.url(key), data)))
    return sorted(found)


def unique_subjects(subject_ids: Iterable[str]) -> list[str]:
    """``subject_ids`` each once, in the order given; an empty or non-string id is an error."""
    out = list(dict.fromkeys(subject_ids))
    bad = [s for s in out if not isinstance(s, str) or not s.strip()]
    if bad:
        raise StoreError(f"a subject id must be a non-empty string, got {bad[0]!r}")
    if not out:
        raise StoreError("no subject to erase: give at least one subject id")
    return out


def plan_batch(log, subject_ids: Sequence[str], *, mode: str, keystore=None, registry=None,
               derived: Sequence[Any] = (), skip_unknown: bool = False) -> dict[str, ErasurePlan]:
    """Each subject's plan (read-only); raises :class:`ErasureError` naming every unknown subject
    (no events, keys, registry entry or earlier receipt) before anything is written, or with
    ``skip_unknown`` leaves them out of the result."""
    live = [k for s in subject_ids for k in keystore.key_ids(s)] if keystore is not None else []
    rows = plan_rows(log, subject_ids, key_ids=live)  # the log read once for every subject (their rows only)
    shared = SharedReads.read(log, rows)  # the cache, the receipts and the head, once too
    plans = {s: make_plan(log, s, mode=mode, keystore=keystore, registry=registry, rows=rows, shared=shared)
             for s in subject_ids}
    unknown = [s for s, p in plans.items() if p.nothing_to_do and p.previous_erasure_id is None]
    if skip_unknown:
        plans = {s: p for s, p in plans.items() if s not in unknown}
    elif unknown:
        raise ErasureError(
            f"unknown subject(s) {', '.join(map(repr, unknown[:10]))}{' …' if len(unknown) > 10 else ''}: "
            "no event is tagged with them, they have no key, no registry entry and no earlier erasure; "
            "fix the subjects file (check ids with `refold subjects STORE`) and rerun")
    if derived:
        # one preview per derived store, of the union
        union = _union(plans, mode, "preview")
        seq_of = {e["event_id"]: e["seq"] for e in union.events}
        ids = sorted(seq_of)
        previews = []
        for store in derived:
            preview = getattr(store, "preview", None)
            if preview is not None and ids:
                r = preview(ids, seqs=[seq_of[i] for i in ids])
                previews.append({"store": r.store, "rows": r.rows, "detail": list(r.detail)})
        plans = {s: ErasurePlan.from_json({**p.as_json(), "derived": previews}) for s, p in plans.items()}
    return plans


def _union(plans: Mapping[str, ErasurePlan], mode: str, batch_id: str) -> ErasurePlan:
    """One plan covering every subject's events and keys (each event once)."""
    events: dict[int, Mapping[str, Any]] = {}
    tomb: set[int] = set()
    keys: dict[str, None] = {}
    for p in plans.values():
        for e in p.events:
            events.setdefault(int(e["seq"]), e)
        tomb.update(p.tombstone_seqs)
        keys.update(dict.fromkeys(p.key_ids))
    first = next(iter(plans.values()), None)
    return ErasurePlan(
        subject_id=f"batch:{batch_id}", mode=mode, events=tuple(events[s] for s in sorted(events)),
        tombstone_seqs=tuple(sorted(tomb)), key_ids=tuple(keys),
        registered=any(p.registered for p in plans.values()),
        cache_rows=sum(p.cache_rows for p in plans.values()),
        derived=first.derived if first else (), head=first.head if first else None,
        out_of_scope=first.out_of_scope if first else (),
    )


def _pending(layout, subjects: Sequence[str]) -> dict | None:
    """The journal of an interrupted batch of exactly ``subjects`` (any order), if any; a pending
    batch that shares only some of them stops this one (its events are half erased)."""
    wanted = set(subjects)
    for _name, journal in [(n, j) for n, j in _journals(layout) if n.startswith("batch-")]:
        theirs = set(journal.get("subjects", ()))
        if wanted in (theirs, theirs | set(journal.get("unknown", ()))):
            return journal
        if theirs & wanted:
            raise ErasureError(
                f"an interrupted erasure batch ({journal['batch_id']}) covers "
                f"{len(theirs & wanted)} of these subjects; rerun it with its own subjects "
                f"({len(theirs)}) to complete it first")
    return None


def _pending_singles(layout) -> set[str]:
    """Subjects with an interrupted single erasure (its journal names them)."""
    return {j["subject_id"] for name, j in _journals(layout) if not name.startswith("batch-") and j.get("subject_id")}


def erase_batch(source, subject_ids: Iterable[str], *, mode: str | None = None, keystore=None,
                derived: Sequence[Any] = (), refold: Callable[[], Any] | None = None,
                registry: SubjectRegistry | None = None,
                canaries: Iterable[str] | Mapping[str, Iterable[str]] = (),
                orphan_grace_hours: int = 1, notes: Sequence[str] = (), skip_unknown: bool = False) -> BatchResult:
    """Erase every subject of ``subject_ids`` in one pass (see the module docstring).

    An unknown subject stops the batch before it writes anything; with ``skip_unknown`` the
    others are erased and the result lists it in ``unknown`` (a backfill job's choice).

    ``canaries``: strings the residue scan must not find — a mapping subject → strings (hits
    attributed to that subject), or one list every subject's receipt answers for. The other
    arguments are :func:`refold.erasure.procedure.erase`'s. Duplicate ids are erased once.
    """
    subjects = unique_subjects(subject_ids)
    log, mode, keystore, registry = _resolve(source, mode, keystore, registry)
    layout = log.layout
    per_canaries = ({s: [c for c in canaries.get(s, ()) if c] for s in subjects} if isinstance(canaries, Mapping)
                    else dict.fromkeys(subjects, [c for c in canaries if c]))
    needles = {s: _needles(registry, s, per_canaries[s]) for s in subjects}
    journal = _pending(layout, subjects)
    single = _pending_singles(layout) & set(subjects)
    if single:
        raise ErasureError(
            f"an interrupted single erasure of {', '.join(map(repr, sorted(single)[:10]))} is pending; "
            "complete it first by rerunning `refold erase STORE --subject ID` for each, then rerun the batch")
    if journal is None:
        plans = plan_batch(log, subjects, mode=mode, keystore=keystore, registry=registry, derived=derived,
                           skip_unknown=skip_unknown)
        unknown = tuple(s for s in subjects if s not in plans)
        subjects = [s for s in subjects if s in plans]
        batch_id = new_event_id()
        noop = {s: p.previous_erasure_id for s, p in plans.items() if p.nothing_to_do}
        active = {s: p for s, p in plans.items() if s not in noop}
        if not active:
            receipts = tuple(_noop(layout, plans[s], None) for s in subjects)
            summary = _summary(layout, batch_id, mode, subjects, receipts, {"unknown": unknown}, now=_now()) \
                if receipts else {}
            return BatchResult(batch_id, receipts, summary, unknown)
        journal = {
            "format": JOURNAL_FORMAT, "batch_id": batch_id, "erasure_id": f"batch-{batch_id}",
            "subjects": subjects, "mode": mode, "started_at": _now(),
            "head_before": log.head().as_json(),
            "erasure_ids": {s: new_event_id() for s in active},
            "plans": {s: p.as_json() for s, p in plans.items()},
            "noop": noop, "unknown": list(unknown), "plan": _union(active, mode, batch_id).as_json(),
            "done": [], "results": {}, "timings": {}, "notes": list(notes),
        }
        _save(layout, journal)
    _log.info("erasure batch %s: %d subjects (%d unknown, %d with nothing left to erase)", journal["batch_id"],
              len(journal["subjects"]), len(journal.get("unknown", ())), len(journal.get("noop", {})))
    run = _BatchRun(log, journal, keystore=keystore, derived=derived, refold=refold, registry=registry,
                    needles=needles, orphan_grace_hours=orphan_grace_hours)
    return run.execute()


def _needles(registry, subject_id: str, canaries: Sequence[str]) -> tuple[list[str], list[str], int]:
    """(names, exact, registered): the subject's registered names and aliases (whole words), its
    identifiers plus canaries (substrings), as a single erasure scans for them, and how many of
    them the registry gave."""
    subject = registry.get(subject_id) if registry is not None else None
    registered = subject.needles if subject else ()
    identifiers = set(subject.identifiers) if subject else set()
    names = [n for n in registered if n not in identifiers]
    exact = list(dict.fromkeys([*(n for n in registered if n in identifiers), *canaries]))
    return names, exact, len(registered)


class _BatchRun(_Run):
    """One pass over the steps of a batch journal (fresh or resumed): the union plan drives the
    shared steps (purge, scrub, epoch, refold); the per-subject ones are overridden here."""

    def __init__(self, log: EventLog, journal: dict, *, keystore, derived, refold, registry, needles,
                 orphan_grace_hours):
        names = list(dict.fromkeys(n for ns, _, _ in needles.values() for n in ns))
        exact = list(dict.fromkeys(c for _, cs, _ in needles.values() for c in cs))
        super().__init__(log, journal, keystore=keystore, derived=derived, refold=refold, registry=registry,
                         names=names, canaries=exact, registry_needles=0,
                         orphan_grace_hours=orphan_grace_hours)
        self.subject_needles = needles
        self.batch_id: str = journal["batch_id"]
        self.erasure_ids: dict[str, str] = journal["erasure_ids"]
        self.plans = {s: ErasurePlan.from_json(p) for s, p in journal["plans"].items()}
        # each tombstone names the erasure of the first subject (in the order given) that plans it
        self.owner: dict[int, str] = {}
        for s in journal["subjects"]:
            if s in self.erasure_ids:
                for seq in self.plans[s].tombstone_seqs:
                    self.owner.setdefault(int(seq), s)
        self.erasure_of = {seq: self.erasure_ids[s] for seq, s in self.owner.items()}

    def execute(self):
        # each step's duration goes into the journal with its result (the summary's timings)
        for step in STEPS:
            if step in self.journal["done"]:
                continue
            original = getattr(self, f"_{step}")

            def timed(original=original, step=step):
                started = time.perf_counter()
                out = original()
                self.journal["timings"][step] = round(time.perf_counter() - started, 4)
                return out

            setattr(self, f"_{step}", timed)
        return super().execute()

    def _erasure_event(self) -> dict:
        pseudonym = pseudonyms(self.layout.root, create=True, files=self.layout.files())
        planned = {int(e["seq"]): e["commitment"] for e in self.plan.events}
        # one erasure event per subject, its id the subject's erasure id (so a rerun finds them),
        # all in one commit; each record vouches for the tombstones that name its erasure
        system = EventLog(self.layout, storage_options=self.log.storage_options,
                          protector=lambda batch: {"erasure_id": [e.event_id for e in batch]})
        present = {e.event_id: e.seq for e in system.events_by_id(None, list(self.erasure_ids.values()))}
        fresh = []
        # the rows every record names, read once (a read per subject cost ~9 s for 100 at 1M events)
        rows = kept_rows(self.log, [seq for seq, s in self.owner.items() if self.erasure_ids[s] not in present])
        for s, eid in self.erasure_ids.items():
            if eid in present:
                continue
            owned = [seq for seq, o in self.owner.items() if o == s]
            mine = [int(e["seq"]) for e in self.plans[s].events] if self.plans[s].mode == "shred" else []
            record = record_for(self.log, eid, owned, planned, pseudonym=pseudonym, shredded=mine, rows=rows)
            fresh.append(NewEvent(kind="erasure", content=record.content(), source="refold:erasure",
                                  event_id=eid))
        seqs = system.append(fresh) if fresh else []
        by_id = {**present, **{e.event_id: q for e, q in zip(fresh, seqs)}}
        self._publish_record_head(list(self.erasure_ids.values()), seqs=list(by_id.values()))
        return {"seqs": {s: by_id[eid] for s, eid in self.erasure_ids.items()}}

    def _destroy_keys(self) -> dict:
        out = {}
        for s, eid in self.erasure_ids.items():
            planned = list(self.plans[s].key_ids)
            if self.keystore is None:
                out[s] = {"destroyed": planned}
                continue
            now = self.keystore.destroy(s, erasure_id=eid)
            how = self.keystore.destruction(s)
            out[s] = {"destroyed": sorted(set(planned) | set(now)), "key_store": dict(how or {})}
        return {"subjects": out}

    def _registry(self) -> dict:
        removed = [s for s in self.erasure_ids if self.registry is not None and self.registry.remove(s)]
        return {"removed": removed}

    def _forget_ids(self) -> None:
        pseudonym = pseudonyms(self.layout.root, create=True, files=self.layout.files())
        changed = False
        for plan in [self.journal["plan"], *self.journal["plans"].values()]:
            events = [{**e, "event_id": pseudonym(e["event_id"])} for e in plan["events"]]
            if events != plan["events"]:
                plan["events"], changed = events, True
        if changed:
            self.plan = ErasurePlan.from_json(self.journal["plan"])
            self.plans = {s: ErasurePlan.from_json(p) for s, p in self.journal["plans"].items()}
            _save(self.layout, self.journal)

    def _scan(self) -> dict:
        self._forget_ids()
        if not self.needles:
            return {"files": None, "hits": 0, "subjects": {}}
        versions = self._old_versions()  # (a versioned bucket: old copies go before the scan)
        report = scan_report(self.layout.root, self.names, canaries=self.canaries,
                             storage_options=self.log.storage_options)
        # attributed now, each hit to every subject whose needle matched, by its index in that
        # subject's needles: the journal never holds a needle
        per: dict[str, dict] = {}
        for s, (names, exact, registered) in self.subject_needles.items():
            own = list(dict.fromkeys([*names, *exact]))
            if not own:
                per[s] = {"needles": 0, "hits": [], "files": None,
                          "note": "no needles: the subject has no registry entry and no canaries were given"}
                continue
            index = {n: i for i, n in enumerate(own)}
            per[s] = {"files": report.files, "needles": len(own), "errors": list(report.errors),
                      "hits": [{"file": h.file, "location": h.location, "needle_index": index[h.needle]}
                               for h in report.hits if h.needle in index],
                      "registry_needles": registered, "caller_needles": len(own) - registered}
            if versions is not None:
                per[s]["old_versions"] = versions
        return {"files": report.files, "hits": len(report.hits), "subjects": per}

    def _receipt(self) -> BatchResult:
        self._forget_ids()
        j, res = self.journal, self.journal["results"]
        shared = self._shared_receipt_fields(res)
        receipts = []
        keys = res.get("destroy_keys", {}).get("subjects", {})
        event_seqs = res.get("erasure_event", {}).get("seqs", {})
        head_after = self.log.head().as_json()
        done_at = _now()
        for s in j["subjects"]:
            plan = self.plans[s]
            if s in j["noop"]:
                receipts.append(_noop(self.layout, plan, None))
                continue
            eid = self.erasure_ids[s]
            events = []
            for e in plan.events:
                seq = int(e["seq"])
                how = "tombstone" if seq in self.owner else "shredded"
                item = {**e, "how": how}
                if how == "tombstone" and self.owner[seq] != s:
                    item["erasure_id"] = self.erasure_ids[self.owner[seq]]
                events.append(item)
            receipt = Receipt(
                erasure_id=eid, subject_id=s, mode=plan.mode, status="erased", started_at=j["started_at"],
                completed_at=done_at, head_before=j["head_before"], head_after=head_after,
                events=tuple(events), destroyed_key_ids=tuple(keys.get(s, {}).get("destroyed", plan.key_ids)),
                key_store=keys.get(s, {}).get("key_store", {}), erasure_event_seq=event_seqs.get(s),
                scan=res.get("scan", {}).get("subjects", {}).get(s, {}), engines=plan.engines, out_of_scope=plan.out_of_scope,
                notes=tuple(j.get("notes", ())), batch_id=self.batch_id, **shared,
            )
            receipt.write(self.layout)
            receipts.append(receipt)
        summary = _summary(self.layout, self.batch_id, j["mode"], j["subjects"], tuple(receipts), j, now=done_at)
        return BatchResult(self.batch_id, tuple(receipts), summary, tuple(j.get("unknown", ())))

    def _shared_receipt_fields(self, res: dict) -> dict:
        """What every receipt of the batch shares: purges, removed files, Delta cleanup, refold."""
        removed, delta = removed_and_delta(res)
        refolded = res.get("refold", {})
        return {"purged": tuple(res.get("purge", {}).get("stores", ())),
                "removed_files": tuple(sorted(set(removed))), "delta": delta,
                "spec_hash": refolded.get("spec_hash"), "state_digest": refolded.get("state_digest"),
                "extraction_calls": refolded.get("extraction_calls")}


def _summary(layout, batch_id: str, mode: str, subjects: Sequence[str], receipts: Sequence[Receipt],
             journal: Mapping[str, Any], *, now: str) -> dict:
    """Write and return the batch summary (no needles, no event ids: counts and receipt ids)."""
    res = journal.get("results", {})
    seqs = [int(e["seq"]) for r in receipts for e in r.events]
    summary = {
        "format": SUMMARY_FORMAT, "batch_id": batch_id, "mode": mode,
        "started_at": journal.get("started_at", now), "completed_at": now,
        "head_before": journal.get("head_before"), "head_after": receipts[0].head_after if receipts else None,
        "subjects": [{"subject_id": r.subject_id, "erasure_id": r.erasure_id, "status": r.status,
                      "events": len(r.events), "residue_hits": len(dict(r.scan).get("hits", ())),
                      "receipt": f"{r.erasure_id}.json"} for r in receipts],
        "totals": {"subjects": len(subjects), "erased": sum(r.status == "erased" for r in receipts),
                   "noop": sum(r.status == "noop" for r in receipts), "events": len(set(seqs)),
                   "shared_events": len(seqs) - len(set(seqs)),
                   "tombstoned": res.get("tombstones", {}).get("tombstoned", 0),
                   "keys_destroyed": sum(len(r.destroyed_key_ids) for r in receipts),
                   "residue_hits": res.get("scan", {}).get("hits", 0)},
        "unknown": list(journal.get("unknown", ())),
        "timings": dict(journal.get("timings", {})),
        "extraction_calls": res.get("refold", {}).get("extraction_calls"),
        "state_digest": res.get("refold", {}).get("state_digest"),
    }
    layout.files().put_json(_summary_key(batch_id), summary)
    return summary
