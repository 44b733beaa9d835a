"""benchmarks/serve.py --quick runs and reports what it promises (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "serve.py"


def test_serve_benchmark_quick():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert (result["facts"], result["queries"], result["cli_calls"], result["embedder"]) == (100, 10, 2, "hashing")
    assert result["server_median_ms"] > 0 and result["cli_median_ms"] > 0
    assert result["ratio"] == result["cli_median_ms"] / result["server_median_ms"]
