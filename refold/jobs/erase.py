"""Erasure backfill job: erase one subject or a file of many, a receipt each.

    refold job erase /abs/path/store --subject s-3f9c [--dry-run]
    refold job erase /abs/path/store --subjects-file erase.txt
    python -m refold.jobs.erase /abs/path/store ...         # the same command
    ray job submit --working-dir . -- python -m refold.jobs.erase /abs/path/store --subjects-file ...

Several subjects are erased as ONE batch (:func:`refold.erasure.verbs.erase_batch`: one erasure
commit, one tombstone commit or key destruction, one purge, scrub and refold, one residue scan,
then a receipt per subject and ``receipts/batches/<batch_id>.json``). A legal hold on any subject,
or an unknown subject, stops the batch before it writes anything (exit 2, naming them). The batch
is journaled: running the same job again resumes it; subjects already erased get ``noop``
receipts; an unknown subject is reported as failed (exit 1) and the others are erased.
``--dry-run`` prints each subject's plan. Duplicate lines are erased once.

The erasure itself runs in the job's driver (on a folder or a bucket, through the store URI). When
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

import click

from refold.fold.errors import ErasureError, ExtractionError, RefoldError, ValidationError
from refold.jobs.config import JobConfig, job_command, removed_flag, run_job

__all__ = ["DECREMENTAL_REMOVED", "command", "erase_subjects", "read_lines"]

#: what ``--decremental``/``--no-decremental`` (the graph engine's snapshot patch) answer now
DECREMENTAL_REMOVED = ("--decremental/--no-decremental was removed in refold 0.2: erasure always refolds the "
                       "touched buckets of the state tables; drop the option")


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
               canaries: list[str]) -> dict[str, Any]:
    from refold.jobs.project import fold_job
    from refold.erasure.receipts import receipt_path

    def attempt():
        return mem.erase(subject, dry_run=dry_run, canaries=canaries, include_mentions=include_mentions)

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


def _erase_batch(mem, cfg: JobConfig, subjects: Sequence[str], *, canaries: list[str],
                 include_mentions: bool) -> dict[str, Any]:
    """Every subject in ONE batch (:func:`refold.erasure.verbs.erase_batch`): a receipt each and the
    batch summary. A legal hold or an unknown subject stops the whole batch before it writes."""
    from refold.jobs.project import fold_job
    from refold.erasure.batch import summary_path
    from refold.erasure.receipts import receipt_path

    if include_mentions:
        raise ValidationError("--include-mentions erases one subject's untagged mentions: run those "
                              "subjects one at a time with --subject ID --include-mentions")

    from refold.erasure import verbs as erasing
    def attempt():
        return erasing.erase_batch(mem.store, subjects, canaries=canaries, skip_unknown=True)

    out: dict[str, Any] = {}
    try:
        batch = attempt()
    except ErasureError as exc:
        if not isinstance(exc.__cause__, ExtractionError):
            raise
        out["extraction_before_resume"] = fold_job(cfg, full=False)  # then resume the journaled batch
        batch = attempt()
    results = [{"subject": r.subject_id, "ok": True, "status": r.status, "erasure_id": r.erasure_id,
                "events": len(r.events), "receipt": str(receipt_path(mem.layout, r.erasure_id)),
                "residue_hits": len(dict(r.scan).get("hits", []))} for r in batch.receipts]
    unknown = list(batch.unknown)
    results += [{"subject": s, "ok": False, "error": "ErasureError: unknown subject: no event, key, registry "
                 "entry or earlier erasure names it"} for s in unknown]
    totals = batch.summary.get("totals", {})
    print(f"erase: batch {batch.batch_id}: {totals.get('erased', 0)} erased, {totals.get('noop', 0)} noop, "
          f"{totals.get('events', 0)} event(s)", file=sys.stderr, flush=True)
    return {"ok": not unknown, "dry_run": False, "batch_id": batch.batch_id, "subjects": results,
            "failed": unknown, "receipts": [r["receipt"] for r in results if r.get("receipt")],
            "summary": str(summary_path(mem.layout, batch.batch_id)) if batch.receipts else None,
            "extraction_calls": batch.summary.get("extraction_calls"), **out}


def erase_subjects(cfg: JobConfig, subjects: Sequence[str], *, dry_run: bool = False,
                   include_mentions: bool = False, canaries: Sequence[str] = ()) -> dict[str, Any]:
    """Erase the subjects: several (duplicates dropped) in ONE batch, a receipt each plus the batch
    summary; one subject, or a dry run, each in turn (``ok`` false if any subject failed)."""
    if not subjects:
        raise ValidationError("no subject to erase: pass --subject ID or --subjects-file FILE")
    mem = cfg.open_store()
    if not dry_run and len(dict.fromkeys(subjects)) > 1:
        return _erase_batch(mem, cfg, subjects, canaries=list(canaries), include_mentions=include_mentions)
    results = []
    for subject in dict.fromkeys(subjects):  # each once, in the order given
        try:
            results.append(_erase_one(mem, cfg, subject, dry_run=dry_run,
                                      include_mentions=include_mentions, canaries=list(canaries)))
        except RefoldError as exc:
            results.append({"subject": subject, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
        state = "ok" if results[-1]["ok"] else "FAILED"
        print(f"erase: {len(results)}/{len(subjects)} {subject} {state}", file=sys.stderr, flush=True)
    failed = [r["subject"] for r in results if not r["ok"]]
    return {"ok": not failed, "dry_run": dry_run, "subjects": results, "failed": failed,
            "receipts": [r["receipt"] for r in results if r.get("receipt")]}


@job_command("erase")
@click.option("--subject", "subjects", multiple=True, metavar="ID", help="Subject id (repeatable).")
@click.option("--subjects-file", metavar="FILE", help="File of subject ids, one per line.")
@click.option("--dry-run", is_flag=True, help="Print each plan; write nothing.")
@click.option("--include-mentions", is_flag=True, help="Also erase untagged events that name the subject.")
@click.option("--canaries-file", metavar="FILE", help="Strings the residue scan must not find, one a line.")
@removed_flag("--decremental", "--no-decremental", message=DECREMENTAL_REMOVED)
def command(subjects: tuple[str, ...], subjects_file: str | None, dry_run: bool, include_mentions: bool,
            canaries_file: str | None, **flags: Any) -> int:
    """Erase subjects, a receipt each (erasure backfill).

    Several subjects are erased as one batch; a job run again resumes it.

    STORE is the store root: an absolute path or an object-store URI. Prints one JSON summary.
    """

    def body(cfg: JobConfig) -> dict[str, Any]:
        return erase_subjects(cfg, [*subjects, *read_lines(subjects_file)], dry_run=dry_run,
                              include_mentions=include_mentions, canaries=read_lines(canaries_file))

    return run_job("erase", body, flags)


if __name__ == "__main__":
    command(prog_name="python -m refold.jobs.erase")
