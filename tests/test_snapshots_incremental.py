"""Incremental folds on a real store: every fold leaves a tagged state version (the snapshot),
the next fold resumes from it and extracts only the new events, a full refold re-merges the
cache; reads as of every past log version answer from the newest tag at or before it (plus the
overlay); a graph a read returned is never changed by a later fold; the removed snapshot options
and ``Memory.snapshot`` (and ``refold snapshot``, ``--engine``) say in one line what replaces
them. Every state is held to the reference
fold of the same log (refold.fold.reference)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import refold
from refold.fold.errors import ValidationError
from tests.fold_helpers import canonical_edges, canonical_graph, fact_event, reference_of
from tests.snapshot_helpers import CountingRules


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


def _expected(mem) -> str:
    return canonical_graph(reference_of(mem).graph)


@pytest.fixture
def mem(tmp_path):
    store = refold.init(tmp_path / "store")
    store.append(_facts(30))
    return store


def test_extraction_calls_equal_new_events_and_the_fold_resumes_from_the_tag(mem):
    ext = CountingRules()
    first = mem.fold(extractor=ext)
    assert first.started_from == -1 and ext.calls == first.extraction_calls == 30
    tags = mem.state_store(mem.current_spec()).tags()
    assert [t.log_seq for t in tags] == [first.last_seq] == [mem.head().seq]  # (the spec record is the head)
    mem.append(_facts(5, start=30))

    ext = CountingRules()
    again = refold.open(mem.root).fold(extractor=ext)  # a new process
    assert again.started_from == first.last_seq
    assert ext.calls == again.extraction_calls == 5
    assert again.last_seq == mem.head().seq == first.last_seq + 5
    assert [t.log_seq for t in mem.state_store(mem.current_spec()).tags()] == [first.last_seq, again.last_seq]
    assert canonical_graph(refold.open(mem.root).graph()) == _expected(mem)

    ext = CountingRules()
    full = refold.open(mem.root).fold(extractor=ext, full=True)
    assert full.started_from == -1 and ext.calls == full.extraction_calls == 0
    assert (full.facts, full.derived_facts) == (again.facts, again.derived_facts)
    assert canonical_graph(refold.open(mem.root).graph()) == _expected(mem)


def test_a_fold_with_nothing_new_moves_nothing(mem):
    first = mem.fold()
    ext = CountingRules()
    again = refold.open(mem.root).fold(extractor=ext)
    assert (again.started_from, again.last_seq, ext.calls) == (first.last_seq, first.last_seq, 0)
    assert [t.log_seq for t in mem.state_store(mem.current_spec()).tags()] == [first.last_seq]


def test_same_process_folds_never_touch_returned_graphs(mem):
    mem.fold()
    graph_before = mem.graph()
    frozen = canonical_graph(graph_before)
    mem.append(_facts(6, start=30) + [fact_event("Person1", "lives_in", "City1", day=31)])
    ext = CountingRules()
    report = mem.fold(extractor=ext)
    assert ext.calls == 7
    assert canonical_graph(graph_before) == frozen  # corroboration/supersession did not leak into it
    graph_after = mem.graph()
    assert canonical_graph(graph_after) == _expected(mem) != frozen
    assert report.last_seq == mem.head().seq


def test_as_of_every_version_equals_the_reference_fold_of_that_prefix(mem):
    mem.fold()
    mem.append(_facts(6, start=30))
    mem.append(_facts(6, start=36))
    mem.fold()
    mem.append(_facts(4, start=42))  # after the last tag: the overlay
    fresh = refold.open(mem.root)
    events = fresh.events()
    for version in range(1, mem.head().table_version + 1):
        prefix = [e for e in events if e.table_version <= version]
        expected = reference_of(fresh, events=prefix).graph
        assert canonical_edges(fresh.graph(as_of=version)) == canonical_edges(expected), version
        state = fresh.state(as_of=version)
        assert state.last_seq == prefix[-1].seq and canonical_edges(state.graph) == canonical_edges(expected)


@pytest.mark.parametrize("option", [{"snapshot_every": 10}, {"snapshot_keep": 2}, {"engine": "graph"}])
def test_a_removed_fold_option_is_refused_in_one_line_naming_what_replaces_it(mem, option):
    with pytest.raises(ValidationError) as caught:
        mem.fold(**option)
    message = str(caught.value)
    assert next(iter(option)) in message and "\n" not in message
    assert mem.state_store(mem.current_spec()).tag() is None  # nothing was folded


def test_memory_snapshot_is_refused_in_one_line_naming_the_fold(mem):
    with pytest.raises(ValidationError, match=r"mem\.fold\(\)") as caught:
        mem.snapshot()
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("args, replacement", [(["snapshot", "{root}"], "refold fold"),
                                               (["fold", "{root}", "--engine", "graph"], "--engine"),
                                               (["snapshot", "{root}", "--list"], "refold fold")])
def test_the_removed_cli_command_and_flag_are_refused_in_one_line(mem, args, replacement):
    cli = str(Path(sys.executable).with_name("refold"))
    done = subprocess.run([cli, *(a.format(root=mem.root) for a in args)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and replacement in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # (as every refold error: one line)
    assert mem.state_store(mem.current_spec()).tag() is None
