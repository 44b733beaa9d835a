"""A principal's reads answer from the state tables (issue #17 item 4: a read must not load the
whole state), with exactly what the scoped view of the reference fold of the whole log gives
(refold.fold.scoping: a fact closed by something the reader may not see is open to that reader;
a derived fact is visible when its inputs are, its valid time recomputed from them).

Each seeded log mixes principals over supersession (single-valued relations), facts about the
past (ended where a later-recorded fact begins), retractions by restricted events, inverse and
compose roll-ups, and events after the last fold (the read overlay). The oracle is the reference
fold of the same log (refold.fold.reference), scoped whole (``refold.fold.scoping.reader_view``)
and cut to what is asked.
"""

from __future__ import annotations

import random

import pytest

import refold
from refold.fold.errors import NotFoundError
from refold.fold.queries import fact_rows, facts_frame, why
from refold.fold.scoping import reader_view
from refold.state_queries import neighbourhood
from tests.fold_helpers import fact_event, reference_of

PEOPLE = ["Zoe", "Yann", "Xia"]
ORGS = ["Acme", "Initech"]
CITIES = ["Oslo", "Rome", "Paris"]
ACCESS = [[], [], ["hr"], ["hr", "ops"], ["ops"]]
READERS = ["hr", "ops", "dave"]


def _events(rng: random.Random, n: int, start: int) -> list[dict]:
    out = []
    for i in range(start, start + n):
        who = rng.choice(PEOPLE)
        relation, obj = rng.choice([("lives_in", rng.choice(CITIES)), ("works_at", rng.choice(ORGS)),
                                    ("likes", rng.choice(["tea", "chess"]))])
        subject = who
        if rng.random() < 0.2:
            subject, relation, obj = rng.choice(ORGS), "located_in", rng.choice(CITIES)
        event = fact_event(subject, relation, obj, day=rng.randint(0, 30), event_id=f"ev-{i}",
                           principals=rng.choice(ACCESS))
        if rng.random() < 0.12:
            event["kind"] = "retraction"
        out.append(event)
    return out


def _oracle_graph(mem, principal):
    events = mem.events()
    retractions = {e.event_id: e.principals for e in events if e.kind == "retraction"}
    return reader_view(reference_of(mem, events=events).graph, principal, retractions)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.slow
def test_a_principals_reads_of_the_state_tables_equal_the_scoped_whole_state(tmp_path, seed):
    rng = random.Random(seed)
    mem = refold.init(tmp_path / "store")
    mem.append(_events(rng, 40, 0))
    mem.fold()
    mem.append(_events(rng, 12, 40))  # read through the overlay
    assert mem.state_store(mem.current_spec()).tag().log_seq < mem.head().seq  # (so the reads overlay)
    closed_somewhere = 0
    for principal in READERS:
        oracle = _oracle_graph(mem, principal)
        assert mem.facts(principal=principal).equals(facts_frame(fact_rows(oracle))), principal
        for subject in PEOPLE + ORGS:
            got = mem.facts(subject=subject, principal=principal)
            assert got.equals(facts_frame(fact_rows(oracle, subject=subject))), (principal, subject)
            closed_somewhere += int((~got["current"]).sum())
            view = mem.graph(subject=subject, depth=2, principal=principal)
            want = neighbourhood(oracle, subject=subject, depth=2)
            assert sorted(view.edges(keys=True, data=True), key=str) == sorted(want.edges(keys=True, data=True),
                                                                              key=str), (principal, subject)
        visible = set(oracle.edges(keys=True))
        everything = mem.facts()["fact_id"].to_list()
        for fid in rng.sample(everything, min(6, len(everything))):
            if any(k == fid for _, _, k in visible):
                assert mem.why(fid, principal=principal) == why(oracle, fid, mem.events_by_id), (principal, fid)
            else:
                with pytest.raises(NotFoundError):
                    mem.why(fid, principal=principal)
    assert closed_somewhere  # (closed facts are in the comparison)


def test_a_principals_read_of_one_subject_does_not_read_the_whole_state(tmp_path, monkeypatch):
    """The read of one subject with a principal opens the buckets of that subject and of the
    subjects that decide what the principal sees (roll-up inputs), never every bucket."""
    from refold.storage.state import StateStore

    rng = random.Random(7)
    mem = refold.init(tmp_path / "store")
    mem.append(_events(rng, 60, 0))
    mem.fold()
    reads = []
    real = StateStore.read

    def counting(self, name, **kw):
        reads.append((name, kw.get("buckets")))
        return real(self, name, **kw)

    monkeypatch.setattr(StateStore, "read", counting)
    mem.facts(subject="Zoe", principal="dave")
    facts_reads = [b for name, b in reads if name == "facts"]
    assert facts_reads and all(b is not None and len(b) <= 1 + len(ORGS) for b in facts_reads), reads
