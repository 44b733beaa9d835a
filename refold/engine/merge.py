"""The partitioned fold's merge stage: a bucket group's items merged and its partitions of the merged
layer replaced, in this process (:func:`local_merger`) or as remote tasks given the store URI
(``refold.jobs.ray_merge``: each task reads and writes its own group; nothing large travels
through the driver). Subjects never span buckets, so a group merges on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import polars as pl
import pyarrow as pa

from refold.fold.errors import RefoldError, StoreError
from refold.fold.partition import (
    FACT_SCHEMA, merge_items,
)
from refold.fold.spec import FoldSpec
from refold.storage.log.schema import _utc_times
from refold.storage.state import StateStore

_log = logging.getLogger(__name__)


#: Item rows per bucket group: a full fold (and a compaction) holds one group at a time, and
#: each group costs a few commits, so small stores fold in one group and large ones in many.
GROUP_ROWS = 25_000


#: Commits a bucket group's merge task tries before giving up (concurrent groups rarely conflict).
MERGE_COMMIT_TRIES = 5


class PartitionError(RefoldError):
    """A partition's fold failed; names the partition (bucket) and the cause."""


def group_name(group: Sequence[int]) -> str:
    return f"{group[0]}-{group[-1]}"


def local_merger(state_tables: StateStore, spec: FoldSpec, groups: Sequence[Sequence[int]], buckets: int, *,
                 run: str) -> Iterator[tuple[Sequence[int], int]]:
    """The merge stage in this process: each group merged and written (:func:`merge_group`), one
    after another, yielding (group, rows written). A *merger* is any callable of this shape
    (``refold.jobs.ray_merge.ray_merger`` runs the groups as Ray tasks that write their own
    files): the fold only learns which groups are done, never their rows."""
    for group in groups:
        yield group, merge_group(state_tables, spec, group, buckets=buckets, run=run)


def merge_group(state_tables: StateStore, spec: FoldSpec, group: Sequence[int], *, buckets: int, run: str) -> int:
    """Merge the buckets ``group`` (:func:`merge_buckets`) and replace their partitions of the
    merged layer with the result, in one commit noting the run and the group (what a rerun after
    a kill reuses); return the rows written. Groups are disjoint partitions, so several of them
    (Ray tasks) may commit at once: delta-rs rebases an overwrite whose predicate no concurrent
    commit touched, and a commit that still fails is retried (the overwrite is idempotent).

    The facts table must exist (the fold creates or empties it before the merge stage): a task
    that created it would replace the whole table, and a concurrent group's commit with it."""
    from deltalake.exceptions import CommitFailedError

    if state_tables.table("facts") is None:
        raise StoreError(f"the state table {state_tables.path('facts')} does not exist; a merge task only replaces "
                         "its partitions (run the merge through fold_state, which creates the table first)")
    merged = merge_buckets(state_tables, spec, group, buckets=buckets)
    for attempt in range(MERGE_COMMIT_TRIES):
        try:
            state_tables.write("facts", merged, buckets=group, layer="merged", note={"run": run, "group": group_name(group)})
            return merged.num_rows
        except StoreError as exc:
            if not isinstance(exc.__cause__, CommitFailedError) or attempt + 1 == MERGE_COMMIT_TRIES:
                raise
    raise AssertionError("unreachable")


def merge_buckets(state_tables: StateStore, spec: FoldSpec, group: Sequence[int], *, buckets: int) -> pa.Table:
    """Merged rows of the buckets ``group`` from the store's items table (subjects never span
    buckets, so the group merges as one: :func:`~refold.fold.partition.merge_items`).

    Reads only those partitions; a failure names the bucket (:class:`PartitionError`)."""
    parts = []
    for bucket in group:
        try:
            parts.append(state_tables.read("items", buckets=[bucket]))
        except RefoldError:
            raise
        except Exception as exc:  # noqa: BLE001 - name the partition, keep the cause
            raise PartitionError(f"reading partition bucket={bucket} of {state_tables.root} failed: {exc!r}; "
                                 "rerun the fold (finished partitions are kept)") from exc
    try:
        return merge_rows(spec, pa.concat_tables(parts), buckets)
    except RefoldError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise PartitionError(f"folding partitions bucket={group_name(group)} of {state_tables.root} failed: {exc!r}; "
                             "rerun the fold (finished partitions are kept)") from exc


def merge_rows(spec: FoldSpec, items: pa.Table, buckets: int) -> pa.Table:
    """Merged rows (:data:`FACT_SCHEMA`) of ``items`` (whole subjects' item rows)."""
    merged = merge_items(spec, pl.from_arrow(items), buckets=buckets, rows=lambda f: dicts_of(f.to_arrow()))
    return merged.to_arrow().select(FACT_SCHEMA.names).cast(FACT_SCHEMA)


def group_size(state_tables: StateStore, buckets: int) -> int:
    """Buckets per group: :data:`GROUP_ROWS` item rows each (from the items files' metadata)."""
    dt = state_tables.table("items")
    rows = sum(pa.table(dt.get_add_actions(flatten=True))["num_records"].to_pylist()) if dt is not None else 0
    return max(1, min(buckets, -(-GROUP_ROWS * buckets // max(rows, 1))))


def groups_of(buckets: int, size: int) -> list[list[int]]:
    return [list(range(b, min(b + size, buckets))) for b in range(0, buckets, size)]


def dicts_of(table: pa.Table) -> list[dict[str, Any]]:
    """Rows as dicts, column by column (times through the log reader's converter: each distinct
    time made once; ``to_pylist`` made a zoneinfo datetime per value, half of a partition's fold)."""
    columns = {name: (_utc_times(table[name]) if pa.types.is_timestamp(table.schema.field(name).type)
                      else table[name].to_pylist()) for name in table.column_names}
    names = list(columns)
    return [dict(zip(names, values)) for values in zip(*columns.values())]
