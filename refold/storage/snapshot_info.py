"""A snapshot's manifest as a value (see :mod:`refold.storage.snapshots` for the folder it describes)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from refold.fold.errors import StoreError
from refold.fold.snapshot_codec import FORMAT, FORMATS

__all__ = ["SnapshotInfo", "contained_digest"]


def contained_digest(ids: Iterable[str]) -> str:
    """SHA-256 over the sorted, newline-joined event ids."""
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


@dataclass(frozen=True)
class SnapshotInfo:
    """One snapshot's manifest (no personal data: positions, counts and digests)."""

    spec_hash: str
    last_seq: int
    link: str
    path: str
    stats: dict[str, int] = field(default_factory=dict)
    nodes: int = 0
    edges: int = 0
    contained: int = 0
    contained_sha256: str = ""
    created_at: str = ""
    files: dict[str, str] = field(default_factory=dict)
    format: str = FORMAT

    @property
    def events(self) -> int:
        """Log events covered: seqs 0 … last_seq."""
        return self.last_seq + 1

    @property
    def indexed(self) -> bool:
        """Whether it has the bucket index (format 3: ``index.parquet`` and the contained ids'
        buckets), so that a patch can read only the buckets it needs."""
        return self.format == FORMAT and "index" in self.files and "edges" not in self.files

    def as_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["events"] = self.events
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any], path: str) -> "SnapshotInfo":
        if value.get("format") not in FORMATS:
            raise StoreError(f"snapshot {path} has format {value.get('format')!r}, expected one of {FORMATS}")
        return cls(spec_hash=value["spec_hash"], last_seq=int(value["last_seq"]), link=value["link"],
                   path=path, stats=dict(value["stats"]), nodes=int(value["nodes"]),
                   edges=int(value["edges"]), contained=int(value["contained"]),
                   contained_sha256=value["contained_sha256"], created_at=value["created_at"],
                   files=dict(value["files"]), format=value["format"])
