"""Retention rules and legal holds: how long events are kept, and what must be kept regardless.

    from refold import retention
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

Expired events go through the erasure procedure (:func:`refold.erasing.erase`) as the extra
events of the synthetic subject :data:`RETENTION_SUBJECT`: tombstones (or, in shred mode,
tombstones for events no erased key covers), purge of every derived store, refold, residue scan,
and one receipt per run whose notes say which rule expired which events. A run interrupted by a
crash is resumed by the next run (the erasure journal), which then erases what it had planned.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from refold.fold.errors import LegalHoldError, NotFoundError, StoreError, ValidationError
from refold.fold.events import USER_KINDS, parse_time
from refold.storage.layout import Layout

if TYPE_CHECKING:
    from refold.memory import Memory
    from refold.storage.erasure.receipts import Receipt

__all__ = [
    "RETENTION_SUBJECT", "Expired", "Hold", "Policy", "RetentionPlan", "RetentionRun", "Rule", "apply",
    "check_erasure", "parse_keep", "place_hold", "plan", "read_policy", "release_hold", "remove_rule",
    "set_rule",
]

POLICY_FORMAT = "refold-retention/v1"
#: the subject id retention erasures are recorded under (their receipts name it)
RETENTION_SUBJECT = "refold:retention"
RETENTION = "retention.json"  # the policy's key under the store root
#: kinds a rule may expire: what users and agents write, and the reads refold records
RETAINABLE_KINDS = USER_KINDS | {"memory_read"}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_KEEP = re.compile(r"^\s*(\d+)\s*([smhdwy])\s*$")


def parse_keep(text: str) -> int:
    """Seconds in a keep duration such as ``90d``, ``12h`` or ``7y`` (y = 365 days)."""
    match = _KEEP.match(text) if isinstance(text, str) else None
    if match is None or int(match.group(1)) == 0:
        raise ValidationError(f"--keep {text!r} is not a duration; write a positive number and a unit "
                              "(s, m, h, d, w, y), e.g. 90d or 7y")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _check_name(value: str | None, what: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValidationError(f"{what} must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Rule:
    """Keep events of ``kind`` (None: any retainable kind) in ``tenant`` (None: any) for ``keep``."""

    kind: str | None
    tenant: str | None
    keep: str

    @property
    def seconds(self) -> int:
        return parse_keep(self.keep)

    @property
    def name(self) -> str:
        """``kind@tenant`` with ``*`` for either side left open, e.g. ``chat_turn@*``."""
        return f"{self.kind or '*'}@{self.tenant or '*'}"

    def matches(self, kind: str, tenant: str | None) -> bool:
        return kind in RETAINABLE_KINDS and self.kind in (None, kind) and self.tenant in (None, tenant)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "tenant": self.tenant, "keep": self.keep,
                "seconds": self.seconds}


@dataclass(frozen=True)
class Hold:
    """A legal hold on one data subject or one tenant, with why and since when."""

    subject: str | None
    tenant: str | None
    reason: str
    placed_at: str

    @property
    def name(self) -> str:
        return f"subject {self.subject}" if self.subject is not None else f"tenant {self.tenant}"

    def covers(self, subjects: Iterable[str], tenant: str | None) -> bool:
        return (self.subject is not None and self.subject in subjects) or \
            (self.tenant is not None and self.tenant == tenant)

    def describe(self) -> str:
        return f"legal hold on {self.name} ({self.reason!r}, placed {self.placed_at})"

    def as_json(self) -> dict[str, Any]:
        return {"subject": self.subject, "tenant": self.tenant, "reason": self.reason,
                "placed_at": self.placed_at}


@dataclass(frozen=True)
class Policy:
    """The store's retention rules and legal holds (``ROOT/retention.json``)."""

    rules: tuple[Rule, ...] = ()
    holds: tuple[Hold, ...] = ()

    def rule_for(self, kind: str, tenant: str | None) -> Rule | None:
        """The rule that decides an event's expiry (see the module docstring), or None."""
        matching = [r for r in self.rules if r.matches(kind, tenant)]
        if not matching:
            return None
        best = max((r.kind is not None) + (r.tenant is not None) for r in matching)
        return max((r for r in matching if (r.kind is not None) + (r.tenant is not None) == best),
                   key=lambda r: r.seconds)

    def hold_on(self, subjects: Iterable[str], tenant: str | None) -> Hold | None:
        subjects = tuple(subjects)
        return next((h for h in self.holds if h.covers(subjects, tenant)), None)

    def as_json(self) -> dict[str, Any]:
        return {"format": POLICY_FORMAT,
                "rules": [{"kind": r.kind, "tenant": r.tenant, "keep": r.keep} for r in self.rules],
                "holds": [h.as_json() for h in self.holds]}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Policy":
        return cls(rules=tuple(Rule(r.get("kind"), r.get("tenant"), r["keep"]) for r in value.get("rules", ())),
                   holds=tuple(Hold(h.get("subject"), h.get("tenant"), h["reason"], h["placed_at"])
                               for h in value.get("holds", ())))


def _layout(target: "Memory | Layout") -> Layout:
    return target if isinstance(target, Layout) else target.layout


def read_policy(target: "Memory | Layout") -> Policy:
    """The store's policy (empty when no rule or hold was ever set)."""
    return _parse_policy(_layout(target), _layout(target).files().get(RETENTION))


def _parse_policy(layout: Layout, text: bytes | None) -> Policy:
    import json

    if text is None:
        return Policy()
    try:
        return Policy.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"{layout.retention} is not a readable retention policy ({exc}); restore it "
                         "from a backup or remove it and set the rules again") from exc


