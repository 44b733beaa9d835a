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


def _dicts(frame):
    """The rows as dicts; times Python's datetime cannot hold (stored by an older refold that did
    not check the range) are printed as text instead of failing the whole listing."""
    try:
        return frame.to_dicts()
    except (ValueError, OverflowError):
        import polars as pl

        return frame.with_columns(pl.col(pl.Datetime).dt.strftime("%Y-%m-%dT%H:%M:%S%.6f+00:00")).to_dicts()


@main.command()
@store_argument
@click.option("--mode", type=click.Choice(["delete", "shred"]), default="delete", show_default=True,
              help="Erasure mode, fixed for the store's life: delete rewrites files, shred destroys keys.")
@click.option("--group", is_flag=True,
              help="Share the store with your group (folders 2770 setgid, files 0660) instead of keeping it "
                   "private (0700/0600).")
@json_option
def init(store: str, mode: str, group: bool, as_json: bool) -> None:
    """Create a new store at STORE."""
    import refold

    mem = refold.init(store, mode=mode, group=group)  # type: ignore[arg-type]
    if as_json:
        emit_json({"store": mem.root, "mode": mem.mode})
    else:
        click.echo(f"created {mode}-mode store at {mem.root}")


@main.command()
@store_argument
# bytes: parse_jsonl decodes each line itself, so a byte that is not UTF-8 is named with its line
@click.argument("file", type=click.File("rb"))
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
        for row in _dicts(frame):
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


