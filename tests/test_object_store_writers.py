"""Several processes appending to one store in a bucket at once (the local S3 API, moto, in a
process of its own): the compare-and-append runs on the store's conditional put, so every
acknowledged append lands exactly once, the chain verifies, and each commit's published head is
its own object that no other writer overwrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import refold
from refold.storage.log.heads import store_head_lines
from tests.moto_process import moto_process, new_bucket  # noqa: F401

WRITERS, BATCHES = 4, 4

_WRITER = """
import json, sys, warnings
import refold
root, options, who, batches = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
warnings.simplefilter("error")  # a head that could not be published fails the writer
mem = refold.open(root, storage_options=options, group_commit=False)
acked = []
for b in range(batches):
    ids = [f"{who}-{b}-{i}" for i in range(2)]
    mem.append([{"kind": "chat_turn", "content": f"{who} says {i}", "source": f"chat#{who}", "event_id": i}
                for i in ids])
    acked += ids
print(json.dumps(acked))
"""


def test_concurrent_writers_on_a_bucket_lose_nothing_and_overwrite_no_head(moto_process):
    bucket = new_bucket(moto_process)
    root = f"{bucket.uri}/shared"
    options = bucket.storage_options
    refold.init(root, storage_options=options)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, root, json.dumps(options), f"w{n}", str(BATCHES)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for n in range(WRITERS)]
    acked = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-2000:]
        acked += json.loads(out.strip().splitlines()[-1])

    mem = refold.open(root, storage_options=options)
    ids = [e.event_id for e in mem.events()]
    assert sorted(ids) == sorted(acked) and len(acked) == WRITERS * BATCHES * 2  # each exactly once
    assert [e.seq for e in mem.events()] == list(range(len(acked)))
    report = mem.verify()
    assert report.ok, report.problems
    # one head object per commit, each naming its own version (the newest 16 are kept)
    lines = store_head_lines(mem.layout)
    assert all(line.head is not None for line in lines)
    assert [int(line.where[:20]) for line in lines] == [line.head.table_version for line in lines]
    assert [line.head.table_version for line in lines] == list(range(1, WRITERS * BATCHES + 1))
    assert max(line.head.seq for line in lines) == len(acked) - 1


def test_signed_heads_on_a_bucket(moto_process, tmp_path, monkeypatch):
    """Signing set up for a store in a bucket: appends publish signed head objects, and verify
    checks their signatures against the public key recorded in the bucket."""
    from refold.storage.log.signing import KEY_ENV, PUBLIC_KEY_FILE, set_up_signing

    bucket = new_bucket(moto_process)
    root, options = f"{bucket.uri}/signed", bucket.storage_options
    mem = refold.init(root, storage_options=options)
    key = tmp_path / "head-signing.pem"
    set_up_signing(mem.layout, key)
    assert f"signed/receipts/heads/{PUBLIC_KEY_FILE}" in bucket.keys()  # the public key, in the bucket
    monkeypatch.setenv(KEY_ENV, str(key))
    mem = refold.open(root, storage_options=options)
    mem.append({"kind": "chat_turn", "content": "signed words", "source": "chat#1"})
    signed = [line for line in store_head_lines(mem.layout) if line.signature]
    assert len(signed) == 1
    report = mem.verify(signed_heads=True)
    assert report.ok, report.problems
