"""The interleaved-erasure benchmark keeps working: it runs once in --quick mode and prints both
cases and its correctness line (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_erasure_interleaved_benchmark_quick():
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "erasure_interleaved.py"), "--quick"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    for case in ("interleaved", "contiguous "):
        assert re.search(rf"{case}: erased 60 of 120 turns: whole erasure \d+\.\d+ s, "
                         rf"tombstone commit \d+\.\d+ s \(best of 1\)", done.stdout), done.stdout
    assert re.search(r"ratio interleaved / contiguous \(whole erasure\): \d+\.\dx; verify ok, "
                     r"nothing of A readable: yes", done.stdout)
