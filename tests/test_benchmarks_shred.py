"""benchmarks/shred_reads.py --quick runs and prints every step and its ratio line (no timing is
asserted: the machine is shared). Its own checks run too: the graph engine's read equals the
tables', and the fold that honours a destroyed key makes no extraction call."""

from __future__ import annotations

import re

from tests.bench_helpers import assert_timed_steps, run_quick


def test_shred_reads_benchmark_quick():
    out = run_quick("shred_reads.py")
    assert "shred-mode store, 2,000 events" in out
    assert_timed_steps(out, ("append", "fold", "read tables, median", "read graph engine, median",
                             "incremental: fold of 1% new", "destroy: first read (graph engine)",
                             "destroy: fold honouring the marker", "destroy: next read (tables)",
                             "erase: whole erasure", "erase: next read (tables)"))
    assert re.search(r"one subject's read: graph engine / state tables = [\d,]+x", out)
