"""benchmarks/append.py --quick runs and prints what it promises (no timing is asserted: the
machine is shared and noisy, so speed is reported as ratios and floors met or missed, not tested)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick

WORKLOADS = ("single", "batch=10", "batch=100", "batch=1k", "batch=10k")


@pytest.mark.slow
def test_append_benchmark_quick(tmp_path):
    out = run_quick("append.py", "--dir", str(tmp_path))
    for workload in WORKLOADS:
        for baseline in ("parquet", "sqlite"):
            match = re.search(rf"^ratio refold/{baseline} {re.escape(workload)}: (\d+\.\d+)x", out, re.M)
            assert match, f"no {baseline} ratio for {workload}:\n{out}"
            assert float(match.group(1)) > 0
    assert re.search(r"^ratio refold/parquet batch=1k: .*\(target <= 2\.5x: (met|MISSED)\)", out, re.M), out
    floors = re.findall(r"floors: SHA-256 x3 per event alone +(\d+\.\d+) ms with hashlib; "
                        r"pyarrow writing .* (\d+\.\d+) ms", out)
    assert len(floors) == 2 and all(float(x) > 0 for row in floors for x in row), out  # 1k and 10k
    for ratio in ("refold/sqlite", "refold-group/sqlite", "refold-group/refold"):
        assert re.search(rf"^ratio {ratio} 8threads: \d+\.\d+x", out, re.M), out
    assert re.search(r"group commit .*\((\d+) commits", out)
    assert re.search(r"^floor single-event append median: \d+\.\d+ ms  \(floor <= 30 ms: (met|MISSED)\)",
                     out, re.M), out
    assert re.search(r"^floor group commit 8threads: [\d,]+ events/s  \(floor >= 500 events/s with 8 threads: "
                     r"(met|MISSED)\)", out, re.M), out
    assert re.search(r"^ratio shred/delete append: \d+\.\d+x, per run \(median\) \d+\.\d+x  "
                     r"\(target <= 3x: (met|MISSED)\); CPU time \d+\.\d+x$", out, re.M), out
    assert re.search(r"shred mode .*\(([\d,]+) subject keys made\)", out), out
    assert list(tmp_path.iterdir()) == []  # the work folder is cleaned up
