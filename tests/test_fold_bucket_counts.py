"""A full fold at the same log position with another bucket count, and back, reads right: the
items a run wrote are reused only while no other run has rewritten them since."""

from __future__ import annotations

import refold
from tests.fold_helpers import canonical_graph, fact_event
from tests.test_fold_state import _log, _reference, _state_graph


def test_a_full_fold_back_to_an_earlier_bucket_count_rewrites_what_another_count_wrote(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_log(80) + [fact_event("Maria Santos", "lives_in", "Lisbon", day=90)])
    mem.fold(full=True, buckets=64)
    expected = mem.facts(subject="Maria Santos", current_only=True)
    assert expected.height == 1
    mem.fold(full=True, buckets=8)  # no event appended in between: the same log position
    again = refold.open(mem.root)
    again.fold(full=True, buckets=64)
    fresh = refold.open(mem.root)
    assert fresh.facts(subject="Maria Santos", current_only=True)["fact_id"].to_list() == expected["fact_id"].to_list()
    assert canonical_graph(_state_graph(fresh)) == canonical_graph(_reference(tmp_path / "store"))


def test_a_full_fold_without_a_count_keeps_the_states_count(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_log(40))
    mem.fold(full=True, buckets=8)
    mem.fold(full=True)
    assert mem.state_store(mem.current_spec()).tag().buckets == 8
    mem.fold(full=True, buckets=16)
    assert refold.open(mem.root).state_store(mem.current_spec()).tag().buckets == 16
