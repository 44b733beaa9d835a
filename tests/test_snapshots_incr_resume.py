"""A fold resumes from the state tables' tag (the snapshot) only when the log still holds the tag's
position: the first event it reads is the tag's own seq, whose link must be the tag's. A tag from
another (or a rewritten) log is not resumed: the fold refolds in full, and so does a read (the
overlay of the whole log on an empty state). Real stores in tmp_path."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import refold
from tests.fold_helpers import canonical_edges, canonical_graph, fact_event, reference_of


def _facts(n: int, start: int = 0, *, city: str = "City") -> list[dict]:
    return [fact_event(f"Person{i % 7}", "lives_in", f"{city}{i % 5}", day=i) if i % 2 else
            fact_event(f"Org{i % 3}", "located_in", f"{city}{i % 4}", day=i) for i in range(start, start + n)]


def _expected(mem) -> str:
    return canonical_graph(reference_of(mem).graph)


def test_a_tag_whose_link_the_log_does_not_chain_to_is_not_resumed(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_facts(30))
    first = mem.fold()
    store = mem.state_store(mem.current_spec())
    store.set_tag(dataclasses.replace(store.tag(), log_link="0" * 64))  # as if from another log
    mem.append(_facts(3, start=30))
    reader = refold.open(mem.root)  # a read before the fold: the whole log overlaid, the same answer
    assert canonical_edges(reader.graph()) == canonical_edges(reference_of(mem).graph)
    fresh = refold.open(mem.root)
    report = fresh.fold()
    assert report.started_from == -1 and report.extraction_calls == 3  # a full refold: the rest from the cache
    assert report.last_seq == first.last_seq + 3
    assert canonical_graph(fresh.graph()) == _expected(mem)
    mem.append(_facts(2, start=33))  # an intact tag with events after it is resumed
    again = refold.open(mem.root).fold()
    assert again.started_from == report.last_seq and again.extraction_calls == 2
    assert canonical_graph(refold.open(mem.root).graph()) == _expected(mem)


def test_a_fold_is_not_resumed_on_a_log_replaced_by_a_longer_one(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_facts(20))
    assert mem.fold().started_from == -1
    other = refold.init(tmp_path / "other")
    other.append(_facts(25, city="Town"))  # another log: same length and more, other chain
    shutil.rmtree(Path(mem.layout.events))
    shutil.copytree(Path(other.layout.events), Path(mem.layout.events))
    report = mem.fold()
    assert report.started_from == -1 and report.last_seq == mem.head().seq
    assert canonical_graph(mem.graph()) == _expected(mem)
    mem.append(_facts(2, start=100, city="Town"))  # and on that log, the next fold resumes again
    assert mem.fold().started_from == report.last_seq
    assert canonical_graph(mem.graph()) == _expected(mem)
