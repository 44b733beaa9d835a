"""The erasure-backfill benchmark keeps working: it runs once in --quick mode and prints both
times, the extraction calls and its correctness line (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
def test_erasure_backfill_benchmark_quick():
    out = run_quick("erasure_backfill.py")
    assert re.search(r"erase 5 subjects: one batch \d+\.\d+ s, one by one \d+\.\d+ s; ratio \d+\.\dx",
                     out), out
    assert "extraction calls: batch 0, one by one 0" in out
    assert "same facts: yes; verify ok: yes; names left: none" in out
