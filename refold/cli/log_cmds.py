"""Log commands: init, append, log, verify, head."""

from __future__ import annotations

import json
import sys

import click

from .app import emit_json, emit_jsonl, iso_text, json_option, main, open_store, store_argument

_TABLE_COLUMNS = ["seq", "event_id", "recorded_at", "kind", "tenant", "source", "content"]
_SHREDDED = "(shredded: key destroyed)"


def _readable(mem, frame, as_of):
    """A shred-mode log frame with what the store's keys can open decrypted (content,
    justification, fact; ``cipher`` cleared on those rows); a row whose key was destroyed keeps
    its ``cipher`` and shows no content. Plain stores are returned as they are."""
    if mem.mode != "shred" or frame.is_empty() or frame["cipher"].null_count() == frame.height:
        return frame
    import polars as pl

    wanted = set(frame["event_id"].to_list())
    opened = {e.event_id: e for e in mem.events(as_of=as_of) if e.event_id in wanted}
    rows = []
    for row in frame.to_dicts():
        event = opened.get(row["event_id"])
        if row["cipher"] is not None and event is not None:
            readable = event.content is not None
            row.update(content=event.content, justification=event.justification,
                       fact=json.dumps(event.fact.as_dict(), sort_keys=True) if event.fact else None,
                       cipher=None if readable else row["cipher"])
        rows.append(row)
    return pl.DataFrame(rows, schema=frame.schema)


@main.command()
@store_argument
@click.option("--mode", type=click.Choice(["delete", "shred"]), default="delete", show_default=True,
              help="Erasure mode, fixed for the store's life: delete rewrites files, shred destroys keys.")
@json_option
def init(store: str, mode: str, as_json: bool) -> None:
    """Create a new store at STORE."""
    import refold

    mem = refold.init(store, mode=mode)  # type: ignore[arg-type]
    if as_json:
        emit_json({"store": mem.root, "mode": mem.mode})
    else:
        click.echo(f"created {mode}-mode store at {mem.root}")


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
        emit_jsonl({"seq": s, "event_id": e.event_id} for s, e in zip(seqs, batch))
    else:
        for seq, event in zip(seqs, batch):
            click.echo(f"{seq} {event.event_id}")


@main.command("log")
@store_argument
@click.option("--since", type=int, help="First seq to show (inclusive).")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--raw", is_flag=True, help="Shred mode: show the stored ciphertext instead of decrypting.")
@json_option
def log_cmd(store: str, since: int | None, as_of: str | None, fmt: str, raw: bool, as_json: bool) -> None:
    """Show the log. On a shred-mode store, content is decrypted where its key exists (--raw: as stored)."""
    mem = open_store(store)
    frame = mem.log(since=since, as_of=as_of)
    if not raw:
        frame = _readable(mem, frame, as_of)
    if as_json or fmt == "jsonl":
        emit_jsonl(frame.to_dicts())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for name in _TABLE_COLUMNS:
        table.add_column(name, overflow="fold", max_width=60 if name == "content" else None)
    for row in frame.iter_rows(named=True):
        cells = [iso_text(row[name]) for name in _TABLE_COLUMNS]
        if row["content"] is None and row.get("cipher"):
            cells[-1] = _SHREDDED
        table.add_row(*cells)
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


