"""The receipt's state digest is of the state tables ("state2:", a hash of per-bucket hashes; refold
0.2's "state1:" receipts still verify): the erasure's refold brings them
up to date and digests them, no whole-store graph is built beside them. The digest is of the
state a read sees, so a full refold of the same log, with other files and row versions, digests
equal; the receipt verifies from a fresh Memory and a wrong digest does not. Receipts of refold
0.1 hold a digest of a retired scheme (the graph engine's "cols1:" snapshot encoding, or a plain
SHA-256 of its JSON): they verify everything else, and say in one line that the digest is not
recomputed; a digest of no scheme refold ever wrote fails."""

from __future__ import annotations

import dataclasses
import json

import pytest

import refold
from refold.erasure import verbs as erasing
from refold.engine.merge import group_size
from refold.erasure.receipts import load_receipt, receipt_path
from tests.fold_helpers import fact_event
from tests.test_fold_state import _log

X, NAME = "s-x", "Quillon Varga"
CANARY = "zephyrmarmalade"


def _store(tmp_path):
    mem = refold.init(tmp_path / "store")
    mine = [fact_event(NAME, "works_at", "Acme", day=2, subjects=[X]),
            fact_event(NAME, "likes", CANARY, day=3, subjects=[X])]
    mem.append(_log(120) + mine + _log(40, start=120))
    mem.fold(full=True, buckets=8)
    mem.append(_log(20, start=160))
    mem.fold()  # an incremental fold: the state holds appended row versions
    mem.register_subject(X, NAME)
    return mem


def _digest(mem, *, kept: bool = False) -> str:
    store = mem.state_store(mem.current_spec())
    buckets = store.tag().buckets
    return erasing.STATE_SCHEME + store.bucket_digest(buckets=buckets, group=group_size(store, buckets), kept=kept)


def _digest1(mem) -> str:
    store = mem.state_store(mem.current_spec())
    buckets = store.tag().buckets
    return erasing.STATE1_SCHEME + store.digest(buckets=buckets, group=group_size(store, buckets))


def test_kept_bucket_hashes_serve_only_buckets_whose_files_are_unchanged(tmp_path):
    """The per-bucket hashes kept beside the tables are reused for a bucket exactly while its data
    files are the ones they were computed from: a kept digest after an erasure equals a full
    recomputation, a tampered hash of an unchanged bucket is served as kept (so unchanged buckets
    are not read), and a garbled file of kept hashes is recomputed, never trusted."""
    mem = _store(tmp_path)
    assert _digest(mem, kept=True) == _digest(mem)  # (the first one computes and keeps them all)
    kept_file = tmp_path / "store" / "state" / mem.current_spec().hash / "bucket_digests.json"
    assert kept_file.is_file()
    receipt = mem.erase(X)  # rewrites the erased subject's buckets
    assert receipt.state_digest == _digest(refold.open(mem.root))
    entries = json.loads(kept_file.read_text())
    first = sorted(entries)[0]
    entries[first][1] = "0" * 64  # a wrong hash under the bucket's true file set
    kept_file.write_text(json.dumps(entries))
    assert _digest(refold.open(mem.root), kept=True) != _digest(refold.open(mem.root))  # served as kept
    entries[first][0] = "f" * 64  # the file set it claims is not the bucket's: recomputed
    kept_file.write_text(json.dumps(entries))
    assert _digest(refold.open(mem.root), kept=True) == _digest(refold.open(mem.root))
    kept_file.write_text("{not json")
    assert _digest(refold.open(mem.root), kept=True) == _digest(refold.open(mem.root))


