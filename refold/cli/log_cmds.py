"""Log commands: init, append, log, verify, head."""

from __future__ import annotations

import json
import sys

import click

from .app import emit_json, json_option, main, open_store, store_argument

_TABLE_COLUMNS = ["seq", "event_id", "recorded_at", "kind", "tenant", "source", "content"]


def _iso(value):
    """Timestamps as ISO-8601 (``2026-01-01T12:00:00+00:00``, what --as-of reads back), else str."""
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


@main.command()
@store_argument
@click.option("--mode", type=click.Choice(["delete", "shred"]), default="delete", show_default=True,
              help="Erasure mode, fixed for the store's life: delete rewrites files, shred destroys keys.")
@click.option("--kms-key-id", help="Shred mode: keep the keys in AWS KMS, wrapped by this KMS key "
              "(ARN, key id or alias/NAME). Region and credentials: the usual AWS environment.")
@click.option("--kms-key-per-subject", is_flag=True,
              help="Shred mode: one KMS key per data subject, scheduled for deletion when it is erased.")
@click.option("--kms-endpoint", help="KMS endpoint URL (default: AWS_ENDPOINT_URL_KMS / AWS_ENDPOINT_URL or AWS's own).")
@click.option("--kms-region", help="KMS region (default: the key ARN's, or AWS_REGION).")
@click.option("--kms-pending-days", type=int,
              help="Per-subject KMS keys: days before KMS deletes an erased subject's key (7-30; default 7).")
@json_option
def init(store: str, mode: str, kms_key_id: str | None, kms_key_per_subject: bool, kms_endpoint: str | None,
         kms_region: str | None, kms_pending_days: int | None, as_json: bool) -> None:
    """Create a new store at STORE."""
    import refold

    mem = refold.init(store, mode=mode, kms_key_id=kms_key_id,  # type: ignore[arg-type]
                      kms_key_per_subject=kms_key_per_subject, kms_endpoint=kms_endpoint,
                      kms_region=kms_region, kms_pending_window_days=kms_pending_days)
    keys = mem.settings.get("keys") or {}
    if as_json:
        emit_json({"store": mem.root, "mode": mem.mode, **({"keys": keys} if keys else {})})
    else:
        where = ""
        if keys.get("kms_key_per_subject"):
            where = ", keys in AWS KMS (one KMS key per subject)"
        elif keys:
            where = f", keys in AWS KMS under {keys['kms_key_id']}"
        click.echo(f"created {mode}-mode store at {mem.root}{where}")


@main.command()
@store_argument
@click.argument("file", type=click.File("r", encoding="utf-8"))
@click.option("--ingestion-run", help="Tag every event of this batch with an ingestion run id.")
@json_option
def append(store: str, file, ingestion_run: str | None, as_json: bool) -> None:
    """Append events from FILE (JSON Lines; '-' reads stdin). Prints `seq event_id` per event."""
    from refold.fold.events import parse_jsonl

    mem = open_store(store)
    batch = parse_jsonl(file, max_content_bytes=mem.max_content_bytes, ingestion_run=ingestion_run)
    seqs = mem.log_store.append(batch)
    if as_json:
        emit_json([{"seq": s, "event_id": e.event_id} for s, e in zip(seqs, batch)])
    else:
        for seq, event in zip(seqs, batch):
            click.echo(f"{seq} {event.event_id}")


@main.command("log")
@store_argument
@click.option("--since", type=int, help="First seq to show (inclusive).")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@json_option
def log_cmd(store: str, since: int | None, as_of: str | None, fmt: str, as_json: bool) -> None:
    """Show the log."""
    frame = open_store(store).log(since=since, as_of=as_of)
    if as_json or fmt == "jsonl":
        for row in frame.to_dicts():
            click.echo(json.dumps(row, default=_iso, ensure_ascii=False))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for name in _TABLE_COLUMNS:
        table.add_column(name, overflow="fold", max_width=60 if name == "content" else None)
    for row in frame.select(_TABLE_COLUMNS).iter_rows():
        table.add_row(*["" if v is None else str(v) for v in row])
    Console().print(table)
    click.echo(f"{frame.height} event(s)")


@main.command()
@store_argument
@click.option("--against", type=click.Path(dir_okay=False, exists=True),
              help="A chain head kept outside the store (from `refold head --json`).")
@json_option
def verify(store: str, against: str | None, as_json: bool) -> None:
    """Recompute the chain. Exit 0 when intact; exit 1 naming the first bad seq."""
    report = open_store(store).verify(against=against)
    if as_json:
        emit_json(report.as_json())
    elif report.ok:
        click.echo(f"ok: {report.events} event(s), chain intact"
                   + (f", head seq {report.head.seq}" if report.head else ""))
    else:
        click.echo(f"TAMPERED: first bad seq {report.first_bad_seq}", err=True)
        for problem in report.problems:
            click.echo(f"  {problem}", err=True)
    sys.exit(0 if report.ok else 1)


@main.command()
@store_argument
@json_option
def head(store: str, as_json: bool) -> None:
    """Print the chain head (seq, link, table version) as JSON."""
    emit_json(open_store(store).head().as_json())


