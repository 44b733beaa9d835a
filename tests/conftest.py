"""Shared fixtures: real stores in temporary folders."""

from __future__ import annotations

import os

import pytest

# the local S3/KMS API (moto): fixtures moto_server, s3_bucket, kms_key, aws_env
from tests.object_store import aws_env, kms_key, moto_server, s3_bucket  # noqa: F401

# Never reach a model hub: models come from installed packages only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


#: Fixtures that start something heavy, and the marker every test using one gets (directly or
#: through another fixture: pytest's fixture closure), so that ``make test-fast``
#: (``-m "not slow and not ray and not llm and not s3"``) leaves it out without a decorator of its
#: own. The names are the fixtures of tests/object_store.py and tests/moto_process.py (moto's
#: S3/KMS server), tests/ray_head.py (a ``ray start --head`` node), tests/ray_cluster.py (a head
#: and a worker node) and tests/llm_server.py
#: (llama.cpp serving the packaged GGUF). A test that starts one of these some other way (a local
#: ``ray.init``, an in-process llama.cpp model, ``running_moto()``) carries the marker itself; so
#: does a test of faiss or the MiniLM model (``search``) and one that takes more than a few
#: seconds (``slow``). The markers are declared in pyproject.toml ([tool.pytest.ini_options]).
FIXTURE_MARKERS = {
    "moto_server": "s3", "s3_bucket": "s3", "kms_key": "s3", "aws_env": "s3", "moto_process": "s3",
    "head": "ray", "two_nodes": "ray",
    "llama_server": "llm",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(item.fixturenames)
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in used and item.get_closest_marker(marker) is None:
                item.add_marker(marker)


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
