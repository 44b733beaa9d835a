"""The erasure-backfill benchmark keeps working: it runs once in --quick mode and prints both
times, the extraction calls and its correctness line (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_erasure_backfill_benchmark_quick():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "erasure_backfill.py"), "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"erase 5 subjects: one batch \d+\.\d+ s, one by one \d+\.\d+ s; ratio \d+\.\dx",
                     done.stdout), done.stdout
    assert "extraction calls: batch 0, one by one 0" in done.stdout
    assert "same facts: yes; verify ok: yes; names left: none" in done.stdout
