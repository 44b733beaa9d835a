"""The reads that used to fall back to a whole-store graph, each in a fresh process (issue #33).

Before refold 0.2 three kinds of read folded the whole log in one process (the graph engine):
an ``as_of`` read older than the newest tag, a principal-scoped read, and a shred-mode read after
a key was destroyed outside an erasure. Every read now answers from the state tables at a tag
plus the in-memory overlay of the events after it. This script measures those reads against the
issue's target — at 300k events of the synthetic workload (``snapshot_workload.events``; rules
extractor; appends of 1,000), each of these reads of one subject takes <= 1 s in a fresh process
at <= 0.6 GiB peak RSS — and against an ordinary read of one subject measured in the same run:

* build         a delete-mode store: append N events, ``fold()``, note the log version of that
                fold's head (its tag's position), append 1,000 more, ``fold()`` again. A
                shred-mode store of the same N events, folded once. (Set-up, in child processes.)
* read          one subject's facts, ``facts(subject=S)``: the baseline of (a) and (b)
* (a) as_of     ``facts(subject=S, as_of=<the log version of the first fold's head>)``: time
                travel to that tagged state version
* (b) principal ``facts(subject=S, principal=P)``: the reader's view
* shred read    ``facts(subject=S)`` on the unchanged shred-mode store: the baseline of (c)
* (c) shred     on a copy of that store, another owner's key destroyed with ``KeyStore.destroy``
                outside an erasure (no receipt, no fold; in its own process, not timed), then
                ``facts(subject=S)``: the tables predate the marker, so the read leaves the marked
                owner's facts out itself

Each read runs in its own child process: "read s" is ``refold.open`` plus the read (imports
excluded; "cpu s" the process's CPU seconds over the same span, Delta's Rust threads included:
the steadier number on a shared machine), "process s" the child's whole wall time as the parent
saw it, and "peak RSS" the
child's own high-water mark (``resource.getrusage(RUSAGE_SELF).ru_maxrss``, interpreter and
imports included). Checked, untimed, in further child processes: the as_of read holds no fact
recorded after the first fold's position, the principal's read equals the ordinary one (the
workload restricts no event), and the destroyed owner's facts are gone from the read.
Targets are printed as met / not met; nothing is asserted on time or memory.

``--work DIR`` keeps the two built stores under ``DIR/n<N>/`` and reuses them on the next run
(building 300k events takes minutes; the destroyed key's store is a fresh copy each run).

    python benchmarks/one_engine_reads.py [--n 300000] [--work DIR] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

SUBJECT = "Person7"
PRINCIPAL = "auditor"
DESTROYED = ("s-person2", "Person2")
NEW_EVENTS = 1_000
TARGET_S = 1.0
TARGET_GIB = 0.6
GIB = 1024 ** 3


# -- the steps (each in a child process) -----------------------------------------------------------



def _version_of(mem, seq: int) -> int:
    """The log (Delta table) version that appended the event at ``seq``."""
    rows = mem.log_store.arrow(columns=["table_version"], prune=[{"seq": (seq, seq)}])
    return rows["table_version"][0].as_py()


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def step(name: str, root: Path, n: int, as_of: int | None) -> dict:
    import refold
    from snapshot_workload import append_all, events

    out: dict = {}
    start, cpu = time.perf_counter(), time.process_time()
    if name == "build":
        mem = refold.init(root)
        out["events"] = append_all(mem, events(n, seed=11))
        mem.fold(extractor="rules")
        first = mem.state_store(mem.current_spec()).tag()
        out["first_fold_s"] = time.perf_counter() - start
        out.update(first_seq=first.log_seq, as_of=_version_of(mem, first.log_seq))
        t0 = time.perf_counter()
        out["new"] = append_all(mem, events(NEW_EVENTS, seed=12, start=10 * n))
        mem.fold(extractor="rules")
        out["second_fold_s"] = time.perf_counter() - t0
        out["second_seq"] = mem.state_store(mem.current_spec()).tag().log_seq
    elif name == "build_shred":
        mem = refold.init(root, mode="shred")
        out["events"] = append_all(mem, events(n, seed=11))
        mem.fold(extractor="rules")
    elif name == "destroy":
        out["keys"] = len(refold.open(root).key_store.destroy(DESTROYED[0]))
    elif name in ("read", "as_of", "principal"):
        options = {"as_of": {"as_of": as_of}, "principal": {"principal": PRINCIPAL}}.get(name, {})
        rows = refold.open(root).facts(subject=SUBJECT, **options)
        out.update(read_s=time.perf_counter() - start, cpu_s=time.process_time() - cpu, rows=rows.height)
    elif name == "check":  # untimed: what the reads above must answer
        mem = refold.open(root)
        past = mem.facts(subject=SUBJECT, as_of=as_of)
        head = mem.facts(subject=SUBJECT)
        scoped = mem.facts(subject=SUBJECT, principal=PRINCIPAL)
        newest = past["recorded_seq"].max()
        out.update(past_rows=past.height, past_newest=-1 if newest is None else newest,
                   head_rows=head.height, scoped_equal=scoped.sort("fact_id").equals(head.sort("fact_id")))
    elif name == "check_shred":
        out["destroyed_rows"] = refold.open(root).facts(subject=DESTROYED[1]).height
    else:
        raise SystemExit(f"unknown step {name!r}")
    out.update(seconds=time.perf_counter() - start, rss=_rss())
    return out


# -- the driver ------------------------------------------------------------------------------------

def run_step(name: str, root: Path, n: int, as_of: int | None = None) -> dict:
    cmd = [sys.executable, __file__, "--step", name, "--root", str(root), "--n", str(n)]
    if as_of is not None:
        cmd += ["--as-of", str(as_of)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"step {name} at {n} events failed:\n{done.stdout}{done.stderr}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["process_s"] = took
    return out


def _build(work: Path, n: int) -> tuple[Path, Path, dict, dict]:
    """Both stores, built side by side (set-up, not measured against a target), or those a
    previous run built under ``work`` (``built.json``)."""
    plain, shred, done = work / "delete", work / "shred", work / "built.json"
    if done.exists():
        built = json.loads(done.read_text())
        return plain, shred, built["build"], built["build_shred"]
    shutil.rmtree(plain, ignore_errors=True)
    shutil.rmtree(shred, ignore_errors=True)
    procs = {}
    for name, root in (("build", plain), ("build_shred", shred)):
        cmd = [sys.executable, __file__, "--step", name, "--root", str(root), "--n", str(n)]
        procs[name] = (time.perf_counter(), subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                             text=True))
    results = {}
    for name, (t0, proc) in procs.items():
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"step {name} at {n} events failed:\n{stdout}{stderr}")
        results[name] = json.loads(stdout.strip().splitlines()[-1])
        results[name]["process_s"] = time.perf_counter() - t0
    done.write_text(json.dumps(results))
    return plain, shred, results["build"], results["build_shred"]


def measure(n: int, work: Path) -> dict:
    plain, shred, built, built_shred = _build(work, n)
    r: dict = {"build": built, "build_shred": built_shred}
    r["read"] = run_step("read", plain, n)
    r["as_of"] = run_step("as_of", plain, n, built["as_of"])
    r["principal"] = run_step("principal", plain, n)
    r["check"] = run_step("check", plain, n, built["as_of"])
    r["shred_read"] = run_step("read", shred, n)
    destroyed = work / "shred-destroyed"
    shutil.rmtree(destroyed, ignore_errors=True)
    shutil.copytree(shred, destroyed)
    try:
        r["destroy"] = run_step("destroy", destroyed, n)
        r["shred_destroyed"] = run_step("read", destroyed, n)
        r["check_shred"] = run_step("check_shred", destroyed, n)
    finally:
        shutil.rmtree(destroyed, ignore_errors=True)
    return r


def _met(ok: bool) -> str:
    return "met" if ok else "not met"


def report(n: int, r: dict) -> bool:
    b, bs = r["build"], r["build_shred"]
    print(f"one engine reads: {n:,} events of the synthetic workload (rules extractor), each read in a fresh process")
    print(f"  build, delete mode: append {b['events']:,} + fold {b['first_fold_s']:.1f} s (tag at seq "
          f"{b['first_seq']}, log version {b['as_of']}); append {b['new']:,} + fold {b['second_fold_s']:.1f} s "
          f"(tag at seq {b['second_seq']})")
    print(f"  build, shred mode: append {bs['events']:,} + fold {bs['seconds']:.1f} s; then "
          f"{r['destroy']['keys']} key(s) of {DESTROYED[0]} destroyed outside an erasure")
    rows = (("read", "ordinary read of one subject"),
            ("as_of", "(a) as_of the first fold's head"),
            ("principal", "(b) a principal's read"),
            ("shred_read", "shred: ordinary read (unchanged store)"),
            ("shred_destroyed", "(c) shred: read after a destroyed key"))
    width = max(len(label) for _, label in rows)
    print(f"  {'read':<{width}}  {'read s':>8}  {'cpu s':>7}  {'process s':>9}  {'peak RSS GiB':>12}  {'rows':>6}")
    for key, label in rows:
        x = r[key]
        print(f"  {label:<{width}}  {x['read_s']:>8.3f}  {x['cpu_s']:>7.3f}  {x['process_s']:>9.2f}  "
              f"{x['rss'] / GIB:>12.2f}  {x['rows']:>6}")
    for key, label, base in (("as_of", "(a) as_of read", "read"), ("principal", "(b) principal's read", "read"),
                             ("shred_destroyed", "(c) shred-mode read after a destroyed key", "shred_read")):
        x, y = r[key], r[base]
        print(f"{label}: {x['read_s']:.3f} s (target <= {TARGET_S:g} s: {_met(x['read_s'] <= TARGET_S)}), "
              f"peak RSS {x['rss'] / GIB:.2f} GiB (target <= {TARGET_GIB:g} GiB: "
              f"{_met(x['rss'] <= TARGET_GIB * GIB)}); / ordinary read {x['read_s'] / y['read_s']:.1f}x time, "
              f"{x['rss'] / y['rss']:.2f}x peak RSS")
    c = r["check"]
    checks = {
        "as_of holds nothing recorded after the first fold": 0 < c["past_rows"] and c["past_newest"] <= b["first_seq"],
        "the principal's read equals the ordinary read": c["scoped_equal"] and c["head_rows"] == r["read"]["rows"],
        "the reads return the subject's facts": all(r[k]["rows"] > 0 for k, _ in rows),
        "the destroyed owner's facts are gone": r["check_shred"]["destroyed_rows"] == 0 and r["destroy"]["keys"] > 0,
    }
    print("checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    return all(checks.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300_000, help="events in each store")
    parser.add_argument("--quick", action="store_true", help="5,000 events (for the test suite)")
    parser.add_argument("--work", help="keep the stores under WORK/n<N>/ and reuse them (default: a temporary "
                                       "folder, removed after)")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--as-of", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(step(args.step, Path(args.root), args.n, args.as_of)))
        return 0
    n = 5_000 if args.quick else args.n
    if args.work:
        work = Path(args.work) / f"n{n}"
        work.mkdir(parents=True, exist_ok=True)
        ok = report(n, measure(n, work))
    else:
        with tempfile.TemporaryDirectory(prefix="refold-one-engine-") as tmp:
            ok = report(n, measure(n, Path(tmp)))
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    sys.exit(main())
