"""Crash injection: kill -9 the erasure (a child process) at several steps; rerunning completes it
and the final state equals an uninterrupted run's."""

from __future__ import annotations

from pathlib import Path

import pytest

import refold
from refold.erasure.procedure import STEPS
from refold.erasure.scan import scan
from tests import erasure_helpers as H

DELETE_POINTS = ["erasure_event", "tombstones", "scrub_log:vacuumed", "scrub_log", "purge", "refold",
                 "registry", "receipt"]
SHRED_POINTS = ["erasure_event", "destroy_keys", "purge", "scrub_derived", "refold"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Facts of a store whose log never held X's events (the uninterrupted run converges to it)."""
    return H.reference_facts(tmp_path_factory.mktemp("reference") / "store")


def _check_completed(root: Path, reference: set, *, mode: str) -> None:
    mem = refold.open(root, create=False)
    assert not list(Path(mem.layout.receipts).glob("*.pending.json"))
    receipts = [r for r in Path(mem.layout.receipts).glob("*.json")]
    assert len(receipts) == 1
    assert scan(root, H.NEEDLES) == []
    assert mem.verify().ok
    assert H.facts(mem) == reference
    report = mem.verify_receipt(receipts[0], needles=H.NEEDLES)
    assert report.ok, report.as_json()
    rows = {e.event_id: e for e in mem.log_store.events()}
    assert sum(1 for e in rows.values() if e.kind == "erasure") == 1
    if mode == "delete":
        assert all(rows[H.erased_id(mem, i)].is_tombstone and i not in rows for i in H.X_EVENT_IDS)
    assert [s.subject_id for s in mem.subjects()] == [H.Y]


def test_crash_points_are_real_steps():
    assert {p.split(":")[0] for p in DELETE_POINTS + SHRED_POINTS} <= set(STEPS)


@pytest.mark.slow
@pytest.mark.parametrize("point", DELETE_POINTS)
def test_delete_mode_resumes_after_kill(tmp_path, point, reference):
    root = tmp_path / "store"
    H.build(root)
    assert H.erase_in_child(root, crash_at=point) == -9
    pending = list((root / "receipts").glob("*.pending.json"))
    assert len(pending) == 1  # the journal survived the kill
    H.erase_x(root)  # the rerun resumes the same erasure
    _check_completed(root, reference, mode="delete")


@pytest.mark.slow
@pytest.mark.parametrize("point", SHRED_POINTS)
def test_shred_mode_resumes_after_kill(tmp_path, point, reference):
    root = tmp_path / "store"
    H.build(root, mode="shred")
    assert H.erase_in_child(root, crash_at=point) == -9
    H.erase_x(root)
    _check_completed(root, reference, mode="shred")


@pytest.mark.slow
def test_uninterrupted_child_run_completes(tmp_path, reference):
    root = tmp_path / "store"
    H.build(root)
    assert H.erase_in_child(root) == 0
    _check_completed(root, reference, mode="delete")
