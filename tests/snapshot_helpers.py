"""Helpers for fold tests: in-memory logs of facts (and a hypothesis strategy for them), and a
counting extractor. (A snapshot is a tagged version of the state tables; see docs/state.md.)"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone

from refold.fold.events import Event, Fact
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

    Links chain like the real log's (a hash of the previous link and the seq).
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


def memory_steps(retract_one_in: int = 8):
    """Hypothesis strategy for one :func:`memory_log` step (a retraction one time in ``retract_one_in``)."""
    from hypothesis import strategies as st

    return st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(RELATIONS), st.sampled_from(OBJECTS),
                     st.one_of(st.none(), st.integers(min_value=0, max_value=60)),
                     st.sampled_from([False] * (retract_one_in - 1) + [True]), st.booleans())
