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
from collections.abc import Container
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import NotFoundError, RefoldError
from refold.fold.merge import node_id
from refold.fold.partition import bucket_of
from refold.fold.queries import fact_rows, facts_frame, why
from refold.fold.scoping import reader_view
from refold.reads.queries import neighbourhood
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


#: what a read that opens a garbled file raises: pyarrow's error (or refold's, naming the file)
UNREADABLE = (pa.ArrowException, OSError, RefoldError)


def garble_buckets(table_path: str, keep: Container[int] = ()) -> dict[Path, bytes]:
    """Overwrite with garbage every data file of the Delta table at ``table_path`` whose
    ``bucket`` partition is not in ``keep``: a read that opens one of them fails. Returns each
    file's original bytes, for :func:`restore_files`. (The tests run as root, which ignores file
    modes, so unreadable means garbled.)"""
    root = Path(table_path.removeprefix("file://"))
    actions = pa.table(DeltaTable(str(root)).get_add_actions(flatten=True))
    saved = {}
    for path, bucket in zip(actions["path"].to_pylist(), actions["partition.bucket"].to_pylist()):
        if int(bucket) not in keep:
            file = root / path
            saved[file] = file.read_bytes()
            file.write_bytes(b"not parquet: this bucket must not be read")
    return saved


def restore_files(saved: dict[Path, bytes]) -> None:
    """Put back the files :func:`garble_buckets` garbled (those still there)."""
    for file, data in saved.items():
        if file.exists():
            file.write_bytes(data)


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


def test_a_principals_read_of_one_subject_does_not_read_the_whole_state(tmp_path):
    """The read of one subject with a principal opens the buckets of that subject and of the
    subjects that decide what the principal sees (roll-up inputs: the organisations), never every
    bucket: with every other bucket's facts files garbled it gives the same answer, while a read
    of the whole state fails on them."""
    rng = random.Random(7)
    mem = refold.init(tmp_path / "store")
    mem.append(_events(rng, 60, 0))
    mem.fold()
    want = mem.facts(subject="Zoe", principal="dave")
    assert want.height  # (an answer worth comparing)
    store = mem.state_store(mem.current_spec())
    tag = store.tag()
    keep = {bucket_of(node_id("default", n), tag.buckets) for n in ["Zoe", *ORGS]}
    garbled = garble_buckets(store.path("facts"), keep)
    assert garbled  # (the other people's buckets)
    fresh = refold.open(mem.root)  # (no read kept in memory)
    assert fresh.facts(subject="Zoe", principal="dave").equals(want)
    with pytest.raises(UNREADABLE):
        fresh.facts(principal="dave")  # the whole state needs the garbled files
