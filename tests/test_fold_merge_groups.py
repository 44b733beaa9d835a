"""The partitioned fold's merge stage (refold.engine.merge): bucket groups merged and committed
one by one, concurrently, as Ray tasks or in a bucket, each replacing only its own partitions; a
failing partition named; a killed full fold's rerun redoing only the groups it had not written."""

from __future__ import annotations
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
import polars as pl
import pytest
from deltalake import DeltaTable
import refold
from refold.fold.errors import RefoldError
from refold.fold.partition import FACT_SCHEMA
from refold.engine.merge import PartitionError
from refold.storage.state import StateStore
from tests.fold_helpers import canonical_graph
from tests.test_fold_state import REPO, _log, _reference, _state_graph


def test_a_failing_partition_is_named(mem):
    mem.append(_log(200))
    mem.fold(full=True)
    store = mem.state_store(mem.current_spec())
    victim = next(p for p in Path(store.path("items")).rglob("*.parquet"))
    bucket = int(victim.parent.name.split("=")[1])
    victim.write_bytes(b"not parquet")
    from refold.engine.merge import merge_buckets

    with pytest.raises(PartitionError, match=f"bucket={bucket}") as caught:
        merge_buckets(store, mem.current_spec(), [bucket], buckets=store.tag().buckets)
    assert isinstance(caught.value, RefoldError)


@pytest.mark.slow
def test_a_rerun_after_a_killed_full_fold_redoes_only_the_missing_partitions(mem, monkeypatch):
    """(A small ``GROUP_ROWS`` makes this small log fold in several bucket groups.)"""
    from refold.engine import merge as state_fold
    mem.append(_log(300))
    mem.fold(full=True)  # the extraction cache, and a first state
    mem.append(_log(30, start=300))
    code = ("import sys, refold; from refold.engine import merge; merge.GROUP_ROWS = 20; "
            "m = refold.open(sys.argv[1]); m.fold(full=True)")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "tests.fault_driver", "fold.merged:1", "-c", code, mem.root],
                          env=env, capture_output=True, text=True)
    assert done.returncode == -signal.SIGKILL, done.stderr
    store = mem.state_store(mem.current_spec())
    assert store.tag() is None  # a half-written state is never taken for a complete one
    monkeypatch.setattr(state_fold, "GROUP_ROWS", 20)
    size = state_fold.group_size(store, 64)
    assert size < 32
    again = refold.open(mem.root).fold()
    assert again.reused_partitions == 2 * size  # the two groups written before the kill
    assert again.last_seq == mem.head().seq
    assert canonical_graph(_state_graph(refold.open(mem.root))) == canonical_graph(_reference(Path(mem.root)))


@pytest.mark.ray
@pytest.mark.slow
def test_the_merge_stage_runs_as_ray_tasks_that_write_their_own_partitions(mem, monkeypatch):
    """Each bucket group is a Ray task that reads its items from the store and commits its merged
    partitions there itself: the driver gets a row count per group and writes no merged row,
    and the state equals the local merger's.

    Which process commits a partition leaves no trace in the table, so the driver is made
    unable to: ``StateStore.write`` refuses merged rows in this process (the Ray workers are
    other processes), and a local fold of a copy of the store shows the refusal stops the
    driver's own merge; the Ray fold still lands whole."""
    from refold.engine import merge as state_fold
    from refold.jobs.ray_merge import ray_merger
    from refold.storage.state import StateStore

    monkeypatch.setattr(state_fold, "GROUP_ROWS", 30)  # several groups, so several tasks

    mem.append(_log(200))
    local = mem.fold(full=True)
    expected = canonical_graph(_state_graph(mem))
    store = mem.state_store(mem.current_spec())
    groups = len(state_fold.groups_of(64, state_fold.group_size(store, 64)))
    assert groups > 2
    original = StateStore.write

    def driver_write(self, name, rows, **kw):
        if name == "facts" and kw.get("layer") == "merged":
            raise AssertionError("the driver wrote merged rows")
        return original(self, name, rows, **kw)

    monkeypatch.setattr(StateStore, "write", driver_write)
    shutil.copytree(mem.root, Path(mem.root).parent / "copy")
    with pytest.raises(AssertionError, match="the driver wrote merged rows"):
        refold.open(Path(mem.root).parent / "copy").fold(full=True)  # (the local merger: refused)
    merger = ray_merger()
    remote = refold.open(mem.root).fold(full=True, merger=merger)
    monkeypatch.undo()
    assert merger.worker_peak_rss > 50 * 2**20  # (the workers' own high-water mark, reported back)
    assert (remote.facts, remote.derived_facts) == (local.facts, local.derived_facts)
    assert canonical_graph(_state_graph(refold.open(mem.root))) == expected
    # one commit per group, each noting its group (what a rerun after a kill reuses)
    since_cleared = []
    for info in DeltaTable(store.path("facts")).history():  # newest first, back to this fold's start
        if info.get("refold.cleared"):
            break
        since_cleared.append(info.get("refold.group"))
    assert len({g for g in since_cleared if g}) == len([g for g in since_cleared if g]) == groups


