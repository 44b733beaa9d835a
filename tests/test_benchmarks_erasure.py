"""The interleaved-erasure benchmark keeps working: it runs once in --quick mode and prints both
cases and its correctness line (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
def test_erasure_interleaved_benchmark_quick():
    out = run_quick("erasure_interleaved.py")
    for case in ("interleaved", "contiguous "):
        assert re.search(rf"{case}: erased 60 of 120 turns: whole erasure \d+\.\d+ s, "
                         rf"tombstone commit \d+\.\d+ s \(best of 1\)", out), out
    assert re.search(r"ratio interleaved / contiguous \(whole erasure\): \d+\.\dx; verify ok, "
                     r"nothing of A readable: yes", out)
