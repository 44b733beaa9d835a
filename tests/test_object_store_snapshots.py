"""Snapshots (tagged versions of the state tables) of a store in a bucket (the local S3 API, moto,
in its own process): a fold writes the state tables as objects and tags them; a fresh Memory
resumes from the tag in the bucket and extracts only the new events; a read as of the first
fold's position travels back to that version in the bucket; a vacuum keeps what its retention
covers; ``refold fold s3://…`` from the CLI tags the head. Every state is held to the reference
fold of the log. (Erasure in a bucket: tests/test_object_store_erasure.py.)

One store per module (moto is slow-ish), checked by the tests in the module's order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import refold
from refold.reads.tables import read_tables
from tests import erasure_helpers as H
from tests.fold_helpers import canonical_graph, fact_event, reference_facts, reference_of
from tests.moto_process import moto_process, new_bucket  # noqa: F401
from tests.snapshot_helpers import CountingRules


@pytest.fixture(scope="module")
def bucket(moto_process):  # noqa: F811
    return new_bucket(moto_process)


@pytest.fixture(scope="module")
def store(bucket):
    """The store, its first fold's report and the log version right after it."""
    mem = refold.init(f"{bucket.uri}/memory", storage_options=bucket.storage_options)
    mem.append(H.events()[:12])
    first = mem.fold()
    return mem, first, mem.log_store.version()


def _fresh(mem, bucket) -> refold.Memory:
    return refold.open(mem.root, storage_options=bucket.storage_options)


def test_a_fold_writes_and_tags_the_state_tables_in_the_bucket(store, bucket):
    mem, first, _ = store
    prefix = f"memory/state/{first.spec_hash}/"
    tables = {k[len(prefix):].split("/")[0] for k in bucket.keys() if k.startswith(prefix)}
    assert tables == {"items", "facts", "entities"}
    fresh = _fresh(mem, bucket)
    tags = fresh.state_store(fresh.current_spec()).tags()
    assert [t.log_seq for t in tags] == [first.last_seq] == [fresh.head().seq]
    assert canonical_graph(fresh.graph()) == canonical_graph(reference_of(fresh).graph)
    assert fresh.facts(subject=H.X_NAME).height > 0


def test_a_fresh_memory_resumes_from_the_tag_in_the_bucket(store, bucket):
    mem, first, _ = store
    mem.append(H.events()[12:])
    ext = CountingRules()
    report = _fresh(mem, bucket).fold(extractor=ext)
    assert report.started_from == first.last_seq and report.last_seq > first.last_seq
    assert ext.calls == report.extraction_calls == len(H.events()[12:])  # only the new events
    full = _fresh(mem, bucket)
    assert canonical_graph(full.graph()) == canonical_graph(reference_of(full).graph)
    assert [t.log_seq for t in full.state_store(full.current_spec()).tags()] == [first.last_seq, report.last_seq]


def test_a_read_as_of_the_first_fold_travels_to_that_version_in_the_bucket(store, bucket):
    mem, first, version = store
    fresh = _fresh(mem, bucket)
    spec = fresh.current_spec()
    assert read_tables(fresh.store, version, spec)[1].log_seq == first.last_seq  # that tagged version, no overlay
    got = fresh.facts(as_of=version)
    assert got.height and got.equals(reference_facts(reference_of(fresh, as_of=version)))
    assert got.height < fresh.facts().height  # (the later events' facts are not in it)


def test_a_vacuum_in_the_bucket_keeps_what_its_retention_covers(store, bucket):
    mem, _, version = store
    fresh = _fresh(mem, bucket)
    spec = fresh.current_spec()
    tags = fresh.state_store(spec).tags()
    assert fresh.vacuum_state(retain_hours=168) == {spec.hash: 0}  # every version is younger than a week
    again = _fresh(mem, bucket)
    assert again.state_store(spec).tags() == tags
    assert again.facts(as_of=version).equals(reference_facts(reference_of(again, as_of=version)))


def test_refold_fold_from_the_cli_tags_the_head_in_the_bucket(store, bucket):
    mem, _, _ = store
    mem.append(fact_event(H.Y_NAME, "visited", "Lima", day=40, event_id="ev-cli", subjects=[H.Y]))
    before = _fresh(mem, bucket).state_store(mem.current_spec()).tag()
    env = {**os.environ, **bucket.server.env(), "PYTHONPATH": str(H.REPO)}
    cli = os.path.join(os.path.dirname(sys.executable), "refold")
    done = subprocess.run([cli, "fold", mem.root, "--json", "--no-progress"], env=env, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["started_from"] == before.log_seq and report["extraction_calls"] == 1
    fresh = _fresh(mem, bucket)
    assert fresh.state_store(fresh.current_spec()).tag().log_seq == report["last_seq"] == fresh.head().seq
