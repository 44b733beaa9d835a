"""Retention job: erase the events the store's retention rules expire, one receipt per run.

    refold job retain /abs/path/store --dry-run          # what would go, writes nothing
    refold job retain /abs/path/store [--now 2026-12-04T00:00:00+00:00]
    python -m refold.jobs.retain /abs/path/store ...     # the same command
    ray job submit --working-dir . -- python -m refold.jobs.retain /abs/path/store

Meant to run on a schedule (cron, a workflow engine, a Ray job). Rules and legal holds are set
with ``refold retention`` and ``refold hold`` (see :mod:`refold.agent.retention`); events under a hold
are skipped and listed as ``held``. The expired events go through the erasure procedure as one
erasure (tombstones or shredding, purge of every derived store, refold, residue scan) whose
receipt's notes say which rule expired which events. ``--now`` fixes the clock (a backfill, or a
test). A run interrupted by a crash is resumed by the next run. When the refold after the
erasure needs model extractions, the job makes them with the configured extractor (on Ray when
Ray is on) and resumes, as :mod:`refold.jobs.erase` does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from refold.fold.errors import ErasureError, ExtractionError
from refold.jobs.config import JobConfig, job_command, removed_flag, run_job
from refold.jobs.erase import DECREMENTAL_REMOVED, read_lines

__all__ = ["command", "retain"]


def retain(cfg: JobConfig, *, now: str | None = None, dry_run: bool = False,
           canaries: Sequence[str] = ()) -> dict[str, Any]:
    """Apply the store's retention policy at ``now``; the summary's part."""
    from refold.agent import retention
    from refold.jobs.project import fold_job
    from refold.erasure.receipts import receipt_path

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


@job_command("retain")
@click.option("--dry-run", is_flag=True, help="List what would be erased; write nothing.")
@click.option("--now", metavar="TIME", help="The time to expire against (ISO-8601 with a timezone; default: now).")
@click.option("--canaries-file", metavar="FILE", help="Strings the residue scan must not find, one a line.")
@removed_flag("--no-decremental", message=DECREMENTAL_REMOVED)
def command(dry_run: bool, now: str | None, canaries_file: str | None, **flags: Any) -> int:
    """Erase the events retention rules expire.

    One receipt per run; events under a legal hold are skipped.

    STORE is the store root: an absolute path or an object-store URI. Prints one JSON summary.
    """
    return run_job("retain", lambda cfg: retain(cfg, now=now, dry_run=dry_run,
                                                canaries=read_lines(canaries_file)), flags)


if __name__ == "__main__":
    command(prog_name="python -m refold.jobs.retain")
