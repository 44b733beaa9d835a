"""Retention rules and legal holds: how long events are kept, and what must be kept regardless.

    from refold.agent import retention
    retention.set_rule(mem, kind="chat_turn", keep="90d")           # debugging history
    retention.set_rule(mem, tenant="bank", keep="7y")               # a regulated tenant
    retention.place_hold(mem, subject="s-3f9c", reason="case 2026-17")
    retention.plan(mem)                      # what has expired now (held events are skipped)
    retention.apply(mem)                     # erase it: one erasure, one receipt

Rules and holds live in ``ROOT/retention.json`` (rewritten atomically, under a lock, by each
change). A rule names a ``kind``, a ``tenant``, or both, and how long such events are kept
(``90d``; units s, m, h, d, w and y = 365 days), counted from the event's ``recorded_at``. When
several rules match an event the most specific wins (kind and tenant, over kind or tenant
alone); between a kind rule and a tenant rule the longer keep wins, because keeping is the
failure that can be undone. System events (spec changes, erasures, tombstones) never expire.

A legal hold names a data subject or a tenant. Retention skips every event tagged with a held
subject or recorded in a held tenant, and :func:`check_erasure` (called first by every erasure)
refuses to erase a held subject, or any event such a hold covers, with :class:`LegalHoldError`.
Releasing a hold removes it; a hold's reason should name a case, not a person (it is not erased).

Expired events go through the erasure procedure (:func:`refold.erasure.verbs.erase`) as the extra
events of the synthetic subject :data:`RETENTION_SUBJECT`: tombstones (or, in shred mode,
tombstones for events no erased key covers), purge of every derived store, refold, residue scan,
and one receipt per run whose notes say which rule expired which events. A run interrupted by a
crash is resumed by the next run (the erasure journal), which then erases what it had planned.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from refold.fold.errors import ValidationError
from refold.fold.events import parse_time
from refold.storage.policy import (
    RETENTION_SUBJECT, Hold, Policy, Rule, check_erasure, parse_keep, place_hold,
    read_policy, release_hold, remove_rule, set_rule,
)

if TYPE_CHECKING:
    from refold.memory import Memory
    from refold.erasure.receipts import Receipt

__all__ = [
    "RETENTION_SUBJECT", "Expired", "Hold", "Policy", "RetentionPlan", "RetentionRun", "Rule", "apply",
    "check_erasure", "parse_keep", "place_hold", "plan", "read_policy", "release_hold", "remove_rule",
    "set_rule",
]


# -- expiry -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expired:
    """An event a rule expired (or would, were it not held: then ``hold`` names the hold)."""

    seq: int
    event_id: str
    kind: str
    tenant: str | None
    recorded_at: datetime
    rule: str
    hold: str | None = None

    def as_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["recorded_at"] = self.recorded_at.isoformat()
        return out


@dataclass(frozen=True)
class RetentionPlan:
    """What the policy expires at ``now``: ``expired`` go, ``held`` stay because of a hold."""

    now: datetime
    rules: tuple[Rule, ...]
    expired: tuple[Expired, ...] = ()
    held: tuple[Expired, ...] = ()

    def by_rule(self) -> dict[str, list[str]]:
        """Expired event ids per rule name, in log order."""
        out: dict[str, list[str]] = {}
        for e in self.expired:
            out.setdefault(e.rule, []).append(e.event_id)
        return out

    def notes(self, name_of: Callable[[str], str] = str) -> list[str]:
        """One receipt line per rule: which events it expired (each named by ``name_of(id)``: a
        receipt names erased events by their ids' pseudonyms), and why now."""
        rules = {r.name: r for r in self.rules}
        lines = []
        for name, ids in self.by_rule().items():
            ids = [name_of(i) for i in ids]
            cutoff = self.now - timedelta(seconds=rules[name].seconds)
            lines.append(f"retention rule {name} (keep {rules[name].keep}) at {self.now.isoformat()}: "
                         f"{len(ids)} event(s) recorded before {cutoff.isoformat()} expired: {', '.join(ids)}")
        if self.held:
            lines.append(f"{len(self.held)} expired event(s) kept under legal hold")
        return lines

    def as_json(self) -> dict[str, Any]:
        return {"now": self.now.isoformat(), "rules": [r.as_json() for r in self.rules],
                "expired": [e.as_json() for e in self.expired], "held": [e.as_json() for e in self.held],
                "by_rule": self.by_rule()}


@dataclass(frozen=True)
class RetentionRun:
    """A retention run: its plan and, unless it was a dry run or nothing expired, the receipt."""

    plan: RetentionPlan
    dry_run: bool
    receipt: "Receipt | None" = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def as_json(self) -> dict[str, Any]:
        out = {"dry_run": self.dry_run, **self.plan.as_json(), "notes": list(self.notes),
               "erasure_id": self.receipt.erasure_id if self.receipt else None,
               "erased": len(self.receipt.events) if self.receipt else 0}
        return out


def _now(now: datetime | str | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
    try:
        return parse_time(now, line=None, name="now")
    except ValidationError as exc:
        raise ValidationError(f"--now {now!r} is not an ISO-8601 time with a timezone "
                              "(e.g. 2026-12-04T00:00:00+00:00)") from exc


def plan(mem: "Memory", *, now: datetime | str | None = None) -> RetentionPlan:
    """What the store's rules expire at ``now`` (default: the current time); reads, never writes.

    An event expires when a rule decides it (:meth:`Policy.rule_for`) and it was recorded more
    than the rule's keep before ``now``; erased events (tombstones, shredded events) are skipped,
    and an expired event a hold covers is listed in ``held`` instead.
    """
    when = _now(now)
    policy = read_policy(mem.layout)
    if not policy.rules:
        return RetentionPlan(now=when, rules=())
    keys = mem.key_store if mem.mode == "shred" else None
    rows = mem.log_store.arrow(columns=["event_id", "kind", "tenant", "subjects", "recorded_at", "cipher",
                                        "key_ids"])
    expired, held = [], []
    for r in rows.to_pylist():
        if RETENTION_SUBJECT in (r["subjects"] or ()):
            # the erasure of expired events erases every event tagged with its subject id
            raise ValidationError(f"event at seq {r['seq']} is tagged with {RETENTION_SUBJECT!r}, the subject "
                                  "id retention erases under; retag it before running retention")
        rule = policy.rule_for(r["kind"], r["tenant"])
        if rule is None or r["recorded_at"] > when - timedelta(seconds=rule.seconds):
            continue
        if r["cipher"] and keys is not None and not all(keys.exists(k) for k in r["key_ids"] or ()):
            continue  # shredded already: nothing readable is left to expire
        hold = policy.hold_on(r["subjects"] or (), r["tenant"])
        item = Expired(seq=r["seq"], event_id=r["event_id"], kind=r["kind"], tenant=r["tenant"],
                       recorded_at=r["recorded_at"], rule=rule.name, hold=hold.name if hold else None)
        (held if hold else expired).append(item)
    return RetentionPlan(now=when, rules=policy.rules, expired=tuple(expired), held=tuple(held))


def apply(mem: "Memory", *, now: datetime | str | None = None, dry_run: bool = False,
          canaries: Sequence[str] = ()) -> RetentionRun:
    """Erase what :func:`plan` expires, as one erasure with one receipt (see the module
    docstring); ``dry_run`` returns the plan and writes nothing. When an earlier run was
    interrupted, this run finishes it (and only it): its receipt, its notes."""
    from refold.storage.erased_ids import pseudonyms
    from refold.erasure.planning import pending_journal

    pending = None if dry_run else pending_journal(mem.layout, RETENTION_SUBJECT)
    if pending is not None:
        # an earlier run stopped half-way: finish what it planned (its receipt carries its
        # notes); what expired since is left to the next run
        receipt = mem.erase(RETENTION_SUBJECT, canaries=canaries)
        return RetentionRun(plan=RetentionPlan(now=_now(now), rules=read_policy(mem).rules), dry_run=False,
                            receipt=receipt, notes=(f"resumed the interrupted retention run {pending['erasure_id']}",
                                                    *receipt.notes))
    the_plan = plan(mem, now=now)
    if dry_run or not the_plan.expired:
        return RetentionRun(plan=the_plan, dry_run=dry_run, notes=tuple(the_plan.notes()))
    # the receipt (and the journal) must not keep a caller's event id: name them as tombstones will
    notes = tuple(the_plan.notes(pseudonyms(mem.root, create=True, files=mem.layout.files())))
    receipt = mem.erase(RETENTION_SUBJECT, include=[e.event_id for e in the_plan.expired],
                            canaries=canaries, notes=notes)
    return RetentionRun(plan=the_plan, dry_run=False, receipt=receipt, notes=notes)
