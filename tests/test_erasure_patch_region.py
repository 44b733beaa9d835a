"""The erasure patch's region selection (the row helpers of refold.erasing.region): the
row masks it builds over dictionary-encoded columns (tested on the dictionary, then per row by
index) equal a plain membership test, with nulls, empty chunks and chunks of different
dictionaries."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from refold.erasing.region import cut as cut_rows, isin, list_hits

value = st.one_of(st.none(), st.sampled_from(["a", "b", "c", "é"]))


@settings(max_examples=200, deadline=None)
@given(values=st.lists(value, max_size=30), cuts=st.lists(st.integers(min_value=0, max_value=30), max_size=4),
       wanted=st.lists(st.sampled_from(["a", "b", "é", "z"]), max_size=3))
def test_isin_on_dictionary_chunks_equals_plain_membership(values, cuts, wanted):
    arr = pa.array(values, pa.string())
    points = sorted({0, len(values), *(c for c in cuts if c <= len(values))})
    chunks = [arr.slice(a, b - a) for a, b in zip(points, points[1:])]
    expected = np.array([v is not None and v in wanted for v in values], dtype=bool)
    dictionary = pa.chunked_array([c.dictionary_encode() for c in chunks], pa.dictionary(pa.int32(), pa.string()))
    for column in (arr, pa.chunked_array(chunks, pa.string()), dictionary):
        got = isin(column, wanted)
        assert got.dtype == bool and got.tolist() == expected.tolist()
    assert isin(dictionary, pa.array(wanted, pa.string()).dictionary_encode()).tolist() == expected.tolist()


@settings(max_examples=100, deadline=None)
@given(n=st.integers(min_value=0, max_value=40), drop=st.sets(st.integers(min_value=0, max_value=39)))
def test_cut_leaves_out_exactly_the_rows_given(n, drop):
    table = pa.table({"i": list(range(n))})
    rows = np.array(sorted(d for d in drop if d < n), dtype=np.int64)
    assert cut_rows(table, rows)["i"].to_pylist() == [i for i in range(n) if i not in drop]


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), st.lists(st.sampled_from("abcd"), max_size=3)), max_size=20),
       cut=st.integers(min_value=0, max_value=20), wanted=st.lists(st.sampled_from("abz"), max_size=2))
def test_list_hits_by_chunk_equals_plain_membership(rows, cut, wanted):
    arr = pa.array(rows, pa.list_(pa.string()))
    cut = min(cut, len(rows))
    column = pa.chunked_array([arr.slice(0, cut), arr.slice(cut)], arr.type)
    expected = [r is not None and any(x in wanted for x in r) for r in rows]
    assert list_hits(column, pa.array(wanted, pa.string())).tolist() == expected
