"""The erasure plan reads the log's small list columns to find a subject's events, then the plan's
columns only from the files holding them: same rows as a read of the whole log."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

import refold
from refold.erasure.planning import PLAN_COLUMNS, plan_rows
from refold.storage.delta.io import seq_spans
from tests.fold_helpers import fact_event


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=200), st.integers(1, 40))
def test_seq_spans_cover_every_seq_in_at_most_so_many_sorted_ranges(seqs, most):
    spans = seq_spans(seqs, most=most)
    assert len(spans) <= most and all(a <= b for a, b in spans)
    assert all(spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1))
    assert all(any(a <= s <= b for a, b in spans) for s in seqs)
    assert all(a in seqs and b in seqs for a, b in spans)  # (no range starts or ends outside them)


def test_the_plan_rows_equal_a_filter_of_the_whole_log(tmp_path):
    mem = refold.init(tmp_path / "store")
    for batch in range(6):  # several data files
        mem.append([fact_event(f"P{i}", "lives_in", "Oslo", day=i, subjects=[f"s-{i % 7}"] + (["s-x"] if i % 9 == 0 else []))
                    for i in range(batch * 30, batch * 30 + 30)])
    whole = pl.from_arrow(mem.log_store.arrow(columns=PLAN_COLUMNS))
    for subject in ("s-x", "s-3", "s-none"):
        expected = whole.filter(pl.col("subjects").list.contains(subject)).to_dicts()
        assert plan_rows(mem.log_store, [subject]) == expected, subject
