"""Physically removing what a Delta table no longer references, and the log entries that name it.

A Delta DELETE (or an overwrite with a predicate) only writes a new version: the old data files
stay on disk, readable through time travel, and old ``_delta_log`` commits may quote column
values in their statistics. :func:`scrub_table` finishes the job for one table:

1. VACUUM with zero retention, *lite* mode: deletes every file that a commit removed — the files
   that held the erased rows — so a pre-erasure version can no longer be read.
2. Untracked ("orphan") files, e.g. the file of an append whose commit lost a race: VACUUM
   ``full=True`` deletes those older than ``orphan_grace_hours``; younger orphans are deleted only
   when they hold an erased event id. Why not ``full=True`` with zero retention: a full vacuum
   cannot tell an orphan from the file of a commit still in flight, and deleting the latter
   would make an acknowledged append point at a missing file. ``orphan_grace_hours=0`` does
   exactly that full vacuum; use it only when no writer is running.
3. Checkpoint, then ``cleanup_metadata`` with ``delta.logRetentionDuration`` set to zero, so no
   JSON commit from before the erasure remains; the table's previous log retention is restored
   afterwards (a permanent zero would break concurrent writers' conflict checks at every
   automatic checkpoint).

Each step is idempotent, so a rerun after a crash finishes what the first run started.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ContextManager

import pyarrow.parquet as pq
from deltalake import DeltaTable

from refold.storage.files.modes import apply_tree
from refold.storage.files.objects import is_local_uri, store_files

ZERO_RETENTION = "interval 0 seconds"
DEFAULT_LOG_RETENTION = "interval 30 days"
_RETENTION_KEY = "delta.logRetentionDuration"


def delta_tables(root: str | os.PathLike, *, files=None) -> list:
    """Every Delta table (a folder with ``_delta_log``) under ``root``, not nested in another:
    local paths, or (``files``: the side-file port of a store on object storage) table URIs."""
    if files is not None and not is_local_uri(str(root)):
        prefixes = {key.split("/_delta_log/", 1)[0] for key in files.list() if "/_delta_log/" in key}
        outer = sorted(p for p in prefixes if not any(p.startswith(q + "/") for q in prefixes))
        return [f"{str(root).rstrip('/')}/{p}" for p in outer]
    found = []
    for folder, dirs, _ in os.walk(root):
        if "_delta_log" in dirs:
            found.append(Path(folder))
            dirs[:] = []  # a table's own subfolders are its data, not other tables
        dirs.sort()
    return sorted(found)


def _tracked(dt: DeltaTable) -> set[str]:
    import pyarrow as pa

    actions = pa.table(dt.get_add_actions(flatten=True))
    return {p for p in actions.column("path").to_pylist()} if actions.num_rows else set()


def _holds_erased(data: bytes | None, erased: set[str]) -> bool:
    import pyarrow as pa

    if data is None:
        return False
    try:
        schema = pq.read_schema(pa.BufferReader(data))
        if "event_id" not in schema.names:
            return False
        ids = pq.read_table(pa.BufferReader(data), columns=["event_id"]).column("event_id").to_pylist()
    except Exception:  # noqa: BLE001 - a file still being written; the grace rule covers it
        return False
    return not erased.isdisjoint(ids)


def _vacuum(dt: DeltaTable, hours: int, *, full: bool) -> list[str]:
    return dt.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False, full=full)


def scrub_table(path: str | os.PathLike, *, erased_ids: Iterable[str] = (),
                orphan_grace_hours: int = 1, storage_options: dict[str, str] | None = None,
                after_vacuum: Callable[[], None] | None = None,
                hold: Callable[[], ContextManager[Any]] | None = None) -> dict[str, Any]:
    """Vacuum, remove orphans holding erased rows, checkpoint and clean the log of one table.

    Returns ``{"removed": [relative file paths], "checkpoint_version": int, "log_files_removed": int}``.
    ``after_vacuum`` runs between the file removal and the log cleanup (a crash-test seam).
    ``hold`` is held around the log cleanup: a writer that loaded the table before the cleanup
    and commits after it fails (the commits it would check against are gone), so the event log
    passes its host lock to make local appenders wait instead.
    """
    table = str(path).rstrip("/")
    files = store_files(table, storage_options)  # the table's own files: a folder or a bucket prefix
    erased = set(erased_ids)
    present = set(files.list())
    dt = DeltaTable(table, storage_options=storage_options)
    removed = list(_vacuum(dt, 0, full=orphan_grace_hours <= 0))
    if orphan_grace_hours > 0:
        dt = DeltaTable(table, storage_options=storage_options)
        removed += _vacuum(dt, int(orphan_grace_hours), full=True)
    # vacuum also lists files a previous run already deleted (their remove actions live on in
    # the checkpoint), sometimes as absolute paths: report only what this run removed
    removed = [r for r in (_relative(table, p) for p in removed) if r in present]
    if orphan_grace_hours > 0:
        tracked = _tracked(DeltaTable(table, storage_options=storage_options))
        for rel in files.list():
            if not rel.endswith(".parquet") or rel.startswith("_delta_log/") or rel in tracked:
                continue
            if erased and _holds_erased(files.get(rel), erased):
                files.delete(rel)
                removed.append(rel)
    if after_vacuum is not None:
        after_vacuum()
    before = set(files.list("_delta_log"))
    with hold() if hold is not None else contextlib.nullcontext():
        version = _clean_log(table, storage_options)
    after = set(files.list("_delta_log"))
    if is_local_uri(table):
        apply_tree(table.removeprefix("file://"))  # what delta-rs rewrote and checkpointed, with the store's modes
    return {"removed": sorted(set(removed)), "checkpoint_version": version,
            "log_files_removed": len(before - after)}


def _relative(table: str, path: str) -> str:
    if not is_local_uri(table):  # an object URI of the table's prefix, or already relative
        return path.removeprefix(table + "/")
    table = table.removeprefix("file://")
    path = path.removeprefix("file://")
    if os.path.isabs(path):
        try:
            return Path(path).resolve().relative_to(Path(table).resolve()).as_posix()
        except ValueError:
            return path
    return path


def _clean_log(path: str, storage_options: dict[str, str] | None) -> int:
    dt = DeltaTable(path, storage_options=storage_options)
    previous = dt.metadata().configuration.get(_RETENTION_KEY)
    restore = previous if previous and previous != ZERO_RETENTION else DEFAULT_LOG_RETENTION
    if previous != ZERO_RETENTION:
        _retry(lambda: DeltaTable(path, storage_options=storage_options).alter.set_table_properties(
            {_RETENTION_KEY: ZERO_RETENTION}))
    dt = DeltaTable(path, storage_options=storage_options)
    dt.create_checkpoint()
    version = dt.version()
    dt.cleanup_metadata()
    _retry(lambda: DeltaTable(path, storage_options=storage_options).alter.set_table_properties(
        {_RETENTION_KEY: restore}))
    return version


def _retry(action, attempts: int = 20) -> None:
    """Run ``action``, again while a concurrent writer makes its commit fail (50 ms more wait
    each time); the last ``CommitFailedError`` is raised."""
    from deltalake.exceptions import CommitFailedError
    from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

    Retrying(retry=retry_if_exception_type(CommitFailedError), stop=stop_after_attempt(attempts),
             wait=wait_incrementing(start=0.05, increment=0.05), reraise=True)(action)
