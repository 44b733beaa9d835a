"""Sharded extraction on a real local Ray runtime (one per test session, shared).

Every test compares against an uninterrupted in-process fold of the same events: same cache rows
(every column but ``created_at``), same facts. Interruptions are real: an actor process that
``os._exit``s mid-batch (Ray restarts it and retries the batch), and a ``refold fold --ray``
process killed with SIGKILL after some batches were cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

import refold
from refold.fold.extractors.rules import RulesExtractor
from refold.fold.spec import FoldSpec
from refold.jobs.ray_extract import CacheWriter, ray_runner

pytestmark = [pytest.mark.ray, pytest.mark.slow]

REFOLD = str(Path(sys.executable).with_name("refold"))
_PEOPLE = ("Ana", "Ben", "Chloe", "Dev", "Eli")
_LINES = ("I live in {city}.", "I work at {org}.", "{org} is located in {city}.",
          "I moved to {city}.", "My sister is {name}.", "I like {hobby}.")
_CITIES = ("Lisbon", "Porto", "Berlin", "Oslo", "Quito")
_ORGS = ("Acme", "Globex", "Initech")
_HOBBIES = ("hiking", "chess", "painting")


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray runtime for the whole session (starting one costs ~5 s and ~0.8 GB)."""
    from refold.jobs.ray_extract import ensure_ray

    ensure_ray()
    import ray

    return ray


def _events(n: int) -> list[dict]:
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        text = _LINES[i % len(_LINES)].format(city=_CITIES[i % 5], org=_ORGS[i % 3],
                                              name=_PEOPLE[(i + 1) % 5], hobby=_HOBBIES[i % 3])
        out.append({"kind": "chat_turn", "content": f"{_PEOPLE[i % 5]}: {text}",
                    "source": f"chat#{i}", "event_id": f"ev-{i:04d}",
                    "valid_from": (start + timedelta(days=i)).isoformat()})
    return out


def _store(path: Path, n: int):
    mem = refold.init(path)
    mem.append(_events(n))
    return mem


def _cache_rows(mem) -> pl.DataFrame:
    return mem.cache.frame().drop("created_at").sort("event_id")


def _facts(mem) -> pl.DataFrame:
    return mem.facts().sort("fact_id")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """An uninterrupted in-process fold of 40 events (the reference every test compares to)."""
    mem = _store(tmp_path_factory.mktemp("baseline") / "store", 40)
    report = mem.fold()
    assert report.extraction_calls == 40
    return mem


def test_cache_writer_writes_by_count_and_time_and_never_twice(tmp_path):
    mem = _store(tmp_path / "store", 10)
    events = mem.events()
    results = RulesExtractor().extract(events, FoldSpec())
    seqs = {e.event_id: e.seq for e in events}
    writer = CacheWriter(mem.cache, every_events=4, every_seconds=3600)
    writer.add(results[:3], seqs)
    assert writer.writes == 0 and mem.cache.frame().height == 0
    writer.add(results[3:5], seqs)  # 5 pending >= 4: written
    assert writer.writes == 1 and mem.cache.frame().height == 5
    writer.add(results[:2], seqs)  # duplicates of written rows
    writer.add(results[5:], seqs)
    writer.flush()
    assert writer.inserted == 10 and mem.cache.frame().height == 10
    timed = CacheWriter(mem.cache, every_events=10_000, every_seconds=0)
    timed.add(results[:1], seqs)  # due by time: written at once, nothing new
    assert timed.writes == 1 and timed.inserted == 0
    CacheWriter(None).add(results, seqs)  # no cache: nothing to do


def test_ray_fold_equals_in_process_fold(ray_session, tmp_path, baseline):
    mem = _store(tmp_path / "store", 40)
    runner = ray_runner("rules", {}, cache=mem.cache, batch_size=6, progress=False)
    report = mem.fold(runner=runner)

    assert report.extraction_calls == 40
    assert runner.last.events == 40 and runner.last.batches >= 2
    # the runner cached every row while it ran; the fold's own put afterwards added nothing
    assert runner.last.rows_inserted == 40 and runner.last.cache_writes >= 1
    rows = _cache_rows(mem)
    assert rows.equals(_cache_rows(baseline))
    assert _facts(mem).equals(_facts(baseline))
    assert _facts(mem).height > 20


