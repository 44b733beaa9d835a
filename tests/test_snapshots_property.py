"""Folds resumed from tagged state versions equal the reference fold (hypothesis over random logs
and fold points, on real stores: Delta log, extraction cache, state tables).

Batches of facts are appended, with a fold (in another Memory, as another process would) after
some of them; a fresh Memory's fold then resumes from the newest tag and extracts nothing, and
the state it reads equals the reference fold of the whole log (refold.fold.reference), every
node and edge attribute compared, after roll-ups. (The pure core's version of this, at many
more examples: tests/test_fold_partition.py.)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import refold
from tests.fold_helpers import canonical_graph, fact_event, reference_of
from tests.snapshot_helpers import OBJECTS, RELATIONS

fact_step = st.tuples(st.sampled_from(["Ann", "Bo", "Acme"]), st.sampled_from(RELATIONS),
                      st.sampled_from(OBJECTS), st.integers(min_value=0, max_value=90))
batches = st.lists(st.lists(fact_step, min_size=1, max_size=5), min_size=2, max_size=5)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=batches, fold_after=st.data())
@pytest.mark.slow
def test_store_folds_resumed_from_tags_equal_the_reference_fold(batches, fold_after):
    with tempfile.TemporaryDirectory() as tmp:
        mem = refold.init(Path(tmp) / "store")
        for number, batch in enumerate(batches):
            mem.append([fact_event(s, r, o, day=d) for s, r, o, d in batch])
            if fold_after.draw(st.booleans(), label=f"fold after batch {number}"):
                refold.Memory(mem.root).fold()
        mem.fold()
        fresh = refold.Memory(mem.root)  # a new process's view: only the tables on disk
        report = fresh.fold()
        assert report.extraction_calls == 0
        tags = mem.state_store(mem.current_spec()).tags()
        assert report.started_from == tags[-1].log_seq == mem.head().seq
        expected = canonical_graph(reference_of(mem).graph)
        assert canonical_graph(fresh.state().graph) == expected
        assert canonical_graph(refold.Memory(mem.root).graph()) == expected
