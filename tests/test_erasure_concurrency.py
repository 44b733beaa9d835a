"""Appends racing an erasure: every acknowledged append survives, the chain verifies, no residue."""

from __future__ import annotations

import threading

import refold
from refold import erasing
from refold.storage.scan import scan
from tests import erasure_helpers as H


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
    receipt = erasing.erase(refold.open(root, create=False), H.X, canaries=H.CANARIES, include_mentions=True)
    stop.set()
    thread.join(timeout=120)
    assert not errors, errors
    mem = refold.open(root, create=False)
    rows = {e.event_id: e for e in mem.log_store.events()}
    assert all(rows[eid].seq == seq and rows[eid].content for eid, seq in acknowledged.items())
    assert len(acknowledged) >= 5
    assert mem.verify().ok
    assert scan(root, H.NEEDLES) == []
    assert erasing.verify_receipt(mem, receipt, refold=False).ok