def test_merge_groups_committed_at_once_land_whole(mem):
    """Bucket groups merged and committed concurrently (as Ray tasks do: threads here) each
    replace only their own partitions: the result equals the groups committed one by one."""
    from concurrent.futures import ThreadPoolExecutor

    from refold.engine.merge import groups_of, merge_group
    from refold.storage.state import StateStore

    mem.append(_log(200))
    mem.fold(full=True, buckets=8)
    expected = canonical_graph(_state_graph(mem))
    spec = mem.current_spec()
    store = mem.state_store(spec)
    tag = store.tag()
    with ThreadPoolExecutor(4) as pool:
        written = list(pool.map(lambda g: merge_group(StateStore(mem.layout, spec.hash), spec, g, buckets=8, run="t"),
                                groups_of(8, 2)))
    assert sum(written) == tag.facts
    store.set_tag(tag)
    assert canonical_graph(_state_graph(refold.open(mem.root))) == expected


def test_a_merge_task_refuses_to_create_the_facts_table(mem):
    """A merge task given a store without a facts table refuses (one line) instead of creating
    it: its whole-table write would replace the partitions concurrent groups committed."""
    from refold.fold.errors import StoreError
    from refold.engine.merge import merge_group

    mem.append(_log(20))
    mem.fold(full=True, buckets=4)
    store = mem.state_store(mem.current_spec())
    shutil.rmtree(store.path("facts"))
    fresh = StateStore(mem.layout, store.spec_hash)
    with pytest.raises(StoreError, match="does not exist"):
        merge_group(fresh, mem.current_spec(), [0, 1], buckets=4, run="x")


def test_merge_groups_commit_their_partitions_on_object_storage(mem, s3_bucket):
    """A merge task given only the store URI and its storage options (here the local S3 API)
    reads its group's items and commits its merged partitions there, groups at once: the merged
    layer equals the local store's."""
    from concurrent.futures import ThreadPoolExecutor

    from refold.engine.merge import groups_of, merge_group
    from refold.storage.layout import Layout
    from refold.storage.state import StateStore

    mem.append(_log(120))
    mem.fold(full=True, buckets=8)
    spec = mem.current_spec()
    local = mem.state_store(spec)
    remote = StateStore(Layout(s3_bucket.uri), spec.hash, storage_options=s3_bucket.storage_options)
    remote.write("items", local.read("items"))
    remote.write("facts", FACT_SCHEMA.empty_table())  # (what the fold does before its merge stage)
    with ThreadPoolExecutor(4) as pool:
        written = list(pool.map(lambda g: merge_group(
            StateStore(Layout(s3_bucket.uri), spec.hash, storage_options=s3_bucket.storage_options), spec, g,
            buckets=8, run="s3"), groups_of(8, 2)))
    key = ["fact_id"]
    got = pl.from_arrow(remote.read("facts", layer="merged")).sort(key)
    want = pl.from_arrow(local.read("facts", layer="merged")).sort(key)
    assert sum(written) == want.height > 0 and got.equals(want)
    assert any(k.startswith(f"state/{spec.hash}/facts/layer=merged/") for k in s3_bucket.keys())
