"""A real S3 and KMS API for the tests: moto's threaded server on 127.0.0.1.

The fixtures below (registered by ``tests/conftest.py``) give a test the same wire protocol a
store on AWS speaks, with nothing outside the machine: the store code under test talks to it
through its ordinary clients (delta-rs ``storage_options``, boto3), exactly as it would to AWS.

Fixtures:

``moto_server`` (session)
    One :class:`MotoServer`: ``endpoint`` (``http://127.0.0.1:PORT``), dummy credentials,
    region ``us-east-1``. Started on a free port on first use, stopped at the end of the
    session. ``env()`` is the AWS environment a subprocess (the ``refold`` CLI) needs;
    ``client("s3" | "kms")`` a boto3 client bound to it.
``s3_bucket`` (function)
    A fresh, empty :class:`Bucket` per test (unique name, ``s3://NAME``), with the
    ``storage_options`` delta-rs needs to read and write Delta tables in it (conditional put by
    etag, so the log's compare-and-append works; see DESIGN.md, "Known delta-rs facts").
``kms_key`` (function)
    The ARN of a fresh symmetric KMS key on the server (each test its own key).
``aws_env`` (function)
    ``monkeypatch``-sets the server's AWS environment (endpoint, credentials, region) for the
    test's own process, for code that reads the usual AWS variables.

Measured with moto 5.2.5: it honours ``If-None-Match: *`` on PutObject, rejects one-letter
bucket names, and its KMS emulation still serves ``GenerateDataKey``/``Decrypt`` for a key pending
deletion (real KMS refuses them), so tests check a scheduled deletion through ``DescribeKey``'s
``KeyState``, not through a failing decrypt.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

REGION = "us-east-1"
#: dummy credentials: moto accepts any, and they make sure no real account is ever reached
ACCESS_KEY_ID = "refold-test-access-key"
SECRET_ACCESS_KEY = "refold-test-secret-key"


@dataclass(frozen=True)
class MotoServer:
    """Where the local S3/KMS API listens, and the credentials to use."""

    endpoint: str
    region: str = REGION
    access_key_id: str = ACCESS_KEY_ID
    secret_access_key: str = SECRET_ACCESS_KEY

    def env(self) -> dict[str, str]:
        """The usual AWS variables pointing at this server (for subprocesses and boto3)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    def storage_options(self) -> dict[str, str]:
        """delta-rs ``storage_options`` for a table on this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "conditional_put": "etag",
        }

    def client(self, service: str):
        import boto3

        return boto3.client(service, endpoint_url=self.endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=self.secret_access_key)


@dataclass(frozen=True)
class Bucket:
    """One test's bucket: ``uri`` is ``s3://NAME``; ``storage_options`` go to delta-rs."""

    name: str
    server: MotoServer

    @property
    def uri(self) -> str:
        return f"s3://{self.name}"

    @property
    def storage_options(self) -> dict[str, str]:
        return self.server.storage_options()

    def keys(self) -> list[str]:
        """Every object key in the bucket (to check what a write left behind)."""
        s3 = self.server.client("s3")
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=self.name)
        return sorted(obj["Key"] for page in pages for obj in page.get("Contents", ()))


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)  # port 0: a free one
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield MotoServer(endpoint=f"http://{host}:{port}")
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(moto_server: MotoServer) -> Bucket:
    name = f"refold-test-{uuid.uuid4().hex[:16]}"  # moto wants >= 3 characters; unique per test
    moto_server.client("s3").create_bucket(Bucket=name)
    return Bucket(name, moto_server)


@pytest.fixture
def kms_key(moto_server: MotoServer) -> str:
    meta = moto_server.client("kms").create_key(Description="refold test key")["KeyMetadata"]
    return meta["Arn"]


@pytest.fixture
def aws_env(moto_server: MotoServer, monkeypatch) -> MotoServer:
    for name, value in moto_server.env().items():
        monkeypatch.setenv(name, value)
    return moto_server
