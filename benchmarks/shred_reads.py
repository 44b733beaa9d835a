"""Reads of a shred-mode store from the state tables, and a key destroyed outside an erasure.

On a fresh shred-mode store of N events of the synthetic workload (``snapshot_workload.events``:
each person's events under that person's key, organisations' under the tenant key; rules
extractor; appends of 1,000), in one process:

* append        the N events, each encrypted under its subjects' keys
* fold          ``fold()`` from scratch (decrypting every event once)
* read          one subject's current facts (``facts(subject=…, current_only=True)``), first read
                and median of 20, from the state tables (every read lists the key store's erased
                markers first)
* incremental   1% new events appended, then ``fold()``: only they are decrypted and extracted
* destroy       another subject's keys destroyed with ``KeyStore.destroy``, outside an erasure
                (no receipt, no refold): the first read after it (the tables predate the
                marker: the read leaves the marked owner's facts out itself,
                ``refold.reads.overlay.without_events``), the fold that erases the subject's
                events from the tables (``honour_marks``: cached extractions, no model call) and
                purges what the extraction cache and other derived stores keep of them (the
                sweep), then the read again
* erase         a third subject erased with ``erasing.erase`` (the whole procedure and its
                receipt; its state step records the markers), then the read

Prints seconds and the ratio of the first read after the destroyed key to the median read of
the unchanged store (both measured in this run). Before refold 0.2 the baseline of that ratio
was the graph engine's read (decrypt the log, fold it in memory); that engine is gone, so the
ratio now says what honouring an unhonoured marker costs a read over an ordinary one. Checked
(not timed): the destroyed subject's facts are gone from the read at once and stay gone after
the fold, and the fold that honours the marker makes no extraction call. Nothing is asserted
on time.

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

SUBJECT, DESTROYED, ERASED = "Person1", ("s-person2", "Person2"), ("s-person3", "Person3")


def _median(fn, times: int) -> float:
    runs = []
    for _ in range(times):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def run(n: int, root: Path) -> tuple[dict[str, float], dict[str, bool]]:
    import refold

    out: dict[str, float] = {}
    checks: dict[str, bool] = {}
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
    mem.fold(extractor="rules")
    out["fold"] = time.perf_counter() - start

    def read(subject: str = SUBJECT):
        return mem.facts(subject=subject, current_only=True)

    start = time.perf_counter()
    read()
    out["read tables, first"] = time.perf_counter() - start
    out["read tables, median"] = _median(read, 20)
    had_destroyed = read(DESTROYED[1]).height > 0

    new = max(n // 100, 1)  # 1% new events: the incremental fold decrypts only them
    mem.append(list(workload(new, seed=12, start=10 * n)))
    start = time.perf_counter()
    report = mem.fold(extractor="rules")
    out["incremental: fold of 1% new"] = time.perf_counter() - start
    checks["the incremental fold extracts only the new events"] = report.extraction_calls == new

    mem.key_store.destroy(DESTROYED[0])
    start = time.perf_counter()
    read()
    out["destroy: first read (marker not yet folded)"] = time.perf_counter() - start
    checks["the destroyed subject's facts are gone at once"] = had_destroyed and read(DESTROYED[1]).height == 0
    start = time.perf_counter()
    report = mem.fold(extractor="rules")
    out["destroy: fold honouring the marker"] = time.perf_counter() - start
    checks["the fold honouring the marker makes no extraction call"] = report.extraction_calls == 0
    start = time.perf_counter()
    read()
    out["destroy: next read (tables)"] = time.perf_counter() - start
    checks["the destroyed subject's facts stay gone after the fold"] = read(DESTROYED[1]).height == 0

    start = time.perf_counter()
    mem.erase(ERASED[0])
    out["erase: whole erasure"] = time.perf_counter() - start
    start = time.perf_counter()
    read()
    out["erase: next read (tables)"] = time.perf_counter() - start
    checks["the erased subject's facts are gone"] = read(ERASED[1]).height == 0
    return out, checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="events in the store")
    parser.add_argument("--quick", action="store_true", help="2,000 events (for the test suite)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 2_000
    with tempfile.TemporaryDirectory() as tmp:
        out, checks = run(args.n, Path(tmp) / "store")
    width = max(map(len, out))
    print(f"shred-mode store, {args.n:,} events")
    for name, seconds in out.items():
        print(f"  {name:<{width}}  {seconds:8.3f} s")
    ratio = out["destroy: first read (marker not yet folded)"] / out["read tables, median"]
    print(f"  one subject's read: first read after a destroyed key / ordinary read = {ratio:,.1f}x")
    print("  checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
