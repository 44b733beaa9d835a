"""The click group every ``refold`` command registers on, and small shared helpers.

One output dialect for every command (docs/cli.md): ``--json`` prints one indented JSON document
for a single result (:func:`emit_json`) and JSON Lines, one compact object per line, for a list
(:func:`emit_jsonl`); every time is ISO-8601 (``2026-12-04T05:20:41.123456+00:00``), in JSON and
in tables alike (:func:`iso`). Errors are one line on stderr, in their CLI wording, exit 2.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import date, datetime
from typing import Any

import click

from refold.fold.errors import RefoldError


class _Group(click.Group):
    """Turns refold's own errors into one clean line on stderr and exit status 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RefoldError as exc:
            # the CLI wording of the message: it names `refold` commands, not Python calls
            click.echo(f"refold: error: {exc.for_cli()}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="refold")
@click.option("--log-level", envvar="REFOLD_LOG_LEVEL", show_envvar=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Print refold's log records from this level on stderr (timings of folds, erasures ...).")
def main(log_level: str | None) -> None:
    """refold: agent memory as an input-closed fold over an append-only Delta Lake log."""
    if log_level:  # (unset: the command's own output only)
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        logging.getLogger("refold").setLevel(log_level.upper())


def store_argument(fn):
    return click.argument("store", type=click.Path(file_okay=False))(fn)


def json_option(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def open_store(path: str):
    """The existing store at ``path``; a missing one is a NotFoundError naming `refold init`."""
    from refold.memory import open as open_memory

    return open_memory(path)


def iso(value: Any) -> Any:
    """JSON fallback for values json cannot write: times as ISO-8601, anything else as str."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


def iso_text(value: Any) -> str:
    """A table cell: times as ISO-8601, None as empty, anything else as str."""
    if value is None:
        return ""
    return iso(value)


def emit_json(value: Any) -> None:
    """One result: one indented JSON document."""
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=iso, ensure_ascii=False))


def emit_jsonl(rows: Iterable[Any]) -> None:
    """A list of results: JSON Lines, one compact object per line (nothing for an empty list)."""
    for row in rows:
        click.echo(json.dumps(row, default=iso, ensure_ascii=False))


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()
