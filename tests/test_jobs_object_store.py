"""The jobs against a store in a bucket: ``s3://BUCKET/store`` on a local S3 API, no local store.

The S3 API is moto's server run as its own process (``moto_server`` on a free port), not the
in-process threaded server of :mod:`tests.object_store`: this test's process opens the store with
delta-rs too, and a delta-rs call that holds the GIL while it waits for an answer would wait for
a server thread of the same process forever. The jobs (Ray drivers and workers, other processes)
reach it on 127.0.0.1 like any endpoint.

Two submits to one local Ray head (:mod:`tests.ray_head`), the two documented ways of giving a
job its store's endpoint and credentials: a projection with them in the job's runtime env
(``--runtime-env-json '{"env_vars": {...}}'``: the driver and every worker read the usual AWS
variables), then a full refold with them in ``--storage-options``.
The cheaper cases run the job module as a plain process (``--no-ray``): the same job body and
the same error handling, without a cluster.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator

import polars as pl
import pytest

import refold
from refold.fold.spec import FoldSpec
from refold.storage.files.options import RETRY_DEFAULTS, arrow_filesystem, with_defaults
from tests.moto_process import running_moto
from tests.object_store import MotoServer
from tests.ray_head import REPO, chat_events, head, submit, summary  # noqa: F401 - head: the fixture

N_EVENTS = 120


def _events(n: int = N_EVENTS) -> list[dict]:
    return chat_events(n)


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoServer]:
    with running_moto() as server:
        yield server


@pytest.fixture
def bucket(s3) -> str:
    name = f"refold-jobs-{uuid.uuid4().hex[:12]}"
    s3.client("s3").create_bucket(Bucket=name)
    return name


def _run_job(module: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m refold.jobs.<module> ...`` as its own process, without the caller's AWS settings."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                          env={**clean, "PYTHONPATH": str(REPO), **(env or {})}, timeout=300)


def _one_line_error(done: subprocess.CompletedProcess) -> str:
    """The job failed with exit 1, a summary naming the error, and no traceback."""
    assert done.returncode == 1, (done.stdout, done.stderr[-3000:])
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("{")]
    out = json.loads(line)
    assert out["ok"] is False
    assert "Traceback" not in done.stderr and "\u21b3" not in out["error"], done.stderr[-3000:]
    assert "\n" not in out["error"]
    return out["error"]


# -- the options refold adds, and pyarrow's view of them ------------------------------------------

def test_object_store_options_get_conditional_put_and_retries_unless_set():
    assert with_defaults("memory", None) is None and with_defaults("memory", {"a": "1"}) == {"a": "1"}
    opts = with_defaults("s3://b/store", {"AWS_REGION": "eu-west-1", "max_retries": "9"})
    assert opts["conditional_put"] == "etag"  # the log's compare-and-append on S3 (DESIGN.md)
    assert opts["max_retries"] == "9" and opts["AWS_REGION"] == "eu-west-1"  # the caller's wins
    assert opts["retry_timeout"] == RETRY_DEFAULTS["retry_timeout"]
    assert "conditional_put" not in with_defaults("gs://b/store", {})


def test_pyarrow_reads_s3_with_the_endpoint_region_and_credentials_of_the_storage_options():
    fs = arrow_filesystem("s3://b/store", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "eu-west-1",
                                           "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}, env={})
    assert fs.type_name == "s3" and fs.region == "eu-west-1"
    # what the filesystem was built with (pyarrow pickles S3FileSystem by these arguments)
    built = fs.__reduce__()[1][0]
    assert built["endpoint_override"] == "127.0.0.1:9000" and built["scheme"] == "http"
    assert built["access_key"] == "k" and built["secret_key"] == "s"
    # options left out come from the environment, as delta-rs reads them
    fs = arrow_filesystem("s3://b/store", {}, env={"AWS_ENDPOINT_URL": "https://s3.example", "AWS_REGION": "us-west-2"})
    assert fs.region == "us-west-2" and fs.__reduce__()[1][0]["endpoint_override"] == "s3.example"
    assert arrow_filesystem("memory", None) is None and arrow_filesystem("file://memory", None) is None


# -- a job without a cluster: the same body, the same errors --------------------------------------

@pytest.mark.s3
def test_a_projection_job_folds_a_store_in_a_bucket(s3, bucket):
    uri = f"s3://{bucket}/store"
    opts = s3.storage_options()
    mem = refold.init(uri, storage_options=opts)
    mem.append(_events()[:20])
    done = _run_job("refold.jobs.project", uri, "--no-ray", "--no-progress",
                    "--storage-options", json.dumps(opts))
    out = json.loads(done.stdout.splitlines()[-1])
    assert done.returncode == 0 and out["ok"], (out, done.stderr[-3000:])
    assert out["fold"]["extraction_calls"] == 20
    assert refold.open(uri, storage_options=opts).facts().height == 20


@pytest.mark.s3
def test_a_job_names_the_missing_bucket(s3):
    uri = f"s3://refold-no-such-bucket-{uuid.uuid4().hex[:8]}/store"
    error = _one_line_error(_run_job("refold.jobs.project", uri, "--no-ray", "--storage-options",
                                     json.dumps(s3.storage_options())))
    assert uri in error and "the bucket does not exist" in error and "NoSuchBucket" in error


@pytest.mark.s3
def test_a_job_names_an_endpoint_it_cannot_reach(bucket):
    uri = f"s3://{bucket}/store"
    unreachable = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                   "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}  # (the discard port: nothing listens)
    error = _one_line_error(_run_job("refold.jobs.refold", uri, "--no-ray", "--storage-options",
                                     json.dumps({**unreachable, "AWS_ALLOW_HTTP": "true"})))
    assert uri in error and "the endpoint cannot be reached" in error and "AWS_ENDPOINT_URL" in error
    # an http:// endpoint without AWS_ALLOW_HTTP: object_store refuses the scheme
    error = _one_line_error(_run_job("refold.jobs.refold", uri, "--no-ray", "--storage-options",
                                     json.dumps(unreachable)))
    assert uri in error and "AWS_ALLOW_HTTP=true" in error


@pytest.mark.s3
def test_a_job_names_refused_credentials():
    with running_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as server:  # a server that checks keys
        uri = "s3://refold-locked/store"
        # the credentials reach the job through its environment (the runtime-env way), not a flag
        error = _one_line_error(_run_job("refold.jobs.erase", uri, "--subject", "s-x",
                                         env={**server.env(), "AWS_ACCESS_KEY_ID": "unknown"}))
    assert uri in error and "credentials were refused" in error  # (a HEAD answer has no S3 error code)


@pytest.mark.s3
def test_an_erase_job_erases_a_subject_of_a_store_in_a_bucket(s3, bucket):
    """The erase job runs against a bucket like against a folder: the subject's events become
    tombstones, the receipt lands in the bucket and verifies, the chain verifies, and the residue
    scan of every object under the prefix finds nothing (no local store folder anywhere)."""
    from refold.erasure.receipts import list_receipts

    uri = f"s3://{bucket}/store"
    opts = s3.storage_options()
    mem = refold.init(uri, storage_options=opts)
    mem.append(_events()[:10])
    done = _run_job("refold.jobs.erase", uri, "--subject", "s-ana", "--no-ray", "--storage-options",
                    json.dumps(opts))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.splitlines()[-1])
    assert out["ok"] is True and out["config"]["store"] == uri
    (subject,) = out["subjects"]
    assert subject["status"] == "erased" and subject["residue_hits"] == 0
    mem = refold.open(uri, storage_options=opts)
    assert not [e for e in mem.events() if "s-ana" in e.subjects]
    assert mem.verify().ok
    (receipt,) = list_receipts(mem.layout)
    assert receipt.subject_id == "s-ana" and mem.verify_receipt(receipt).ok


class _FlakyProxy:
    """An HTTP proxy in front of the S3 API that answers every ``every``-th request with 503 Slow
    Down without passing it on (a transient object-store failure), and forwards the rest."""

    def __init__(self, target: str, every: int):
        import http.client
        import http.server
        import threading
        from urllib.parse import urlsplit

        host, port = urlsplit(target).hostname, urlsplit(target).port
        proxy = self
        self.requests = self.failed = 0
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    proxy.requests += 1
                    fail = proxy.requests % every == 0
                    proxy.failed += fail
                if fail:
                    self.send_response(503)
                    payload = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(host, port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                length = answer.getheader("Content-Length") if self.command == "HEAD" else str(len(data))
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", length or "0")
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.s3
def test_a_job_rides_out_transient_object_store_errors_with_the_default_retries(s3, bucket):
    uri = f"s3://{bucket}/store"
    mem = refold.init(uri, storage_options=s3.storage_options())
    mem.append(_events()[:30])
    proxy = _FlakyProxy(s3.endpoint, every=4)  # every 4th request of the job answers 503
    try:
        flaky = {**s3.storage_options(), "AWS_ENDPOINT_URL": proxy.endpoint}
        done = _run_job("refold.jobs.project", uri, "--no-ray", "--no-progress", "--storage-options",
                        json.dumps(flaky))
        out = json.loads(done.stdout.splitlines()[-1])
        assert done.returncode == 0 and out["ok"], (out, done.stderr[-3000:])
        assert proxy.failed >= 3  # (the job's reads and commits all went through the proxy)
        # the same job with the library's retries turned off fails on the first 503
        done = _run_job("refold.jobs.refold", uri, "--no-ray", "--no-progress", "--storage-options",
                        json.dumps({**flaky, "max_retries": "0"}))
    finally:
        proxy.close()
    assert done.returncode == 1
    assert refold.open(uri, storage_options=s3.storage_options()).facts().height == 30


# -- on a Ray head node ----------------------------------------------------------------------------

@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.s3
def test_project_refold_and_erase_jobs_on_a_head_node_with_the_store_in_a_bucket(head, s3, bucket, tmp_path):
    uri = f"s3://{bucket}/store"
    opts = s3.storage_options()
    mem = refold.init(uri, storage_options=opts)
    mem.append(_events())
    reference = refold.init(tmp_path / "reference")
    reference.append(_events())
    reference.fold()
    expected = reference.facts().sort("fact_id")

    # 1. a projection whose endpoint and credentials come from the job's runtime env
    env_vars = {**s3.env()}
    done = submit(head, "refold.jobs.project", uri, "--batch-size", "16", "--no-progress",
                  runtime_env={"env_vars": env_vars})
    out = summary(done)
    assert done.returncode == 0 and out["ok"], (out, done.stderr[-3000:])
    assert out["config"]["ray"] is True and out["ray_extraction"]["events"] == N_EVENTS
    assert out["ray_extraction"]["events_from"] == "store"  # the actors read their events by seq
    assert out["fold"]["extraction_calls"] == N_EVENTS

    # 2. a full refold, options as a flag (merge tasks get them from the driver)
    done = submit(head, "refold.jobs.refold", uri, "--no-progress",
                  "--storage-options", json.dumps(opts))
    out = summary(done)
    assert done.returncode == 0 and out["ok"] and out["job"] == "refold", (out, done.stderr[-3000:])
    assert out["fold"]["extraction_calls"] == 0  # every extraction is in the bucket's cache

    after = refold.open(uri, storage_options=opts)
    cache = after.cache.frame()
    assert cache.height == cache["event_id"].n_unique() == N_EVENTS
    assert set(cache["spec_hash"].to_list()) == {FoldSpec().hash}
    assert after.facts().sort("fact_id").select(expected.columns).equals(expected)
    # the partitioned refold's facts are what a fold of the same events on a local disk gives
    assert out["fold"]["facts"] == expected.filter(pl.col("derivation") == "extracted").height
    # the store is in the bucket: no Delta table was written on the node's or the test's disk
    assert not [p for p in [*head.temp.rglob("_delta_log"), *tmp_path.rglob("_delta_log")]
                if (tmp_path / "reference") not in p.parents]
    # nor a side file under a local folder named after the URI (an s3:// string taken for a path)
    assert not [*head.temp.rglob("s3:"), *tmp_path.rglob("s3:"), *REPO.glob("s3:")]
    assert any(k.startswith("store/extractions/_delta_log/") for k in _keys(s3, bucket))

    # 3. an erasure backfill of two subjects as one batch, on the bucket, from a subjects file
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("s-ana\ns-ben\n")
    done = submit(head, "refold.jobs.erase", uri, "--subjects-file", str(subjects), "--no-progress",
                  "--storage-options", json.dumps(opts))
    out = summary(done)
    assert done.returncode == 0 and out["ok"], (out, done.stderr[-3000:])
    assert {s["subject"]: s["status"] for s in out["subjects"]} == {"s-ana": "erased", "s-ben": "erased"}
    erased = refold.open(uri, storage_options=opts)
    assert not [e for e in erased.events() if {"s-ana", "s-ben"} & set(e.subjects)]
    assert erased.verify().ok
    assert any(k.startswith("store/receipts/batches/") for k in _keys(s3, bucket))


def _keys(s3: MotoServer, bucket: str) -> list[str]:
    pages = s3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return [obj["Key"] for page in pages for obj in page.get("Contents", ())]


@pytest.mark.s3
def test_an_extraction_actor_reads_its_batch_from_the_bucket_by_seq(s3, bucket):
    """The actor class behind ``map_batches``, called as Ray Data calls it (no cluster needed)."""
    import pyarrow as pa

    from refold.jobs.ray_extract import _ExtractBatch

    uri = f"s3://{bucket}/store"
    mem = refold.init(uri, storage_options=s3.storage_options())
    mem.append(_events()[:10])
    actor = _ExtractBatch(extractor="rules", options={}, spec=FoldSpec(),
                          events_from=(uri, mem.storage_options))
    out = actor(pa.table({"seq": [7, 2, 3]}))
    assert out["error"].null_count == 3 and out["seq"].to_pylist() == [7, 2, 3]
    stored = {e.seq: e.event_id for e in mem.events()}
    assert [pickle.loads(b).event_id for b in out["extraction"].to_pylist()] == [stored[7], stored[2], stored[3]]
    # seqs the log does not hold (it changed under the fold): the batch fails, as data
    out = actor(pa.table({"seq": [3, 50]}))
    assert out["seq"].to_pylist() == [-1] and out["error"][0].as_py().startswith("ExtractionError\n")
    assert "seq 50" in out["error"][0].as_py() and uri in out["error"][0].as_py()
