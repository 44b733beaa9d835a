"""benchmarks/one_engine_reads.py --quick runs the reads that used to fall back to a whole-store
graph (an as_of read at the previous fold's position, a principal's read, a shred-mode read after a
key destroyed outside an erasure), each in a fresh process, and prints each against issue #33's
target and against an ordinary read of the same run (no timing or memory is asserted: the machine
is shared). Its own checks run too: the as_of read holds nothing recorded after that fold, the
principal's read equals the ordinary one, and the destroyed owner's facts are gone."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
def test_one_engine_reads_benchmark_quick():
    out = run_quick("one_engine_reads.py")
    assert "one engine reads: 5,000 events" in out, out
    for label in ("ordinary read of one subject", r"\(a\) as_of the first fold's head", r"\(b\) a principal's read",
                  r"shred: ordinary read \(unchanged store\)", r"\(c\) shred: read after a destroyed key"):
        assert re.search(rf"^  {label} +\d+\.\d{{3}} +\d+\.\d{{3}} +\d+\.\d{{2}} +\d+\.\d{{2}} +[1-9]\d*$", out, re.M), (label, out)
    for label in (r"\(a\) as_of read", r"\(b\) principal's read", r"\(c\) shred-mode read after a destroyed key"):
        assert re.search(rf"^{label}: \d+\.\d{{3}} s \(target <= 1 s: (met|not met)\), peak RSS \d+\.\d{{2}} GiB "
                         rf"\(target <= 0\.6 GiB: (met|not met)\); / ordinary read [\d.]+x time, [\d.]+x peak RSS$",
                         out, re.M), (label, out)
    checks = re.search(r"^checks: (.*)$", out, re.M)
    assert checks and checks.group(1).count(": yes") == 4 and "NO" not in checks.group(1), out
    assert "graph engine" not in out
