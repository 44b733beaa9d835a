"""Search latency through the MCP server (``refold mcp``) against one ``refold search`` CLI call.

An agent that shells out to ``refold search`` pays, per query, for a Python start, refold's
imports and, above all, loading the embedding model. ``refold mcp`` loads them once and keeps the
folded state and the index warm, so a query costs only the embedding of the query, the ranking and
the MCP round trip. This script builds a store of ``--facts`` facts (rules extractor), brings the
index up to date once (so neither side pays for embedding the store), then measures in the same
run:

* ``server``  the median wall time of a ``search_memory`` call through the official MCP client to a
  ``refold mcp`` subprocess over stdio, after one warm-up call;
* ``cli``     the median wall time of ``refold search STORE QUERY --json`` subprocesses;

and prints the ratio cli / server (target: at least 50x with the packaged MiniLM model).

    python benchmarks/serve.py [--facts 500] [--queries 50] [--cli-calls 5] [--embedder minilm]
                               [--quick] [--json]

``--quick``: 100 facts, 10 queries, 2 CLI calls and the hashing embedder (no model to load, so the
ratio is far smaller: it measures the process start and imports only); what
tests/test_benchmarks_serve.py runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import refold

SCRIPT = str(Path(sys.executable).parent / "refold")
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Emil", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
CITIES = ["Lisbon", "Oslo", "Berlin", "Rome", "Quito", "Accra", "Hanoi", "Lima", "Perth", "Riga"]
RELATIONS = ["lives_in", "works_at", "likes", "visited"]
QUERIES = ["Where does Ana live?", "Who works at Oslo?", "What does Ben like?", "Which city did Chloe visit?",
           "Where does Dev work?", "Who lives in Rome?"]


def build_store(root: Path, facts: int) -> None:
    mem = refold.init(root)
    mem.append([{"kind": "memory_written", "source": f"bench#{i}", "trace_id": "bench",
                 "justification": "benchmark", "content": f"{s} {r.replace('_', ' ')} {o}",
                 "fact": {"subject": s, "relation": r, "object": o}}
                for i in range(facts)
                for s, r, o in [(f"{NAMES[i % 10]} {i // 10}", RELATIONS[i % 4], CITIES[(i * 7) % 10])]])
    mem.fold()


def time_server(root: Path, embedder: str, queries: int) -> list[float]:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=SCRIPT, args=["mcp", str(root), "--embedder", embedder],
                                   env=dict(os.environ))

    async def run() -> list[float]:
        async with Client(params) as client:
            await client.call_tool("search_memory", {"query": "warm-up", "k": 5})
            took = []
            for i in range(queries):
                start = time.perf_counter()
                result = await client.call_tool("search_memory", {"query": QUERIES[i % len(QUERIES)], "k": 5})
                took.append(time.perf_counter() - start)
                assert not result.is_error and result.structured_content["results"], result.content
            return took

    return asyncio.run(run())


def time_cli(root: Path, embedder: str, calls: int) -> list[float]:
    took = []
    for i in range(calls):
        start = time.perf_counter()
        done = subprocess.run([SCRIPT, "search", str(root), QUERIES[i % len(QUERIES)], "--k", "5",
                               "--embedder", embedder, "--json"], capture_output=True, text=True)
        took.append(time.perf_counter() - start)
        if done.returncode != 0 or not done.stdout.strip():
            raise SystemExit(f"refold search failed: {done.stderr.strip()}")
    return took


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--facts", type=int, default=500)
    parser.add_argument("--queries", type=int, default=50, help="search_memory calls through the server")
    parser.add_argument("--cli-calls", type=int, default=5, help="refold search subprocesses")
    parser.add_argument("--embedder", default="minilm", help="minilm (default) | hashing")
    parser.add_argument("--quick", action="store_true", help="100 facts, 10 queries, 2 CLI calls, hashing")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.quick:
        args.facts, args.queries, args.cli_calls, args.embedder = 100, 10, 2, "hashing"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        build_store(root, args.facts)
        refold.open(root).index(embedder=args.embedder)  # both sides start from an up-to-date index
        server = time_server(root, args.embedder, args.queries)
        cli = time_cli(root, args.embedder, args.cli_calls)
    result = {
        "facts": args.facts, "embedder": args.embedder, "queries": args.queries, "cli_calls": args.cli_calls,
        "server_median_ms": statistics.median(server) * 1e3, "cli_median_ms": statistics.median(cli) * 1e3,
    }
    result["ratio"] = result["cli_median_ms"] / result["server_median_ms"]
    if args.json:
        print(json.dumps(result))
    else:
        print(f"store: {args.facts} facts, embedder {args.embedder}")
        print(f"search_memory through refold mcp (stdio): median {result['server_median_ms']:.1f} ms "
              f"over {args.queries} calls")
        print(f"refold search (one CLI process per query): median {result['cli_median_ms']:.0f} ms "
              f"over {args.cli_calls} calls")
        print(f"ratio cli / server: {result['ratio']:.0f}x (target >= 50x with minilm)")
    return result


if __name__ == "__main__":
    main()
