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

Reading costs one small file read (~10-20 µs locally; one GET on object storage, where the
epoch is an object replaced by a plain put, which is atomic there).
"""

from __future__ import annotations

import secrets
from pathlib import Path

from refold.storage.layout import Layout

__all__ = ["EPOCH_FILE", "bump_epoch", "read_epoch"]

EPOCH_FILE = "erasure.epoch"


def read_epoch(layout: Layout) -> str:
    """The store's current erasure epoch ("" before the first erasure).

    Any cache of derived state calls this before it reads data, keeps the value with what it
    builds, and drops what it holds when a later call returns something else."""
    if layout.is_local:  # the hot path (every read checks it): no port object
        try:
            with open(Path(layout.root.removeprefix("file://")) / EPOCH_FILE, encoding="ascii") as fh:
                return fh.read()
        except FileNotFoundError:
            return ""
    return layout.files().get_text(EPOCH_FILE) or ""


def bump_epoch(layout: Layout, erasure_id: str) -> str:
    """Give the store a new epoch (after an erasure's rewrites; see the module docstring) and
    return it. Atomic: a reader sees the old value or the new one."""
    value = f"{erasure_id} {secrets.token_hex(8)}"
    layout.files().put(EPOCH_FILE, value.encode("ascii"))
    return value
