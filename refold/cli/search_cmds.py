"""Search commands: ``refold search`` and ``refold index``."""

from __future__ import annotations

import click

from refold.cli.app import emit_json, emit_jsonl, json_option, main, open_store, store_argument

_EMBEDDER = click.option("--embedder", default="minilm", show_default=True,
                         help="minilm (packaged all-MiniLM-L6-v2) | hashing (tests only).")


def _t(value) -> str:
    return "" if value is None else value.isoformat(timespec="seconds")


@main.command()
@store_argument
@click.argument("text")
@click.option("--k", "k", type=click.IntRange(min=1), default=5, show_default=True, help="How many results.")
@click.option("--tenant", help="Only this tenant's facts.")
@click.option("--principal", help="Only facts whose every source event this principal may read.")
@click.option("--as-of", "as_of", help="Record time: search the index of the log as it stood at a table "
                                       "VERSION or an ISO-8601 TIME.")
@click.option("--valid-at", "valid_at", help="Valid time (ISO-8601): facts true then, instead of current ones.")
@click.option("--history", is_flag=True, help="Include superseded facts.")
@click.option("--kind", type=click.Choice(["facts", "events"]), default="facts", show_default=True)
@_EMBEDDER
@json_option
def search(store: str, text: str, k: int, tenant, principal, as_of, valid_at, history: bool, kind: str,
           embedder: str, as_json: bool) -> None:
    """Semantic search over folded memory (filters apply before ranking)."""
    frame = open_store(store).search(text, k=k, tenant=tenant, principal=principal, as_of=as_of,
                                     valid_at=valid_at, kind=kind, history=history, embedder=embedder)
    if as_json:
        emit_jsonl(frame.to_dicts())
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    if kind == "facts":
        for name in ("score", "fact_id", "subject", "relation", "object", "valid_from", "valid_to"):
            table.add_column(name, overflow="fold")
        for row in frame.iter_rows(named=True):
            table.add_row(f"{row['score']:.3f}", row["fact_id"], row["subject"], row["relation"], row["object"],
                          _t(row["valid_from"]), _t(row["valid_to"]) or "(current)")
    else:
        for name in ("score", "seq", "kind", "source", "text"):
            table.add_column(name, overflow="fold")
        for row in frame.iter_rows(named=True):
            table.add_row(f"{row['score']:.3f}", str(row["seq"]), row["kind"], row["source"] or "", row["text"])
    Console().print(table)
    click.echo(f"{frame.height} result(s)")


@main.command()
@store_argument
@click.option("--backend", type=click.Choice(["flat", "hnsw"]), help="Rebuild with this faiss backend.")
@_EMBEDDER
@json_option
def index(store: str, backend: str | None, embedder: str, as_json: bool) -> None:
    """Bring the vector index up to date with the log; print what it cost."""
    report = open_store(store).index(embedder=embedder, backend=backend).report
    if as_json:
        emit_json(report.as_json())
        return
    click.echo(f"index:     {report.path}")
    click.echo(f"model:     {report.model_id} ({report.backend})")
    click.echo(f"position:  seq {report.last_seq}")
    click.echo(f"vectors:   {report.facts} facts, {report.events} events")
    click.echo(f"this run:  {report.added} added ({report.embedded} embedded), {report.removed} removed")
