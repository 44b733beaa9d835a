"""benchmarks/shred_reads.py --quick runs and prints every step and its ratio line (no timing is
asserted: the machine is shared). Its own checks run too: the graph engine's read equals the
tables', and the fold that honours a destroyed key makes no extraction call."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_shred_reads_benchmark_quick():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "shred_reads.py"), "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "shred-mode store, 2,000 events" in done.stdout
    for step in ("append", "fold", "read tables, median", "read graph engine, median", "incremental: fold of 1% new",
                 "destroy: first read (graph engine)", "destroy: fold honouring the marker",
                 "destroy: next read (tables)", "erase: whole erasure", "erase: next read (tables)"):
        assert re.search(rf"  {re.escape(step)} +\d+\.\d{{3}} s", done.stdout), (step, done.stdout)
    assert re.search(r"one subject's read: graph engine / state tables = [\d,]+x", done.stdout)
