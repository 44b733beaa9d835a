"""The partitioned fold's merge stage on Ray: one task per bucket group.

Each task gets the store URI (and its storage options), the spec, its bucket group and the run's
name, reads that group's items from ``state/<spec>/items`` itself (partition pruning: only those
files), merges them and commits the group's partitions of ``state/<spec>/facts`` itself
(:func:`refold.engine.merge.merge_group`: an overwrite of those partitions through delta-rs, noting
the run and the group). It returns only the number of rows it wrote, so no merged row travels
through the driver, which learns as each task finishes (``ray.wait``) which groups are done; a
killed fold resumes from the groups already committed (see :mod:`refold.engine.fold`). With the
store on object storage no task depends on one node's disk.

Why a commit per task rather than one transaction of files the tasks wrote: the groups are
disjoint partitions, so concurrent overwrites of them commit without conflict (delta-rs rebases
them; a conflict left over is retried), delta-rs computes each file's statistics and partition
values itself, and each committed group is a resume point. A full fold already made one commit
per group when the driver wrote them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from refold.fold.spec import FoldSpec
from refold.engine.merge import PartitionError
from refold.storage.state import StateStore

__all__ = ["ray_merger"]


def _merge_group(root: str, storage_options: dict[str, str] | None, spec_json: dict[str, Any],
                 group: list[int], buckets: int, run: str) -> tuple[int, int]:
    """A Ray task: merge ``group`` in the store at ``root`` and commit it there; (the rows
    written, the worker process's peak RSS in bytes so far)."""
    import resource

    from refold.engine.merge import merge_group
    from refold.storage.layout import Layout  # (imported in the worker)

    spec = FoldSpec.from_json(spec_json)
    store = StateStore(Layout(root), spec.hash, storage_options=storage_options)
    rows = merge_group(store, spec, group, buckets=buckets, run=run)
    return rows, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # (Linux: KiB)


def ray_merger(*, address: str | None = None, num_cpus: float = 0.5):
    """A merger (see :func:`refold.engine.fold.local_merger`) that runs each bucket group as a Ray
    task of ``num_cpus`` writing its own partitions; Ray is started (or joined: ``address``) on
    first use. ``merger.worker_peak_rss``: the highest peak RSS (bytes) a worker process that
    ran one of its tasks had reached (a worker runs many tasks: its peak over all of them)."""

    def merge(store: StateStore, spec: FoldSpec, groups: Sequence[Sequence[int]], buckets: int, *,
              run: str) -> Iterator[tuple[Sequence[int], int]]:
        if not groups:
            return
        from refold.jobs.ray_extract import ensure_ray

        ensure_ray(address)
        import ray

        task = ray.remote(num_cpus=num_cpus)(_merge_group)
        pending = {task.remote(store.layout.root, store.storage_options, spec.to_json(), list(g), buckets, run): g
                   for g in groups}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            group = pending.pop(done[0])
            try:
                written, peak = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:  # the task's own error, named by its bucket
                raise PartitionError(f"Ray task for buckets {group[0]}-{group[-1]} failed: "
                                     f"{exc.cause!r}; rerun the fold (finished groups are kept)") from exc
            merge.worker_peak_rss = max(merge.worker_peak_rss, peak)
            yield group, written

    merge.worker_peak_rss = 0
    return merge
