"""Erasure backfill as one batch (refold.erasure.batch): many subjects erased in one pass,
one receipt each (verifiable alone) plus a batch summary; resumable after kill -9."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import refold
from refold.agent import retention
from refold.fold.errors import ErasureError, LegalHoldError, RefoldError
from refold.erasure.batch import summary_path
from refold.erasure.scan import scan
from tests import erasure_helpers as H
from tests.fold_helpers import fact_event

Z, Z_NAME = "s-z", "Zora Pell"
Z_CANARIES = tuple(f"glimmerquartz{i:02d}" for i in range(5))
REPO = Path(__file__).resolve().parents[1]


def build(root: Path, *, mode: str = "delete", **init) -> refold.Memory:
    """The erasure helpers' store (X, Y; four events shared by both) plus a third subject Z."""
    mem = refold.init(root, mode=mode, **init)
    mem.append(H.events())
    mem.append([fact_event(Z_NAME, "collects", c, day=40 + i, event_id=f"ev-z-{i:02d}", subjects=[Z])
                for i, c in enumerate(Z_CANARIES)])
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.register_subject(H.Y, H.Y_NAME)
    mem.register_subject(Z, Z_NAME)
    mem.fold()
    return mem


CANARIES = {H.X: list(H.CANARIES), Z: list(Z_CANARIES)}


def erase_batch(root: Path, subjects=(H.X, Z)):
    mem = refold.open(root, create=False)
    return mem.erase(list(subjects), canaries=CANARIES)


def _check(root: Path, result, subjects=(H.X, Z)) -> refold.Memory:
    mem = refold.open(root, create=False)
    assert mem.verify().ok
    assert not list(Path(mem.layout.receipts).glob("*.pending.json"))
    assert [r.subject_id for r in result.receipts] == list(subjects)
    for r in result.receipts:
        needles = [*CANARIES.get(r.subject_id, ()), {H.X: H.X_NAME, Z: Z_NAME, H.Y: H.Y_NAME}[r.subject_id]]
        report = mem.verify_receipt(refold.erasure.receipts.receipt_path(mem.layout, r.erasure_id),
                                        needles=needles)
        assert report.ok, report.as_json()
        assert r.batch_id == result.batch_id and r.extraction_calls == 0
    erasures = [e for e in mem.log_store.events() if e.kind == "erasure"]
    assert len({e.table_version for e in erasures}) == 1  # every erasure record in one commit
    names = {H.X: [H.X_NAME], Z: [Z_NAME], H.Y: [H.Y_NAME]}
    assert scan(root, [n for s in subjects for n in (*names[s], *CANARIES.get(s, ()))]) == []
    summary = json.loads(Path(summary_path(mem.layout, result.batch_id)).read_text())
    assert summary == json.loads(json.dumps(result.summary))
    assert [s["erasure_id"] for s in summary["subjects"]] == [r.erasure_id for r in result.receipts]
    assert summary["extraction_calls"] == 0 and summary["totals"]["subjects"] == len(subjects)
    assert {"tombstones", "refold", "scan"} <= set(summary["timings"])
    return mem


@pytest.mark.slow
def test_batch_equals_one_by_one_delete(tmp_path):
    one = build(tmp_path / "one")
    start = one.log_store.table().version()
    one.erase(H.X, canaries=H.CANARIES)
    one.erase(Z, canaries=Z_CANARIES)
    build(tmp_path / "batch")
    before = refold.open(tmp_path / "batch", create=False).log_store.table().version()

    result = erase_batch(tmp_path / "batch")

    mem = _check(tmp_path / "batch", result)
    # the batch commits to the log what ONE erasure does (records, tombstones, maintenance)
    one = refold.open(tmp_path / "one", create=False)
    assert 2 * (mem.log_store.table().version() - before) == one.log_store.table().version() - start
    assert H.facts(mem) == H.facts(one)
    assert [s.subject_id for s in mem.subjects()] == [H.Y]
    assert result.summary["totals"]["events"] == len(H.X_EVENT_IDS) - 1 + len(Z_CANARIES)


