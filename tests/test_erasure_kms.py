"""Shred mode with the keys in AWS KMS (the local KMS API of tests/object_store.py): init records
the choice, every later open uses it, and an erasure destroys the subject's wrapped keys (and, per
subject, schedules its KMS key's deletion), as its receipt says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest

import refold
from refold.fold.errors import StoreError
from refold.storage.keys.kms import KmsKeyStore
from tests import erasure_helpers as H

REPO = Path(__file__).resolve().parents[1]


def _build(root: Path, server, **kms) -> refold.Memory:
    mem = refold.init(root, mode="shred", kms_endpoint=server.endpoint, **kms)
    mem.append(H.events())
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.register_subject(H.Y, H.Y_NAME)
    mem.fold()
    return mem


def _assert_x_shredded_and_y_readable(root: Path, receipt, x_keys: list[str]) -> None:
    fresh = refold.open(root, create=False)  # a new Memory: keys unwrapped through KMS again
    assert isinstance(fresh.key_store, KmsKeyStore)
    events = {e.event_id: e for e in fresh.events()}
    x_only = H.X_EVENT_IDS - {"ev-mention"}
    assert all(events[i].content is None for i in x_only)
    assert all(events[f"ev-y-{i:02d}"].content for i in range(11))
    assert not [f for f in H.facts(fresh) if any(c in str(f) for c in H.CANARIES)]
    assert any(f[2] == "default/city number 3" for f in H.facts(fresh))
    assert sorted(receipt.destroyed_key_ids) == sorted(x_keys)
    assert not any((root / "keys" / "ids" / k).exists() for k in x_keys)
    assert fresh.verify().ok
    assert fresh.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_one_kms_key_for_the_store(tmp_path, aws_env, kms_key):
    root = tmp_path / "store"
    mem = _build(root, aws_env, kms_key_id=kms_key)
    settings = json.loads((root / "store.json").read_text())
    assert settings["keys"]["adapter"] == "kms" and settings["keys"]["kms_key_id"] == kms_key
    for path in (root / "keys" / "ids").iterdir():  # only wrapped keys on disk
        assert set(json.loads(path.read_bytes())) == {"format", "kms_key_id", "wrapped"}
    x_keys = mem.key_store.key_ids(H.X)

    receipt = mem.erase(H.X, canaries=H.CANARIES)

    assert receipt.key_store["key_store"] == "kms" and receipt.key_store["kms_key_id"] == kms_key
    assert receipt.key_store["how"] == "wrapped data keys deleted"
    assert "kms_key_deletions" not in receipt.key_store
    saved = json.loads((root / "receipts" / f"{receipt.erasure_id}.json").read_text())
    assert saved["key_store"]["kms_key_id"] == kms_key
    _assert_x_shredded_and_y_readable(root, receipt, x_keys)


def test_a_kms_key_per_subject_is_scheduled_for_deletion(tmp_path, aws_env):
    root = tmp_path / "store"
    mem = _build(root, aws_env, kms_key_per_subject=True, kms_pending_window_days=9)
    x_keys = mem.key_store.key_ids(H.X)
    x_kms = {json.loads((root / "keys" / "ids" / k).read_bytes())["kms_key_id"] for k in x_keys}
    y_kms = {json.loads((root / "keys" / "ids" / k).read_bytes())["kms_key_id"] for k in mem.key_store.key_ids(H.Y)}
    assert len(x_kms) == 1 and x_kms.isdisjoint(y_kms)

    receipt = mem.erase(H.X, canaries=H.CANARIES)

    (deletion,) = receipt.key_store["kms_key_deletions"]
    assert deletion["kms_key_id"] in x_kms and deletion["pending_window_days"] == 9
    kms = aws_env.client("kms")
    meta = kms.describe_key(KeyId=deletion["kms_key_id"].split("/")[-1])["KeyMetadata"]
    assert meta["KeyState"] == "PendingDeletion"
    assert datetime.fromisoformat(deletion["deletion_date"]) == meta["DeletionDate"]
    (y_key,) = y_kms
    assert kms.describe_key(KeyId=y_key.split("/")[-1])["KeyMetadata"]["KeyState"] == "Enabled"
    _assert_x_shredded_and_y_readable(root, receipt, x_keys)
    checked = refold.open(root, create=False).verify_receipt(receipt, refold=False)
    assert checked.ok and "KMS key deletions" in [c.name for c in checked.checks]
    # a cancelled deletion would bring the key (and every backup's copy of X's events) back
    kms.cancel_key_deletion(KeyId=deletion["kms_key_id"].split("/")[-1])
    report = refold.open(root, create=False).verify_receipt(receipt, refold=False)
    (check,) = [c for c in report.checks if c.name == "KMS key deletions"]
    assert not report.ok and not check.ok and deletion["kms_key_id"] in check.detail


def test_init_with_a_missing_kms_key_fails_cleanly_and_writes_nothing(tmp_path, aws_env):
    root = tmp_path / "store"
    with pytest.raises(StoreError, match="alias/refold-missing.*NotFoundException"):
        refold.init(root, mode="shred", kms_key_id="alias/refold-missing", kms_endpoint=aws_env.endpoint)
    assert not root.exists()
    with pytest.raises(StoreError, match="--mode shred"):
        refold.init(root, mode="delete", kms_key_id="alias/anything")
    with pytest.raises(StoreError, match="needs --kms-key-per-subject"):
        refold.init(root, mode="shred", kms_key_id="alias/anything", kms_pending_window_days=7)
    assert not root.exists()



def test_init_without_permission_on_the_key_names_the_missing_permission(tmp_path, aws_env):
    """moto enforces a key policy's Deny for kms:DescribeKey (only that action, in 5.2.5)."""
    policy = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "Principal": "*", "Action": ["kms:DescribeKey"], "Resource": "*"}]}
    kms = aws_env.client("kms")
    key = kms.create_key(Policy=json.dumps(policy))["KeyMetadata"]["Arn"]
    root = tmp_path / "store"
    try:
        with pytest.raises(StoreError) as info:
            refold.init(root, mode="shred", kms_key_id=key, kms_endpoint=aws_env.endpoint)
    finally:
        # on moto 5.2.5 this Deny also denied DescribeKey on keys the shared server made later
        # (test_keys after this test): an allowing policy back keeps later tests independent
        allow = {"Version": "2012-10-17", "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "kms:*", "Resource": "*"}]}
        kms.put_key_policy(KeyId=key, PolicyName="default", Policy=json.dumps(allow))
    message = str(info.value)
    assert "AccessDeniedException" in message and "lack kms:DescribeKey" in message and key in message
    assert not root.exists()


def _cli(*args, env):
    """The installed ``refold`` console script, in a process of its own (PYTHONPATH: this tree)."""
    script = str(Path(sys.executable).parent / "refold")
    return subprocess.run([script, *map(str, args)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)


def test_cli_init_records_the_kms_key_and_later_commands_use_it(tmp_path, aws_env, kms_key):
    env = {**os.environ, **aws_env.env(), "PYTHONPATH": str(REPO)}
    env.pop("AWS_ENDPOINT_URL")  # the endpoint must come from the store's settings
    store = tmp_path / "store"
    out = _cli("init", store, "--mode", "shred", "--kms-key-id", kms_key, "--kms-endpoint", aws_env.endpoint,
               env=env)
    assert out.returncode == 0, out.stderr
    assert f"keys in AWS KMS under {kms_key}" in out.stdout
    mem = refold.open(store, create=False)  # this process: the settings name the KMS key and endpoint
    mem.append(H.events()[:3])  # about X (one shared with Y)
    (x_key,) = mem.key_store.key_ids(H.X)
    erased = _cli("erase", store, "--subject", H.X, "--json", env=env)
    assert erased.returncode == 0, erased.stderr
    receipt = json.loads(erased.stdout)
    assert receipt["key_store"]["kms_key_id"] == kms_key and receipt["destroyed_key_ids"] == [x_key]
    after = refold.open(store, create=False).events()
    assert [e.content for e in after if e.event_id.startswith("ev-x-")] == [None] * 3
    assert after[-1].kind == "erasure" and after[-1].content  # the erasure event is in clear

    bad = _cli("init", tmp_path / "other", "--mode", "shred", "--kms-key-id", "alias/refold-missing",
               "--kms-endpoint", aws_env.endpoint, env=env)
    assert bad.returncode == 2 and bad.stdout == ""
    line, = bad.stderr.strip().splitlines()
    assert "alias/refold-missing" in line and aws_env.endpoint in line and "NotFoundException" in line
    assert not (tmp_path / "other").exists()


def test_a_rerun_after_a_kill_still_reports_the_scheduled_kms_deletion(tmp_path, aws_env):
    """Killed (SIGKILL) right after the keys went, before the journal recorded it: the rerun finds
    no key left to destroy, and the receipt still names the KMS deletion and its date (the store
    recorded it before deleting the wrapped keys)."""
    root = tmp_path / "store"
    mem = _build(root, aws_env, kms_key_per_subject=True)
    x_keys = mem.key_store.key_ids(H.X)
    assert H.erase_in_child(root, crash_at="destroy_keys") == -9
    assert not any((root / "keys" / "ids" / k).exists() for k in x_keys)

    receipt = H.erase_x(root)

    (deletion,) = receipt.key_store["kms_key_deletions"]
    meta = aws_env.client("kms").describe_key(KeyId=deletion["kms_key_id"].split("/")[-1])["KeyMetadata"]
    assert meta["KeyState"] == "PendingDeletion"
    assert datetime.fromisoformat(deletion["deletion_date"]) == meta["DeletionDate"]
    assert sorted(receipt.destroyed_key_ids) == sorted(x_keys)
