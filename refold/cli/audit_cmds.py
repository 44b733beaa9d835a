"""Audit commands: ``refold trace`` (what a trace wrote and read, and whether its reads replay)."""

from __future__ import annotations

import sys

import click

from refold.cli.app import emit_json, json_option, main, open_store, store_argument


@main.command()
@store_argument
@click.argument("trace_id")
@click.option("--replay", is_flag=True,
              help="Ask each recorded read again of the log as it stood then; exit 1 if one differs.")
@click.option("--embedder", default=None,
              help="Embedder to replay with when a read recorded none by name (e.g. hashing, minilm).")
@json_option
def trace(store: str, trace_id: str, replay: bool, embedder: str | None, as_json: bool) -> None:
    """Everything TRACE_ID wrote and read in STORE, in log order (see docs/audit.md).

    Exit 0, or 1 when --replay found a read that no longer returns what it returned then.
    """
    report = open_store(store).trace(trace_id, replay=replay, embedder=embedder)
    if as_json:
        emit_json(report.as_json())
    else:
        for e in report.entries:
            click.echo(_line(e))
        summary = f"trace {trace_id}: {len(report.writes)} write(s), {len(report.reads)} read(s)"
        if replay:
            summary += f", {len(report.reads) - len(report.mismatches)} replayed the same"
            summary += f", {len(report.mismatches)} differ" if report.mismatches else ""
        click.echo(summary)
    sys.exit(0 if report.ok else 1)


def _line(e) -> str:
    head = f"{e.seq:>6}  {e.recorded_at.isoformat(timespec='seconds')}  {e.kind:<13}"
    if e.erased:
        return f"{head} (erased: its key was destroyed)"
    if e.read is None:
        text = (e.content or "").replace("\n", " ")
        fact = f"  [{e.fact['subject']} {e.fact['relation']} {e.fact['object']}]" if e.fact else ""
        return f"{head} {e.source or ''}: {text[:70]}{fact}"
    r = e.read
    filters = ", ".join(f"{k}={v}" for k, v in (("tenant", r.tenant), ("principal", r.principal),
                                               ("valid_at", r.valid_at), ("as_of", r.as_of)) if v)
    line = (f"{head} read {r.query!r} k={r.k} {r.kind} at log version {r.log_version}"
            + (f" ({filters})" if filters else "") + f" -> {', '.join(r.ids) or 'nothing'}")
    if e.replay is not None:
        if e.replay.same:
            line += "\n        replay: same"
        else:
            line += f"\n        replay: DIFFERS -> {e.replay.error or ', '.join(e.replay.ids) or 'nothing'}"
    return line
