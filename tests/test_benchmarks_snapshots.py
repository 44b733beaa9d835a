"""The snapshot benchmarks keep working: each runs once in --quick mode and prints its ratio lines
and its correctness checks (no timing is asserted: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick

RATIO = r"\d+\.\dx wall, \d+\.\dx CPU"


@pytest.mark.slow
def test_incremental_benchmark_quick():
    out = run_quick("incremental.py")
    assert "extraction calls == new events exactly: in-process yes, new process yes (20 per fold)" in out
    assert re.search(rf"ratio full refold / incremental in-process: {RATIO} \(target >= 50x\)", out)
    assert re.search(rf"ratio full refold / incremental new process: {RATIO}", out)
    assert re.search(r"2000 extraction calls", out)  # the from-scratch baseline really extracts


@pytest.mark.slow
def test_erasure_refold_benchmark_quick():
    out = run_quick("erasure_refold.py")
    assert out.count("extraction calls 0 everywhere: yes; patched state == full rebuild: yes") == 2
    assert re.search(rf"ratio full rebuild / erasure refold \(near the end\): {RATIO} \(target >= 20x\)", out)
    assert re.search(rf"ratio full rebuild / erasure refold \(spread over the log\): {RATIO}", out)
    assert re.search(rf"ratio full rebuild \+ digest / patch \+ refold step \(near the end\): {RATIO}", out)
    assert re.search(r"whole erasure end to end: \d+\.\d+ s \(previous path: \d+\.\d+ s\)", out)
    near = re.search(r"subject s-x .* first at seq (\d+)(?:.*\n)*?.*resumes from seq (-?\d+)", out)
    assert near and int(near.group(2)) > int(near.group(1))  # resumed from the patched snapshot, after X


@pytest.mark.slow
def test_snapshot_load_benchmark_quick():
    out = run_quick("snapshot_load.py")
    assert "same graph from both: yes" in out
    assert re.search(rf"ratio JSON / snapshot load: {RATIO} \(target >= 3x\)", out)
