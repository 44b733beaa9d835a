"""The receipt's derived-store steps say what was done, consistently with the plan: the state
tables' purge names the item rows it removed per spec (none for events no fold reached: the
plan's impact counts their facts from the read overlay, and the refold leaves them out), the
extraction cache the rows it deleted, and in shred mode the residue sweep its owners. No step
names a snapshot: the state tables are the only derived state."""

from __future__ import annotations

import json

import refold
from tests import erasure_helpers as H
from tests.fold_helpers import fact_event


def _by_store(entries) -> dict[str, dict]:
    return {e["store"]: e for e in entries}


def test_delete_receipt_names_the_item_rows_the_state_purge_removed(tmp_path):
    mem = H.build(tmp_path / "s")
    spec = mem.current_spec().hash
    plan = _by_store(mem.erase(H.X, dry_run=True).derived)
    receipt = mem.erase(H.X)
    steps = _by_store(receipt.purged)
    assert set(steps) == {"extractions", "state"}
    assert steps["extractions"]["rows"] == len(H.X_EVENT_IDS) - 1  # (the untagged mention stays)
    assert steps["state"]["detail"] == [f"state/{spec}: {steps['state']['rows']} item row(s) removed"]
    assert steps["state"]["rows"] == 12  # one fact item per tagged event of X
    assert plan["state"]["detail"][0].startswith("12 fact(s) removed")
    assert "snapshot" not in json.dumps(receipt.as_json()["purged"])


def test_events_no_fold_reached_are_counted_by_the_plan_and_removed_by_none(tmp_path):
    mem = refold.init(tmp_path / "s")
    mem.append([fact_event("Yolanda", "visited", "Oslo", day=1, subjects=["s-y"])])
    mem.fold()
    mem.append([fact_event("Quillon", "likes", "tea", day=2, subjects=["s-x"])])  # after the tag
    plan = _by_store(mem.erase("s-x", dry_run=True).derived)
    assert plan["state"]["detail"][0] == "1 fact(s) removed: 1 current, 0 historical"
    receipt = mem.erase("s-x")
    steps = _by_store(receipt.purged)
    assert steps["state"]["rows"] == 0 and steps["state"]["detail"][0].endswith(": 0 item row(s) removed")
    fresh = refold.open(mem.root, create=False)
    assert fresh.facts(subject="Quillon").height == 0 and fresh.facts(subject="Yolanda").height == 1


def test_shred_receipt_names_the_state_purge_and_the_residue_sweep(tmp_path):
    mem = H.build(tmp_path / "s", mode="shred")
    receipt = mem.erase(H.X)
    steps = _by_store(receipt.purged)
    assert set(steps) == {"extractions", "state", "keys destroyed outside an erasure"}
    assert steps["state"]["rows"] == 12
    assert steps["keys destroyed outside an erasure"]["rows"] == 0  # no other key went
