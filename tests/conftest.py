"""Shared fixtures: real stores in temporary folders."""

from __future__ import annotations

import os

import pytest

# the local S3/KMS API (moto): fixtures moto_server, s3_bucket, kms_key, aws_env
from tests.object_store import aws_env, kms_key, moto_server, s3_bucket  # noqa: F401

# Never reach a model hub: models come from installed packages only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def mem(tmp_path):
    """A fresh delete-mode store."""
    import refold

    return refold.init(tmp_path / "store")


@pytest.fixture(scope="session", autouse=True)
def _ray_shut_down_before_the_summary():
    """Disconnect a Ray runtime the tests started before pytest prints its summary, so Ray's
    log lines (from the deliberately killed workers) never come after the closing line."""
    yield
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
