"""refold's own Delta commit for local tables: one ``add`` action, put-if-absent by ``os.link``.

Why not delta-rs here: on this 2-core machine a delta-rs append commit costs ~6 ms by itself
(its transaction machinery, post-commit hooks, and the replay of the table's file list that
``update_incremental`` does to bring a handle to the new version: 3-20 ms, growing by ~0.02 ms
per data file), more than the whole 1.5×-Parquet budget of a 1k-event append (~4 ms). The
commit an append needs is small and fully specified by the Delta protocol
(PROTOCOL.md, "Delta Log Entries", "Add File and Remove File", "Commit Provenance Information"):

- version ``v + 1`` of a table is the file ``_delta_log/<v + 1, 20 digits>.json``: newline-
  delimited JSON actions; its creation must be atomic and fail when the file exists (mutual
  exclusion between writers). On a local file system, ``os.link`` of a complete temp file onto
  that name is exactly that (the ``object_store`` crate under delta-rs does the same: a staged
  file, then ``hard_link`` for ``PutMode::Create``), so refold and delta-rs writers exclude each
  other on the same versions.
- the ``add`` action: ``path`` relative to the table root (URI-encoded; refold's names need no
  escaping), ``partitionValues`` (the table has no partitions), ``size``, ``modificationTime``
  (ms), ``dataChange: true``, and ``stats`` as a JSON string (min/max/null counts for the table's
  ``delta.dataSkippingStatsColumns`` only, see :func:`refold.storage.datafiles.add_stats`).
- ``commitInfo`` (optional, free-form; first, as delta-rs writes it): ``timestamp``,
  ``operation: WRITE``, ``operationParameters: {mode: Append}``, and refold's custom metadata
  (the chain head), which ``DeltaTable.history`` returns as top-level keys.

A writer must honour the table's protocol. :func:`unsupported` accepts only what refold's own
``DeltaTable.create`` makes: reader version 1, writer version 1 or 2 without table features
(writer 2 adds ``delta.appendOnly``, which an add-only commit satisfies, and column invariants,
refused here), no partition columns, the schema and stats columns refold created the table with
(the event log's, or the extraction cache's: :mod:`refold.storage.cache` commits its local
appends the same way). Anything else (a table
upgraded by another tool, a check constraint, column mapping, deletion vectors, CDF) makes
refold commit through delta-rs instead.

Checkpoints: delta-rs writes one as a post-commit hook when ``(version + 1)`` is a multiple of
``delta.checkpointInterval`` (default 100), then removes expired log files
(``delta.enableExpiredLogCleanup``, default on, ``delta.logRetentionDuration``). :func:`post_commit`
does the same for refold's commits.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
import warnings
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.schema import Schema as DeltaSchema

from .datafiles import StagedFiles, encode_file
from .schema import EVENTS_SCHEMA, STATS_COLUMNS

#: refold commits local appends itself (False: every commit through delta-rs; tests flip it)
ENABLED = True

_ENGINE = "refold"


@functools.lru_cache(maxsize=8)
def _schema_json(schema: pa.Schema) -> dict:
    """The Delta schema ``DeltaTable.create`` stores for ``schema`` (as parsed JSON)."""
    return json.loads(DeltaSchema.from_arrow(schema).to_json())


def log_name(version: int) -> str:
    return f"{version:020d}.json"


def unsupported(dt: DeltaTable, *, schema: pa.Schema = EVENTS_SCHEMA,
                stats_columns: tuple[str, ...] = STATS_COLUMNS) -> str | None:
    """Why refold must not write ``dt``'s commits itself (None: it may).

    ``schema`` and ``stats_columns``: what refold created the table with (default: the event
    log's; the extraction cache passes its own).
    """
    if not ENABLED:
        return "disabled"
    protocol = dt.protocol()
    if protocol.min_reader_version != 1 or protocol.min_writer_version not in (1, 2):
        return f"protocol {protocol.min_reader_version}/{protocol.min_writer_version}"
    if protocol.writer_features or protocol.reader_features:
        return "table features"
    metadata = dt.metadata()
    if metadata.partition_columns:
        return "partitioned"
    config = metadata.configuration
    if tuple(config.get("delta.dataSkippingStatsColumns", "").split(",")) != tuple(stats_columns):
        return "other stats columns"
    if any(k.startswith("delta.constraints.") for k in config):
        return "check constraints"
    if json.loads(dt.schema().to_json()) != _schema_json(schema):  # also: no invariants, no column mapping
        return "other schema"
    return None


def commit_add(folder: Path, version: int, add: dict, metadata: dict[str, str], *,
               staged: tuple[Path, int] | None = None) -> None:
    """Create commit ``version`` of the table at ``folder`` holding ``add`` and a commitInfo.

    Raises ``CommitFailedError`` when that version exists already (another writer got there
    first); nothing of this call is left in ``_delta_log`` then. ``staged``: an empty file in
    ``_delta_log`` created for this commit, with its open descriptor
    (:meth:`~.datafiles.StagedFiles.commit_file`), used instead of creating one; it is closed and
    removed like one created here.
    """
    millis = int(time.time() * 1000)
    info = {"timestamp": millis, "operation": "WRITE",
            "operationParameters": {"mode": "Append"}, "engineInfo": _ENGINE,
            "clientVersion": _ENGINE, **metadata}
    text = json.dumps({"commitInfo": info}) + "\n" + json.dumps({"add": add}) + "\n"
    log_dir = folder / "_delta_log"
    if staged is None:
        tmp = log_dir / f"_commit_{uuid.uuid4()}.json.tmp"  # the name delta-rs gives its staged commits
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    else:
        tmp, fd = staged
    try:
        try:
            os.write(fd, text.encode())
            # delta-rs finds a version by time from the commit file's modification time, so that
            # time is the commitInfo timestamp (both end up in history; the link keeps the inode's)
            os.utime(fd, ns=(millis * 1_000_000, millis * 1_000_000))
        finally:
            os.close(fd)
        os.link(tmp, log_dir / log_name(version))
    except FileExistsError:
        raise CommitFailedError(f"version {version} of {folder} exists: another writer committed first") from None
    finally:
        os.unlink(tmp)


def commit_rows(folder: Path, version: int, rows: pa.Table, metadata: dict[str, str], *,
                options: dict | None = None, stats_columns: tuple[str, ...] = STATS_COLUMNS,
                stats: str | None = None) -> dict:
    """Append ``rows`` to the table at ``folder`` as one new data file in commit ``version``;
    return the commit's ``add`` action.

    Both files are created on a worker while the rows are encoded (:class:`~.datafiles.StagedFiles`),
    then the data file is written and the commit file filled and linked. Raises
    ``CommitFailedError`` when another writer took ``version``; its data file is removed then
    (nobody can reference it), as when encoding or writing fails. ``options``/``stats_columns``/
    ``stats``: as :func:`~.datafiles.encode_file`.
    """
    files = StagedFiles(folder)
    try:
        add, data = encode_file(rows, name=files.data_name, options=options, stats_columns=stats_columns,
                                stats=stats)
    except BaseException:
        files.discard()
        raise
    try:
        files.store(data)
    except BaseException:  # no data file (store removed it): the staged commit file goes too
        files.discard()
        raise
    try:
        commit_add(folder, version, add, metadata, staged=files.commit_file())
    except CommitFailedError:  # raised by the link, after the data file was written
        files.discard()
        raise
    return add


def checkpoint_due(version: int, interval: int) -> bool:
    """Whether delta-rs would checkpoint right after committing ``version``."""
    return interval > 0 and (version + 1) % interval == 0


def post_commit(dt: DeltaTable) -> None:
    """delta-rs's post-commit hook for ``dt`` at a version due for one: checkpoint, log cleanup.

    Best effort, like delta-rs's own: the commit landed; a failure only leaves more JSON to replay.
    """
    try:
        dt.create_checkpoint()
        if dt.metadata().configuration.get("delta.enableExpiredLogCleanup", "true").lower() != "false":
            dt.cleanup_metadata()
    except Exception as exc:  # noqa: BLE001
        warnings.warn(f"refold: checkpoint of {dt.table_uri} at version {dt.version()} failed ({exc}); "
                      "readers replay more commits until the next one", RuntimeWarning, stacklevel=3)


def checkpoint_interval(dt: DeltaTable) -> int:
    try:
        return int(dt.metadata().configuration.get("delta.checkpointInterval", "100"))
    except ValueError:
        return 100