def test_a_receipt_of_refold_0_2_state1_scheme_is_recomputed(tmp_path):
    mem = _store(tmp_path)
    receipt = mem.erase(X)
    old = _rewritten(mem, receipt, _digest1(refold.open(mem.root)))
    checks = {c.name: c for c in refold.open(mem.root).verify_receipt(old).checks}
    assert checks["state digest"].ok and checks["state digest"].detail == "refolded state matches"
    wrong = _rewritten(mem, receipt, erasing.STATE1_SCHEME + "0" * 64)
    assert not {c.name: c for c in refold.open(mem.root).verify_receipt(wrong).checks}["state digest"].ok


def test_the_receipt_digests_the_state_tables(tmp_path):
    mem = _store(tmp_path)
    receipt = mem.erase(X, canaries=[CANARY])
    assert receipt.state_digest.startswith(erasing.STATE_SCHEME)
    assert receipt.state_digest == _digest(refold.open(mem.root))
    assert receipt.extraction_calls == 0  # the surviving events' cached extractions were reused
    assert {p["store"] for p in receipt.purged} == {"extractions", "state"}  # nothing else is derived


@pytest.mark.slow
def test_the_state_digest_follows_the_state_not_its_files(tmp_path):
    mem = _store(tmp_path)
    receipt = mem.erase(X)
    again = refold.open(mem.root)
    again.fold(full=True, buckets=8)  # other files, one version per row
    assert _digest(again) == receipt.state_digest
    checks = {c.name: c for c in refold.open(mem.root).verify_receipt(receipt).checks}
    assert checks["state digest"].ok and checks["state digest"].detail == "refolded state matches"
    wrong = dataclasses.replace(receipt, state_digest=erasing.STATE_SCHEME + "0" * 64)
    checks = {c.name: c for c in refold.open(mem.root).verify_receipt(wrong).checks}
    assert not checks["state digest"].ok


def _rewritten(mem, receipt, digest: str):
    """The receipt as refold 0.1 would have written it: its JSON file with ``digest`` instead."""
    path = receipt_path(mem.layout, receipt.erasure_id)
    data = json.loads(path.read_text())
    data["state_digest"] = digest
    path.write_text(json.dumps(data))
    return load_receipt(path)


@pytest.mark.parametrize("old", ["cols1:" + "ab" * 32, "cd" * 32], ids=["columnar", "json"])
@pytest.mark.slow
def test_a_receipt_of_a_retired_digest_scheme_verifies_everything_else(tmp_path, monkeypatch, old):
    mem = _store(tmp_path)
    receipt = mem.erase(X, canaries=[CANARY])
    fresh = refold.open(mem.root)
    old_receipt = _rewritten(fresh, receipt, old)

    def no_refold(*args, **kwargs):
        raise AssertionError("a digest of a retired scheme was refolded for")

    monkeypatch.setattr(erasing, "refold_outcome", no_refold)
    report = fresh.verify_receipt(old_receipt, canaries=[CANARY])
    assert report.ok, report.as_json()
    checks = {c.name: c for c in report.checks}
    # everything else about the erasure is checked as for any receipt
    assert {"chain", "erasure event", "events erased", "old versions unreadable", "residue scan"} <= set(checks)
    line = checks["state digest"].detail
    assert "\n" not in line and "retired" in line
    assert "still checked: chain, erasure event, events erased, old versions unreadable, residue scan" in line
    # a retired receipt still fails on what it can check: an event of its erasure made readable again
    tampered = dataclasses.replace(old_receipt, events=(*old_receipt.events[:-1],
                                                        {**old_receipt.events[-1], "commitment": "0" * 64}))
    assert not fresh.verify_receipt(tampered).ok


@pytest.mark.slow
def test_a_digest_of_no_scheme_refold_wrote_fails(tmp_path):
    mem = _store(tmp_path)
    receipt = mem.erase(X)
    fresh = refold.open(mem.root)
    report = fresh.verify_receipt(_rewritten(fresh, receipt, "zz9:" + "0" * 64))
    checks = {c.name: c for c in report.checks}
    assert not report.ok and not checks["state digest"].ok and "unknown digest scheme" in checks["state digest"].detail
