"""Snapshot command: write a snapshot of the fold at the head, or list the snapshots."""

from __future__ import annotations

import click

from .app import emit_json, emit_jsonl, iso_text, json_option, main, open_store, store_argument


@main.command()
@store_argument
@click.option("--list", "list_only", is_flag=True, help="List the snapshots instead of writing one.")
@click.option("--prune", "keep", type=click.IntRange(min=1), metavar="N",
              help="Then keep only the N newest snapshots of the spec.")
@json_option
def snapshot(store: str, list_only: bool, keep: int | None, as_json: bool) -> None:
    """Snapshot the fold (current spec) at the head of the log; folds resume from snapshots.

    The fold is brought up to date first (rules spec: missing extractions are made; a model
    spec needs `refold fold STORE --extractor ...` first). Erasure removes every snapshot that
    holds an erased event.
    """
    from refold.storage.snapshots import SnapshotStore

    mem = open_store(store)
    snaps = SnapshotStore(mem.layout, storage_options=mem.storage_options)
    if not list_only:
        info = mem.snapshot()
        if keep is not None and info is not None:
            snaps.prune(info.spec_hash, keep=keep)
        if as_json:
            emit_json(info.as_json() if info else None)
            return
        if info is None:
            click.echo("nothing to snapshot (the log is empty)")
            return
        click.echo(f"snapshot at seq {info.last_seq} ({info.events} events) of spec {info.spec_hash}: "
                   f"{info.nodes} nodes, {info.edges} facts, {info.contained} contributing events")
        click.echo(f"  {info.path}")
        return
    items = snaps.list()
    if as_json:
        emit_jsonl(s.as_json() for s in items)
        return
    if not items:
        click.echo("no snapshots")
        return
    click.echo(f"{'spec':<18}{'last_seq':>10}{'nodes':>9}{'facts':>9}{'contained':>11}  created_at")
    for s in items:
        click.echo(f"{s.spec_hash:<18}{s.last_seq:>10}{s.nodes:>9}{s.edges:>9}{s.contained:>11}  "
                   f"{iso_text(s.created_at)}")
    click.echo(f"{len(items)} snapshot(s)")
