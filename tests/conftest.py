"""Shared fixtures: real stores in temporary folders."""

from __future__ import annotations

import os

import pytest

# Never reach a model hub: models come from installed packages only.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def mem(tmp_path):
    """A fresh delete-mode store."""
    import refold

    return refold.init(tmp_path / "store")
