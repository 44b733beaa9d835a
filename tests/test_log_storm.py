"""Many writers at once: no lost write, no duplicate, no gap, no fork (invariant 3).

Processes are real OS processes (each its own interpreter and its own ``Memory``), started
together behind a file barrier; threads share one ``Memory`` or hold one each. The ambiguous
commit is simulated by wrapping the ``EventLog._write`` seam: the real write runs, then an
``OSError`` is raised, as a network failure after the server applied the commit would.
"""

from __future__ import annotations

import json
import subprocess
from contextlib import nullcontext
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import StoreError
from refold.fold.events import NewEvent
from refold.storage.log.eventlog import EventLog

WORKER = r"""
import json, sys, time
from pathlib import Path
import refold
import refold.storage.log.eventlog
from contextlib import nullcontext

root, name, mode, count, size, go = sys.argv[1:7]
count, size = int(count), int(size)
if mode == "nolock":  # no host lock: writers race through the compare-and-append alone
    refold.storage.log.eventlog.host_turn = lambda root: nullcontext(False)
mem = refold.Memory(root)
lost = []  # commits this process lost to another writer (each retried)
write = mem.log_store._write
def counting(*args):
    from deltalake.exceptions import CommitFailedError
    try:
        return write(*args)
    except CommitFailedError:
        lost.append(1)
        raise
mem.log_store._write = counting
while not Path(go).exists():  # start together, after the slow imports
    time.sleep(0.005)
acked = []
for i in range(count):
    batch = [{"kind": "observation", "content": f"{name} call {i} item {j}", "source": name,
              "event_id": f"{name}-{i}-{j}"} for j in range(size)]
    seqs = mem.append(batch)
    acked.extend(zip([e["event_id"] for e in batch], seqs))
print(json.dumps({"acked": acked, "lost": len(lost)}))
"""


def _check_log(mem: refold.Memory, acked: dict[str, int], expected: int) -> None:
    """Every acknowledged event exactly once at its acknowledged seq; seqs 0..N-1; chain intact."""
    frame = mem.log()
    assert frame.height == expected
    assert frame["seq"].to_list() == list(range(expected))
    ids = frame["event_id"].to_list()
    assert len(set(ids)) == expected, [i for i, c in Counter(ids).items() if c > 1][:5]
    stored = dict(zip(ids, frame["seq"].to_list()))
    assert len(acked) == expected
    assert all(stored[eid] == seq for eid, seq in acked.items())
    report = mem.verify()
    assert report.ok, report.problems
    assert report.head is not None and report.head.seq == expected - 1
    assert mem.head().seq == expected - 1
    # the published head agrees with the table
    assert mem.log_store.published_head().seq == expected - 1


def _storm(tmp_path, plan, mode: str) -> tuple[refold.Memory, int]:
    """Run ``plan`` as processes at once; check the log; return it and the number of lost races."""
    mem = refold.init(tmp_path / "store")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, mem.root, name, mode, str(count), str(size),
                          str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, count, size in plan
    ]
    time.sleep(0.5)
    go.touch()
    acked: dict[str, int] = {}
    lost = 0
    for (name, count, size), proc in zip(plan, procs):
        out, err = proc.communicate(timeout=280)
        assert proc.returncode == 0, f"{name} failed:\n{err[-3000:]}"
        result = json.loads(out)
        pairs, lost = result["acked"], lost + result["lost"]
        assert len(pairs) == count * size
        seqs = [seq for _, seq in pairs]
        assert seqs == sorted(seqs), f"{name}: its own appends came back out of order"
        if size > 1:  # a batch lands contiguous and in order
            for i in range(count):
                chunk = seqs[i * size:(i + 1) * size]
                assert chunk == list(range(chunk[0], chunk[0] + size))
        acked.update(pairs)
    total = sum(count * size for _, count, size in plan)
    _check_log(mem, acked, total)
    # one commit per acknowledged append, no more: a lost race never leaves a partial commit
    assert len(_commits(mem, "WRITE")) == sum(count for _, count, _ in plan)
    return mem, lost


def _commits(mem: refold.Memory, operation: str) -> list[dict]:
    return [c for c in DeltaTable(mem.layout.events).history() if c["operation"] == operation]


def _data_files(mem: refold.Memory) -> int:
    return len(list(Path(mem.layout.events).glob("*.parquet")))


