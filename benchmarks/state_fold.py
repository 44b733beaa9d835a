"""The partitioned fold (state tables) against the graph engine, on snapshot_workload's log.

    python benchmarks/state_fold.py --events 30000 [--skip-graph]

Builds a store (rules extractor, appends of 1,000), extracts once, then measures in fresh child
processes (peak RSS from resource.getrusage; wall and CPU seconds: this machine is shared, CPU time is the
steadier of the two): a refold from the cache with each engine; then
for the state tables an incremental fold of 1% new events, the erasure refold of 0.1% of the
events (the state purge: their subjects' buckets refolded from cached extractions) and the
median read of one subject's current facts in a warm process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = r"""
import json, resource, statistics, sys, time
def clock():
    return time.perf_counter(), time.process_time()
def lap(start):
    return round(time.perf_counter() - start[0], 4), round(time.process_time() - start[1], 4)
sys.path.insert(0, {here!r})
import refold
from snapshot_workload import events, append_all
root, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
reverse = len(sys.argv) > 4  # erase the last subjects instead (a rerun on a store erased before)
mem = refold.open(root)
out = {{}}
if what == "build":
    append_all(mem, list(events(n, seed=7)))
    mem.fold(engine="partitioned", full=True)  # extracts once (rules)
elif what == "graph":
    t = clock(); r = mem.fold(engine="graph", full=True, snapshot_every=0)
    out["refold_s"], out["refold_cpu_s"] = lap(t)
elif what == "state":
    t = clock(); r = mem.fold(engine="partitioned", full=True)
    out["refold_s"], out["refold_cpu_s"] = lap(t)
    out["facts"], out["derived"] = r.facts, r.derived_facts
elif what == "incremental":
    mem.fold(engine="partitioned")
    append_all(mem, list(events(n // 100, seed=7, start=n + mem.head().seq)))
    t = clock(); r = mem.fold(engine="partitioned")
    out["incremental_s"], out["incremental_cpu_s"] = lap(t)
    out["extraction_calls"] = r.extraction_calls
elif what == "erase":
    from refold.state_fold import StatePurger
    log = mem.log()
    want = max(n // 1000, 1)
    ids = []
    for sid in sorted({{s for subs in log["subjects"].to_list() for s in (subs or [])}}, reverse=reverse):
        mine = [e for e, subs in zip(log["event_id"].to_list(), log["subjects"].to_list()) if subs and sid in subs]
        ids += mine
        if len(ids) >= want:
            break
    t = clock(); res = StatePurger(mem).purge(ids)
    out["erase_s"], out["erase_cpu_s"] = lap(t)
    out["erased_events"], out["item_rows_removed"] = len(ids), res.rows
elif what == "read":
    mem.fold(engine="partitioned")
    times = []
    for i in range(40):
        t = time.perf_counter(); f = mem.facts(subject=f"Person{{i % 10}}", current_only=True)
        times.append(time.perf_counter() - t)
    out["first_read_s"], out["read_median_s"] = times[0], statistics.median(times[1:])
out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps(out))
"""


def child(root: str, what: str, n: int, *extra: str) -> dict:
    code = CHILD.format(here=str(HERE))
    done = subprocess.run([sys.executable, "-c", code, root, what, str(n), *extra], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=30_000)
    parser.add_argument("--skip-graph", action="store_true", help="do not measure the graph engine")
    parser.add_argument("--root", help="reuse (or build) the store here")
    args = parser.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="refold-state-")
    if not (Path(root) / "events").exists():  # built in a child: this process stays small, and
        child(root, "build", args.events)  # a child's peak RSS starts from this one's (execve keeps it)
    results = {"events": args.events}
    if not args.skip_graph:
        results["graph"] = child(root, "graph", args.events)
    results["state"] = child(root, "state", args.events)
    results["incremental_1pct"] = child(root, "incremental", args.events)
    results["erase_0.1pct"] = child(root, "erase", args.events)
    results["read"] = child(root, "read", args.events)
    refold_s, refold_cpu = results["state"]["refold_s"], results["state"]["refold_cpu_s"]
    results["ratios"] = {
        "us_per_event_refold": refold_s / args.events * 1e6,
        "cpu_us_per_event_refold": refold_cpu / args.events * 1e6,
        "incremental_speedup": refold_s / results["incremental_1pct"]["incremental_s"],
        "incremental_speedup_cpu": refold_cpu / results["incremental_1pct"]["incremental_cpu_s"],
        "erase_speedup": refold_s / results["erase_0.1pct"]["erase_s"],
        "erase_speedup_cpu": refold_cpu / results["erase_0.1pct"]["erase_cpu_s"],
    }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
