"""Helpers for snapshot tests: in-memory logs of facts, a counting extractor, graph comparison."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from refold.fold.events import Event, Fact
from refold.fold.incremental import LiveFold
from refold.fold.extractors.rules import RulesExtractor
from refold.fold.spec import FoldSpec

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
PARIS = timezone(timedelta(hours=2))
SUBJECTS = ("Ann", "Bo", "Acme", "Globex")
RELATIONS = ("lives_in", "works_at", "located_in", "likes", "risk_tolerance")
OBJECTS = ("Oslo", "Rome", "Acme", "Globex", "low", "high", "Bo")


class CountingRules(RulesExtractor):
    """The rules extractor, counting the events it is asked to extract (the tests' call meter)."""

    name = "rules"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def extract(self, events: Sequence[Event], spec: FoldSpec):
        self.calls += len(events)
        return super().extract(events, spec)


def memory_log(steps: Sequence[tuple], *, tenant: str = "t") -> list[Event]:
    """Stored-looking events from (subject, relation, object, day or None, retract, paris_time) steps.

    Links chain like the real log's (a hash of the previous link and the seq), so a snapshot's
    position check works on these lists too.
    """
    events, link = [], "genesis"
    for seq, (subject, relation, obj, day, retract, paris) in enumerate(steps):
        valid = None
        if day is not None:
            valid = T0 + timedelta(days=day)
            if paris:
                valid = valid.astimezone(PARIS)
        link = hashlib.sha256(f"{link}/{seq}".encode()).hexdigest()
        events.append(Event(
            seq=seq, event_id=f"e{seq:04d}", recorded_at=T0 + timedelta(days=400, seconds=seq), table_version=seq,
            kind="retraction" if retract else "memory_written", tenant=tenant, source="tool#write_memory",
            content=f"{subject} {relation} {obj}", fact=Fact(subject, relation, obj), valid_from=valid,
            justification="test", link=link,
        ))
    return events


def folded(steps: Sequence[tuple]) -> LiveFold:
    """A refreshed LiveFold of :func:`memory_log` ``steps`` with the counting rules' spec."""
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    for e in events:
        live.apply(e, extractions.get(e.event_id))
    live.refresh()
    return live
