"""benchmarks/shred_reads.py --quick runs and prints every step and its ratio line (no timing is
asserted: the machine is shared). Its own checks run too: a key destroyed outside an erasure takes
the subject's facts out of the next read at once (the state tables at their tag, the marked owner's
rows left out by the read) and after the fold that honours it, which makes no extraction call."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import assert_timed_steps, run_quick


@pytest.mark.slow
def test_shred_reads_benchmark_quick():
    out = run_quick("shred_reads.py")
    assert "shred-mode store, 2,000 events" in out
    assert_timed_steps(out, ("append", "fold", "read tables, first", "read tables, median",
                             "incremental: fold of 1% new", "destroy: first read (marker not yet folded)",
                             "destroy: fold honouring the marker", "destroy: next read (tables)",
                             "erase: whole erasure", "erase: next read (tables)"))
    assert "graph engine" not in out
    assert re.search(r"one subject's read: first read after a destroyed key / ordinary read = [\d,]+\.\dx", out)
    checks = re.search(r"checks: (.*)", out)
    assert checks and checks.group(1).count(": yes") == 5 and "NO" not in checks.group(1), out
