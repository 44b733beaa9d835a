"""Where things live under a store root, and the store's own small settings file.

    ROOT/
      store.json      format version, erasure mode ("delete" or "shred") and, in shred mode, the
                      key store (absent: key files; "kms": AWS KMS), written once by init
      events/         Delta table: the log (the only source of truth)
      extractions/    Delta table: extraction cache (derived)
      snapshots/      folded state at log positions (derived)
      index/          vector index (derived)
      keys/           per-subject keys (shred mode); a file per key, deleted for real
      receipts/       erasure receipts; receipts/heads/ holds published chain heads
      subjects.json   subject registry (names and aliases per opaque subject id; erasable)
      retention.json  retention rules and legal holds (refold.retention)

Only local paths get the side files (heads, keys, receipts); the Delta tables also accept object
store URIs with ``storage_options``.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from refold.fold.errors import StoreError

from .filemodes import file_mode, make_dirs

FORMAT_VERSION = 1
Mode = Literal["delete", "shred"]


@dataclass(frozen=True)
class Layout:
    """Paths of one store."""

    root: str

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def events(self) -> str:
        return self._join("events")

    @property
    def extractions(self) -> str:
        return self._join("extractions")

    @property
    def snapshots(self) -> str:
        return self._join("snapshots")

    @property
    def index(self) -> str:
        return self._join("index")

    @property
    def keys(self) -> str:
        return self._join("keys")

    @property
    def receipts(self) -> str:
        return self._join("receipts")

    @property
    def heads(self) -> str:
        return self._join("receipts", "heads")

    @property
    def settings(self) -> str:
        return self._join("store.json")

    @property
    def subjects(self) -> str:
        return self._join("subjects.json")

    @property
    def retention(self) -> str:
        return self._join("retention.json")

    @property
    def is_local(self) -> bool:
        return "://" not in self.root or self.root.startswith("file://")


def atomic_write_json(path: str | os.PathLike, value: Any) -> None:
    """Write JSON so a reader sees the old file or the new one, never half (temp file, fsync, rename)."""
    atomic_write_text(path, json.dumps(value, indent=2, sort_keys=True, default=str))


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` so a reader sees the old file or the new one, never half (temp file, fsync,
    rename), with the mode the store's folder calls for (0600, or 0660 in a group-shared store)."""
    path = Path(path)
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)  # 0600
    try:
        os.fchmod(fd, file_mode(path.parent))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_settings(layout: Layout, mode: Mode, *, keys: dict[str, Any] | None = None) -> dict[str, Any]:
    """``keys``: the key store entry (see :func:`refold.storage.key_stores.key_settings`)."""
    if mode not in ("delete", "shred"):
        raise StoreError(f"unknown erasure mode {mode!r}; use 'delete' or 'shred'")
    settings: dict[str, Any] = {"format_version": FORMAT_VERSION, "mode": mode}
    if keys:
        settings["keys"] = keys
    if layout.is_local:
        atomic_write_json(layout.settings, settings)
    return settings


def read_settings(layout: Layout) -> dict[str, Any]:
    if not layout.is_local:
        return {"format_version": FORMAT_VERSION, "mode": "delete"}
    try:
        with open(layout.settings, encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise StoreError(
            f"{layout.root} is not a refold store (no store.json); create one with refold.init({layout.root!r})",
            cli=f"{layout.root} is not a refold store (no store.json); create one with `refold init {layout.root}`",
        ) from None
