"""Incremental projection job: bring derived state up to date with the log.

    python -m refold.jobs.project /abs/path/store [--extractor rules] [--ray | --no-ray]
    ray job submit --working-dir . -- python -m refold.jobs.project /abs/path/store

Extracts only events with no cached extraction for the spec (sharded over a Ray actor pool when
Ray is on, each batch cached where it ran), then folds the events after the state tables' tag
into the buckets they touch (the merge's bucket groups as Ray tasks when Ray is on). A job
killed part-way and submitted again extracts only what is still missing. Prints one JSON summary
(see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from refold.jobs.config import JobConfig, job_parser, run_job

__all__ = ["add_fold_flags", "fold_job", "main"]


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


def add_fold_flags(parser, env=None) -> None:
    """``--vacuum-hours`` (default: ``REFOLD_VACUUM_HOURS``, else no vacuum), and ``--engine``,
    removed in refold 0.2, which now fails with a line naming its replacement."""
    env = os.environ if env is None else env
    parser.add_argument("--engine", action=_Removed, help=argparse.SUPPRESS)
    parser.add_argument("--vacuum-hours", type=_hours, default=env.get("REFOLD_VACUUM_HOURS") or None,
                        help="after the fold, delete the state tables' files unused for this many hours")


class _Removed(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} was removed in refold 0.2: there is one engine, the state tables; "
                     "drop the flag")


def _hours(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of hours (e.g. 168 for a week)")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.project", "Incremental projection: fold new events.")
    add_fold_flags(parser)
    return run_job("project", lambda cfg, args: fold_job(cfg, full=False, vacuum_hours=args.vacuum_hours),
                   parser, argv)


if __name__ == "__main__":
    sys.exit(main())
