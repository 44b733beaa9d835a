"""Full refold job: rewrite the state tables from the whole log.

    refold job refold /abs/path/store [--extractor rules] [--ray | --no-ray]
    python -m refold.jobs.refold /abs/path/store ...      # the same command

The extraction cache is still used (a full refold re-merges; it does not re-run the model over
events already extracted under the spec); only missing extractions are made, sharded over Ray
when it is on. Prints one JSON summary (see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

from typing import Any

from refold.jobs.config import job_command, run_job
from refold.jobs.project import fold_flags, fold_job

__all__ = ["command"]


@job_command("refold")
@fold_flags
def command(vacuum_hours: int | None, **flags: Any) -> int:
    """Rewrite the state tables from the whole log (full refold).

    STORE is the store root: an absolute path or an object-store URI. Prints one JSON summary.
    """
    return run_job("refold", lambda cfg: fold_job(cfg, full=True, vacuum_hours=vacuum_hours), flags)


if __name__ == "__main__":
    command(prog_name="python -m refold.jobs.refold")
