"""The LoCoMo conversations in ../shared/data (see its README), for tests that read real chat text."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo10.zip"
if not DATA.exists():  # the brief's layout: /work/shared next to the repo
    DATA = Path("/work/shared/data/locomo10.zip")


def conversations() -> list[dict]:
    """Every conversation's JSON (one file per conversation in the zip), in file-name order.

    Fails the calling test, saying where the data was looked for, when the archive is absent: the
    data ships with the project's environment (../shared/data), so its absence is a broken set-up
    that a skip would hide.
    """
    if not DATA.exists():
        pytest.fail(f"LoCoMo data not found at {DATA}: put locomo10.zip from ../shared/data there "
                    "(see its README) and run the tests again")
    with zipfile.ZipFile(DATA) as archive:
        names = sorted(n for n in archive.namelist() if n.endswith(".json"))
        return [json.loads(archive.read(name)) for name in names]
