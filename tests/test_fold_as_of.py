"""Point-in-time answers: as_of (record time) equals the reference fold of the log prefix
(refold.fold.reference), whether the prefix ends at a tagged state version or past it."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from refold.fold.reference import reference_fold
from refold.fold.spec import FoldSpec
from tests.fold_helpers import canonical_edges, fact_event

SUBJECTS = ["Ann", "Bo", "Cy"]
RELATIONS = ["lives_in", "works_at", "likes", "located_in"]
OBJECTS = ["Oslo", "Rome", "Acme", "Tea", "Bo"]

fact = st.tuples(st.sampled_from(SUBJECTS), st.sampled_from(RELATIONS), st.sampled_from(OBJECTS),
                 st.integers(min_value=0, max_value=400), st.booleans())
batches = st.lists(st.lists(fact, min_size=1, max_size=4), min_size=1, max_size=5)


def _append(mem, batch):
    events = []
    for subject, relation, obj, day, retract in batch:
        e = fact_event(subject, relation, obj, day=day)
        if retract:
            e["kind"] = "retraction"
        events.append(e)
    mem.append(events)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, fold_after=st.integers(min_value=0, max_value=4))
@pytest.mark.slow
def test_as_of_version_equals_fold_of_prefix(tmp_path_factory, batches, fold_after):
    mem = refold.init(tmp_path_factory.mktemp("asof") / "store")
    for number, batch in enumerate(batches):
        _append(mem, batch)
        if number == fold_after:
            mem.fold()  # a tagged state version here; the later versions read through the overlay
    spec = FoldSpec()
    mem.fold()  # fills the cache for every event
    all_events = mem.events()
    extractions = mem.cache.get(spec.hash)
    head_version = mem.head().table_version
    for version in range(1, head_version + 1):
        prefix = [e for e in all_events if e.table_version <= version]
        fresh = reference_fold(spec, prefix, extractions)
        assert canonical_edges(mem.graph(as_of=version)) == canonical_edges(fresh.graph), version


def test_as_of_time_equals_as_of_version(mem):
    mem.append(fact_event("Ann", "lives_in", "Oslo", day=0))
    first = mem.head()
    mem.append(fact_event("Ann", "lives_in", "Rome", day=9))
    by_time = mem.facts(as_of=first.recorded_at)
    by_version = mem.facts(as_of=first.table_version)
    assert by_time.equals(by_version)
    assert by_time["object"].to_list() == ["Oslo"] and by_time["current"].to_list() == [True]
    assert mem.facts(as_of=first.recorded_at.isoformat())["object"].to_list() == ["Oslo"]
    now = mem.facts(subject="Ann").sort("valid_from")
    assert now["current"].to_list() == [False, True]


def test_as_of_before_anything_is_empty(mem):
    mem.append(fact_event("Ann", "lives_in", "Oslo", day=0))
    assert mem.facts(as_of=0).height == 0
