"""Delete-mode erasure on a real store with a real (rules) fold: nothing of X remains anywhere,
everything else survives, the chain verifies, old versions are gone, the receipt re-checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from deltalake import DeltaTable

import refold
from refold.fold.errors import ErasureError
from refold.erasure.scan import scan
from tests import erasure_helpers as H


@pytest.fixture
def store(tmp_path):
    return H.build(tmp_path / "store")


def _files(root: str) -> dict[str, tuple[int, int]]:
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in Path(root).rglob("*") if p.is_file()}


def test_before_erasure_the_canaries_are_everywhere(store):
    hits = scan(store.root, H.NEEDLES)
    folders = {h.file.split("/")[0] for h in hits}
    assert {"events", "extractions", "state", "subjects.json"} <= folders
    assert {h.needle for h in hits} >= set(H.CANARIES)


@pytest.mark.slow
def test_erase_leaves_no_residue_and_converges_to_a_log_without_x(store, tmp_path):
    before = store.head()
    x_facts = {f for f in H.facts(store) if set(f[5]) & H.X_EVENT_IDS}
    assert len(x_facts) >= len(H.CANARIES)
    receipt = store.erase(H.X, canaries=H.CANARIES, include_mentions=True)

    assert receipt.status == "erased" and receipt.mode == "delete"
    # the receipt and the tombstones name the erased events by their ids' pseudonyms
    assert set(receipt.event_ids) == {H.erased_id(store, i) for i in H.X_EVENT_IDS}
    assert receipt.scan["hits"] == [] and receipt.scan["needles"] == len(H.NEEDLES)
    assert scan(store.root, H.NEEDLES) == []
    assert store.verify().ok
    # every unrelated fact survives: the graph equals a fresh fold of the log without X's events
    after = H.facts(store)
    assert after == H.reference_facts(tmp_path / "reference")
    assert not after & x_facts and len(after) == 11
    # extraction cache rows of erased events are gone, others stay
    cached = set(store.cache.frame()["event_id"].to_list())
    assert not cached & H.X_EVENT_IDS and {f"ev-y-{i:02d}" for i in range(11)} <= cached
    purged = {p["store"]: p["rows"] for p in receipt.purged}
    # the cache and the state tables are the derived stores; the state lost X's fact items
    assert purged == {"extractions": len(H.X_EVENT_IDS), "state": len(H.CANARIES)}
    # tombstones keep the chain fields and nothing else
    rows = {e.event_id: e for e in store.log_store.events()}
    for eid in H.X_EVENT_IDS:
        assert eid not in rows
        t = rows[H.erased_id(store, eid)]
        assert t.is_tombstone and t.erasure_id == receipt.erasure_id
        assert (t.content, t.source, t.salt, t.justification, t.fact, t.subjects) == (None, None, None, None, None, ())
    # the pre-erasure table version can no longer be read
    with pytest.raises(Exception):
        DeltaTable(store.layout.events, version=before.table_version)
    # registry entry gone, the other subject kept
    assert [s.subject_id for s in store.subjects()] == [H.Y]
    assert store.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_receipt_holds_no_personal_data_and_names_what_is_out_of_scope(store):
    receipt = store.erase(H.X, canaries=H.CANARIES, include_mentions=True)
    text = Path(store.layout.receipts, f"{receipt.erasure_id}.json").read_text()
    for needle in H.NEEDLES:
        assert needle.lower() not in text.lower()
    data = json.loads(text)
    assert data["subject_id"] == H.X and data["head_before"]["seq"] < data["head_after"]["seq"]
    assert all(set(e) == {"event_id", "seq", "commitment", "how"} for e in data["events"])
    assert any("backups" in item for item in data["out_of_scope"])
    # rules ran in process: named in engines, but nothing left refold, so no out-of-scope entry
    assert data["engines"] == [{"engine": "rules", "model_id": None, "host": None, "events": 13}]
    assert not any("engine" in item for item in data["out_of_scope"])
    assert data["spec_hash"] == store.current_spec().hash and data["state_digest"]
    assert data["removed_files"] and all(not f.startswith("/") for f in data["removed_files"])


def test_dry_run_writes_nothing(store):
    files = _files(store.root)
    plan = store.erase(H.X, dry_run=True, include_mentions=True)
    assert _files(store.root) == files
    assert set(plan.event_ids) == H.X_EVENT_IDS and plan.untagged == 1
    assert plan.cache_rows == len(H.X_EVENT_IDS) and plan.registered
    assert plan.seq_ranges[0] == (0, 11)
    assert H.X_NAME not in json.dumps(plan.as_json())


def test_unknown_subject_is_a_clear_error(store):
    with pytest.raises(ErasureError, match="unknown subject 's-nobody'"):
        store.erase("s-nobody")
    with pytest.raises(ErasureError):
        store.erase("s-nobody", dry_run=True)


@pytest.mark.slow
def test_erasing_twice_is_a_noop_with_a_receipt(store):
    first = store.erase(H.X, canaries=H.CANARIES, include_mentions=True)
    head = store.head()
    second = store.erase(H.X, include_mentions=True)
    assert second.status == "noop" and second.previous_erasure_id == first.erasure_id
    assert store.head() == head
    assert store.verify_receipt(second).ok


@pytest.mark.slow
def test_an_append_after_erasure_works_and_verifies(store):
    store.erase(H.X, include_mentions=True)
    store.append({"kind": "observation", "content": "a later event", "source": "obs#1"})
    report = store.verify()
    assert report.ok and report.events == 27
    reopened = refold.open(store.root, create=False)
    assert reopened.verify().ok


@pytest.mark.slow
def test_erasing_the_other_subject_afterwards_keeps_both_receipts_valid(store):
    rx = store.erase(H.X, include_mentions=True)
    ry = store.erase(H.Y, canaries=[H.Y_NAME])
    assert ry.scan["hits"] == []
    assert store.verify().ok
    assert store.verify_receipt(rx).ok and store.verify_receipt(ry).ok
    assert H.facts(store) == set()
