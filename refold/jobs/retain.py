"""Retention job: erase the events the store's retention rules expire, one receipt per run.

    python -m refold.jobs.retain /abs/path/store --dry-run          # what would go, writes nothing
    python -m refold.jobs.retain /abs/path/store [--now 2026-12-04T00:00:00+00:00]
    ray job submit --working-dir . -- python -m refold.jobs.retain /abs/path/store

Meant to run on a schedule (cron, a workflow engine, a Ray job). Rules and legal holds are set
with ``refold retention`` and ``refold hold`` (see :mod:`refold.retention`); events under a hold
are skipped and listed as ``held``. The expired events go through the erasure procedure as one
erasure (tombstones or shredding, purge of every derived store, refold, residue scan) whose
receipt's notes say which rule expired which events. ``--now`` fixes the clock (a backfill, or a
test). A run interrupted by a crash is resumed by the next run. When the refold after the
erasure needs model extractions, the job makes them with the configured extractor (on Ray when
Ray is on) and resumes, as :mod:`refold.jobs.erase` does.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from refold.fold.errors import ErasureError, ExtractionError, ValidationError
from refold.jobs.config import JobConfig, job_parser, run_job
from refold.jobs.erase import DECREMENTAL_REMOVED, read_lines

__all__ = ["main", "retain"]


def retain(cfg: JobConfig, *, now: str | None = None, dry_run: bool = False,
           canaries: Sequence[str] = ()) -> dict[str, Any]:
    """Apply the store's retention policy at ``now``; the summary's part."""
    from refold import retention
    from refold.jobs.project import fold_job
    from refold.storage.erasure.receipts import receipt_path

    mem = cfg.open_store()

    def attempt():
        return retention.apply(mem, now=now, dry_run=dry_run, canaries=canaries)

    extracted = None
    try:
        run = attempt()
    except ErasureError as exc:
        if dry_run or not isinstance(exc.__cause__, ExtractionError):
            raise
        extracted = fold_job(cfg, full=False)  # the journal holds the erasure; resume it after
        run = attempt()
    out = run.as_json()
    if run.receipt is not None:
        out["receipt"] = str(receipt_path(mem.layout, run.receipt.erasure_id))
        out["residue_hits"] = len(dict(run.receipt.scan).get("hits", []))
    if extracted is not None:
        out["extraction_before_resume"] = extracted
    print(f"retain: {len(run.plan.expired)} expired, {len(run.plan.held)} held"
          + (" (dry run)" if dry_run else ""), file=sys.stderr, flush=True)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.retain",
                        "Retention: erase expired events (one receipt per run), skipping legal holds.")
    parser.add_argument("--dry-run", action="store_true", help="list what would be erased; write nothing")
    parser.add_argument("--now", help="the time to expire against (ISO-8601 with a timezone; default: now)")
    parser.add_argument("--canaries-file", help="strings the residue scan must not find, one a line")
    parser.add_argument("--no-decremental", dest="removed_decremental", action="store_true", help=argparse.SUPPRESS)

    def body(cfg: JobConfig, args) -> dict[str, Any]:
        if args.removed_decremental:
            raise ValidationError(DECREMENTAL_REMOVED)
        return retain(cfg, now=args.now, dry_run=args.dry_run, canaries=read_lines(args.canaries_file))

    return run_job("retain", body, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
