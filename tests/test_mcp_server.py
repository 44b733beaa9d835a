"""``refold mcp`` (issue #20 item 4) driven by the official MCP SDK's own client, against real
server subprocesses: over stdio (the client launches ``refold mcp STORE``) and over streamable
HTTP (a server on a free 127.0.0.1 port). Write, then search finds it; a missing justification is
refused with nothing written; another tenant's server sees nothing; the tool listing is
``refold.agent.tools.mcp_tools()``. The hashing embedder keeps the servers fast; one test loads the
packaged MiniLM model to show it stays warm between calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

import refold
from refold.agent import tools
SCRIPT = str(Path(sys.executable).parent / "refold")
WRITE = {"subject": "Alice", "relation": "lives_in", "object": "Berlin", "trace_id": "run-1",
         "justification": "Alice said so in chat #7"}


def _stdio(store: Path, *options: str) -> StdioServerParameters:
    # the server inherits this environment (PYTHONPATH, offline model flags); the SDK's default
    # environment alone would drop them
    return StdioServerParameters(command=SCRIPT, args=["mcp", str(store), *options], env=dict(os.environ))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _http_server(store: Path, *options: str):
    """A ``refold mcp --http`` subprocess on a free loopback port; yields its URL."""
    port = _free_port()
    proc = subprocess.Popen([SCRIPT, "mcp", str(store), "--http", "--port", str(port), *options],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stderr.read()
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.monotonic() < deadline, "the HTTP server did not start listening"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()


@pytest.fixture
def store(tmp_path) -> Path:
    refold.init(tmp_path / "store")
    return tmp_path / "store"


async def _scenario(acme, globex) -> dict:
    """Write as tenant acme, search it back, be refused without a justification, and look from
    tenant globex. ``acme``/``globex`` are what :class:`mcp.Client` connects to."""
    out: dict = {}
    async with Client(acme) as client:
        listing = await client.list_tools()
        out["tools"] = [t.model_dump(by_alias=True, exclude_none=True,
                                     include={"name", "description", "input_schema", "annotations"})
                        for t in listing.tools]
        written = await client.call_tool("write_memory", WRITE)
        assert not written.is_error, written.content
        out["written"] = written.structured_content
        found = await client.call_tool("search_memory", {"query": "where does Alice live", "k": 3})
        out["found"] = found.structured_content["results"]
        refused = await client.call_tool("write_memory", {k: v for k, v in WRITE.items() if k != "justification"})
        out["refused"] = (refused.is_error, refused.content[0].text)
        widened = await client.call_tool("search_memory", {"query": "Alice", "tenant": "globex"})
        out["widened"] = (widened.is_error, widened.content[0].text)
    async with Client(globex) as client:
        other = await client.call_tool("search_memory", {"query": "where does Alice live", "k": 3})
        out["other"] = other.structured_content["results"]
        fact_id = out["found"][0]["fact_id"]
        why = await client.call_tool("why", {"fact_id": fact_id})
        out["other_why"] = (why.is_error, why.content[0].text)
    return out


def _check(out: dict, store: Path) -> None:
    assert out["tools"] == tools.mcp_tools()  # the one schema source, served as is
    assert out["written"]["status"] == "recorded" and out["written"]["trace_id"] == "run-1"
    [top] = out["found"]
    assert (top["subject"], top["relation"], top["object"]) == ("Alice", "lives_in", "Berlin")
    assert out["refused"] == (True, "ValidationError: write_memory: invalid input (1 problem(s)): "
                                    "input: 'justification' is a required property")
    is_error, text = out["widened"]  # a model cannot name another tenant in its input
    assert is_error and "Additional properties are not allowed ('tenant' was unexpected)" in text
    assert out["other"] == []
    assert out["other_why"][0] and "no fact with id" in out["other_why"][1]
    events = [e for e in refold.open(store).events() if e.kind == "memory_written"]
    assert [(e.tenant, e.trace_id, e.source) for e in events] == [("acme", "run-1", "agent:write_memory")]


@pytest.mark.search
@pytest.mark.slow
def test_stdio_write_search_refuse_and_tenant_scope(store):
    out = asyncio.run(_scenario(_stdio(store, "--tenant", "acme", "--embedder", "hashing"),
                                _stdio(store, "--tenant", "globex", "--embedder", "hashing")))
    _check(out, store)


@pytest.mark.search
@pytest.mark.slow
def test_http_write_search_refuse_and_tenant_scope(store):
    with _http_server(store, "--tenant", "acme", "--embedder", "hashing") as acme, \
            _http_server(store, "--tenant", "globex", "--embedder", "hashing") as globex:
        out = asyncio.run(_scenario(acme, globex))
    _check(out, store)


@pytest.mark.search
@pytest.mark.slow
def test_principal_is_fixed_by_the_server_and_retract_and_as_of_work(store):
    mem = refold.open(store)
    mem.append([{"kind": "memory_written", "content": "Bob earns 90k", "source": "hr#1", "tenant": "acme",
                 "principals": ["hr"], "fact": {"subject": "Bob", "relation": "salary", "object": "90k"},
                 "justification": "payroll"},
                {"kind": "memory_written", "content": "Bob lives in Rome", "source": "chat#2", "tenant": "acme",
                 "fact": {"subject": "Bob", "relation": "lives_in", "object": "Rome"}, "justification": "chat"}])

    async def run() -> dict:
        out = {}
        async with Client(_stdio(store, "--tenant", "acme", "--principal", "intern", "--reader", "intern",
                                 "--reader", "hr", "--embedder", "hashing")) as c:
            seen = await c.call_tool("search_memory", {"query": "Bob salary", "k": 10})
            out["intern"] = {r["object"] for r in seen.structured_content["results"]}
            rome = next(r for r in seen.structured_content["results"] if r["object"] == "Rome")
            retracted = await c.call_tool("retract_memory", {"fact_id": rome["fact_id"], "trace_id": "run-3",
                                                             "justification": "Bob moved"})
            out["retracted"] = retracted.structured_content
            now = await c.call_tool("memory_as_of", {"as_of": "2999-01-01T00:00:00+00:00", "subject": "Bob"})
            out["now"] = now.structured_content
        return out

    out = asyncio.run(run())
    assert out["intern"] == {"Rome"}  # the salary's reader list does not name the intern
    assert out["retracted"]["status"] == "recorded" and len(out["retracted"]["retracts"]) == 1
    assert out["now"]["facts"] == []  # Rome retracted, the salary invisible to the intern
    [retraction] = [e for e in refold.open(store).events() if e.kind == "retraction"]
    assert (retraction.tenant, retraction.trace_id, retraction.justification) == ("acme", "run-3", "Bob moved")
    assert retraction.principals == ("intern", "hr")  # --reader: who may read what the agent writes


@pytest.mark.slow
@pytest.mark.search
def test_minilm_server_stays_warm(store):
    """The packaged MiniLM model loads once, at start: every search through the server reuses it."""

    async def run() -> list:
        async with Client(_stdio(store, "--tenant", "acme")) as client:
            await client.call_tool("write_memory", WRITE)
            results = []
            for query in ("Where is Alice's home?", "Which city does Alice live in?"):
                found = await client.call_tool("search_memory", {"query": query, "k": 1})
                results.append(found.structured_content["results"][0]["object"])
            return results

    assert asyncio.run(run()) == ["Berlin", "Berlin"]


@pytest.mark.slow
def test_cli_refuses_a_missing_store_a_busy_port_and_a_port_without_http(store, tmp_path):
    missing = subprocess.run([SCRIPT, "mcp", str(tmp_path / "nope")], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=120)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (f"refold: error: no refold store at {tmp_path / 'nope'}; "
                                      f"create one with `refold init {tmp_path / 'nope'}`")
    stdio_port = subprocess.run([SCRIPT, "mcp", str(tmp_path / "nope"), "--port", "9000"], capture_output=True,
                                text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert stdio_port.returncode == 2 and "--port needs --http" in stdio_port.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        busy = subprocess.run([SCRIPT, "mcp", str(store), "--http", "--port", str(port), "--embedder", "hashing"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=120)
    assert busy.returncode == 2 and busy.stderr.strip().splitlines() == [
        f"refold: error: cannot listen on 127.0.0.1:{port} (Address already in use); pick another --port"]
