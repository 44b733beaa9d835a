"""The LoCoMo conversations (locomo10.zip), for tests that read real chat text.

Where the archive is looked for, first match wins:

1. ``$REFOLD_LOCOMO_DIR/locomo10.zip`` (``.ci/run`` sets it to ``../shared/data``);
2. ``../shared/data/locomo10.zip`` beside the repository root (the project's environment keeps the
   data set there, never in the repository; see that folder's README).
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import pytest

ARCHIVE = "locomo10.zip"
ENV = "REFOLD_LOCOMO_DIR"
#: ../shared/data, relative to the repository root (this file is tests/locomo_helpers.py).
BESIDE_REPO = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def locomo_archive() -> Path:
    """Where locomo10.zip is expected: in ``$REFOLD_LOCOMO_DIR`` when set, else ../shared/data."""
    configured = os.environ.get(ENV)
    return (Path(configured) if configured else BESIDE_REPO) / ARCHIVE


def conversations() -> list[dict]:
    """Every conversation's JSON (one file per conversation in the zip), in file-name order.

    Fails the calling test, saying where the data was looked for and how to provide it, when the
    archive is absent: the data ships with the project's environment (../shared/data), so its
    absence is a broken set-up that a skip would hide.
    """
    path = locomo_archive()
    if not path.is_file():
        pytest.fail(f"LoCoMo data not found at {path}: put {ARCHIVE} (the LoCoMo-10 release, see "
                    f"../shared/data/README) in ../shared/data beside the repository, or set {ENV} "
                    "to the folder that holds it, and run the tests again", pytrace=False)
    with zipfile.ZipFile(path) as archive:
        names = sorted(n for n in archive.namelist() if n.endswith(".json"))
        return [json.loads(archive.read(name)) for name in names]
