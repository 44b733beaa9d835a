"""Reads of a shred-mode store from the state tables, and a key destroyed outside an erasure.

On a fresh shred-mode store of N events of the synthetic workload (``snapshot_workload.events``:
each person's events under that person's key, organisations' under the tenant key; rules
extractor; appends of 1,000), in one process:

* append        the N events, each encrypted under its subjects' keys
* fold          ``fold(engine="partitioned")`` from scratch (decrypting every event once)
* read          one subject's current facts (``facts(subject=…, current_only=True)``), first read
                and median of 20: from the state tables (every read lists the key store's erased
                markers first), and, for comparison, through the graph engine, the path every
                shred-mode read took before (decrypt the log, fold it; median of 3)
* incremental   1% new events appended, then ``fold()``: only they are decrypted and extracted
* destroy       another subject's keys destroyed with ``KeyStore.destroy``, outside an erasure
                (no receipt, no refold): the first read after it (the graph engine answers:
                the tables predate the marker), the fold that erases the subject's events from the
                tables (``honour_marks``: cached extractions, no model call) and purges what the
                extraction cache and other derived stores keep of them (the sweep), then the read again
* erase         a third subject erased with ``erasing.erase`` (the whole procedure and its
                receipt; its state step records the markers), then the read (from the tables)

Prints seconds and the ratio of the graph engine's read to the tables'. Nothing is asserted on
time.

    python benchmarks/shred_reads.py [--n 100000] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshot_workload import events as workload  # noqa: E402

SUBJECT, DESTROYED, ERASED = "Person1", "s-person2", "s-person3"


def _median(fn, times: int) -> float:
    runs = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def run(n: int, root: Path, *, graph: bool = True) -> dict[str, float]:
    import refold
    from refold.memory import Memory

    out: dict[str, float] = {}
    start = time.perf_counter()
    mem = refold.init(root, mode="shred")
    batch = []
    for event in workload(n, seed=11):
        batch.append(event)
        if len(batch) == 1000:
            mem.append(batch)
            batch = []
    if batch:
        mem.append(batch)
    out["append"] = time.perf_counter() - start

    start = time.perf_counter()
    mem.fold(engine="partitioned", extractor="rules")
    out["fold"] = time.perf_counter() - start

    def read(m: Memory = mem):
        return m.facts(subject=SUBJECT, current_only=True)

    start = time.perf_counter()
    tables = read()
    out["read tables, first"] = time.perf_counter() - start
    out["read tables, median"] = _median(read, 20)

    if graph:
        graph_mem = refold.open(root)
        graph_mem._readable_tables = lambda as_of: None  # the read path shred mode had: the graph engine
        start = time.perf_counter()
        assert read(graph_mem).sort("fact_id").equals(tables.sort("fact_id"))
        out["read graph engine, first"] = time.perf_counter() - start
        out["read graph engine, median"] = _median(lambda: read(graph_mem), 3)
        del graph_mem

    new = max(n // 100, 1)  # 1% new events: the incremental fold decrypts only them
    mem.append(list(workload(new, seed=12, start=10 * n)))
    start = time.perf_counter()
    report = mem.fold(engine="partitioned", extractor="rules")
    out["incremental: fold of 1% new"] = time.perf_counter() - start
    assert report.extraction_calls == new

    mem.key_store.destroy(DESTROYED)
    if graph:
        start = time.perf_counter()
        read()
        out["destroy: first read (graph engine)"] = time.perf_counter() - start
    start = time.perf_counter()
    report = mem.fold(engine="partitioned", extractor="rules")
    out["destroy: fold honouring the marker"] = time.perf_counter() - start
    assert report.extraction_calls == 0
    start = time.perf_counter()
    read()
    out["destroy: next read (tables)"] = time.perf_counter() - start

    from refold import erasing

    start = time.perf_counter()
    erasing.erase(mem, ERASED)
    out["erase: whole erasure"] = time.perf_counter() - start
    start = time.perf_counter()
    read()
    out["erase: next read (tables)"] = time.perf_counter() - start
    assert mem._readable_tables(None) is not None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="events in the store")
    parser.add_argument("--quick", action="store_true", help="2,000 events (for the test suite)")
    parser.add_argument("--no-graph", action="store_true",
                        help="skip the graph engine's reads (each folds the whole store: minutes at 1M)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 2_000
    with tempfile.TemporaryDirectory() as tmp:
        out = run(args.n, Path(tmp) / "store", graph=not args.no_graph)
    width = max(map(len, out))
    print(f"shred-mode store, {args.n:,} events")
    for name, seconds in out.items():
        print(f"  {name:<{width}}  {seconds:8.3f} s")
    if not args.no_graph:
        ratio = out["read graph engine, median"] / out["read tables, median"]
        print(f"  one subject's read: graph engine / state tables = {ratio:,.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