def _change(layout: Layout, edit: Callable[[Policy], Policy]) -> None:
    """Read-modify-write of the policy with no lost update (an exclusive lock locally, a
    conditional put on object storage; see :meth:`refold.storage.objects.StoreFiles.update`):
    ``edit`` gets the current policy and returns the new one; it may run more than once."""
    import json

    def change(data: bytes | None) -> bytes | None:
        before = _parse_policy(layout, data)
        after = edit(before)
        if after == before:
            return None
        return json.dumps(after.as_json(), indent=2, sort_keys=True, default=str).encode()

    layout.files().update(RETENTION, change, lock=".retention.lock")


def set_rule(target: "Memory | Layout", *, kind: str | None = None, tenant: str | None = None,
             keep: str) -> Rule:
    """Add the rule for (``kind``, ``tenant``), or replace its keep; at least one must be given."""
    layout = _layout(target)
    _check_name(tenant, "tenant")
    if kind is None and tenant is None:
        raise ValidationError("a retention rule needs --kind KIND, --tenant TENANT or both")
    if kind is not None and kind not in RETAINABLE_KINDS:
        raise ValidationError(f"kind {kind!r} cannot expire; use one of {', '.join(sorted(RETAINABLE_KINDS))}")
    parse_keep(keep)
    rule = Rule(kind, tenant, keep.strip())
    def edit(policy: Policy) -> Policy:
        others = tuple(r for r in policy.rules if (r.kind, r.tenant) != (kind, tenant))
        return Policy(rules=(*others, rule), holds=policy.holds)

    _change(layout, edit)
    return rule


def remove_rule(target: "Memory | Layout", *, kind: str | None = None, tenant: str | None = None) -> Rule:
    """Remove the rule for exactly (``kind``, ``tenant``); NotFoundError when there is none."""
    layout = _layout(target)
    box: list[Rule] = []

    def edit(policy: Policy) -> Policy:
        found = next((r for r in policy.rules if (r.kind, r.tenant) == (kind, tenant)), None)
        if found is None:
            raise NotFoundError(f"no retention rule {Rule(kind, tenant, '1d').name}; list them with "
                                "`refold retention STORE`")
        box[:] = [found]
        return Policy(rules=tuple(r for r in policy.rules if r is not found), holds=policy.holds)

    _change(layout, edit)
    return box[0]


def _hold_target(subject: str | None, tenant: str | None) -> None:
    _check_name(subject, "subject")
    _check_name(tenant, "tenant")
    if (subject is None) == (tenant is None):
        raise ValidationError("a legal hold names exactly one of --subject ID or --tenant TENANT")


def place_hold(target: "Memory | Layout", *, subject: str | None = None, tenant: str | None = None,
               reason: str, now: datetime | None = None) -> Hold:
    """Place a legal hold on a subject or a tenant (an existing one keeps its date; the reason is
    replaced)."""
    layout = _layout(target)
    _hold_target(subject, tenant)
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError("a legal hold needs --reason TEXT (the case or order it is for)")
    box: list[Hold] = []

    def edit(policy: Policy) -> Policy:
        old = next((h for h in policy.holds if (h.subject, h.tenant) == (subject, tenant)), None)
        placed = old.placed_at if old else (now or datetime.now(timezone.utc)).isoformat()
        box[:] = [Hold(subject, tenant, reason.strip(), placed)]
        others = tuple(h for h in policy.holds if h is not old)
        return Policy(rules=policy.rules, holds=(*others, box[0]))

    _change(layout, edit)
    return box[0]


def release_hold(target: "Memory | Layout", *, subject: str | None = None, tenant: str | None = None) -> Hold:
    """Remove the hold on ``subject`` or ``tenant``; NotFoundError when there is none."""
    layout = _layout(target)
    _hold_target(subject, tenant)
    box: list[Hold] = []

    def edit(policy: Policy) -> Policy:
        found = next((h for h in policy.holds if (h.subject, h.tenant) == (subject, tenant)), None)
        if found is None:
            what = f"subject {subject}" if subject is not None else f"tenant {tenant}"
            raise NotFoundError(f"no legal hold on {what}; list them with `refold hold STORE`")
        box[:] = [found]
        return Policy(rules=policy.rules, holds=tuple(h for h in policy.holds if h is not found))

    _change(layout, edit)
    return box[0]


# -- erasure's check ----------------------------------------------------------------------------


def check_erasure(mem: "Memory", subject_id: str, event_ids: Iterable[str] = ()) -> None:
    """Raise :class:`LegalHoldError` when a hold covers ``subject_id`` or an event the erasure
    would remove (tagged with ``subject_id``, or in ``event_ids``). Free when no hold is placed."""
    policy = read_policy(mem.layout)
    if not policy.holds:
        return
    hold = policy.hold_on([subject_id], None)
    if hold is not None:
        raise LegalHoldError(f"cannot erase subject {subject_id!r}: {hold.describe()}; release it with "
                             f"`refold hold STORE --release --subject {subject_id}` when the hold ends")
    extra = set(event_ids)
    rows = mem.log_store.arrow(columns=["event_id", "kind", "tenant", "subjects"])
    for seq, event_id, kind, tenant, subjects in zip(
            rows["seq"].to_pylist(), rows["event_id"].to_pylist(), rows["kind"].to_pylist(),
            rows["tenant"].to_pylist(), rows["subjects"].to_pylist()):
        subjects = subjects or ()
        if kind in ("tombstone", "erasure") or not (subject_id in subjects or event_id in extra):
            continue
        hold = policy.hold_on(subjects, tenant)
        if hold is not None:
            raise LegalHoldError(f"cannot erase subject {subject_id!r}: event at seq {seq} is under "
                                 f"{hold.describe()}; release it with `refold hold STORE --release` "
                                 "when the hold ends")


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
    from refold.storage.erasure.planning import pending_journal

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