def test_duplicated_and_retried_batches_add_no_rows(ray_session, tmp_path, baseline):
    mem = _store(tmp_path / "store", 40)
    events = [e for e in mem.events() if e.kind == "chat_turn"]
    runner = ray_runner("rules", {}, cache=mem.cache, spec=FoldSpec(), batch_size=5, progress=False)

    # the same events twice in one run: two batches carry the same keys
    first = runner(events + events[:15])
    assert [x.event_id for x in first] == [e.event_id for e in events + events[:15]]
    assert runner.last.rows_inserted == 40
    # the whole run again (a resubmitted job): every batch is a duplicate
    runner(events)
    assert runner.last.rows_inserted == 0

    rows = _cache_rows(mem)
    assert rows.height == 40 and rows["event_id"].n_unique() == 40
    mem.fold()  # nothing left to extract; merge from the cache
    assert rows.equals(_cache_rows(baseline))
    assert _facts(mem).equals(_facts(baseline))


class CrashOnce:
    """Rules, except that the actor process dies (``os._exit``) on its ``crash_at``-th batch the
    first time any actor gets there: a marker file makes the crash happen once per test."""

    name = "rules"

    def __init__(self, marker: str, crash_at: int = 2):
        self.marker = marker
        self.crash_at = crash_at
        self.inner = RulesExtractor()
        self.batches = 0

    def extract(self, events, spec):
        self.batches += 1
        if self.batches == self.crash_at and not os.path.exists(self.marker):
            Path(self.marker).write_text(f"crashed in pid {os.getpid()}\n")
            os._exit(1)
        return self.inner.extract(events, spec)


def test_killed_actor_is_restarted_and_the_result_is_unchanged(ray_session, tmp_path, baseline):
    import ray.cloudpickle

    # the test module is not importable in Ray workers: ship CrashOnce by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    mem = _store(tmp_path / "store", 40)
    marker = tmp_path / "crashed"
    runner = ray_runner(CrashOnce(str(marker)), cache=mem.cache, spec=FoldSpec(), batch_size=4,
                        progress=False)
    report = mem.fold(runner=runner)

    assert marker.exists(), "no actor crashed: the test did not exercise a restart"
    assert report.extraction_calls == 40
    rows = _cache_rows(mem)
    assert rows["event_id"].n_unique() == rows.height == 40
    assert rows.equals(_cache_rows(baseline))
    assert _facts(mem).equals(_facts(baseline))


def _count_rows(path: Path) -> int:
    from refold.storage.cache.table import ExtractionCache
    from refold.storage.layout import Layout

    return len(ExtractionCache(Layout(str(path))).keys(FoldSpec().hash))


def test_killed_run_resumes_and_redoes_only_what_was_missing(ray_session, tmp_path):
    # enough events that the run outlasts its first cache writes (every 512 events or 5 s)
    n = 3000
    path = tmp_path / "store"
    _store(path, n)
    address = ray_session.get_runtime_context().gcs_address
    cmd = [REFOLD, "fold", str(path), "--ray", "--address", address, "--no-progress", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while _count_rows(path) == 0:
            assert proc.poll() is None, f"fold ended before it could be killed: {proc.communicate()}"
            assert time.monotonic() < deadline, "no batch reached the cache in 180 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    # the driver is gone; Ray stops its actors. Wait until no late batch lands any more.
    before, stable_since = _count_rows(path), time.monotonic()
    while time.monotonic() - stable_since < 3:
        time.sleep(0.5)
        now = _count_rows(path)
        if now != before:
            before, stable_since = now, time.monotonic()
    assert 0 < before < n, f"the kill came too late to test a resume ({before} of {n} cached)"

    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["extraction_calls"] == n - before  # only the missing events were extracted

    resumed = refold.open(path)
    rows = _cache_rows(resumed)
    assert rows.height == rows["event_id"].n_unique() == n
    reference = _store(tmp_path / "reference", n)
    reference.fold()
    assert rows.equals(_cache_rows(reference))
    assert _facts(resumed).equals(_facts(reference))


class Broken:
    """An extractor whose backend is down: it raises on every batch."""

    name = "rules"

    def extract(self, events, spec):
        from refold.fold.errors import ExtractionError

        raise ExtractionError("endpoint down: start the server")


def test_an_extractor_error_fails_the_run_and_caches_nothing(ray_session, tmp_path):
    import ray.cloudpickle

    from refold.fold.errors import ExtractionError

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    mem = _store(tmp_path / "store", 12)
    runner = ray_runner(Broken(), cache=mem.cache, spec=FoldSpec(), batch_size=4, progress=False)
    started = time.monotonic()
    with pytest.raises(ExtractionError, match="endpoint down"):
        mem.fold(runner=runner)
    assert time.monotonic() - started < 300  # not retried forever
    assert mem.cache.frame().height == 0
