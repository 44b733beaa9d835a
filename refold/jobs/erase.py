"""Erasure backfill job: erase one subject or a file of many, a receipt each.

    python -m refold.jobs.erase /abs/path/store --subject s-3f9c [--dry-run]
    python -m refold.jobs.erase /abs/path/store --subjects-file erase.txt
    ray job submit --working-dir . -- python -m refold.jobs.erase /abs/path/store --subjects-file ...

Each subject goes through ``Memory.erase`` (tombstones or key destruction, purge of every derived
store, scrub, refold, residue scan, receipt; see :mod:`refold.erasing`). Subjects are independent: one that
fails is reported and the others still run; the job then exits 1. Every erasure is journaled, so
running the same job again resumes an interrupted subject and gives ``noop`` receipts for those
already erased.

The erasure itself runs in the job's driver (it rewrites files under a local store root). When
the refold after an erasure needs new model extractions (a model spec whose batched request
included an erased event), the job makes them with the configured extractor — sharded on Ray when
Ray is on — and resumes the erasure.

Subjects files hold one opaque subject id per line (blank lines and ``#`` comments ignored).
Canaries (strings the residue scan must not find) are read from ``--canaries-file`` only: a
job's command line is stored by Ray in its job table, and a canary is personal data.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from refold.fold.errors import ErasureError, ExtractionError, RefoldError, ValidationError
from refold.jobs.config import JobConfig, job_parser, run_job

__all__ = ["erase_subjects", "main", "read_lines"]


def read_lines(path: str | None) -> list[str]:
    """Non-blank, non-comment lines of ``path`` (none when ``path`` is None)."""
    if not path:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc}") from exc
    return [s for line in text.splitlines() if (s := line.strip()) and not s.startswith("#")]


def _erase_one(mem, cfg: JobConfig, subject: str, *, dry_run: bool, include_mentions: bool,
               canaries: list[str], decremental: bool = True) -> dict[str, Any]:
    from refold.jobs.project import fold_job
    from refold.storage.erasure.receipts import receipt_path

    def attempt():
        return mem.erase(subject, dry_run=dry_run, canaries=canaries, include_mentions=include_mentions,
                         decremental=decremental)

    extracted = None
    try:
        result = attempt()
    except ErasureError as exc:
        if dry_run or not isinstance(exc.__cause__, ExtractionError):
            raise
        # the journal holds the erasure; make the missing extractions and resume it
        extracted = fold_job(cfg, full=False)
        result = attempt()
    if dry_run:
        plan = result.as_json()
        return {"subject": subject, "ok": True, "dry_run": True, "events": len(plan["events"]),
                "cache_rows": plan.get("cache_rows", 0), "plan": plan}
    out = {"subject": subject, "ok": True, "status": result.status,
           "erasure_id": result.erasure_id, "events": len(result.events),
           "receipt": str(receipt_path(mem.layout, result.erasure_id)),
           "residue_hits": len(dict(result.scan).get("hits", []))}
    if extracted is not None:
        out["extraction_before_resume"] = extracted
    return out


def erase_subjects(cfg: JobConfig, subjects: Sequence[str], *, dry_run: bool = False,
                   include_mentions: bool = False, canaries: Sequence[str] = (),
                   decremental: bool = True) -> dict[str, Any]:
    """Erase each subject in turn; the summary's part (``ok`` false if any subject failed)."""
    if not subjects:
        raise ValidationError("no subject to erase: pass --subject ID or --subjects-file FILE")
    mem = cfg.open_store()
    results = []
    for subject in dict.fromkeys(subjects):  # each once, in the order given
        try:
            results.append(_erase_one(mem, cfg, subject, dry_run=dry_run,
                                      include_mentions=include_mentions, canaries=list(canaries),
                                      decremental=decremental))
        except RefoldError as exc:
            results.append({"subject": subject, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        state = "ok" if results[-1]["ok"] else "FAILED"
        print(f"erase: {len(results)}/{len(subjects)} {subject} {state}", file=sys.stderr, flush=True)
    failed = [r["subject"] for r in results if not r["ok"]]
    return {"ok": not failed, "dry_run": dry_run, "subjects": results, "failed": failed,
            "receipts": [r["receipt"] for r in results if r.get("receipt")]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = job_parser("python -m refold.jobs.erase", "Erasure backfill: a receipt per subject.")
    parser.add_argument("--subject", action="append", default=[], help="subject id (repeatable)")
    parser.add_argument("--subjects-file", help="file of subject ids, one per line")
    parser.add_argument("--dry-run", action="store_true", help="print each plan; write nothing")
    parser.add_argument("--include-mentions", action="store_true",
                        help="also erase untagged events that name the subject")
    parser.add_argument("--canaries-file", help="strings the residue scan must not find, one a line")
    parser.add_argument("--no-decremental", action="store_true",
                        help="purge the snapshots holding the subject and refold from an older one, "
                             "instead of patching the newest snapshot")

    def body(cfg: JobConfig, args) -> dict[str, Any]:
        subjects = [*args.subject, *read_lines(args.subjects_file)]
        return erase_subjects(cfg, subjects, dry_run=args.dry_run,
                              include_mentions=args.include_mentions,
                              canaries=read_lines(args.canaries_file),
                              decremental=not args.no_decremental)

    return run_job("erase", body, parser, argv)


if __name__ == "__main__":
    sys.exit(main())
