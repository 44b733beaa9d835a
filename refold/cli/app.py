"""The click group every ``refold`` command registers on, and small shared helpers."""

from __future__ import annotations

import json
import sys
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
def main() -> None:
    """refold: agent memory as an input-closed fold over an append-only Delta Lake log."""


def store_argument(fn):
    return click.argument("store", type=click.Path(file_okay=False))(fn)


def json_option(fn):
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(fn)


def open_store(path: str):
    """The existing store at ``path``; a missing one is a NotFoundError naming `refold init`."""
    from refold.memory import open as open_memory

    return open_memory(path)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


def stdout_is_tty() -> bool:
    return sys.stdout.isatty()
