"""Helpers for snapshot tests: in-memory logs of facts, a counting extractor, graph comparison."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone

import networkx as nx

from refold.fold.events import Event, Fact
from refold.fold.extractors.rules import RulesExtractor
from refold.fold.incremental import LiveFold
from refold.fold.rollups import apply_rollups
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


def memory_steps(retract_one_in: int = 8):
    """Hypothesis strategy for one :func:`memory_log` step (a retraction one time in ``retract_one_in``)."""
    from hypothesis import strategies as st

    return st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(RELATIONS), st.sampled_from(OBJECTS),
                     st.one_of(st.none(), st.integers(min_value=0, max_value=60)),
                     st.sampled_from([False] * (retract_one_in - 1) + [True]), st.booleans())


def recomputed(live: LiveFold) -> nx.MultiDiGraph:
    """The merged edges of ``live`` rolled up from scratch (``apply_rollups``): what any
    incremental roll-up refresh must equal."""
    graph = live.graph.copy()
    graph.remove_edges_from([(u, v, k) for u, v, k, d in graph.edges(keys=True, data="derivation")
                             if d != "extracted"])
    apply_rollups(graph, live.spec)
    return graph


def folded(steps: Sequence[tuple], *, check_each: Callable[[LiveFold], None] | None = None) -> LiveFold:
    """A refreshed LiveFold of :func:`memory_log` ``steps`` with the counting rules' spec;
    ``check_each`` (given) is called after a refresh following every event."""
    spec = CountingRules().default_spec()
    events = memory_log(steps)
    extractions = {x.event_id: x for x in CountingRules().extract(events, spec)}
    live = LiveFold.empty(spec)
    for e in events:
        live.apply(e, extractions.get(e.event_id))
        if check_each is not None:  # a refresh after every event, each checked
            live.refresh()
            check_each(live)
    live.refresh()
    return live


def check_indexes(live: LiveFold) -> None:
    """``live``'s derived-edge indexes (``_derived``, ``_by_input``) equal what its graph holds."""
    derived = {k: ((u, v), tuple(d["inputs"])) for u, v, k, d in live.graph.edges(keys=True, data=True)
               if d["derivation"] != "extracted"}
    assert live._derived == derived
    by_input: dict[str, set[str]] = {}
    for k, (_, inputs) in derived.items():
        for i in inputs:
            by_input.setdefault(i, set()).add(k)
    assert live._by_input == by_input
