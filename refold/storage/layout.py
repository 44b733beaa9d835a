"""Where things live under a store root, and the store's own small settings file.

    ROOT/
      store.json      format version, erasure mode ("delete" or "shred") and, in shred mode, the
                      key store (absent: key files; "kms": AWS KMS), written once by init
      events/         Delta table: the log (the only source of truth)
      extractions/    Delta table: extraction cache (derived)
      state/          Delta tables: the folded state per spec (derived; refold.storage.state)
      index/          vector index (derived)
      keys/           per-subject keys (shred mode); a file per key, deleted for real
      receipts/       erasure receipts; receipts/heads/ holds published chain heads
      subjects.json   subject registry (names and aliases per opaque subject id; erasable)
      retention.json  retention rules and legal holds (refold.agent.retention)
      erasure.epoch   changed by every erasure (refold.storage.epoch)
      erasure.swept   shred mode: owners whose destroyed keys' residue was purged (refold.erasure.sweep)

The root is a local path, ``file://`` or an object-store URI (``s3://bucket/prefix``, ``gs://``,
``az://``); ``storage_options`` (as deltalake names them) reach the Delta tables and, through
:meth:`Layout.files`, the side files (:mod:`refold.storage.files.objects`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from refold.fold.errors import StoreError


FORMAT_VERSION = 1
SETTINGS = "store.json"
Mode = Literal["delete", "shred"]


@dataclass(frozen=True)
class Layout:
    """Paths of one store, and the ``storage_options`` that reach it (not part of its identity)."""

    root: str
    storage_options: dict[str, str] | None = field(default=None, compare=False, hash=False, repr=False)

    def files(self):
        """The side files of this store (:class:`refold.storage.files.objects.StoreFiles`)."""
        from refold.storage.files.objects import store_files

        return store_files(self.root, self.storage_options)

    def _join(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    @property
    def events(self) -> str:
        return self._join("events")

    @property
    def extractions(self) -> str:
        return self._join("extractions")

    @property
    def legacy_snapshots(self) -> str:
        """Where refold 0.1's graph engine kept its snapshot files (a store made before 0.2;
        :mod:`refold.storage.legacy` removes them)."""
        return self._join("snapshots")

    @property
    def index(self) -> str:
        return self._join("index")

    def state(self, spec_hash: str) -> str:
        """Where the state tables of the fold spec with hash ``spec_hash`` live."""
        return self._join("state", spec_hash)

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
        return self._join(SETTINGS)

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
    from refold.storage.files.objects import LocalFiles

    path = Path(path)
    LocalFiles(path.parent).put(path.name, text.encode("utf-8"))


def write_settings(layout: Layout, mode: Mode, *, keys: dict[str, Any] | None = None) -> dict[str, Any]:
    """``keys``: the key store entry (see :func:`refold.storage.keys.select.key_settings`)."""
    if mode not in ("delete", "shred"):
        raise StoreError(f"unknown erasure mode {mode!r}; use 'delete' or 'shred'")
    settings: dict[str, Any] = {"format_version": FORMAT_VERSION, "mode": mode}
    if keys:
        settings["keys"] = keys
    layout.files().put_json(SETTINGS, settings)
    return settings


def read_settings(layout: Layout) -> dict[str, Any]:
    """The store's settings (store.json). A store on object storage made before its side files moved
    there has none: it was a delete-mode store."""
    settings = layout.files().get_json(SETTINGS)
    if settings is None and not layout.is_local and layout.files().list("events/_delta_log"):
        return {"format_version": FORMAT_VERSION, "mode": "delete"}
    if settings is None:
        raise StoreError(
            f"{layout.root} is not a refold store (no store.json); create one with refold.init({layout.root!r})",
            cli=f"{layout.root} is not a refold store (no store.json); create one with `refold init {layout.root}`",
        )
    return settings
