"""Full refold job: rewrite the state tables from the whole log.

    python -m refold.jobs.refold /abs/path/store [--extractor rules] [--ray | --no-ray]

The extraction cache is still used (a full refold re-merges; it does not re-run the model over
events already extracted under the spec); only missing extractions are made, sharded over Ray
when it is on. Prints one JSON summary (see :mod:`refold.jobs.config`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from refold.jobs.config import job_parser, run_job
from refold.jobs.project import add_fold_flags, fold_job

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.refold", "Full refold: rewrite the state tables from the log.")
    add_fold_flags(parser)
    return run_job("refold", lambda cfg, args: fold_job(cfg, full=True, vacuum_hours=args.vacuum_hours),
                   parser, argv)


if __name__ == "__main__":
    sys.exit(main())
