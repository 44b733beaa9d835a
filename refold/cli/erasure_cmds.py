"""Erasure commands: subjects, find, erase, receipt show, receipt verify, scan."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from refold.cli.app import emit_json, emit_jsonl, json_option, main, open_store, store_argument

#: what `erase` says when the residue scan had nothing to look for
NO_NEEDLES = "residue scan: no needles given (pass --canary or register the subject's name)"


def _event_line(e) -> str:
    text = (e.content or "").replace("\n", " ")
    return f"{e.seq:>6}  {e.event_id}  {e.kind:<14} {e.source or '':<16} {text[:70]}"


@main.command()
@store_argument
@click.option("--add", "add_id", metavar="ID", help="Register (or replace) the subject with this opaque id.")
@click.option("--name", help="Display name (with --add).")
@click.option("--alias", "aliases", multiple=True, help="Another name (repeatable, with --add).")
@click.option("--identifier", "identifiers", multiple=True,
              help="An identifier such as an email (repeatable, with --add).")
@json_option
def subjects(store: str, add_id: str | None, name: str | None, aliases: tuple[str, ...],
             identifiers: tuple[str, ...], as_json: bool) -> None:
    """List the data subjects of STORE (or register one with --add ID --name NAME)."""
    from refold.erasure import verbs as erasing
    from refold.fold.errors import ValidationError

    mem = open_store(store)
    if add_id is not None:
        if not name:
            raise ValidationError("--add needs --name")
        erasing.register_subject(mem.store, add_id, name, aliases=aliases, identifiers=identifiers)
    items = erasing.subjects(mem.store)
    if as_json:
        emit_jsonl({"subject_id": s.subject_id, **s.as_json()} for s in items)
        return
    for s in items:
        extra = ", ".join([*s.aliases, *s.identifiers])
        click.echo(f"{s.subject_id}\t{s.name}" + (f"\t({extra})" if extra else ""))
    click.echo(f"{len(items)} subject(s)")


@main.command()
@store_argument
@click.option("--subject", "subject_id", required=True, help="Opaque subject id.")
@json_option
def find(store: str, subject_id: str, as_json: bool) -> None:
    """Events tagged with a subject, and events that name it without the tag."""
    from refold.erasure import verbs as erasing
    from refold.fold.events import event_to_json

    found = erasing.find(open_store(store).store, subject_id)
    if as_json:  # a list of events: JSON Lines, each saying how it matched
        emit_jsonl([*({"match": "tagged", **event_to_json(e)} for e in found.tagged),
                    *({"match": "untagged_mention", **event_to_json(e)} for e in found.untagged)])
        return
    click.echo(f"tagged with {subject_id}: {len(found.tagged)} event(s)")
    for e in found.tagged:
        click.echo(_event_line(e))
    click.echo(f"untagged mentions: {len(found.untagged)} event(s)"
               + (" — add them with `refold erase --include-mentions` or --include ID" if found.untagged else ""))
    for e in found.untagged:
        click.echo(_event_line(e))


@main.command()
@store_argument
@click.option("--subject", "subject_id", help="Opaque subject id to erase.")
@click.option("--subjects-file", type=click.Path(dir_okay=False),
              help="Erase every subject listed (one id a line; blank lines, # comments and duplicates "
                   "ignored) as ONE batch: a receipt each plus receipts/batches/<batch_id>.json.")
@click.option("--dry-run", is_flag=True, help="Show what would be erased; write nothing.")
@click.option("--canary", "canaries", multiple=True,
              help="A string that must not remain anywhere afterwards, even inside a word "
                   "(repeatable; never stored).")
@click.option("--include", "include", multiple=True, metavar="EVENT_ID",
              help="Also erase this (untagged) event (repeatable).")
@click.option("--include-mentions", is_flag=True, help="Also erase every untagged event naming the subject.")
@click.option("--orphan-grace-hours", type=int, default=1, show_default=True,
              help="Delete untracked data files older than this; 0 only when no writer is running.")
@click.option("--decremental/--no-decremental", "removed_decremental", default=None, hidden=True)
@json_option
def erase(store: str, subject_id: str | None, subjects_file: str | None, dry_run: bool, canaries: tuple[str, ...],
          include: tuple[str, ...], include_mentions: bool, orphan_grace_hours: int,
          removed_decremental: bool | None, as_json: bool) -> None:
    """Erase a data subject: tombstone (or shred) its events, purge derived data, refold, receipt.

    With --subjects-file, all listed subjects in one batch (a legal hold on any refuses the
    whole batch, naming the held subjects). Safe to rerun after a crash: it resumes the pending
    erasure. Exit 1 when the residue scan found something.
    """
    from refold.erasure import verbs as erasing
    from refold.fold.errors import ValidationError

    if removed_decremental is not None:
        from refold.jobs.erase import DECREMENTAL_REMOVED

        raise ValidationError(DECREMENTAL_REMOVED)
    if (subject_id is None) == (subjects_file is None):
        raise ValidationError("give --subject ID or --subjects-file FILE (one of them)")
    if subjects_file is not None:
        _erase_file(store, subjects_file, dry_run=dry_run, canaries=canaries, include=include,
                    include_mentions=include_mentions, orphan_grace_hours=orphan_grace_hours, as_json=as_json)
        return
    result = erasing.erase(open_store(store).store, subject_id, dry_run=dry_run, canaries=canaries,
                           include=include, include_mentions=include_mentions,
                           orphan_grace_hours=orphan_grace_hours)
    if dry_run:
        _print_plan(result, as_json)
        return
    hits = len(result.scan.get("hits", []))
    if as_json:
        emit_json(result.as_json())
    else:
        _print_receipt(result)
    sys.exit(1 if hits else 0)


def _erase_file(store: str, subjects_file: str, *, dry_run: bool, canaries: tuple[str, ...],
                include: tuple[str, ...], include_mentions: bool, orphan_grace_hours: int,
                as_json: bool) -> None:
    from refold.erasure import verbs as erasing
    from refold.fold.errors import ValidationError
    from refold.jobs.erase import read_lines

    if include or include_mentions:
        raise ValidationError("--include and --include-mentions erase one subject's extra events; "
                              "use them with --subject ID")
    subjects = read_lines(subjects_file)
    if not subjects:
        raise ValidationError(f"{subjects_file} lists no subject id (one id a line; # starts a comment)")
    mem = open_store(store)
    result = erasing.erase_batch(mem.store, subjects, dry_run=dry_run, canaries=canaries,
                                 orphan_grace_hours=orphan_grace_hours)
    if dry_run:
        if as_json:
            emit_jsonl(p.as_json() for p in result)
            return
        for plan in result:
            _print_plan(plan, False)
        return
    hits = sum(len(r.scan.get("hits", [])) for r in result.receipts)
    if as_json:
        emit_json(dict(result.summary))
    else:
        for r in result.receipts:
            _print_receipt(r)
        t = result.summary.get("totals", {})
        click.echo(f"batch {result.batch_id}: {t.get('erased', 0)} erased, {t.get('noop', 0)} noop, "
                   f"{t.get('events', 0)} event(s); summary receipts/batches/{result.batch_id}.json")
    sys.exit(1 if hits else 0)


def _print_plan(plan, as_json: bool) -> None:
    if as_json:
        emit_json(plan.as_json())
        return
    ranges = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in plan.seq_ranges[:20])
    click.echo(f"dry run: erasing {plan.subject_id} ({plan.mode} mode) would")
    click.echo(f"  erase {len(plan.events)} event(s) (seqs {ranges or '-'}"
               f"{' …' if len(plan.seq_ranges) > 20 else ''}), {plan.untagged} of them untagged")
    if plan.key_ids:
        click.echo(f"  destroy {len(plan.key_ids)} key(s)")
    click.echo(f"  purge {plan.cache_rows} extraction-cache row(s)")
    for d in plan.derived:
        click.echo(f"  {d['store']}: {d['rows']}" + "".join(f"\n    {line}" for line in d.get("detail", ())))
    click.echo(f"  remove the registry entry: {'yes' if plan.registered else 'none registered'}")
    click.echo("out of scope (refold cannot reach these):")
    for item in plan.out_of_scope:
        click.echo(f"  - {item}")
    if plan.nothing_to_do:
        click.echo(f"nothing to do: already erased by {plan.previous_erasure_id}")


def _print_receipt(r) -> None:
    if r.status == "noop":
        click.echo(f"nothing to erase: {r.subject_id} was erased by {r.previous_erasure_id} "
                   f"(receipt {r.erasure_id})")
        return
    hits = r.scan.get("hits", [])
    click.echo(f"erased {r.subject_id} ({r.mode} mode): {len(r.events)} event(s), "
               f"{len(r.destroyed_key_ids)} key(s) destroyed, {len(r.removed_files)} file(s) removed")
    for d in r.key_store.get("kms_key_deletions", ()):
        click.echo(f"  KMS key {d['kms_key_id']}: deletion scheduled, final on {d['deletion_date']}"
                   if d.get("deletion_date") else f"  KMS key {d['kms_key_id']}: {d.get('state')}")
    for p in r.purged:
        click.echo(f"  purged {p['rows']} from {p['store']}")
    click.echo(f"  refold: {_calls(r.extraction_calls)}")
    if r.scan.get("needles", 0):
        click.echo(f"  residue scan: {len(hits)} hit(s) for {r.scan['needles']} needle(s)")
    else:
        click.echo(f"  {NO_NEEDLES}")
    for h in hits[:20]:
        click.echo(f"    {h['file']} @ {h['location']} (needle #{h['needle_index']})")
    click.echo(f"receipt {r.erasure_id}")


def _calls(count: int | None) -> str:
    if count is None:
        return "extraction calls not recorded (a receipt from before refold recorded them)"
    return f"{count} extraction call(s)" + (" (every surviving extraction came from the cache)" if count == 0 else "")


@main.group()
def receipt() -> None:
    """Erasure receipts."""


@receipt.command("show")
@store_argument
@click.argument("receipt_file", metavar="RECEIPT")
@json_option
def receipt_show(store: str, receipt_file: str, as_json: bool) -> None:
    """Print RECEIPT (a path or an erasure id): what the erasure did, as recorded."""
    from refold.erasure.receipts import load_receipt, receipt_path

    mem = open_store(store)
    path = receipt_file
    if not receipt_file.endswith(".json") and not Path(receipt_file).exists():
        path = receipt_path(mem.layout, receipt_file)
    r = load_receipt(path, layout=mem.layout)
    if as_json:
        emit_json(r.as_json())
        return
    click.echo(f"erasure {r.erasure_id}: {r.status}, subject {r.subject_id} ({r.mode} mode)")
    click.echo(f"  started {r.started_at}, completed {r.completed_at}")
    click.echo(f"  events: {len(r.events)} erased, keys destroyed: {len(r.destroyed_key_ids)}, "
               f"files removed: {len(r.removed_files)}")
    for p in r.purged:
        click.echo(f"  purged {p['rows']} from {p['store']}")
    click.echo(f"  refold: {_calls(r.extraction_calls)}; spec {r.spec_hash}, state digest {r.state_digest}")
    needles = r.scan.get("needles", 0)
    click.echo(f"  residue scan: {len(r.scan.get('hits', []))} hit(s) for {needles} needle(s)" if needles
               else f"  {NO_NEEDLES}")
    click.echo("  out of scope (refold cannot reach these):")
    for item in r.out_of_scope:
        click.echo(f"    - {item}")


@receipt.command("verify")
@store_argument
@click.argument("receipt_file", metavar="RECEIPT")
@click.option("--needle", "needles", multiple=True,
              help="Re-scan for this name, as a whole word (repeatable).")
@click.option("--canary", "canaries", multiple=True,
              help="Re-scan for this string anywhere, even inside a word (repeatable).")
@click.option("--no-refold", is_flag=True, help="Skip refolding to compare the state digest.")
@json_option
def receipt_verify(store: str, receipt_file: str, needles: tuple[str, ...], canaries: tuple[str, ...],
                   no_refold: bool, as_json: bool) -> None:
    """Re-check RECEIPT (a path or an erasure id) against STORE. Exit 0 when every check passes."""
    from refold.erasure import verbs as erasing
    report = erasing.verify_receipt(open_store(store).store, receipt_file, needles=needles, canaries=canaries,
                                    refold=not no_refold)
    if as_json:
        emit_json(report.as_json())
    else:
        for c in report.checks:
            click.echo(f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
        click.echo(f"info refold (as recorded): {_calls(report.extraction_calls)}")
    sys.exit(0 if report.ok else 1)


@main.command()
@store_argument
@click.option("--needle", "needles", multiple=True,
              help="A name to look for, as a whole word: 'Tim' is not found in 'timestamp' (repeatable).")
@click.option("--canary", "canaries", multiple=True,
              help="A string to look for anywhere, even inside a word (repeatable).")
@json_option
def scan(store: str, needles: tuple[str, ...], canaries: tuple[str, ...], as_json: bool) -> None:
    """Search every file under STORE for the needles, decoding Parquet, JSON, base64 and compression.

    Give at least one --needle or --canary. Exit 0 when nothing is found, 1 when something is.
    """
    from refold.erasure.scan import scan_report

    report = scan_report(store, needles, canaries=canaries)
    if as_json:
        emit_json(report.as_json())
    else:
        for h in report.hits:
            click.echo(f"{h.file}\t{h.location}\t{h.needle}")
        for err in report.errors:
            click.echo(f"warning: {err}", err=True)
        click.echo(f"{len(report.hits)} hit(s) in {report.files} file(s)")
    sys.exit(1 if report.hits else 0)
