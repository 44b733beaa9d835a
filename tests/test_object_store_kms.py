"""Shred mode with the keys in AWS KMS on a store in a bucket (moto's S3 and KMS, in a process of
its own: tests/moto_process.py): the wrapped data keys are objects under ``keys/`` in the bucket,
reads unwrap them through KMS, and erasing a subject deletes its wrapped key objects (on a
versioned bucket their old versions too, as the receipt says) and, per subject, schedules its
KMS key's deletion."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import refold
from refold.storage.keys.kms import ObjectKmsKeyStore
from tests import erasure_helpers as H
from tests.moto_process import moto_process, new_bucket  # noqa: F401


@pytest.fixture
def aws(moto_process, monkeypatch):  # noqa: F811
    """boto3's KMS client reads its credentials and region from the environment."""
    for name, value in moto_process.env().items():
        monkeypatch.setenv(name, value)
    return moto_process


def _build(bucket, root: str, **kms) -> refold.Memory:
    mem = refold.init(root, mode="shred", storage_options=bucket.storage_options,
                      kms_endpoint=bucket.server.endpoint, **kms)
    mem.append(H.events())
    mem.register_subject(H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.register_subject(H.Y, H.Y_NAME)
    mem.fold()
    return mem


def _wrapped(bucket, prefix: str, key_id: str) -> dict:
    body = bucket.server.client("s3").get_object(Bucket=bucket.name, Key=f"{prefix}/keys/ids/{key_id}")["Body"]
    return json.loads(body.read())


def _assert_x_shredded_and_y_readable(bucket, root: str, prefix: str, receipt, x_keys: list[str]) -> None:
    fresh = refold.open(root, create=False, storage_options=bucket.storage_options)  # keys unwrapped anew
    assert isinstance(fresh.key_store, ObjectKmsKeyStore)
    events = {e.event_id: e for e in fresh.events()}
    assert all(events[i].content is None for i in H.X_EVENT_IDS - {"ev-mention"})
    assert all(events[f"ev-y-{i:02d}"].content for i in range(11))
    assert not [f for f in H.facts(fresh) if any(c in str(f) for c in H.CANARIES)]
    assert sorted(receipt.destroyed_key_ids) == sorted(x_keys)
    assert not {f"{prefix}/keys/ids/{k}" for k in x_keys} & set(bucket.keys())
    assert receipt.scan["hits"] == []
    assert fresh.verify().ok
    assert fresh.verify_receipt(receipt, needles=H.NEEDLES).ok


def test_one_kms_key_for_a_store_in_a_bucket(aws):
    bucket = new_bucket(aws)
    kms_key = aws.client("kms").create_key(Description="refold test key")["KeyMetadata"]["Arn"]
    root = f"{bucket.uri}/shred"
    mem = _build(bucket, root, kms_key_id=kms_key)
    assert isinstance(mem.key_store, ObjectKmsKeyStore) and mem.key_store.kind == "kms"
    x_keys = mem.key_store.key_ids(H.X)
    ids = [k for k in bucket.keys() if k.startswith("shred/keys/ids/")]
    assert x_keys and len(ids) > len(x_keys)
    for key in ids:  # only wrapped keys in the bucket, each under the store's KMS key
        record = _wrapped(bucket, "shred", key.rsplit("/", 1)[1])
        assert set(record) == {"format", "kms_key_id", "wrapped"} and record["kms_key_id"] == kms_key
    assert any(e.content for e in mem.events() if H.X in e.subjects)  # decrypted through KMS

    receipt = mem.erase(H.X, canaries=H.CANARIES)

    assert receipt.status == "erased"
    assert receipt.key_store["key_store"] == "kms" and receipt.key_store["kms_key_id"] == kms_key
    assert receipt.key_store["how"] == "wrapped data keys deleted"
    assert "old_versions" not in receipt.scan  # (no versioning on this bucket)
    _assert_x_shredded_and_y_readable(bucket, root, "shred", receipt, x_keys)
    # the process that erased stops reading X at once too (its cached plaintext keys are dropped)
    assert all(e.content is None for e in mem.events() if e.event_id in H.X_EVENT_IDS - {"ev-mention"})


def test_a_kms_key_per_subject_on_a_versioned_bucket(aws):
    bucket = new_bucket(aws, versioned=True)
    root = f"{bucket.uri}/memory"
    mem = _build(bucket, root, kms_key_per_subject=True, kms_pending_window_days=8)
    x_keys = mem.key_store.key_ids(H.X)
    x_kms = {_wrapped(bucket, "memory", k)["kms_key_id"] for k in x_keys}
    y_kms = {_wrapped(bucket, "memory", k)["kms_key_id"] for k in mem.key_store.key_ids(H.Y)}
    assert len(x_kms) == 1 and x_kms.isdisjoint(y_kms)

    receipt = mem.erase(H.X, canaries=H.CANARIES)

    (deletion,) = receipt.key_store["kms_key_deletions"]
    assert deletion["kms_key_id"] in x_kms and deletion["pending_window_days"] == 8
    kms = aws.client("kms")
    assert kms.describe_key(KeyId=deletion["kms_key_id"].split("/")[-1])["KeyMetadata"]["KeyState"] == "PendingDeletion"
    (y_key,) = y_kms
    assert kms.describe_key(KeyId=y_key.split("/")[-1])["KeyMetadata"]["KeyState"] == "Enabled"
    # the deletions record is in the bucket, so a rerun reports them again
    assert any(k.startswith("memory/keys/kms-deletions/") for k in bucket.keys())
    # the wrapped keys' old versions went with the erasure's old-version cleanup, as the receipt says
    assert receipt.scan["old_versions"]["removed"] > 0 and "error" not in receipt.scan["old_versions"]
    listing = aws.client("s3").list_object_versions(Bucket=bucket.name, Prefix="memory/keys/ids/")
    left = {v["Key"] for v in [*listing.get("Versions", ()), *listing.get("DeleteMarkers", ())]}
    assert not {f"memory/keys/ids/{k}" for k in x_keys} & left
    _assert_x_shredded_and_y_readable(bucket, root, "memory", receipt, x_keys)


def test_the_cli_inits_erases_and_verifies_a_kms_store_in_a_bucket(aws):
    """The console script, in processes of their own: AWS settings from the environment."""
    bucket = new_bucket(aws)
    kms_key = aws.client("kms").create_key(Description="refold test key")["KeyMetadata"]["Arn"]
    root = f"{bucket.uri}/cli"
    env = {**os.environ, **aws.env(), "PYTHONPATH": str(H.REPO)}

    def cli(*args):
        return subprocess.run([os.path.join(os.path.dirname(sys.executable), "refold"), *args], env=env,
                              capture_output=True, text=True, timeout=120)

    out = cli("init", root, "--mode", "shred", "--kms-key-id", kms_key, "--kms-endpoint", aws.endpoint)
    assert out.returncode == 0, out.stderr
    mem = refold.open(root, create=False, storage_options=bucket.storage_options)
    mem.append(H.events()[:3])  # about X (one shared with Y)
    (x_key,) = mem.key_store.key_ids(H.X)
    erased = cli("erase", root, "--subject", H.X, "--json")
    assert erased.returncode == 0, erased.stderr
    receipt = json.loads(erased.stdout)
    assert receipt["key_store"]["key_store"] == "kms" and receipt["destroyed_key_ids"] == [x_key]
    assert f"cli/keys/ids/{x_key}" not in bucket.keys()
    verified = cli("verify", root)
    assert verified.returncode == 0, verified.stderr
