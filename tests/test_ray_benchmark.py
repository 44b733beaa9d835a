"""benchmarks/extract_ray.py --quick keeps working (numbers are printed, never asserted)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "extract_ray.py"


def test_quick_run_prints_every_mode(capsys):
    spec = importlib.util.spec_from_file_location("extract_ray_bench", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # in this process: the session's Ray runtime is reused, not a second one started
    assert bench.main(["--quick", "--events", "24", "--actors", "2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    modes = [row["mode"] for row in result["rows"]]
    assert modes == ["in-process", "ray pool of 2", "resume (ray pool of 2)"]
    assert [row["extracted"] for row in result["rows"]] == [24, 24, 12]
    assert all(row["vs_in_process"] > 0 for row in result["rows"])
