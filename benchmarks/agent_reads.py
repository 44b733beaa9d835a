"""An agent's read right after its own append, on a store whose newest events are not folded yet.

An agent writes a memory and reads again; folds run on a schedule, so between two folds the
state tables lag the log by the events since (here: ``--unfolded``, 1% of the store by
default). A read answers from the tables plus the read overlay of those events
(docs/fold.md, "Reads"). This script measures, on one store of N events of the synthetic
workload (``snapshot_workload.events``; rules extractor; appends of 1,000; folded into the
state tables, then 1% appended and left unfolded):

* first read      one subject's current facts in a fresh process: the overlay of the whole
                  unfolded tail (read, extracted in memory, merged)
* warm read       the same read again, log unmoved (kept)
* after append    the median of 10 rounds of: append one event, read one subject, in the same
                  process (its kept overlay advanced by the appended event alone)
* made again      the same rounds, each read by a fresh ``Memory`` on the store (the overlay
                  of the whole tail made again: what every read after an append cost before
                  the overlay was advanced; the baseline)

and prints the ratio made again / after append. The answers of both are checked equal each
round. Nothing is asserted on time.

    python benchmarks/agent_reads.py [--n 100000] [--unfolded 0.01] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from snapshot_workload import append_all, events as workload  # noqa: E402

SUBJECT = "Person7"
ROUNDS = 10




def _timed(fn):
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run(n: int, unfolded: float, root: Path) -> dict[str, float]:
    import refold

    out: dict[str, float] = {}
    mem = refold.init(root)
    out["append"], _ = _timed(lambda: append_all(mem, workload(n, seed=11)))
    out["fold"], _ = _timed(lambda: mem.fold())
    tail = max(int(n * unfolded), 1)
    append_all(mem, workload(tail, seed=12, start=10 * n))

    def read(m):
        return m.facts(subject=SUBJECT, current_only=True).sort("fact_id")

    agent = refold.open(root)
    out["first read (whole tail)"], _ = _timed(lambda: read(agent))
    out["warm read, log unmoved"], _ = _timed(lambda: read(agent))
    advanced, again = [], []
    fresh_events = workload(ROUNDS, seed=13, start=20 * n)
    for i, event in enumerate(fresh_events):
        agent.append([event])
        took, answer = _timed(lambda: read(agent))
        advanced.append(took)
        took, expected = _timed(lambda: read(refold.open(root)))
        again.append(took)
        if not answer.equals(expected):
            raise SystemExit(f"round {i}: the advanced overlay's answer differs from a fresh read's")
    out["after append, median"] = statistics.median(advanced)
    out["made again, median"] = statistics.median(again)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="events in the store")
    parser.add_argument("--unfolded", type=float, default=0.01, help="share of events appended after the fold")
    parser.add_argument("--quick", action="store_true", help="2,000 events (for the test suite)")
    args = parser.parse_args(argv)
    if args.quick:
        args.n = 2_000
    with tempfile.TemporaryDirectory() as tmp:
        out = run(args.n, args.unfolded, Path(tmp) / "store")
    width = max(map(len, out))
    print(f"store of {args.n:,} events, {max(int(args.n * args.unfolded), 1):,} unfolded")
    for name, seconds in out.items():
        print(f"  {name:<{width}}  {seconds:8.3f} s")
    ratio = out["made again, median"] / out["after append, median"]
    print(f"  read after an append: made again / advanced = {ratio:,.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