@pytest.mark.slow
def test_overlapping_subjects_erased_once_listed_in_each(tmp_path):
    build(tmp_path / "s")
    result = refold.open(tmp_path / "s", create=False).erase([H.X, H.Y, H.X], canaries=CANARIES)
    mem = _check(tmp_path / "s", result, subjects=(H.X, H.Y))
    x, y = result.receipts
    shared = {e["seq"] for e in x.events} & {e["seq"] for e in y.events}
    assert len(shared) == 4  # ev-x-00, 03, 06, 09 are tagged with both
    assert all(e.get("erasure_id") == x.erasure_id for e in y.events if e["seq"] in shared)
    tombs = [e for e in mem.log_store.events() if e.is_tombstone]
    assert len(tombs) == len({e["seq"] for r in result.receipts for e in r.events})
    assert result.summary["totals"]["shared_events"] == 4


def test_residue_hits_attributed_to_their_subject(tmp_path):
    build(tmp_path / "s")
    outside = tmp_path / "s" / "notes.txt"  # a file refold does not manage: the scan finds it
    outside.write_text(f"remember {Z_CANARIES[2]}\n")
    result = erase_batch(tmp_path / "s")
    x, z = result.receipts
    # X's alias and e-mail stay in Y's untagged mention (not erased): X's hits, none in notes.txt
    assert x.scan["hits"] and "notes.txt" not in {h["file"] for h in x.scan["hits"]}
    assert [h["file"] for h in z.scan["hits"]] == ["notes.txt"]
    assert z.scan["hits"][0]["needle_index"] == 1 + 2  # Z's name first, then its canaries
    assert result.summary["totals"]["residue_hits"] == len(x.scan["hits"]) + 1


@pytest.mark.slow
def test_shred_mode_batch(tmp_path):
    build(tmp_path / "s", mode="shred")
    keys = refold.open(tmp_path / "s", create=False).key_store
    x_keys, z_keys = keys.key_ids(H.X), keys.key_ids(Z)
    result = erase_batch(tmp_path / "s")
    mem = _check(tmp_path / "s", result)
    assert sorted(result.receipts[0].destroyed_key_ids) == sorted(x_keys)
    assert sorted(result.receipts[1].destroyed_key_ids) == sorted(z_keys)
    assert not [f for f in H.facts(mem) if any(c in str(f) for c in (*H.CANARIES, *Z_CANARIES))]


def test_shred_mode_batch_with_kms(tmp_path, aws_env, kms_key):
    build(tmp_path / "s", mode="shred", kms_endpoint=aws_env.endpoint, kms_key_id=kms_key)
    result = erase_batch(tmp_path / "s")
    _check(tmp_path / "s", result)
    assert all(r.key_store.get("key_store") == "kms" for r in result.receipts)


def test_bad_input_writes_nothing(tmp_path):
    mem = build(tmp_path / "s")
    before = mem.log_store.table().version()
    with pytest.raises(ErasureError, match="'s-nobody'"):
        mem.erase([H.X, "s-nobody"])
    with pytest.raises(RefoldError, match="no subject"):
        mem.erase([])
    retention.place_hold(mem, subject=Z, reason="case 12")
    with pytest.raises(LegalHoldError, match="'s-z'"):
        mem.erase([H.X, Z])
    assert mem.log_store.table().version() == before
    assert not list(Path(mem.layout.receipts).glob("*.json"))


def test_dry_run_plans_each_subject(tmp_path):
    mem = build(tmp_path / "s")
    plans = mem.erase([H.X, Z], dry_run=True)
    assert [p.subject_id for p in plans] == [H.X, Z]
    assert len(plans[1].events) == len(Z_CANARIES)
    assert not list(Path(mem.layout.receipts).glob("*.json"))


