"""Chain heads: the newest log position, and its publication under ``receipts/heads/``.

Each append publishes the head it created (one small JSON file per table version, the newest few
kept) so ``verify`` can tell a truncated tail — a removed newest commit — from a short log. A
head kept *outside* the store (``refold head --json``) is the stronger check (`verify --against`).
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

_HEAD_GLOB = "[0-9]" * 20 + ".json"  # receipts/heads/<table version, 20 digits>.json


@dataclass(frozen=True)
class Head:
    """The newest position of the log: last seq (-1 when empty), its link, record time and table version."""

    seq: int
    link: str
    recorded_at: datetime
    table_version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "link": self.link,
            "recorded_at": self.recorded_at.isoformat(),
            "table_version": self.table_version,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Head":
        return cls(
            seq=int(value["seq"]),
            link=str(value["link"]),
            recorded_at=datetime.fromisoformat(value["recorded_at"]),
            table_version=int(value["table_version"]),
        )


def publish_head(folder: str | os.PathLike, head: Head, *, keep: int = 16) -> None:
    """Best effort: the commit already landed, so a failure here must not fail the append."""
    folder = Path(folder)
    try:
        # rename without fsync, like the Delta commit itself: after a crash a head file may be
        # empty, and read_published_head() then falls back to the one before
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".tmp-{os.getpid()}-{threading.get_ident()}.json"
        tmp.write_text(json.dumps(head.as_json()), encoding="utf-8")
        os.replace(tmp, folder / f"{head.table_version:020d}.json")
        # only published heads: other writers' temp files (".tmp-*.json") are not ours to remove
        for old in sorted(folder.glob(_HEAD_GLOB))[:-keep]:
            old.unlink(missing_ok=True)
    except OSError as exc:
        warnings.warn(f"refold: could not publish the chain head of version "
                      f"{head.table_version} under {folder}: {exc}", RuntimeWarning, stacklevel=3)


def read_published_head(folder: str | os.PathLike) -> Head | None:
    """The newest readable head published in ``folder`` (None when none was published)."""
    folder = Path(folder)
    files = sorted(folder.glob(_HEAD_GLOB)) if folder.exists() else []
    for path in reversed(files):
        try:
            return Head.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError):
            continue
    return None
