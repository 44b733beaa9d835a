"""The partitioned fold's merge stage on Ray: one task per bucket group.

Each task gets the store URI (and its storage options), the spec and its bucket group, reads that
group's items from ``state/<spec>/items`` itself (partition pruning: only those files) and
returns the group's merged rows; the driver writes each group's partitions as its task finishes
(``ray.wait``), so it holds one group's rows at a time and a killed fold resumes from the groups
already written (see :mod:`refold.state_fold`). With the store on object storage no task depends
on one node's disk.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from refold.fold.spec import FoldSpec
from refold.state_fold import PartitionError
from refold.storage.state import StateStore

__all__ = ["ray_merger"]


def _merge_group(root: str, storage_options: dict[str, str] | None, spec_json: dict[str, Any],
                 group: list[int], buckets: int) -> pa.Table:
    """A Ray task: the merged rows of ``group``, read from the store at ``root``."""
    from refold.state_fold import merge_buckets
    from refold.storage.layout import Layout  # (imported in the worker)

    spec = FoldSpec.from_json(spec_json)
    store = StateStore(Layout(root), spec.hash, storage_options=storage_options)
    return merge_buckets(store, spec, group, buckets=buckets)


def ray_merger(*, address: str | None = None, num_cpus: float = 0.5):
    """A merger (see :func:`refold.state_fold.local_merger`) that runs each bucket group as a Ray
    task of ``num_cpus``; Ray is started (or joined: ``address``) on first use."""

    def run(store: StateStore, spec: FoldSpec, groups: Sequence[Sequence[int]],
            buckets: int) -> Iterator[tuple[Sequence[int], pa.Table]]:
        if not groups:
            return
        from refold.jobs.ray_extract import ensure_ray

        ensure_ray(address)
        import ray

        task = ray.remote(num_cpus=num_cpus)(_merge_group)
        pending = {task.remote(store.layout.root, store.storage_options, spec.to_json(), list(g), buckets): g
                   for g in groups}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            group = pending.pop(done[0])
            try:
                rows = ray.get(done[0])
            except ray.exceptions.RayTaskError as exc:  # the task's own error, named by its bucket
                raise PartitionError(f"Ray task for buckets {group[0]}-{group[-1]} failed: "
                                     f"{exc.cause!r}; rerun the fold (finished groups are kept)") from exc
            yield group, rows

    return run
