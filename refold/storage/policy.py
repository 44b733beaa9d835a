"""Retention rules and legal holds: the store's policy file (``ROOT/retention.json``).

Rules say how long events of a kind or tenant are kept; holds name a subject or tenant whose
events must be kept regardless. :func:`check_erasure` (called first by every erasure) refuses to
erase a held subject or an event a hold covers. The expiry that applies the rules lives in
:mod:`refold.agent.retention`; its docstring explains the rules' semantics.
"""


from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from refold.fold.errors import LegalHoldError, NotFoundError, StoreError, ValidationError
from refold.fold.events import USER_KINDS
from refold.storage.layout import Layout

if TYPE_CHECKING:
    from refold.storage.log.eventlog import EventLog

__all__ = ["Hold", "Policy", "Rule", "check_erasure", "parse_keep", "place_hold", "read_policy",
           "release_hold", "remove_rule", "set_rule"]

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


def _layout(target: "Any") -> Layout:
    return target if isinstance(target, Layout) else target.layout


def read_policy(target: "Any") -> Policy:
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
    conditional put on object storage; see :meth:`refold.storage.files.objects.StoreFiles.update`):
    ``edit`` gets the current policy and returns the new one; it may run more than once."""
    import json

    def change(data: bytes | None) -> bytes | None:
        before = _parse_policy(layout, data)
        after = edit(before)
        if after == before:
            return None
        return json.dumps(after.as_json(), indent=2, sort_keys=True, default=str).encode()

    layout.files().update(RETENTION, change, lock=".retention.lock")


def set_rule(target: "Any", *, kind: str | None = None, tenant: str | None = None,
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


def remove_rule(target: "Any", *, kind: str | None = None, tenant: str | None = None) -> Rule:
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


def place_hold(target: "Any", *, subject: str | None = None, tenant: str | None = None,
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


def release_hold(target: "Any", *, subject: str | None = None, tenant: str | None = None) -> Hold:
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


def check_erasure(layout: Layout, log: "EventLog", subject_id: str, event_ids: Iterable[str] = ()) -> None:
    """Raise :class:`LegalHoldError` when a hold covers ``subject_id`` or an event the erasure
    would remove (tagged with ``subject_id``, or in ``event_ids``). Free when no hold is placed."""
    policy = read_policy(layout)
    if not policy.holds:
        return
    hold = policy.hold_on([subject_id], None)
    if hold is not None:
        raise LegalHoldError(f"cannot erase subject {subject_id!r}: {hold.describe()}; release it with "
                             f"`refold hold STORE --release --subject {subject_id}` when the hold ends")
    extra = set(event_ids)
    rows = log.arrow(columns=["event_id", "kind", "tenant", "subjects"])
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


