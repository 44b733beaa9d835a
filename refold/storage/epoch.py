"""The erasure epoch: one small file under the store root that every erasure changes.

Everything a process keeps in memory about a store (folded states, as-of states, snapshots it
loaded, search indexes) was built from the log *as it was read then*. An erasure rewrites that
past: tombstones in delete mode, destroyed keys in shred mode. A cache keyed by log position
cannot see that (a tombstone keeps its seq and its chain link), so every cache remembers the
epoch it was built under and is dropped when the store's epoch differs.

    ROOT/erasure.epoch     "<erasure id> <random token>", replaced atomically

Ordering is what makes this correct. The erasure procedure bumps the epoch *after* its last
rewrite of anything readers read (the log, the keys, the snapshots, the index). A reader reads
the epoch *before* it reads any data and tags what it builds with that value. A cache built from
data read before a rewrite was tagged with an epoch read before the bump that follows the rewrite,
so its next check sees a different value and drops it. Each bump writes a fresh random token (not
a counter), so two erasures bumping at once can never leave the value a reader saw in place.

Reading costs one small file read (~10-20 µs locally); a store on object storage has no epoch
file (erasure needs a local root) and reads as the constant ``""``.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from .layout import Layout, atomic_write_text

__all__ = ["EPOCH_FILE", "bump_epoch", "read_epoch"]

EPOCH_FILE = "erasure.epoch"


def _path(layout: Layout) -> Path:
    return Path(layout.root.removeprefix("file://")) / EPOCH_FILE


def read_epoch(layout: Layout) -> str:
    """The store's current erasure epoch ("" before the first erasure, or for a remote root).

    Any cache of derived state calls this before it reads data, keeps the value with what it
    builds, and drops what it holds when a later call returns something else."""
    if not layout.is_local:
        return ""
    try:
        with open(_path(layout), encoding="ascii") as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


def bump_epoch(layout: Layout, erasure_id: str) -> str:
    """Give the store a new epoch (after an erasure's rewrites; see the module docstring) and
    return it. Atomic: a reader sees the old value or the new one."""
    value = f"{erasure_id} {secrets.token_hex(8)}"
    path = _path(layout)
    atomic_write_text(path, value)
    return value
