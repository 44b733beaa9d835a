"""benchmarks/erase_one.py --quick erases three subjects one after the other on a copy of a folded
store, refolds another copy from the cache, and measures plain deltalake's floor, each in a fresh
process; it prints each step with the receipt's timings and the ratios against issue #35's targets
(no time is asserted: the machine is shared). Every erasure makes 0 extraction calls."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
def test_erase_one_benchmark_quick():
    out = run_quick("erase_one.py")
    for n in ("2,000", "6,000"):
        assert f"erase one subject: {n} events" in out, out
    assert len(re.findall(r"^  refold from cache  \d+\.\d{3} s$", out, re.M)) == 2, out
    erasures = re.findall(r"^  erase [123]  \d+\.\d{3} s  \((\d+) events, (\d+) extraction calls; \w+ [\d.]+", out, re.M)
    assert len(erasures) == 6 and all(int(e) > 0 and c == "0" for e, c in erasures), out
    assert len(re.findall(r"^  floor  \d+\.\d{3} s  \(log [\d.]+, cache [\d.]+, state items [\d.]+; [1-9]\d* events, [1-9]\d* data files rewritten\)$",
                          out, re.M)) == 2, out
    assert len(re.findall(r"refold / later erasure [\d.]+x \(target >= 10x: (met|not met)\); later erasure / floor "
                          r"[\d.]+x", out)) == 2, out
    assert re.search(r"^growth 2,000 -> 6,000: refold [\d.]+x, later erasure [\d.]+x \(target <= 2x: (met|not met)\)$",
                     out, re.M), out
