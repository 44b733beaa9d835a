"""Snapshots (tagged state versions) and erasure: after an erasure the state tables' only tagged
version is the one the erasure wrote, it holds no erased event, the next fold resumes from it
and re-merges nothing from a model (no extraction call), and a Memory that read the erased
subject's facts before another process erased them no longer shows them. The state equals the
reference fold of the log without the subject's events. Real stores in tmp_path."""

from __future__ import annotations

import pytest

import refold
from tests.fold_helpers import canonical_graph, fact_event, reference_of, without_subjects
from tests.snapshot_helpers import CountingRules

X = "s-x"
X_IDS = {"x-0", "x-1", "x-2", "x-3", "x-move"}


def _others(n: int, start: int = 0) -> list[dict]:
    return [fact_event(f"Person{i % 5}", "lives_in" if i % 2 else "works_at",
                       f"Place{i % 6}" if i % 2 else f"Org{i % 3}", day=i) for i in range(start, start + n)]


def _x_events() -> list[dict]:
    return [fact_event("Xavier Quill", "likes", f"quillberry{i}", day=60 + i, event_id=f"x-{i}", subjects=[X])
            for i in range(4)] + [fact_event("Xavier Quill", "lives_in", "Place1", day=70, event_id="x-move",
                                             subjects=[X])]


@pytest.fixture
def mem(tmp_path):
    """seq 0-49: others; the spec; X's five events; others. Folded twice (two tagged versions)."""
    store = refold.init(tmp_path / "store")
    store.append(_others(50))
    store.fold()
    store.append(_x_events())
    store.append(_others(9, start=50))
    store.fold()
    assert len(store.state_store(store.current_spec()).tags()) >= 2
    return store


def _expected(mem, events) -> str:
    return canonical_graph(reference_of(mem, events=without_subjects(events, [X])).graph)


def test_the_erasures_state_version_is_the_only_one_and_the_next_fold_extracts_nothing(mem):
    events = mem.events()
    mem.erase(X)
    store = mem.state_store(mem.current_spec())
    tags = store.tags()
    assert len(tags) == 1 and tags[0] == store.tag()  # older versions held X and were vacuumed
    assert not set(store.read("items", columns=["event_id"])["event_id"].to_pylist()) & X_IDS
    ext = CountingRules()
    fresh = refold.open(mem.root)
    report = fresh.fold(extractor=ext)
    assert report.extraction_calls == ext.calls == 0
    assert report.started_from == tags[0].log_seq  # resumed from the erasure's state version
    graph = refold.open(mem.root).graph()
    assert canonical_graph(graph) == _expected(mem, events)
    assert not [d for *_, d in graph.edges(data=True) if set(d["sources"]) & X_IDS]


def test_a_memory_that_read_x_before_another_process_erased_x_no_longer_shows_x(mem):
    events = mem.events()
    assert mem.facts(subject="Xavier Quill").height  # this Memory now keeps a read of X's facts
    refold.open(mem.root).erase(X)  # another process's erasure
    assert mem.facts(subject="Xavier Quill").height == 0
    assert canonical_graph(mem.graph()) == _expected(mem, events)
    ext = CountingRules()
    assert mem.fold(extractor=ext).extraction_calls == ext.calls == 0
    assert canonical_graph(mem.graph()) == _expected(mem, events)
