"""A whole store in a bucket (the local S3 API, moto, in its own process): the side files live
there, an erasure in delete mode runs end to end against it — on a versioned bucket, whose old
object versions it deletes — and ``refold verify s3://…`` finds a truncated tail from the heads
published in the bucket.

One store per module (moto is slow-ish): built once, erased once, then checked by the tests in
order of the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import refold
from refold.erasure import verbs as erasing
from refold.erasure.scan import scan_report
from tests import erasure_helpers as H
from tests.locomo_helpers import conversations
from tests.moto_process import moto_process, new_bucket  # noqa: F401

#: a few real chat turns beside the subjects' events (what a store mostly holds)
LOCOMO_TURNS = 12


def _locomo_events() -> list[dict]:
    conv = conversations()[0]
    turns = [t for key in sorted(k for k in conv if k.startswith("session_") and k[8:].isdigit())
             for t in conv[key] if t.get("text")][:LOCOMO_TURNS]
    return [{"kind": "chat_turn", "content": f"{t['speaker']}: {t['text']}", "source": f"locomo#{t.get('dia_id', i)}",
             "event_id": f"locomo-{i}"} for i, t in enumerate(turns)]


@pytest.fixture(scope="module")
def bucket(moto_process):
    return new_bucket(moto_process, versioned=True)


@pytest.fixture(scope="module")
def store(bucket):
    root = f"{bucket.uri}/memory"
    mem = refold.init(root, storage_options=bucket.storage_options)
    mem.append(H.events()[:12])
    mem.append([*H.events()[12:], *_locomo_events()])
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.register_subject(H.Y, H.Y_NAME)
    mem.fold()
    return mem


def _old_versions(bucket) -> list[str]:
    listing = bucket.server.client("s3").list_object_versions(Bucket=bucket.name)
    return [v["Key"] for v in listing.get("Versions", ()) if not v["IsLatest"]] + \
        [m["Key"] for m in listing.get("DeleteMarkers", ())]


def test_open_on_a_missing_store_in_a_bucket_is_not_found(bucket):
    with pytest.raises(refold.NotFoundError, match="no refold store at s3://"):
        refold.open(f"{bucket.uri}/nothing-here", storage_options=bucket.storage_options)


def test_the_side_files_live_in_the_bucket(store, bucket):
    keys = set(bucket.keys())
    assert {"memory/store.json", "memory/subjects.json"} <= keys
    assert any(k.startswith("memory/receipts/heads/") for k in keys)
    assert json.loads(bucket.server.client("s3").get_object(
        Bucket=bucket.name, Key="memory/store.json")["Body"].read())["mode"] == "delete"
    again = refold.open(store.root, storage_options=bucket.storage_options)
    assert again.mode == "delete" and [s.subject_id for s in again.subjects()] == [H.X, H.Y]


def test_before_the_erasure_the_canaries_are_in_objects_and_old_versions(store, bucket):
    report = scan_report(store.root, H.NEEDLES, storage_options=bucket.storage_options)
    assert {h.needle for h in report.hits} >= set(H.CANARIES)
    assert {h.file.split("/")[0] for h in report.hits} >= {"events", "extractions", "subjects.json"}
    assert _old_versions(bucket), "the bucket keeps old versions (subjects.json was rewritten)"


@pytest.fixture(scope="module")
def receipt(store):
    return store.erase(H.X, canaries=H.CANARIES, include_mentions=True)


def test_delete_mode_erasure_leaves_no_residue_in_objects_or_old_versions(store, bucket, receipt):
    assert receipt.status == "erased" and receipt.mode == "delete"
    assert receipt.engines, "the model engines that saw X's events are named, as locally"
    assert receipt.scan["hits"] == [] and receipt.scan["errors"] == []
    assert receipt.scan["old_versions"]["removed"] > 0 and "error" not in receipt.scan["old_versions"]
    # a fresh scan of every object and every old version finds nothing of X
    assert scan_report(store.root, H.NEEDLES, storage_options=bucket.storage_options).hits == ()
    # what is left of old versions was written after the scan: the journal's removal
    assert all("receipts/" in k for k in _old_versions(bucket))
    assert store.verify().ok
    assert store.verify_receipt(receipt, needles=H.NEEDLES).ok
    assert [s.subject_id for s in store.subjects()] == [H.Y]
    assert f"memory/receipts/{receipt.erasure_id}.json" in bucket.keys()
    facts = H.facts(store)
    assert facts and not any(H.X_NAME in f[0] for f in facts)


def test_verify_from_the_cli_finds_a_truncated_tail_from_the_published_heads(store, bucket, receipt):
    env = {**os.environ, **bucket.server.env(), "PYTHONPATH": str(H.REPO)}
    cli = [os.path.join(os.path.dirname(sys.executable), "refold"), "verify", store.root]
    ok = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    # one more append, then its commit removed: the log is shorter, but its chain alone verifies
    store.append({"kind": "chat_turn", "content": "the last word", "source": "chat#99", "event_id": "last"})
    s3 = bucket.server.client("s3")
    commits = sorted(k for k in bucket.keys() if k.startswith("memory/events/_delta_log/") and k.endswith(".json"))
    s3.delete_object(Bucket=bucket.name, Key=commits[-1])
    bad = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr
    assert "receipts/heads/" in bad.stdout + bad.stderr


def test_shred_mode_erasure_in_a_bucket_deletes_the_key_objects(moto_process):
    bucket = new_bucket(moto_process)
    mem = refold.init(f"{bucket.uri}/shred", mode="shred", storage_options=bucket.storage_options)
    mem.append(H.events())
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.fold()
    keys_before = {k for k in bucket.keys() if k.startswith("shred/keys/ids/")}
    assert keys_before
    receipt = mem.erase(H.X, canaries=H.CANARIES, include_mentions=True)
    assert receipt.status == "erased" and receipt.destroyed_key_ids
    assert receipt.scan["hits"] == [] and "old_versions" not in receipt.scan  # (no versioning here)
    gone = {f"shred/keys/ids/{k}" for k in receipt.destroyed_key_ids}
    assert gone <= keys_before and not gone & set(bucket.keys())
    assert mem.verify().ok
    assert mem.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_a_batch_erasure_runs_on_a_bucket(moto_process):  # noqa: F811
    """Erasing two subjects as one batch on a store in a bucket: a receipt per subject and the
    batch summary land in the bucket, each receipt verifies alone, and the log verifies."""
    bucket = new_bucket(moto_process)
    mem = refold.init(f"{bucket.uri}/memory", storage_options=bucket.storage_options)
    mem.append(H.events())
    mem.register_subject(H.X, H.X_NAME)
    mem.register_subject(H.Y, H.Y_NAME)
    mem.fold()
    batch = mem.erase([H.X, H.Y])
    assert [r.subject_id for r in batch.receipts] == [H.X, H.Y]
    assert all(r.status == "erased" and r.scan["hits"] == [] for r in batch.receipts)
    assert f"memory/receipts/batches/{batch.batch_id}.json" in bucket.keys()
    assert all(mem.verify_receipt(r).ok for r in batch.receipts)
    assert mem.verify().ok
    assert not [e for e in mem.events() if {H.X, H.Y} & set(e.subjects)]


def test_an_erasure_refolds_the_state_tables_in_a_bucket(moto_process):  # noqa: F811
    """A store folded into partitioned state tables in a bucket: the erasure refolds the
    buckets X touched and vacuums the old files (listed through the bucket, not a folder),
    so no object and no old version holds X, and the tables still answer for Y."""
    bucket = new_bucket(moto_process, versioned=True)
    mem = refold.init(f"{bucket.uri}/memory", storage_options=bucket.storage_options)
    mem.append(H.events())
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.fold()
    assert any(k.startswith("memory/state/") for k in bucket.keys())
    before = scan_report(mem.root, H.NEEDLES, storage_options=bucket.storage_options)
    assert any(h.file.startswith("state/") for h in before.hits), "X is in the state tables first"
    receipt = mem.erase(H.X, canaries=H.CANARIES, include_mentions=True)
    assert receipt.status == "erased" and receipt.scan["hits"] == [] and receipt.scan["errors"] == []
    assert scan_report(mem.root, H.NEEDLES, storage_options=bucket.storage_options).hits == ()
    assert any(k.startswith("memory/state/") for k in bucket.keys()), "refolded, not dropped"
    again = refold.open(mem.root, storage_options=bucket.storage_options)
    facts = again.facts(subject=H.Y_NAME)
    assert facts.height and again.state_store(again.current_spec()).tag() is not None
    assert mem.verify().ok and mem.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_a_key_destroyed_outside_an_erasure_is_swept_from_a_bucket(moto_process):  # noqa: F811
    """A shred-mode store in a bucket: after a subject's key is destroyed through the key store
    (no erasure), the next fold leaves no object holding the subject's name (extraction cache
    and state tables, their old files vacuumed) and records the sweep in the bucket."""
    bucket = new_bucket(moto_process)
    mem = refold.init(f"{bucket.uri}/shred", mode="shred", storage_options=bucket.storage_options)
    mem.append(H.events())
    mem.fold()
    before = {h.file.split("/")[0] for h in mem.scan([H.Y_NAME]).hits}
    assert {"extractions", "state"} <= before
    erasing.keystore(mem.store).destroy(H.Y)
    mem.fold()
    assert not mem.scan([H.Y_NAME]).hits
    assert "shred/erasure.swept" in bucket.keys()
