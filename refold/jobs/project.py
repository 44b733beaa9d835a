"""Incremental projection job: bring derived state up to date with the log.

    python -m refold.jobs.project /abs/path/store [--extractor rules] [--ray | --no-ray]
    ray job submit --working-dir . -- python -m refold.jobs.project /abs/path/store

Extracts only events with no cached extraction for the spec (sharded over a Ray actor pool when
Ray is on, each batch cached where it ran), then merges from the newest valid snapshot. A job
killed part-way and submitted again extracts only what is still missing. Prints one JSON summary
(see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from refold.jobs.config import JobConfig, job_parser, run_job

__all__ = ["fold_job", "main"]


def fold_job(cfg: JobConfig, *, full: bool) -> dict[str, Any]:
    """Fold the store (``full``: ignore snapshots) and return the summary's fold part."""
    mem = cfg.open_store()
    runner = cfg.runner(mem)
    report = mem.fold(extractor=cfg.extractor, full=full, progress=cfg.progress, runner=runner,
                      **dict(cfg.options))
    out: dict[str, Any] = {"fold": report.as_json()}
    if runner is not None:
        out["ray_extraction"] = runner.last.as_json()
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.project", "Incremental projection: fold new events.")
    return run_job("project", lambda cfg, _args: fold_job(cfg, full=False), parser, argv)


if __name__ == "__main__":
    sys.exit(main())
