"""benchmarks/proofs.py --quick builds a store, makes and checks proofs warm and in fresh processes,
measures what keeping the Merkle tree adds to a 1k-event append, and rebuilds the tree from the log,
printing each against issue #36's targets as met or MISSED (no timing is asserted: the machine is
shared and noisy)."""

from __future__ import annotations

import re

import pytest

from tests.bench_helpers import run_quick


@pytest.mark.slow
def test_proofs_benchmark_quick():
    out = run_quick("proofs.py")
    assert "proofs: 20,000 events" in out, out
    for label in ("inclusion, whole log", "inclusion, older size", "consistency"):
        assert re.search(rf"^warm {re.escape(label)} +median +\d+\.\d ms, max +\d+\.\d ms  "
                         r"\(target <= 100 ms: (met|MISSED)\)$", out, re.M), (label, out)
    for label in ("inclusion", "consistency"):
        assert re.search(rf"^fresh {label} +\d+\.\d{{3}} s  \(target <= 2 s: (met|MISSED)\); `refold proof verify` "
                         r"\d+\.\d{3} s: ok: ", out, re.M), (label, out)
    assert re.search(r"^append: the tree adds -?\d+\.\d% to a 1k-event append \(target <= 10%: (met|MISSED)\)$",
                     out, re.M), out
    assert re.search(r"^rebuild: the first proof without merkle/ \d+\.\d\d s", out, re.M), out
