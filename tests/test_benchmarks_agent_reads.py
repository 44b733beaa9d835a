"""benchmarks/agent_reads.py --quick runs and prints every step and its ratio line (no timing is
asserted: the machine is shared). Its own check runs too: each round, the warm Memory's read
(its overlay advanced by the appended event) equals a fresh Memory's (the whole tail's overlay)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_agent_reads_benchmark_quick():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "agent_reads.py"), "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "store of 2,000 events, 20 unfolded" in done.stdout
    for step in ("append", "fold", "first read (whole tail)", "warm read, log unmoved", "after append, median",
                 "made again, median"):
        assert re.search(rf"  {re.escape(step)} +\d+\.\d{{3}} s", done.stdout), (step, done.stdout)
    assert re.search(r"read after an append: made again / advanced = [\d,.]+x", done.stdout)
