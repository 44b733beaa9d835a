"""benchmarks/search.py --quick runs and reports what it promises (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
@pytest.mark.search
def test_search_benchmark_quick():
    result = json.loads(run_quick("search.py", "--json").strip().splitlines()[-1])
    assert result["n"] == 10_000
    rows = {(r["backend"], r["filter"]): r for r in result["rows"]}
    assert set(rows) == {("flat", "unfiltered"), ("flat", "keep 50%"), ("flat", "keep 1%"), ("hnsw", "unfiltered"),
                         ("hnsw", "keep 50%"), ("hnsw", "keep 1%"), ("hnsw", "keep 1% forced")}
    assert all(r["ratio_vs_unfiltered"] > 0 for r in rows.values())
    # exact strategies are exact; the automatic switch turns HNSW's restrictive-filter case exact
    for key in (("flat", "unfiltered"), ("flat", "keep 50%"), ("flat", "keep 1%"), ("hnsw", "keep 1%")):
        assert rows[key]["recall_at_k"] == 1.0 and rows[key]["empty_slots"] == 0
    assert rows[("hnsw", "keep 1%")]["strategy"] == "exact-subset"
    assert rows[("flat", "keep 50%")]["strategy"] == "flat+selector"
    assert "hnsw+selector" in rows[("hnsw", "keep 1% forced")]["strategy"]
    assert rows[("hnsw", "keep 1% forced")]["recall_at_k"] < 1.0
