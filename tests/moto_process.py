"""The local S3/KMS API (moto) in a process of its own, for tests that drive a whole store.

``tests/object_store.py`` runs moto's threaded server inside the test process. That suits calls
that release the GIL while they wait on the network, but some deltalake calls (``DeltaTable.history``,
which every append reads) hold it while they wait for the server: against a server that needs the
GIL of the same process they wait forever. A real bucket is never in the caller's process, so a
server in a subprocess is also the more faithful set-up.

``moto_process`` (module scope): a :class:`tests.object_store.MotoServer` whose server runs in a
child process, stopped when the module's tests end. ``process_bucket``: a fresh bucket on it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.object_store import Bucket, MotoServer

_SERVER = """
import sys
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
sys.stdin.read()  # until the parent closes it
server.stop()
"""


@contextlib.contextmanager
def running_moto(env: dict[str, str] | None = None) -> Iterator[MotoServer]:
    """A moto server in a child process for the ``with`` block; ``env``: moto settings for it
    (e.g. ``INITIAL_NO_AUTH_ACTION_COUNT=0`` for a server that checks credentials)."""
    proc = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
    try:
        endpoint = proc.stdout.readline().strip()
        if not endpoint.startswith("http://"):
            pytest.fail("the moto server process did not start", pytrace=False)
        yield MotoServer(endpoint=endpoint)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def moto_process() -> Iterator[MotoServer]:
    with running_moto() as server:
        yield server


def new_bucket(server: MotoServer, *, versioned: bool = False) -> Bucket:
    name = f"refold-test-{uuid.uuid4().hex[:16]}"
    s3 = server.client("s3")
    s3.create_bucket(Bucket=name)
    if versioned:
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    return Bucket(name, server)
