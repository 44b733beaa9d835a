"""Incremental projection job: bring derived state up to date with the log.

    refold job project /abs/path/store [--extractor rules] [--ray | --no-ray]
    python -m refold.jobs.project /abs/path/store ...     # the same command
    ray job submit --working-dir . -- python -m refold.jobs.project /abs/path/store

Extracts only events with no cached extraction for the spec (sharded over a Ray actor pool when
Ray is on, each batch cached where it ran), then folds the events after the state tables' tag
into the buckets they touch (the merge's bucket groups as Ray tasks when Ray is on). A job
killed part-way and submitted again extracts only what is still missing. Prints one JSON summary
(see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from refold.jobs.config import JobConfig, job_command, removed_flag, run_job

__all__ = ["command", "fold_flags", "fold_job"]


def fold_job(cfg: JobConfig, *, full: bool, vacuum_hours: int | None = None) -> dict[str, Any]:
    """Fold the store (``full``: rewrite the state tables from the cache; see ``Memory.fold``),
    then, with ``vacuum_hours``, vacuum the state tables (``Memory.vacuum_state``); return the
    summary's fold part."""
    mem = cfg.open_store()
    runner = cfg.runner(mem)
    merger = None
    if cfg.use_ray:
        from refold.jobs.ray_merge import ray_merger

        merger = ray_merger(address=cfg.address)
    report = mem.fold(extractor=cfg.extractor, full=full, progress=cfg.progress, runner=runner,
                      merger=merger, **dict(cfg.options))
    out: dict[str, Any] = {"fold": report.as_json()}
    if runner is not None:
        out["ray_extraction"] = runner.last.as_json()
    if vacuum_hours is not None:
        out["vacuumed_files"] = mem.vacuum_state(retain_hours=vacuum_hours)
    return out


def fold_flags(fn: Callable) -> Callable:
    """``--vacuum-hours`` (default: ``REFOLD_VACUUM_HOURS``, else no vacuum), and ``--engine``,
    removed in refold 0.2, which now fails with a line naming its replacement."""
    fn = removed_flag("--engine", takes_value=True,
                      message="--engine was removed in refold 0.2: there is one engine, the state tables; "
                              "drop the flag")(fn)
    return click.option("--vacuum-hours", type=_Hours(), envvar="REFOLD_VACUUM_HOURS", show_envvar=True,
                        help="After the fold, delete the state tables' files unused for this many hours.")(fn)


class _Hours(click.ParamType):
    name = "hours"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        if not str(value).isdigit():
            self.fail(f"{value!r} is not a whole number of hours (e.g. 168 for a week)", param, ctx)
        return int(value)


@job_command("project")
@fold_flags
def command(vacuum_hours: int | None, **flags: Any) -> int:
    """Fold the events added since the last fold (incremental).

    STORE is the store root: an absolute path or an object-store URI. Prints one JSON summary.
    """
    return run_job("project", lambda cfg: fold_job(cfg, full=False, vacuum_hours=vacuum_hours), flags)


if __name__ == "__main__":
    command(prog_name="python -m refold.jobs.project")
