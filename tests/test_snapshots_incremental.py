"""Incremental projection on a real store: extraction calls = new events, resume points, validity
of snapshots (position, erased events, half-written or damaged folders), as_of from snapshots,
no sharing between returned graphs and later folds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import refold
from refold.fold.spec import FoldSpec
from refold.folding import build_state
from refold.storage.snapshots import SnapshotStore
from tests.fold_helpers import canonical_graph, fact_event
from tests.snapshot_helpers import CountingRules

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


def _facts(n: int, start: int = 0) -> list[dict]:
    out = []
    for i in range(start, start + n):
        who = f"Person{i % 7}"
        if i % 3 == 0:
            out.append(fact_event(who, "lives_in", f"City{i % 5}", day=i))
        elif i % 3 == 1:
            out.append(fact_event(who, "works_at", f"Org{i % 4}", day=i))
        else:
            out.append(fact_event(f"Org{i % 4}", "located_in", f"City{i % 5}", day=i))
    return out


def _full_graph(mem) -> str:
    spec = FoldSpec(extractor="rules", extractor_version=CountingRules.version)
    return canonical_graph(build_state(spec, mem.events(), mem.cache.get(spec.hash)).graph)


@pytest.fixture
def mem(tmp_path):
    store = refold.init(tmp_path / "store")
    store.append(_facts(30))
    return store


def test_extraction_calls_equal_new_events_and_fold_resumes_from_a_snapshot(mem):
    ext = CountingRules()
    first = mem.fold(extractor=ext, snapshot_every=10)
    assert first.started_from == -1 and ext.calls == first.extraction_calls == 30
    snaps = SnapshotStore(mem.layout).list()
    assert [s.last_seq for s in snaps] == [9, 19, 29]  # every 10 events (seq 0 is the spec record)
    mem.append(_facts(5, start=30))

    ext = CountingRules()
    again = refold.Memory(mem.root).fold(extractor=ext, snapshot_every=10)  # a new process
    assert again.started_from == 29
    assert ext.calls == again.extraction_calls == 5
    assert again.events_folded == 36 and again.last_seq == 35
    assert canonical_graph(refold.Memory(mem.root).graph()) == _full_graph(mem)

    ext = CountingRules()
    full = refold.Memory(mem.root).fold(extractor=ext, full=True)
    assert full.started_from == -1 and ext.calls == full.extraction_calls == 0
    assert (full.facts, full.derived_facts) == (again.facts, again.derived_facts)


def test_same_process_folds_resume_from_their_own_state_and_never_touch_returned_graphs(mem):
    mem.fold(snapshot_every=0)
    graph_before = mem.graph()
    frozen = canonical_graph(graph_before)
    mem.append(_facts(6, start=30) + [fact_event("Person1", "lives_in", "City1", day=31)])
    ext = CountingRules()
    report = mem.fold(extractor=ext, snapshot_every=0)
    assert report.started_from == 30 and ext.calls == 7
    assert canonical_graph(graph_before) == frozen  # corroboration/supersession did not leak into it
    graph_after = mem.graph()
    assert canonical_graph(graph_after) == _full_graph(mem) != frozen
    assert not SnapshotStore(mem.layout).list()


def test_as_of_uses_the_newest_snapshot_at_or_before_the_prefix(mem):
    mem.fold(snapshot_every=10)
    versions = mem.head().table_version
    mem.append(_facts(12, start=30))
    mem.fold(snapshot_every=10)
    fresh = refold.Memory(mem.root)
    spec = fresh.current_spec()
    for version in range(1, mem.head().table_version + 1):
        state = fresh.state(as_of=version)
        prefix = [e for e in fresh.events() if e.table_version <= version]
        expected = build_state(spec, prefix, fresh.cache.get(spec.hash))
        assert canonical_graph(state.graph) == canonical_graph(expected.graph)
        if version >= versions:
            assert state.stats["resumed_from"] >= 9


def test_a_half_written_or_damaged_snapshot_is_never_used(mem):
    mem.fold(snapshot_every=10)
    store = SnapshotStore(mem.layout)
    newest = store.list()[-1]
    # a crashed writer's temporary folder and a folder whose manifest never got written
    spec_dir = Path(newest.path).parent
    shutil.copytree(newest.path, spec_dir / ".tmp-crashed")
    half = spec_dir / f"{40:012d}"
    shutil.copytree(newest.path, half)
    (half / "manifest.json").unlink()
    assert [s.last_seq for s in store.list()] == [9, 19, 29]
    # damage the newest: its digest no longer matches, so the fold falls back to the one before
    edges = Path(newest.path) / "edges-000.parquet"
    edges.write_bytes(edges.read_bytes()[:-20] + b"x" * 20)
    mem.append(_facts(2, start=30))
    report = refold.Memory(mem.root).fold(snapshot_every=0)
    assert report.started_from == 19
    assert canonical_graph(refold.Memory(mem.root).graph()) == _full_graph(mem)


def test_a_snapshot_whose_position_the_log_no_longer_has_is_skipped(mem):
    mem.fold(snapshot_every=10)
    store = SnapshotStore(mem.layout)
    newest = store.list()[-1]
    manifest = Path(newest.path) / "manifest.json"
    data = json.loads(manifest.read_text())
    data["link"] = "0" * 64  # as if the snapshot came from another log (or a rewritten one)
    manifest.write_text(json.dumps(data))
    report = refold.Memory(mem.root).fold(snapshot_every=0)
    assert report.started_from == 19


def test_snapshot_on_demand_and_cli(mem, tmp_path):
    from click.testing import CliRunner

    from refold.cli import main

    info = mem.snapshot()
    assert info is not None and info.last_seq == mem.head().seq and info.edges > 0
    assert mem.snapshot().path == info.path  # already there: the same one, nothing rewritten
    runner = CliRunner()
    mem.append(_facts(3, start=30))
    out = runner.invoke(main, ["snapshot", mem.root])
    assert out.exit_code == 0, out.output
    assert f"snapshot at seq {mem.head().seq}" in out.output
    listed = runner.invoke(main, ["snapshot", mem.root, "--list", "--json"])
    assert listed.exit_code == 0
    seqs = [json.loads(line)["last_seq"] for line in listed.output.splitlines()]
    assert seqs == [info.last_seq, mem.head().seq]
    pruned = runner.invoke(main, ["snapshot", mem.root, "--prune", "1", "--json"])
    assert pruned.exit_code == 0 and len(SnapshotStore(mem.layout).list()) == 1
