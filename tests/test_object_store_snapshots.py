"""Snapshots of a store in a bucket (the local S3 API, moto, in its own process): written as
objects with the manifest last, read back by a fresh Memory whose fold resumes from them, a
half-uploaded one never read and cleaned up, an erasure in delete mode leaving none that holds
the subject, and ``refold snapshot s3://…`` from the CLI.

One store per module (moto is slow-ish), checked by the tests in the module's order.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

import refold
from refold import erasing
from refold.storage.scan import scan_report
from refold.storage.snapshots import SnapshotStore
from tests import erasure_helpers as H
from tests.moto_process import moto_process, new_bucket  # noqa: F401

#: these tests are about the graph engine (its snapshots, their patching, its reads)
FOLD_ENGINE = "graph"


@pytest.fixture(scope="module")
def bucket(moto_process):
    return new_bucket(moto_process)


@pytest.fixture(scope="module")
def store(bucket):
    mem = refold.init(f"{bucket.uri}/memory", storage_options=bucket.storage_options)
    mem.append(H.events()[:12])
    erasing.register_subject(mem, H.X, H.X_NAME, aliases=[H.X_ALIAS], identifiers=[H.X_EMAIL])
    mem.fold(snapshot_every=0)
    return mem


@pytest.fixture(scope="module")
def first(store):
    return store.snapshot()


def _snapshot_keys(bucket) -> list[str]:
    return [k for k in bucket.keys() if k.startswith("memory/snapshots/")]


def _fresh(store, bucket):
    return refold.open(store.root, storage_options=bucket.storage_options)


def test_a_snapshot_is_written_as_objects_with_its_manifest(store, bucket, first):
    assert first is not None and first.last_seq >= 11  # (12 events, the spec and subject records)
    prefix = f"memory/snapshots/{first.spec_hash}/{first.last_seq:012d}/"
    assert first.path == f"{bucket.uri}/{prefix.rstrip('/')}"
    keys = {k[len(prefix):] for k in _snapshot_keys(bucket) if k.startswith(prefix)}
    assert keys == {"manifest.json", *(f"{name}.parquet" for name in first.files)}
    listed = SnapshotStore(store.layout, storage_options=bucket.storage_options).list()
    assert [(s.spec_hash, s.last_seq, s.files) for s in listed] == [(first.spec_hash, first.last_seq, first.files)]
    # the same position again: the existing snapshot, nothing rewritten
    assert store.snapshot().created_at == first.created_at


def test_a_fresh_memory_resumes_from_the_snapshot_in_the_bucket(store, bucket, first, monkeypatch, tmp_path):
    store.append(H.events()[12:])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the download goes
    fresh = _fresh(store, bucket)
    report = fresh.fold(snapshot_every=0)
    assert report.started_from == first.last_seq and report.last_seq > first.last_seq
    assert list(tmp_path.iterdir()) == [], "the downloaded snapshot files are removed after the load"
    full = _fresh(store, bucket)
    full.fold(full=True, snapshot_every=0)
    assert sorted(H.facts(fresh)) == sorted(H.facts(full))


def test_a_half_uploaded_snapshot_is_never_read_and_prune_removes_the_older_ones(store, bucket, first):
    s3 = bucket.server.client("s3")
    spec_prefix = f"memory/snapshots/{first.spec_hash}"
    nodes = s3.get_object(Bucket=bucket.name, Key=f"{spec_prefix}/{first.last_seq:012d}/nodes.parquet")["Body"].read()
    for position in (3, 90):  # no manifest: an upload cut short (3), or one still going (90)
        s3.put_object(Bucket=bucket.name, Key=f"{spec_prefix}/{position:012d}/nodes.parquet", Body=nodes)
    snaps = SnapshotStore(store.layout, storage_options=bucket.storage_options)
    assert [s.last_seq for s in snaps.list(first.spec_hash)] == [first.last_seq]
    fresh = _fresh(store, bucket)
    assert fresh.fold(snapshot_every=0).started_from == first.last_seq
    second = fresh.snapshot()
    assert first.last_seq < second.last_seq < 90
    removed = snaps.prune(first.spec_hash, keep=1)
    assert [s.last_seq for s in removed] == [first.last_seq]
    positions = sorted({k.split("/")[3] for k in _snapshot_keys(bucket)})
    # the older leftover is gone; the one past the kept snapshot may still be uploading
    assert positions == [f"{second.last_seq:012d}", f"{90:012d}"]


def test_delete_mode_erasure_leaves_no_snapshot_holding_the_subject(store, bucket):
    fresh = _fresh(store, bucket)
    snaps = SnapshotStore(fresh.layout, storage_options=bucket.storage_options)
    x_events = sorted(H.X_EVENT_IDS)
    preview = snaps.preview(x_events)
    assert preview.rows == 2 and any(d.endswith("/000000000090") for d in preview.detail), preview
    assert scan_report(fresh.root, H.NEEDLES, storage_options=bucket.storage_options).hits
    receipt = erasing.erase(fresh, H.X, canaries=H.CANARIES, include_mentions=True)
    assert receipt.status == "erased" and receipt.scan["hits"] == []
    notes = repr(receipt.as_json())
    assert "not patched: the store is on object storage" in notes
    assert all(not (set(x_events) & snaps.contained_ids(s)) for s in snaps.list())
    assert not any("/000000000090/" in k for k in _snapshot_keys(bucket)), "the purge removes unfinished uploads"
    assert scan_report(fresh.root, H.NEEDLES, storage_options=bucket.storage_options).hits == ()


def test_refold_snapshot_from_the_cli_reports_the_snapshot_in_the_bucket(store, bucket):
    env = {**os.environ, **bucket.server.env(), "PYTHONPATH": str(H.REPO)}
    cli = [os.path.join(os.path.dirname(sys.executable), "refold"), "snapshot", store.root]
    done = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert "snapshot at seq" in done.stdout and f"{store.root}/snapshots/" in done.stdout
    listed = subprocess.run([*cli, "--list"], env=env, capture_output=True, text=True, timeout=180)
    assert listed.returncode == 0 and "1 snapshot(s)" in listed.stdout, listed.stdout + listed.stderr
