"""The receipt's derived-store steps say what was done, consistently (issue #16, item 11): the
snapshot patch never claims "no snapshot holds the erased events" while the snapshot purge
removes snapshots that held them."""

from __future__ import annotations

import refold
from refold import erasing
from tests import erasure_helpers as H
from tests.fold_helpers import fact_event


def _by_store(entries) -> dict[str, dict]:
    return {e["store"]: e for e in entries}


def test_shred_receipt_says_the_patch_was_skipped_and_the_purge_removed_the_snapshot(tmp_path):
    mem = H.build(tmp_path / "s", mode="shred")
    plan = _by_store(erasing.erase(mem, H.X, dry_run=True).derived)
    receipt = mem.erase(H.X)
    steps = _by_store(receipt.purged)
    for patch in (plan["snapshot patch"], steps["snapshot patch"]):
        assert patch["rows"] == 0
        assert patch["detail"] and patch["detail"][0].startswith("not patched: shred mode")
        assert "snapshot purge removes every snapshot that holds the erased events" in patch["detail"][0]
    assert steps["snapshots"]["rows"] == 1 and steps["snapshots"]["detail"][0].startswith("snapshots/")
    assert not any("no snapshot holds" in line for e in receipt.purged for line in e["detail"])


def test_delete_receipt_names_the_snapshot_that_holds_none_of_the_erased_events(tmp_path):
    mem = refold.init(tmp_path / "s")
    mem.append([fact_event("Yolanda", "visited", "Oslo", day=1, subjects=["s-y"])])
    mem.fold()
    info = mem.snapshot()
    mem.append([fact_event("Quillon", "likes", "tea", day=2, subjects=["s-x"])])
    receipt = mem.erase("s-x")
    steps = _by_store(receipt.purged)
    patch = steps["snapshot patch"]
    assert patch["rows"] == 0
    assert patch["detail"] == [f"the newest snapshot of the current spec ({info.path.rsplit('/', 1)[-1]}) "
                               "holds none of the erased events: nothing to patch"]
    assert steps["snapshots"]["rows"] == 0


def test_delete_receipt_says_the_snapshot_was_patched_and_nothing_else_purged_it(tmp_path):
    receipt = H.build(tmp_path / "s").erase(H.X)
    steps = _by_store(receipt.purged)
    assert steps["snapshot patch"]["rows"] == 1 and "erased event(s)" in steps["snapshot patch"]["detail"][0]
    assert steps["snapshots"]["rows"] == 0
