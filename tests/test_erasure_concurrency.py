"""Appends racing an erasure: every acknowledged append survives, the chain verifies, no residue."""

from __future__ import annotations

import threading

import pytest

import refold
from refold.erasure.scan import scan
from tests import erasure_helpers as H


@pytest.mark.slow
def test_appends_while_erasing(tmp_path):
    root = tmp_path / "store"
    H.build(root)
    acknowledged: dict[str, int] = {}
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer():
        # its own Memory, as another agent in the same host would have
        mem = refold.open(root, create=False)
        i = 0
        try:
            while (not stop.is_set() or i < 5) and i < 60:
                eid = f"ev-live-{i:03d}"
                (seq,) = mem.append({"kind": "observation", "content": f"Yolanda note {i}",
                                     "source": f"obs#{i}", "event_id": eid, "subjects": [H.Y]})
                acknowledged[eid] = seq
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    receipt = refold.open(root, create=False).erase(H.X, canaries=H.CANARIES, include_mentions=True)
    stop.set()
    thread.join(timeout=120)
    assert not errors, errors
    mem = refold.open(root, create=False)
    rows = {e.event_id: e for e in mem.log_store.events()}
    assert all(rows[eid].seq == seq and rows[eid].content for eid, seq in acknowledged.items())
    assert len(acknowledged) >= 5
    assert mem.verify().ok
    assert scan(root, H.NEEDLES) == []
    assert mem.verify_receipt(receipt, refold=False).ok


def test_shred_appends_racing_the_erasure_never_stay_readable(tmp_path):
    """Issue #16 item 7: in shred mode an append tagged with X racing X's erasure used to get a
    fresh key and stay readable while the receipt said "erased". Now every such append either
    lands under a key the erasure destroys, or is refused with an error naming the erasure."""
    from refold.fold.errors import ErasedSubjectError

    root = tmp_path / "store"
    H.build(root, mode="shred")
    landed: list[str] = []
    refused: list[ErasedSubjectError] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer():
        mem = refold.open(root, create=False)
        i = 0
        try:
            # keep writing about X until the store refuses it after the erasure was done
            while i < 400 and not (stop.is_set() and refused):
                eid = f"ev-race-{i:03d}"
                try:
                    mem.append({"kind": "observation", "content": f"racing note {i} zephyrmarmalade00",
                                "source": f"obs#{i}", "event_id": eid, "subjects": [H.X]})
                    landed.append(eid)
                except ErasedSubjectError as exc:
                    refused.append(exc)
                i += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    receipt = refold.open(root, create=False).erase(H.X, canaries=H.CANARIES)
    stop.set()
    thread.join(timeout=240)
    assert not errors, errors
    assert landed and refused, (len(landed), len(refused))
    assert receipt.erasure_id in str(refused[-1]) and "new subject id" in str(refused[-1])
    mem = refold.open(root, create=False)
    about_x = [e for e in mem.events() if H.X in e.subjects]
    assert {e.event_id for e in about_x} >= set(landed)
    assert all(e.content is None for e in about_x), [e.event_id for e in about_x if e.content is not None]
    assert mem.verify().ok
    assert mem.verify_receipt(receipt, refold=False).ok
