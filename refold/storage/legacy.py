"""What refold 0.1 left in a store that 0.2 no longer reads: the graph engine's snapshot files.

A store made before 0.2 may hold ``snapshots/``: whole folded graphs (names, facts, summaries)
at log positions. Nothing reads them any more (the state tables' tagged versions are the
snapshots), but they are derived data about people, so an erasure must not leave them behind:
:class:`LegacySnapshots` is a derived store whose purge removes the whole folder, and the first
fold of a 0.2 process removes it too (:func:`drop_legacy_snapshots`).
"""

from __future__ import annotations

from collections.abc import Iterable

from refold.storage.derived import PurgeResult
from refold.storage.layout import Layout

__all__ = ["LegacySnapshots", "drop_legacy_snapshots", "has_legacy_snapshots"]

_FOLDER = "snapshots"


def has_legacy_snapshots(layout: Layout) -> bool:
    """Whether the store still holds refold 0.1's ``snapshots/`` folder."""
    return bool(layout.files().list(_FOLDER))


def drop_legacy_snapshots(layout: Layout) -> int:
    """Delete every file under ``snapshots/``; return how many there were (0: none)."""
    files = layout.files()
    names = files.list(_FOLDER)
    for name in names:
        files.delete(name)
    if layout.is_local:  # (the emptied folders too: an object store has none)
        import shutil
        from pathlib import Path

        shutil.rmtree(Path(layout.legacy_snapshots.removeprefix("file://")), ignore_errors=True)
    return len(names)


class LegacySnapshots:
    """refold 0.1's snapshot files as a derived store of erasure: ``purge`` removes them all
    (they are never read again, whatever events they hold)."""

    def __init__(self, layout: Layout):
        self.layout = layout

    def purge(self, event_ids: Iterable[str]) -> PurgeResult:
        removed = drop_legacy_snapshots(self.layout)
        return PurgeResult(store="legacy snapshots", rows=removed,
                           detail=(f"{removed} file(s) of refold 0.1's snapshots/ removed",) if removed else ())
