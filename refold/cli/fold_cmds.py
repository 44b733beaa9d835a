"""Fold commands: fold, facts, why, graph, audit."""

from __future__ import annotations

import json
import sys

import click

from refold.fold.errors import ValidationError

from refold.cli.app import emit_json, emit_jsonl, json_option, main, open_store, store_argument


def _options(pairs: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE", param_hint="--option")
        try:
            out[name.replace("-", "_")] = json.loads(value)
        except (json.JSONDecodeError, RecursionError):  # not JSON (or absurdly nested): a string
            out[name.replace("-", "_")] = value
    return out


@main.command()
@store_argument
@click.option("--extractor", default="rules", show_default=True,
              help="rules | llamacpp | openai | vllm")
@click.option("--option", "options", multiple=True, metavar="NAME=VALUE",
              help="Extractor option, e.g. --option base_url=http://127.0.0.1:8080/v1 (repeatable).")
@click.option("--full", is_flag=True, help="Rewrite the state tables from the extraction cache.")
@click.option("--ray", "use_ray", is_flag=True,
              help="Shard extraction over Ray workers, and the merge's bucket groups over Ray tasks.")
@click.option("--address", help="Ray cluster address (default: local Ray).")
@click.option("--no-progress", is_flag=True, help="No progress bar or progress lines.")
@click.option("--index", "index", is_flag=False, flag_value="minilm", default=None,
              help="Also embed new facts/events into the vector index (optionally name the embedder).")
@click.option("--engine", hidden=True, expose_value=False, callback=lambda ctx, param, value: _removed(value),
              help="Removed in refold 0.2.")
@click.option("--buckets", type=click.IntRange(1, 4096), default=None,
              help="Partitions of a new state (with --full; default 64).")
@click.option("--vacuum-hours", type=click.IntRange(0), default=None, metavar="HOURS",
              help="Then delete the state tables' files unused for HOURS (see `refold vacuum-state`).")
@json_option
def fold(store: str, extractor: str, options: tuple[str, ...], full: bool, use_ray: bool,
         address: str | None, no_progress: bool, index: str | None, buckets: int | None,
         vacuum_hours: int | None, as_json: bool) -> None:
    """Fold the log into the state tables (a tagged state version: the snapshot); print counts."""
    mem = open_store(store)
    opts = _options(options)
    runner = None
    if use_ray:
        from refold.jobs.ray_extract import ray_runner

        runner = ray_runner(extractor, opts, address=address, progress=not no_progress,
                            cache=mem.cache)  # each batch is cached where it ran: resumable
    merger = None
    if use_ray:
        from refold.jobs.ray_merge import ray_merger

        merger = ray_merger(address=address)  # the merge stage's bucket groups as Ray tasks too
    report = mem.fold(extractor=extractor, full=full, progress=not no_progress, runner=runner,
                      index=index or False, buckets=buckets, merger=merger, **opts)
    vacuumed = None if vacuum_hours is None else mem.vacuum_state(retain_hours=vacuum_hours)
    if as_json:
        emit_json({**report.as_json(), **({} if vacuumed is None else {"vacuumed_files": vacuumed})})
        return
    click.echo(f"events folded:     {report.events_folded}")
    click.echo(f"extraction calls:  {report.extraction_calls}")
    click.echo(f"facts:             {report.facts}")
    click.echo(f"derived facts:     {report.derived_facts}")
    click.echo(f"rejected outputs:  {report.rejected_outputs}")
    click.echo(f"spec:              {report.spec_hash}")
    if vacuumed is not None:
        click.echo(f"state files deleted: {sum(vacuumed.values())}")


def _removed(value) -> None:
    if value is not None:
        raise ValidationError("--engine was removed in refold 0.2: there is one engine, the state tables; "
                              "drop the flag")


@main.command(hidden=True, context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def snapshot() -> None:
    """Removed in refold 0.2: every `refold fold` tags a state version (the snapshot)."""
    raise ValidationError("`refold snapshot` was removed in refold 0.2: every `refold fold STORE` tags a state "
                          "version, which is the snapshot; run `refold fold STORE`")


@main.command("vacuum-state")
@store_argument
@click.option("--retain-hours", type=click.IntRange(0), default=168, show_default=True,
              help="Keep the files the state tables stopped using less than this many hours ago.")
@json_option
def vacuum_state(store: str, retain_hours: int, as_json: bool) -> None:
    """Delete the files old versions of the state tables held (Delta's vacuum, every spec).

    Folds keep every version (reads as of a past position travel to them); run this on a
    schedule. Past reads older than what is kept fold the log instead."""
    removed = open_store(store).vacuum_state(retain_hours=retain_hours)
    if as_json:
        emit_json({"retain_hours": retain_hours, "files_deleted": removed})
        return
    for spec_hash, n in removed.items():
        click.echo(f"state/{spec_hash}: {n} file(s) deleted")


@main.command()
@store_argument
@click.option("--subject")
@click.option("--relation")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
@click.option("--valid-at", "valid_at", help="Valid time (ISO-8601): facts true then.")
@click.option("--tenant")
@click.option("--current", "current_only", is_flag=True, help="Only facts that are still open.")
@click.option("--principal", help="Only what this principal may read (a fact closed by something it "
                                  "may not see shows as open).")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@json_option
def facts(store: str, subject, relation, as_of, valid_at, tenant, current_only, principal, fmt, as_json) -> None:
    """List facts (with validity intervals and derivation).

    A read: writes nothing, calls no model. Facts of events no fold has extracted yet are absent
    (``memory_written`` facts and retractions show at once); each JSON line's
    ``pending_extraction`` counts those events (docs/fold.md, "Reads")."""
    mem = open_store(store)
    frame = mem.facts(subject=subject, relation=relation, as_of=as_of, valid_at=valid_at, tenant=tenant,
                      current_only=current_only, principal=principal)
    pending = mem.pending(as_of=as_of)
    if as_json or fmt == "jsonl":
        emit_jsonl([{**row, "pending_extraction": pending} for row in frame.to_dicts()])
        return
    from rich.console import Console
    from rich.table import Table

    table = Table()
    for name in ("fact_id", "subject", "relation", "object", "valid_from", "valid_to", "derivation"):
        table.add_column(name, overflow="fold")
    for row in frame.iter_rows(named=True):
        table.add_row(row["fact_id"], row["subject"], row["relation"], row["object"],
                      _t(row["valid_from"]), _t(row["valid_to"]) or "(current)", row["derivation"])
    Console().print(table)
    click.echo(f"{frame.height} fact(s)")
    if pending:
        click.echo(f"{pending} newer event(s) await extraction: run `refold fold {store} --extractor "
                   f"{mem.current_spec().extractor}` to add their facts")


def _t(value) -> str:
    return "" if value is None else value.isoformat(timespec="seconds")


@main.command()
@store_argument
@click.argument("fact_id")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
@click.option("--principal", help="Answer as this principal may see it (unknown if it may not read the fact).")
@json_option
def why(store: str, fact_id: str, as_of: str | None, principal: str | None, as_json: bool) -> None:
    """Explain FACT_ID: its derivation and the events it came from."""
    answer = open_store(store).why(fact_id, as_of=as_of, principal=principal)
    if as_json:
        emit_json(answer)
        return
    _print_why(answer, indent=0)


def _print_why(answer: dict, indent: int) -> None:
    pad = "  " * indent
    f = answer["fact"]
    until = _t(answer["valid_to"]) or "now"
    click.echo(f"{pad}{answer['fact_id']}: ({f['subject']}, {f['relation']}, {f['object']}) "
               f"valid {_t(answer['valid_from'])} → {until}  [{answer['derivation']}]")
    for e in answer["events"]:
        if e.get("missing"):
            click.echo(f"{pad}  event {e['event_id']}: not in the log")
            continue
        click.echo(f"{pad}  seq {e['seq']} {e['kind']} from {e['source']}"
                   + (f", run {e['ingestion_run']}" if e["ingestion_run"] else "")
                   + (f", trace {e['trace_id']}" if e["trace_id"] else ""))
        if e["justification"]:
            click.echo(f"{pad}    justification: {e['justification']}")
        click.echo(f"{pad}    quote: \"{e['quote']}\"")
    for sub in answer.get("inputs", []):
        _print_why(sub, indent + 1)


@main.command()
@store_argument
@click.option("--subject", help="Only this subject's neighbourhood (else the whole state).")
@click.option("--depth", type=click.IntRange(1, 16), default=1, show_default=True,
              help="Hops along out-edges from --subject.")
@click.option("--tenant")
@click.option("--valid-at", "valid_at", help="Valid time (ISO-8601): facts true then.")
@click.option("--as-of", "as_of", help="Record time: a table VERSION or an ISO-8601 TIME.")
def graph(store: str, subject, depth, tenant, valid_at, as_of) -> None:
    """Print a view of the knowledge graph as node-link JSON (networkx's format)."""
    import networkx as nx

    view = open_store(store).graph(subject=subject, depth=depth, tenant=tenant, valid_at=valid_at, as_of=as_of)
    emit_json(nx.node_link_data(view, edges="edges"))


@main.command()
@store_argument
@json_option
def audit(store: str, as_json: bool) -> None:
    """Re-derive every recorded model request from log + spec. Exit 1 naming a leaking request."""
    report = open_store(store).audit()
    if as_json:
        emit_json(report.as_json())
    elif report.ok:
        click.echo(f"ok: {report.requests} model request(s), each re-derived byte for byte from log + spec")
    else:
        click.echo(f"AUDIT FAILED: {len(report.findings)} of {report.requests} request(s)", err=True)
        for f in report.findings:
            click.echo(f"  request {f.request_id} (events {', '.join(f.event_ids)}): {f.problem}", err=True)
    sys.exit(0 if report.ok else 1)
