"""An MCP server for one store: refold's agent tools over the Model Context Protocol.

    refold mcp ./memory --tenant acme --principal agent-7             # stdio (an agent launches it)
    refold mcp ./memory --tenant acme --http --port 8765              # streamable HTTP on 127.0.0.1

Built on the official ``mcp`` SDK's low-level :class:`mcp.server.Server` (install the ``mcp``
extra). It serves exactly :func:`refold.agent.tools.mcp_tools` — the schemas generated from the one
source the Anthropic and OpenAI forms come from — and runs every call through
:func:`refold.agent.tools.handle`.

Scope is fixed when the server starts: the :class:`~refold.agent.tools.ToolContext` (tenant,
principal, readers of what the agent writes, data subjects) comes from the command line, and no
tool input can name another tenant or principal, so a model cannot widen its own scope. One
:class:`~refold.Memory` and one embedder live for the server's life: the embedding model is
loaded once (at start, not on the first query) and the folded state and index views stay warm
between calls. Calls run one at a time in a worker thread (the Memory is shared; writes are
appends in log order anyway).

A refused call (bad input, unknown fact id) comes back as a tool result with ``isError`` set and
the one-line message (``ValidationError: ...``), which the model can read and correct; a
successful call returns the tool's JSON both as text and as structured content.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from typing import Any

from refold.fold.errors import RefoldError
from refold.agent.tools import ToolContext, handle, mcp_tools

__all__ = ["ServerOptions", "build_server", "serve"]

SERVER_NAME = "refold"


def _sdk():
    try:
        import mcp_types
        from mcp.server import Server
    except ImportError as exc:
        raise RefoldError(
            "refold mcp needs the official MCP SDK: pip install 'refold[mcp]'",
            cli="`refold mcp` needs the official MCP SDK: pip install 'refold[mcp]'",
        ) from exc
    return Server, mcp_types


@dataclass(frozen=True)
class ServerOptions:
    """What the command line fixes for the server's life. ``host`` is loopback only: the server
    has no authentication, so it must not listen where other machines can reach it."""

    store: str
    tenant: str = "default"
    principal: str | None = None
    readers: tuple[str, ...] = ()
    embedder: str = "minilm"
    http: bool = False
    port: int = 8765
    host: str = "127.0.0.1"


def _warm_context(options: ServerOptions) -> ToolContext:
    """Open the store, load the embedder and bring the state and index up to date once, so the
    first tool call costs what every later one does."""
    import refold
    from refold.search.embedders import get_embedder

    memory = refold.open(options.store)
    embedder = get_embedder(options.embedder)
    context = ToolContext(memory=memory, tenant=options.tenant, principal=options.principal,
                          readers=options.readers, embedder=embedder)
    memory.index(embedder=embedder)  # folds what is new and loads the model (it embeds the new texts)
    embedder.embed(["warm-up"])  # an index already up to date embeds nothing: load the model anyway
    return context


def build_server(context: ToolContext):
    """An MCP :class:`~mcp.server.Server` whose tools run in ``context`` (tenant, principal, ...)."""
    Server, types = _sdk()
    import anyio

    listing = types.ListToolsResult(tools=[types.Tool.model_validate(t) for t in mcp_tools()])
    lock = threading.Lock()

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        with lock:  # one Memory for the server's life: one call at a time
            return handle(name, arguments, context)

    async def list_tools(_ctx, _params) -> Any:
        return listing

    async def call_tool(_ctx, params) -> Any:
        try:
            result = await anyio.to_thread.run_sync(call, params.name, dict(params.arguments or {}))
        except RefoldError as exc:
            # a refusal the model can read and act on, not a protocol error
            text = f"{type(exc).__name__}: {exc}"
            return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)
        text = json.dumps(result, ensure_ascii=False, default=str)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result)

    from refold import __version__

    return Server(SERVER_NAME, version=__version__,
                  instructions=("Long-term memory. Write facts with a justification and your run's trace_id; "
                                "search before you answer; ask why for provenance."),
                  on_list_tools=list_tools, on_call_tool=call_tool)


def serve(options: ServerOptions) -> None:
    """Run the server until stdin closes (stdio) or the process is stopped (HTTP)."""
    _sdk()  # a missing SDK is reported before the store and the model are loaded
    listener = _listen(options) if options.http else None  # a busy port too
    context = _warm_context(options)
    server = build_server(context)
    scope = f"tenant {options.tenant}" + (f", principal {options.principal}" if options.principal else "")
    import anyio

    if not options.http:
        from mcp.server.stdio import stdio_server

        async def run_stdio() -> None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())

        print(f"refold mcp: serving {options.store} on stdio ({scope})", file=sys.stderr, flush=True)
        anyio.run(run_stdio)
        return

    import uvicorn

    app = server.streamable_http_app(host=options.host)
    config = uvicorn.Config(app, host=options.host, port=options.port, log_level="warning")
    print(f"refold mcp: serving {options.store} on http://{options.host}:{options.port}/mcp ({scope})",
          file=sys.stderr, flush=True)
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[listener]))


def _listen(options: ServerOptions):
    """The HTTP socket, bound before anything slow happens: a port in use is a one-line error,
    and the server owns the port from here on (no window for another process to take it)."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((options.host, options.port))
    except OSError as exc:
        sock.close()
        raise RefoldError(f"cannot listen on {options.host}:{options.port} ({exc.strerror}); "
                          "pick another --port") from None
    sock.listen(128)
    return sock