def _child(root: Path, crash_at: str) -> int:
    """Erase the batch in a child process that SIGKILLs itself at the step ``crash_at``."""
    code = (f"import refold, sys; sys.path.insert(0, {str(REPO)!r}); from tests.test_erasure_batch import erase_batch; "
            f"from pathlib import Path; erase_batch(Path({str(root)!r}))")
    proc = subprocess.run([sys.executable, "-m", "tests.fault_driver", f"erasure.{crash_at}", "-c", code], cwd=REPO,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode in (0, -9), proc.stderr[-2000:]
    return proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize("point", ["erasure_event", "tombstones", "purge", "refold", "scan"])
def test_batch_resumes_after_kill(tmp_path, point):
    root = tmp_path / "s"
    build(root)
    assert _child(root, point) == -9
    assert len(list((root / "receipts").glob("batch-*.pending.json"))) == 1
    result = erase_batch(root, subjects=(Z, H.X, Z))  # the same subjects, in any order
    _check(root, result)  # the receipts in the order the interrupted run was given
    assert len(list((root / "receipts").glob("*.json"))) == 2


def test_job_runs_one_batch_from_a_subjects_file(tmp_path):
    from click.testing import CliRunner

    from refold.cli import main

    build(tmp_path / "s")
    subjects = tmp_path / "subjects.txt"
    subjects.write_text(f"# backfill\n{H.X}\n\n{Z}\n{H.X}\nnobody\n")
    result = CliRunner().invoke(main, ["job", "erase", str(tmp_path / "s"), "--subjects-file", str(subjects),
                                       "--no-ray", "--no-progress"])
    status, summary = result.exit_code, json.loads(result.stdout.strip().splitlines()[-1])
    assert status == 1 and summary["failed"] == ["nobody"]  # unknown: reported, the others erased
    assert [s["status"] for s in summary["subjects"] if s["ok"]] == ["erased", "erased"]
    batch = json.loads(Path(summary["summary"]).read_text())
    assert batch["unknown"] == ["nobody"] and batch["totals"]["erased"] == 2
    assert refold.open(tmp_path / "s", create=False).verify().ok


@pytest.mark.slow
def test_cli_erase_subjects_file(tmp_path):
    build(tmp_path / "s")
    subjects, empty = tmp_path / "subjects.txt", tmp_path / "empty.txt"
    subjects.write_text(f"{H.X}\n{Z}\n")
    empty.write_text("# nothing\n")
    cli = [sys.executable, "-c", "import sys; from refold.cli import main; sys.exit(main())", "erase",
           str(tmp_path / "s")]
    run = dict(cwd=REPO, capture_output=True, text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(REPO)})
    bad = subprocess.run([*cli, "--subjects-file", str(empty)], **run)
    assert bad.returncode == 2 and "lists no subject id" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    dry = subprocess.run([*cli, "--subjects-file", str(subjects), "--dry-run"], **run)
    assert dry.returncode == 0 and dry.stdout.count("dry run: erasing") == 2
    done = subprocess.run([*cli, "--subjects-file", str(subjects), "--json"], **run)
    summary = json.loads(done.stdout)
    # exit 1: X's alias stays in Y's untagged mention (the scan reports it, as a single erasure does)
    assert done.returncode == 1 and summary["totals"]["erased"] == 2, done.stderr


@pytest.mark.slow
def test_pending_single_erasure_stops_the_batch(tmp_path):
    root = tmp_path / "s"
    build(root)
    assert H.erase_in_child(root, crash_at="tombstones") == -9  # a single erasure of X, interrupted
    with pytest.raises(ErasureError, match="interrupted single erasure of 's-x'"):
        erase_batch(root)
    H.erase_x(root)  # completing it first
    result = erase_batch(root)
    assert [r.status for r in result.receipts] == ["noop", "erased"]


@pytest.mark.slow
def test_shred_batch_resumes_after_kill_at_key_destruction(tmp_path):
    root = tmp_path / "s"
    build(root, mode="shred")
    assert _child(root, "destroy_keys") == -9
    _check(root, erase_batch(root))


def test_a_receipt_cannot_claim_another_erasures_tombstone(tmp_path):
    """The shared events' tombstones name X's erasure: Y's receipt verifies only while it says so."""
    build(tmp_path / "s")
    mem = refold.open(tmp_path / "s", create=False)
    x, y = mem.erase([H.X, H.Y]).receipts
    path = refold.erasure.receipts.receipt_path(mem.layout, y.erasure_id)
    forged = json.loads(path.read_text())
    for e in forged["events"]:
        e.pop("erasure_id", None)
    path.write_text(json.dumps(forged))
    report = mem.verify_receipt(path, refold=False)
    assert not report.ok and "not a tombstone of this erasure" in json.dumps(report.as_json())