def _files_committed(mem: refold.Memory) -> int:
    """Data files the log's commits added: one per append, plus those compaction wrote."""
    return len(_commits(mem, "WRITE")) + sum(
        c["operationMetrics"]["numFilesAdded"] for c in _commits(mem, "OPTIMIZE"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_storm_processes(tmp_path):
    """4 processes × 100 single-event appends and 2 processes × 20 batches of 50, all at once."""
    plan = [(f"single{k}", 100, 1) for k in range(4)] + [(f"batch{k}", 20, 50) for k in range(2)]
    mem, lost = _storm(tmp_path, plan, "lock")
    # the host lock made writers take turns: no attempt was wasted on a lost race
    assert lost == 0
    assert _data_files(mem) == _files_committed(mem)
    # and the small files were compacted along the way (every COMPACT_EVERY files)
    assert len(_commits(mem, "OPTIMIZE")) >= 3
    assert len(DeltaTable(mem.layout.events).file_uris()) < 100


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_storm_processes_without_host_lock(tmp_path):
    """The same storm, smaller, with the host lock off: compare-and-append alone keeps order."""
    plan = [(f"single{k}", 40, 1) for k in range(3)] + [("batch0", 8, 25)]
    mem, lost = _storm(tmp_path, plan, "nolock")
    assert lost > 0  # races did happen (each lost commit was retried)
    # a lost race leaves at most the data file delta-rs wrote for it, unreferenced (an erasure's
    # scrub vacuums such orphans): never a commit, never a row
    assert _files_committed(mem) <= _data_files(mem) <= _files_committed(mem) + lost


def _hammer(mem_for, n_threads: int, per_thread: int, size: int) -> dict[str, int]:
    acked: dict[str, int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(n_threads)

    def run(t: int) -> None:
        mem = mem_for(t)
        try:
            start.wait()
            for i in range(per_thread):
                batch = [NewEvent(kind="observation", content=f"t{t} {i} {j}", source=f"thread{t}",
                                  event_id=f"t{t}-{i}-{j}") for j in range(size)]
                seqs = mem.log_store.append(batch)
                with lock:
                    acked.update(zip([e.event_id for e in batch], seqs))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    return acked


def test_threads_with_own_memory_take_turns_on_the_host_lock(tmp_path):
    root = tmp_path / "store"
    refold.init(root)
    mems = [refold.Memory(root) for _ in range(3)]
    acked = _hammer(lambda t: mems[t], n_threads=3, per_thread=10, size=2)
    _check_log(mems[0], acked, 3 * 10 * 2)
    assert _data_files(mems[0]) == _files_committed(mems[0])  # no lost race, so no wasted data file


def test_threads_share_one_memory(tmp_path):
    mem = refold.init(tmp_path / "store")
    acked = _hammer(lambda t: mem, n_threads=4, per_thread=15, size=2)
    _check_log(mem, acked, 4 * 15 * 2)


def test_threads_with_own_memory_race_through_compare_and_append(tmp_path, monkeypatch):
    monkeypatch.setattr("refold.storage.log.eventlog.host_turn", lambda root: nullcontext(False))  # no host lock: race for real
    root = tmp_path / "store"
    refold.init(root)
    mems = [refold.Memory(root) for _ in range(4)]
    acked = _hammer(lambda t: mems[t], n_threads=4, per_thread=15, size=3)
    _check_log(mems[0], acked, 4 * 15 * 3)


# -- ambiguous commits --------------------------------------------------------------------------


class _LostAck(EventLog):
    """An EventLog whose next ``fail`` writes land and then raise, like a lost acknowledgement."""

    fail = 0

    def _write(self, dt, table, props):
        super()._write(dt, table, props)
        if self.fail:
            self.fail -= 1
            raise OSError("connection reset after the commit was sent")


def _events(prefix: str, n: int) -> list[NewEvent]:
    return [NewEvent(kind="chat_turn", content=f"{prefix} {i}", source="chat#1",
                     event_id=f"{prefix}-{i}") for i in range(n)]


def test_ambiguous_commit_resolves_to_the_landed_seqs(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append_jsonl(['{"kind": "chat_turn", "content": "before", "source": "chat#0"}'])
    log = _LostAck(mem.layout)
    log.fail = 1
    batch = _events("amb", 3)
    seqs = log.append(batch)  # the error after the commit is absorbed: the ids are in the log
    assert seqs == [1, 2, 3]
    assert log.fail == 0
    version = DeltaTable(mem.layout.events).version()
    # the caller did not trust it and retries, through another object and through the same one
    assert mem.log_store.append(batch) == [1, 2, 3]
    assert log.append(batch) == [1, 2, 3]
    assert DeltaTable(mem.layout.events).version() == version  # nothing written
    frame = mem.log()
    assert frame["event_id"].to_list()[1:] == ["amb-0", "amb-1", "amb-2"]
    assert frame.height == 4 and frame["event_id"].n_unique() == 4
    assert mem.verify().ok
    # the log keeps working after an ambiguous commit, and the published head caught up
    assert log.append(_events("after", 2)) == [4, 5]
    assert log.published_head().seq == 5
    assert mem.verify().ok


def test_ambiguous_commit_that_did_not_land_says_retry(tmp_path, monkeypatch):
    mem = refold.init(tmp_path / "store")
    log = mem.log_store

    def broken(dt, table, props):
        raise OSError("disk unplugged before the commit")

    monkeypatch.setattr(log, "_write", broken)
    batch = _events("lost", 2)
    with pytest.raises(StoreError, match="did not land.*safe to retry"):
        log.append(batch)
    monkeypatch.undo()
    assert log.append(batch) == [0, 1]
    assert log.append(batch) == [0, 1]
    assert mem.log().height == 2 and mem.verify().ok


def test_ambiguous_commit_with_many_lost_acks_in_a_row(tmp_path):
    mem = refold.init(tmp_path / "store")
    log = _LostAck(mem.layout)
    log.fail = 5
    acked = {}
    for i in range(6):
        batch = _events(f"b{i}", 2)
        acked.update(zip([e.event_id for e in batch], log.append(batch)))
        # a retry of every batch, as a careful caller would after an error, changes nothing
        assert log.append(batch) == [acked[e.event_id] for e in batch]
    _check_log(mem, acked, 12)
