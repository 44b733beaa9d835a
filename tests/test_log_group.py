"""Group commit: concurrent single-event callers share Delta commits, with the log's guarantees.

Grouping is made deterministic by holding the first commit until the other callers have queued
(a wrapper around the ``EventLog._write`` seam that waits, then does the real write).
"""

from __future__ import annotations

import threading

import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import ConflictError
from refold.fold.events import NewEvent
from refold.storage.log.group import GroupCommit


def _ev(name: str, content: str | None = None) -> NewEvent:
    return NewEvent(kind="chat_turn", content=content or f"said {name}", source="chat#1", event_id=name)


def _run_callers(gc: GroupCommit, batches: list[list[NewEvent]]):
    results: list = [None] * len(batches)

    def call(i: int) -> None:
        try:
            results[i] = gc.append(batches[i])
        except Exception as exc:  # noqa: BLE001 - checked by the test
            results[i] = exc

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return results


def _hold_first_write_until_queued(gc: GroupCommit, waiting: int) -> None:
    """The first commit waits until ``waiting`` other callers are queued behind it."""
    log = gc.log
    real = log._write
    first = threading.Event()

    def write(dt, table, props):
        if not first.is_set():
            first.set()
            for _ in range(2000):
                with gc._queue_lock:
                    if len(gc._queue) >= waiting:
                        break
                threading.Event().wait(0.005)
        real(dt, table, props)

    log._write = write


def test_callers_queued_during_a_commit_share_the_next_one(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)
    _hold_first_write_until_queued(gc, waiting=7)
    batches = [[_ev(f"c{i}")] for i in range(8)]
    results = _run_callers(gc, batches)
    assert all(isinstance(r, list) for r in results), results
    # one commit for the first caller, one for the seven that queued behind it
    assert gc.commits == 2
    assert DeltaTable(mem.layout.events).version() == 2
    frame = mem.log()
    assert frame["seq"].to_list() == list(range(8))
    stored = dict(zip(frame["event_id"].to_list(), frame["seq"].to_list()))
    assert all(stored[b[0].event_id] == r[0] for b, r in zip(batches, results))
    assert mem.verify().ok


def test_each_callers_batch_stays_contiguous_and_in_order(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)
    _hold_first_write_until_queued(gc, waiting=5)
    batches = [[_ev(f"b{i}-{j}") for j in range(i + 1)] for i in range(6)]
    results = _run_callers(gc, batches)
    for batch, seqs in zip(batches, results):
        assert seqs == list(range(seqs[0], seqs[0] + len(batch)))
    assert sorted(s for seqs in results for s in seqs) == list(range(21))
    assert mem.verify().ok


def test_a_conflict_fails_only_the_caller_at_fault(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.log_store.append([_ev("known")])
    gc = GroupCommit(mem.log_store)
    _hold_first_write_until_queued(gc, waiting=4)
    batches = [
        [_ev("first")],
        [_ev("a"), _ev("b")],
        [_ev("known", "different content")],  # conflicts with the log
        [_ev("c")],
        [_ev("known")],  # an idempotent retry: gets the original seq
    ]
    results = _run_callers(gc, batches)
    assert isinstance(results[2], ConflictError)
    assert results[4] == [0]
    assert all(isinstance(r, list) for i, r in enumerate(results) if i != 2)
    assert sorted(mem.log()["event_id"].to_list()) == ["a", "b", "c", "first", "known"]
    assert mem.verify().ok


def test_same_id_from_two_callers_in_one_group(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)
    _hold_first_write_until_queued(gc, waiting=3)
    batches = [[_ev("lead")], [_ev("x")], [_ev("x")], [_ev("x", "other")]]
    results = _run_callers(gc, batches)
    assert results[1] == results[2] and isinstance(results[1], list)  # written once
    assert isinstance(results[3], ConflictError)
    assert mem.log().height == 2 and mem.verify().ok


def test_max_events_splits_groups(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store, max_events=3)
    _hold_first_write_until_queued(gc, waiting=6)
    results = _run_callers(gc, [[_ev(f"m{i}")] for i in range(7)])
    assert all(isinstance(r, list) for r in results)
    assert gc.commits == 3  # 1, then 3 + 3
    assert mem.log().height == 7 and mem.verify().ok


def test_an_error_reaches_every_caller_of_the_group(tmp_path, monkeypatch):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)

    def broken(batch, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(mem.log_store, "append", broken)
    results = _run_callers(gc, [[_ev(f"e{i}")] for i in range(4)])
    assert all(isinstance(r, RuntimeError) for r in results)
    assert not gc._queue


@pytest.mark.slow
def test_many_threads_many_appends(tmp_path):
    mem = refold.init(tmp_path / "store")
    gc = GroupCommit(mem.log_store)
    per, n = 25, 8
    acked: dict[str, int] = {}
    lock = threading.Lock()

    def worker(t: int) -> None:
        for i in range(per):
            e = _ev(f"w{t}-{i}")
            (seq,) = gc.append([e])
            with lock:
                acked[e.event_id] = seq

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    frame = mem.log()
    assert frame["seq"].to_list() == list(range(n * per))
    assert dict(zip(frame["event_id"].to_list(), frame["seq"].to_list())) == acked
    assert gc.commits == sum(c["operation"] == "WRITE" for c in DeltaTable(mem.layout.events).history())  # (+ compactions)
    assert gc.commits < n * per  # callers did share commits
    assert mem.verify().ok
