"""Vacuuming the state tables (``Memory.vacuum_state``, ``refold vacuum-state``, ``refold fold
--vacuum-hours``, the jobs' ``--vacuum-hours``): Delta's own vacuum deletes the files old
versions held, and the state versions whose files may be gone are no longer travelled to (a read
as of that position overlays the log's prefix on an empty state, or is refused past the overlay
limit). Real stores, real delta-rs vacuums."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import refold
from refold.reads.queries import facts_from_state
from refold.storage.state import _readable_from
from refold.reads.tables import read_tables
from tests.test_state_as_of import _history, _oracle

REPO = Path(__file__).resolve().parents[1]


def _commit(version: int, at: int, operation: str = "WRITE", retain_ms: int | None = None) -> dict:
    info = {"version": version, "timestamp": at, "operation": operation}
    if retain_ms is not None:
        info["operationParameters"] = {"specifiedRetentionMillis": str(retain_ms)}
    return info


def test_the_versions_a_vacuum_left_whole_follow_from_its_start_and_retention():
    writes = [_commit(v, 1000 * v) for v in range(6)]  # versions 0..5, one second apart
    newest_first = lambda cs: sorted(cs, key=lambda c: -c["version"])  # noqa: E731 (as history() lists them)
    assert _readable_from(newest_first(writes)) == 0  # never vacuumed
    # retention 2.5 s at 6.0 s: commits up to 3.5 s removed files long enough ago -> from version 3 on
    assert _readable_from(newest_first(writes + [_commit(6, 6000, "VACUUM START", 2500)])) == 3
    # no retention: only the version it ran on
    assert _readable_from(newest_first(writes + [_commit(6, 6000, "VACUUM START", 0)])) == 5
    # an older vacuum that cut more than the newest one still counts
    both = writes + [_commit(6, 6000, "VACUUM START", 0), _commit(7, 7000), _commit(8, 9000, "VACUUM START", 5000)]
    assert _readable_from(newest_first(both)) == 5


def _whole(store, tag) -> int:
    """Rows of the state at ``tag``'s versions, read in full (fails when a file is gone)."""
    return (store.read("facts", version=tag.facts_version).num_rows
            + store.read("entities", version=tag.entities_version).num_rows)


@pytest.mark.slow
def test_a_vacuum_keeps_what_its_retention_covers_and_past_reads_follow(tmp_path):
    mem, versions = _history(tmp_path / "store")
    mem.fold(full=True)  # a full refold replaces every file: the older versions' files are unused now
    spec = mem.current_spec()
    store = mem.state_store(spec)
    tags = store.tags()
    assert len(tags) == 4 and all(_whole(store, t) for t in tags)
    assert mem.vacuum_state(retain_hours=168) == {spec.hash: 0}  # every version is younger than a week
    assert mem.state_store(spec).tags() == tags
    assert read_tables(mem.store, versions[1], spec) is not None

    reader = refold.open(tmp_path / "store")
    kept = read_tables(reader.store, versions[1], spec)  # a past read kept by another process
    assert kept is not None and read_tables(reader.store, versions[1], spec) is kept
    before = sum(1 for _ in (tmp_path / "store" / "state").rglob("*.parquet"))
    removed = mem.vacuum_state(retain_hours=0)
    after = sum(1 for _ in (tmp_path / "store" / "state").rglob("*.parquet"))
    assert removed[spec.hash] > 0 and after == before - removed[spec.hash]
    store = mem.state_store(spec)
    left = store.tags()
    assert [t.log_seq for t in left] == [store.tag().log_seq] == [tags[-1].log_seq]
    assert _whole(store, left[0]) > 0
    with pytest.raises(FileNotFoundError):
        _whole(store, tags[0])  # what the vacuum cut, and tags() no longer lists
    # a position before the newest tag: no version to travel to; the read overlays the log's
    # prefix on an empty state (it is within Memory.read_overlay_limit), also for the process
    # that had kept an answer from a version the vacuum cut
    for memory in (mem, reader):
        assert read_tables(memory.store, versions[2], spec)[1].log_seq == -1
        assert memory.facts(as_of=versions[2]).equals(_oracle(mem, versions[2]))
    assert read_tables(reader.store, versions[1], spec)[1].log_seq == -1
    assert reader.facts(as_of=versions[1]).equals(_oracle(mem, versions[1]))
    # past the limit, the read is refused, naming the oldest position a read still answers
    reader.read_overlay_limit = 10
    with pytest.raises(refold.ValidationError, match=rf"oldest readable position is seq {left[0].log_seq}"):
        reader.facts(as_of=versions[2])
    head = mem.log_store.version()
    assert read_tables(mem.store, head, spec) is not None
    mem.append([{"kind": "chat_turn", "content": "Person1: I live in Oslo.", "source": "chat"}])
    mem.fold()  # a later fold's versions are whole again
    store = mem.state_store(spec)
    assert len(store.tags()) == 2 and all(_whole(store, t) for t in store.tags())
    tag_store, tag, overlay = read_tables(mem.store, head, spec)
    assert tag == store.tags()[0]
    assert facts_from_state(tag_store, tag, overlay).equals(_oracle(mem, head))


@pytest.mark.parametrize("hours", [-1, 1.5, True, "168"])
def test_a_bad_retention_is_refused_in_one_line(tmp_path, hours):
    mem = refold.init(tmp_path / "store")
    with pytest.raises(refold.ValidationError, match="retain_hours"):
        mem.vacuum_state(retain_hours=hours)


def _run(*args, env=None):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


@pytest.mark.slow
def test_the_cli_and_the_jobs_vacuum_after_a_fold(tmp_path):
    mem, _ = _history(tmp_path / "store")
    spec_hash = mem.current_spec().hash
    cli = ["-c", "from refold.cli import main; main()"]
    done = _run(*cli, "vacuum-state", mem.root, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"retain_hours": 168, "files_deleted": {spec_hash: 0}}
    mem.append([{"kind": "chat_turn", "content": "Person1: I live in Oslo.", "source": "chat"}])
    done = _run(*cli, "fold", mem.root, "--full", "--vacuum-hours", "0", "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["vacuumed_files"][spec_hash] > 0
    assert len(mem.state_store(mem.current_spec()).tags()) == 1
    bad = _run(*cli, "vacuum-state", mem.root, "--retain-hours", "-1")
    assert bad.returncode == 2 and "retain-hours" in bad.stderr
    mem.append([{"kind": "chat_turn", "content": "Person2: I live in Rome.", "source": "chat"}])
    done = _run("-m", "refold.jobs.refold", mem.root, "--no-ray", "--no-progress", env={"REFOLD_VACUUM_HOURS": "0"})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["vacuumed_files"][spec_hash] > 0, summary
    bad = _run("-m", "refold.jobs.project", mem.root, "--no-ray", "--vacuum-hours", "a week")
    assert bad.returncode == 2 and "whole number of hours" in bad.stderr
    assert refold.open(mem.root).facts(subject="Person2", current_only=True).filter(
        pl.col("relation") == "lives_in")["object"].to_list() == ["Rome"]
