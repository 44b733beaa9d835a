"""benchmarks/serve.py --quick runs and reports what it promises (no timing is asserted)."""

from __future__ import annotations

import json

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.search
@pytest.mark.slow
def test_serve_benchmark_quick():
    result = json.loads(run_quick("serve.py", "--json").strip().splitlines()[-1])
    assert (result["facts"], result["queries"], result["cli_calls"], result["embedder"]) == (100, 10, 2, "hashing")
    assert result["server_median_ms"] > 0 and result["cli_median_ms"] > 0
    assert result["ratio"] == result["cli_median_ms"] / result["server_median_ms"]
