"""benchmarks/agent_reads.py --quick runs and prints every step and its ratio line (no timing is
asserted: the machine is shared). Its own check runs too: each round, the warm Memory's read
(its overlay advanced by the appended event) equals a fresh Memory's (the whole tail's overlay)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import assert_timed_steps, run_quick


@pytest.mark.slow
def test_agent_reads_benchmark_quick():
    out = run_quick("agent_reads.py")
    assert "store of 2,000 events, 20 unfolded" in out
    assert_timed_steps(out, ("append", "fold", "first read (whole tail)", "warm read, log unmoved",
                             "after append, median", "made again, median"))
    assert re.search(r"read after an append: made again / advanced = [\d,.]+x", out)
