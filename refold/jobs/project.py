"""Incremental projection job: bring derived state up to date with the log.

    python -m refold.jobs.project /abs/path/store [--extractor rules] [--ray | --no-ray]
    ray job submit --working-dir . -- python -m refold.jobs.project /abs/path/store

Extracts only events with no cached extraction for the spec (sharded over a Ray actor pool when
Ray is on, each batch cached where it ran), then merges from the newest valid snapshot. A job
killed part-way and submitted again extracts only what is still missing. Prints one JSON summary
(see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from refold.jobs.config import JobConfig, job_parser, run_job

__all__ = ["add_engine", "fold_job", "main"]


def fold_job(cfg: JobConfig, *, full: bool, engine: str | None = None,
             vacuum_hours: int | None = None) -> dict[str, Any]:
    """Fold the store (``full``: ignore snapshots; ``engine``: see ``Memory.fold``), then, with
    ``vacuum_hours``, vacuum the state tables (``Memory.vacuum_state``); return the summary's
    fold part."""
    mem = cfg.open_store()
    runner = cfg.runner(mem)
    merger = None
    if cfg.use_ray and (engine or mem.fold_engine) == "partitioned":
        from refold.jobs.ray_merge import ray_merger

        merger = ray_merger(address=cfg.address)
    report = mem.fold(extractor=cfg.extractor, full=full, progress=cfg.progress, runner=runner,
                      engine=engine, merger=merger, **dict(cfg.options))
    out: dict[str, Any] = {"fold": report.as_json()}
    if runner is not None:
        out["ray_extraction"] = runner.last.as_json()
    if vacuum_hours is not None:
        out["vacuumed_files"] = mem.vacuum_state(retain_hours=vacuum_hours)
    return out


def add_engine(parser, env=None) -> None:
    """The ``--engine`` flag (default: ``REFOLD_FOLD_ENGINE``, else the Memory's default) and
    ``--vacuum-hours`` (default: ``REFOLD_VACUUM_HOURS``, else no vacuum)."""
    env = os.environ if env is None else env
    parser.add_argument("--engine", choices=["graph", "partitioned"], default=env.get("REFOLD_FOLD_ENGINE") or None,
                        help="partitioned: state tables folded bucket by bucket (docs/fold.md)")
    parser.add_argument("--vacuum-hours", type=_hours, default=env.get("REFOLD_VACUUM_HOURS") or None,
                        help="after the fold, delete the state tables' files unused for this many hours")


def _hours(text: str) -> int:
    import argparse

    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of hours (e.g. 168 for a week)")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.project", "Incremental projection: fold new events.")
    add_engine(parser)
    return run_job("project", lambda cfg, args: fold_job(cfg, full=False, engine=args.engine,
                                                         vacuum_hours=args.vacuum_hours), parser, argv)


if __name__ == "__main__":
    sys.exit(main())
