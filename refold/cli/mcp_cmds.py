"""``refold mcp``: serve a store's agent tools over the Model Context Protocol (refold.agent.mcp_server)."""

from __future__ import annotations

import click

from refold.cli.app import main, store_argument


@main.command()
@store_argument
@click.option("--tenant", default="default", show_default=True,
              help="The one tenant every call reads and writes (fixed for the server's life).")
@click.option("--principal", help="Whose access rules reads obey (default: none, a trusted single-user agent).")
@click.option("--reader", "readers", multiple=True,
              help="A principal who may read what the agent writes (repeatable; default: the whole tenant).")
@click.option("--embedder", default="minilm", show_default=True,
              help="minilm (packaged all-MiniLM-L6-v2) | hashing (tests only).")
@click.option("--http", is_flag=True, help="Serve streamable HTTP on 127.0.0.1 instead of stdio.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True,
              help="The HTTP port (with --http).")
def mcp(store: str, tenant: str, principal: str | None, readers: tuple[str, ...], embedder: str,
        http: bool, port: int) -> None:
    """Serve STORE's agent tools (write_memory, retract_memory, search_memory, memory_as_of, why)
    to an MCP client: stdio by default, or streamable HTTP at http://127.0.0.1:PORT/mcp. The
    scope (tenant, principal, readers) is fixed here; no tool input can widen it."""
    from refold.agent.mcp_server import ServerOptions, serve

    if not http and click.get_current_context().get_parameter_source("port").name != "DEFAULT":
        raise click.UsageError("--port needs --http (stdio has no port)")
    serve(ServerOptions(store=store, tenant=tenant, principal=principal, readers=tuple(readers),
                        embedder=embedder, http=http, port=port))
