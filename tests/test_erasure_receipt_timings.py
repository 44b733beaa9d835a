"""A receipt says what each step cost: the residue scan (the proof) apart from the work, so a
data-protection officer sees both for every request; a reopened receipt says the same."""

from __future__ import annotations

import refold
from refold.erasure.procedure import STEPS
from refold.erasure.receipts import load_receipt, receipt_path
from tests.fold_helpers import fact_event


def test_the_receipt_times_every_step_and_the_scan_apart(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([fact_event("Quillon Varga", "lives_in", "Oslo", day=1, subjects=["s-x"]),
                fact_event("Ada Byron", "lives_in", "Rome", day=2)])
    mem.fold()
    mem.register_subject("s-x", "Quillon Varga")
    receipt = mem.erase("s-x")
    timings = dict(receipt.timings)
    assert set(timings) == (set(STEPS) - {"receipt"}) | {"total"}
    assert all(isinstance(v, float) and v >= 0 for v in timings.values())
    assert abs(timings["total"] - sum(v for k, v in timings.items() if k != "total")) < 0.01
    assert timings["scan"] > 0  # a registry entry: the residue scan read the store
    assert dict(load_receipt(receipt_path(mem.layout, receipt.erasure_id)).timings) == timings
