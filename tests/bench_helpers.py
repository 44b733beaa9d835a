"""Running a benchmark script's ``--quick`` mode from a test (no timing is ever asserted)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_quick(script: str, *args: str, timeout: int = 600) -> str:
    """The stdout of ``benchmarks/<script> --quick <args>``, asserting it exited 0."""
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--quick", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def assert_timed_steps(stdout: str, steps: Iterable[str]) -> None:
    """Each of ``steps`` is printed as ``  <step>  <seconds> s``."""
    for step in steps:
        assert re.search(rf"  {re.escape(step)} +\d+\.\d{{3}} s", stdout), (step, stdout)
