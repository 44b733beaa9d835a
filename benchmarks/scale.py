"""How the fold scales with the size of the store: 10k, 100k and 1M events.

For each size N, on a fresh store of the synthetic workload (``snapshot_workload.events``: people
moving and changing jobs, organisations located in cities; rules extractor; appends in batches of
1,000), with one data subject X whose events (0.1% of the log) are spread over the whole log:

* append           appending the N events (batches of 1,000)
* fold             ``fold()`` from scratch: extract every event (rules) and merge
* refold           ``fold(full=True)`` in a fresh process: re-merge every cached extraction
* incremental      append 1% new events, then ``fold()`` in a fresh process
* erasure          ``erase("s-x")`` in a fresh process (0.1% of the log): the whole procedure, its
                   state-table refold step (``StatePurger.purge``, timed around the call) and the
                   digest the receipt records; then a fold makes 0 extraction calls
* read             one subject's current facts (``facts(subject=…, current_only=True)``) in a warm
                   process: the first read, then the median of 20 (also of 20 reads with a
                   ``principal``: reader scoping); then, in the same process, the
                   whole state's facts (``facts()``) and ``why`` of one roll-up (``works_in``)
                   fact (compose roll-ups are derived when read): after the
                   read that returned it (its inputs are remembered) and as a process that did
                   not read it (a search of the inputs' join)
* read_past        after the incremental fold, in a fresh process: one subject's facts as of a
                   past log version (``facts(subject=…, as_of=…)``): at the refold's position (time
                   travel to that tagged state version) and halfway to the incremental fold's (that
                   version plus the read overlay of the events between), first read and median of
                   20; then, in the same process, the median of the same 20 subjects' reads at the
                   head (no ``as_of``): the baseline of the as_of / head ratios printed. (Before
                   refold 0.2 the baseline was the graph engine's fold of the log prefix; that
                   engine is gone, and every read now answers from the state tables.)
* index            the vector index stored (``mem.index(embedder="hashing")``: every item embedded),
                   in a fresh process after the read step
* search           last, in a fresh process: an agent's first search (the stored index brought
                   up to date with the new events, the incremental fold and the erasure), the
                   median of 20 queries, and the median of 5 searches each right after an append
* floor            what any merge must at least do: polars reading the cached extractions and
                   sorting their facts by (tenant, subject, relation, seq)
* incremental_floor / erase_floor   what any incremental fold, and any erasure's state step, must
                   at least do, with plain tools: read the new events, extract them (rules) and
                   commit the extractions once; delete X's rows from the facts table and vacuum
                   it. Refold / floor is the most such a step could be faster than the refold: the
                   ceiling of the issue's two ratio targets on this machine

Every step runs in its own child process, so "peak RSS" is that process's own high-water mark
(``ru_maxrss``, interpreter and imports included); with ``--ray`` the refold also prints the
highest peak of the Ray worker processes that ran its merge tasks
(``ray_merger().worker_peak_rss``). Cost per event is relative to the smallest N. Every fold
writes the state tables (the one engine) and tags a state version. ``--ray`` runs the fold steps
a second time with the merge as Ray tasks on a local Ray runtime with 2 CPUs and prints both.
Ratios are printed against the targets of issue #17; nothing is asserted on time.

    python benchmarks/scale.py [--sizes 10000,100000,1000000] [--ray] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: the data subject erased by the erasure step, and the share of the log its events make
SUBJECT = ("s-x", "Xavier Quill")
ERASED_SHARE = 0.001
NEW_SHARE = 0.01
READS = 20


# -- the workload ----------------------------------------------------------------------------------

def workload(n: int, *, seed: int, start: int = 0, with_subject: bool = True) -> Iterator:
    """``n`` workload events; every 1/ERASED_SHARE-th is one of X's (spread over the log)."""
    from snapshot_workload import events

    step = int(1 / ERASED_SHARE)
    others = events(n, seed=seed, start=start)
    mine = events(max(n // step, 1), seed=seed + 1, start=start + n, subject=SUBJECT)
    for i, event in enumerate(others):
        if with_subject and i % step == step // 2:
            yield next(mine, event)
        else:
            yield event




# -- the steps (each in a child process) -----------------------------------------------------------

def _fold_options(use_ray: bool) -> dict:
    """Keyword arguments that make ``Memory.fold`` run its merge partitions as Ray tasks."""
    if not use_ray:
        return {}
    from refold.jobs.ray_extract import ensure_ray
    from refold.jobs.ray_merge import ray_merger

    ensure_ray(num_cpus=2)
    return {"merger": ray_merger()}


def step(name: str, root: Path, n: int, use_ray: bool) -> dict:
    import refold
    from snapshot_workload import CountingRules, append_all

    out: dict = {}
    start = time.perf_counter()
    if name == "append":
        mem = refold.init(root)
        out["events"] = append_all(mem, workload(n, seed=11))
    elif name == "fold":
        ext = CountingRules()
        report = refold.open(root).fold(extractor=ext, **_fold_options(use_ray))
        out.update(calls=ext.calls, facts=report.facts, derived=report.derived_facts)
    elif name == "refold":
        ext = CountingRules()
        opts = _fold_options(use_ray)
        start = time.perf_counter()  # Ray's start-up is not the fold's cost
        report = refold.open(root).fold(extractor=ext, full=True, **opts)
        out.update(calls=ext.calls, facts=report.facts, derived=report.derived_facts)
        if use_ray:
            out["worker_rss"] = opts["merger"].worker_peak_rss
    elif name == "append_new":
        new = max(int(n * NEW_SHARE), 1)
        out["events"] = append_all(refold.open(root), workload(new, seed=12, start=10 * n, with_subject=False))
    elif name == "incremental":
        ext = CountingRules()
        opts = _fold_options(use_ray)
        start = time.perf_counter()
        report = refold.open(root).fold(extractor=ext, **opts)
        out.update(calls=ext.calls, folded=report.events_folded)
    elif name == "erase":
        timed = _time_state_steps()
        receipt = refold.open(root).erase(SUBJECT[0])
        took = time.perf_counter() - start
        out.update(erased=len(receipt.events), refold_s=timed.get("purge"), digest_s=timed.get("digest"))
        ext = CountingRules()
        refold.open(root).fold(extractor=ext)
        out.update(after_calls=ext.calls)
        out.update(seconds=took, rss=_rss())
        return out
    elif name == "read":
        mem = refold.open(root)
        name_ = "Person7"
        t0 = time.perf_counter()
        first = mem.facts(subject=name_, current_only=True)
        out["first"] = time.perf_counter() - t0
        times = []
        for _ in range(READS):
            t0 = time.perf_counter()
            mem.facts(subject=name_, current_only=True)
            times.append(time.perf_counter() - t0)
        out.update(median=statistics.median(times), rows=first.height)
        times = []
        for i in range(READS):  # the same read as a principal sees it (reader scoping)
            t0 = time.perf_counter()
            mem.facts(subject=f"Person{20 + i}", current_only=True, principal="auditor")
            times.append(time.perf_counter() - t0)
        out["principal_median"] = statistics.median(times)
        if n <= WHOLE_READ_MAX:
            t0 = time.perf_counter()
            whole = mem.facts()
            out.update(whole_s=time.perf_counter() - t0, whole_rows=whole.height)
        derived = mem.facts(subject=name_, relation="works_in")["fact_id"].to_list()
        if derived:
            t0 = time.perf_counter()
            mem.why(derived[len(derived) // 2])
            out["why_s"] = time.perf_counter() - t0
            from refold.reads import rollups as state_rollups  # again as a process that did not read it: a search

            state_rollups.forget_hints()
            t0 = time.perf_counter()
            mem.why(derived[len(derived) // 2])
            out["why_cold_s"] = time.perf_counter() - t0
    elif name == "index":
        report = refold.open(root).index(embedder="hashing").report
        out.update(facts=report.facts, events=report.events, embedded=report.embedded)
    elif name == "search":
        out.update(_search(refold.open(root)))
    elif name == "read_past":
        out.update(_read_past(refold.open(root)))
    elif name == "floor":
        out["rows"] = floor(root)
    elif name == "incremental_floor":
        out.update(incremental_floor(root))
    elif name == "erase_floor":
        out.update(erase_floor(root))
    else:
        raise SystemExit(f"unknown step {name!r}")
    out.update(seconds=time.perf_counter() - start, rss=_rss())
    return out


def _read_past(mem) -> dict:
    """One subject's facts as of a past log version, in a fresh process: at the refold's position
    (a tagged state version) and halfway to the incremental fold's (that version plus the read
    overlay of the events between); the first read, then the median of 20 of other subjects.
    Then the median of the same 20 subjects read at the head (``head``): the baseline."""
    older, newer = mem.state_store(mem.current_spec()).tags()[-2:]  # the refold's, the incremental fold's
    out: dict = {}
    for key, seq in (("at_tag", older.log_seq), ("between", (older.log_seq + newer.log_seq) // 2)):
        version = mem.log_store.arrow(columns=["table_version"], prune=[{"seq": (seq, seq)}])["table_version"][0].as_py()
        t0 = time.perf_counter()
        first = mem.facts(subject="Person7", as_of=version)
        took = time.perf_counter() - t0
        times = []
        for i in range(READS):
            t0 = time.perf_counter()
            mem.facts(subject=f"Person{20 + i}", as_of=version)
            times.append(time.perf_counter() - t0)
        out[key] = {"first": took, "median": statistics.median(times), "rows": first.height}
    times = []
    for i in range(READS):
        t0 = time.perf_counter()
        mem.facts(subject=f"Person{20 + i}")
        times.append(time.perf_counter() - t0)
    out["head"] = {"median": statistics.median(times)}
    return out


def _search(mem) -> dict:
    """An agent's searches (hashing embedder), in a fresh process: the first loads the index the
    index step stored and brings it up to date in memory (the new events, the incremental fold
    and the erasure since); then the median of 20 queries with the log unmoved; then the median
    of 5 searches each right after an append of one observation (the index follows the log)."""
    t0 = time.perf_counter()
    hits = mem.search("where does Person7 work", k=5, embedder="hashing")
    out: dict = {"first": time.perf_counter() - t0, "hits": hits.height}
    times = []
    for i in range(READS):
        t0 = time.perf_counter()
        mem.search(f"where does Person{20 + i} live", k=5, embedder="hashing")
        times.append(time.perf_counter() - t0)
    out["median"] = statistics.median(times)
    times = []
    for i in range(5):
        mem.append({"kind": "observation", "source": "agent", "content": f"Person{40 + i} works at Acme"})
        t0 = time.perf_counter()
        mem.search(f"where does Person{40 + i} work", k=5, embedder="hashing")
        times.append(time.perf_counter() - t0)
    out["after_append"] = statistics.median(times)
    return out


#: the largest store whose whole state the read step also reads: the workload's works_in history
#: grows with (moves × staff), so the whole-state answer at 1M events holds tens of millions of
#: derived rows (it took 24 GB here) — what any fold must return for that question
WHOLE_READ_MAX = 300_000


def _time_state_steps() -> dict[str, float]:
    """Seconds the erasure spends in its state-table steps, filled in as it runs: ``purge``
    (``StatePurger.purge``: the refold of the touched buckets from the surviving cached
    extractions, and the vacuum) and ``digest`` (``StateStore.digest``: the outcome the receipt
    records, a read of the whole state)."""
    from refold.engine.purge import StatePurger
    from refold.storage.state import StateStore

    timed: dict[str, float] = {}

    def timing(cls, name: str, key: str) -> None:
        original = getattr(cls, name)

        def timed_call(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                timed[key] = timed.get(key, 0.0) + time.perf_counter() - t0
        setattr(cls, name, timed_call)

    timing(StatePurger, "purge", "purge")
    timing(StateStore, "digest", "digest")
    return timed


def floor(root: Path) -> int:
    """What any merge must do: read the cached extractions' facts and sort them by
    (tenant, subject, relation, seq). Returns the number of facts sorted."""
    import polars as pl

    cache = pl.read_delta(str(root / "extractions"), columns=["seq", "facts"])
    log = pl.read_delta(str(root / "events"), columns=["seq", "tenant"])
    fact = pl.Struct({"subject": pl.String, "relation": pl.String, "object": pl.String})
    facts = (cache.filter(pl.col("facts").is_not_null() & (pl.col("facts") != "[]"))
             .with_columns(pl.col("facts").str.json_decode(pl.List(fact)))
             .explode("facts").unnest("facts")
             .join(log, on="seq", how="left")
             .sort(["tenant", "subject", "relation", "seq"]))
    return facts.height


def incremental_floor(root: Path) -> dict:
    """What any incremental fold of the new events must at least do, with plain tools and no
    merge: read the events after the state's position (a seq-pruned polars scan of the log), run
    the rules extractor on them (the fold's own input; building the events it takes is not
    counted) and commit its output to a Delta table (one append to a scratch table, as the fold
    caches its extractions). Seconds of each part and their sum (``floor_s``)."""
    import dataclasses as dc

    import polars as pl
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    import refold
    from refold.fold.extractors.rules import RulesExtractor
    from refold.storage.log.schema import table_to_events

    mem = refold.open(root)
    spec = mem.current_spec()
    since = mem.state_store(spec).tags()[-1].log_seq
    t0 = time.perf_counter()
    tail = pl.scan_delta(str(root / "events")).filter(pl.col("seq") > since).collect().to_arrow()
    read_s = time.perf_counter() - t0
    events = list(table_to_events(tail))
    t0 = time.perf_counter()
    out = RulesExtractor().extract(events, spec)
    extract_s = time.perf_counter() - t0
    rows = pa.table({"event_id": [x.event_id for x in out],
                     "facts": [json.dumps([dc.asdict(f) for f in x.facts], default=str) for x in out]})
    with tempfile.TemporaryDirectory(prefix="refold-floor-") as scratch:
        write_deltalake(scratch, rows.slice(0, 0))
        table = DeltaTable(scratch)
        t0 = time.perf_counter()
        write_deltalake(table, rows, mode="append")
        commit_s = time.perf_counter() - t0
    return {"events": len(events), "read_s": read_s, "extract_s": extract_s, "commit_s": commit_s,
            "floor_s": read_s + extract_s + commit_s}


def erase_floor(root: Path) -> dict:
    """The least an erasure's state step must do, with delta-rs alone: delete the rows with X
    as subject from the facts table and vacuum the file that delete replaced (the issue asks
    that old versions be vacuumed), timed on a copy of the table vacuumed beforehand. It leaves
    out what a real step also does (the items of X's events, the roll-ups and entities that
    named X)."""
    from deltalake import DeltaTable

    import refold
    from refold.fold.entities import node_id

    mem = refold.open(root)
    facts = mem.state_store(mem.current_spec()).path("facts")
    subject = node_id("default", SUBJECT[1])
    with tempfile.TemporaryDirectory(prefix="refold-floor-") as scratch:
        copy = Path(scratch) / "facts"
        shutil.copytree(facts, copy)
        vacuum = {"retention_hours": 0, "enforce_retention_duration": False, "dry_run": False}
        DeltaTable(str(copy)).vacuum(**vacuum)
        t0 = time.perf_counter()
        table = DeltaTable(str(copy))
        deleted = table.delete(f"subject = '{subject}'").get("num_deleted_rows", 0)
        table.vacuum(**vacuum)
        seconds = time.perf_counter() - t0
    return {"rows": deleted, "floor_s": seconds}


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


# -- the driver ------------------------------------------------------------------------------------

def run_step(name: str, root: Path, n: int, use_ray: bool) -> dict:
    cmd = [sys.executable, __file__, "--step", name, "--root", str(root), "--n", str(n)]
    if use_ray:
        cmd.append("--ray")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"step {name} at {n} events failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(n: int, work: Path, use_ray: bool) -> dict:
    root = work / f"store-{n}-{'ray' if use_ray else 'local'}"
    shutil.rmtree(root, ignore_errors=True)
    r = {name: run_step(name, root, n, use_ray) for name in ("append", "fold", "refold")}
    r["floor"] = run_step("floor", root, n, False)
    r["read"] = run_step("read", root, n, False)
    r["index"] = run_step("index", root, n, False)
    r["state_bytes"] = _du(root / "state")
    r["append_new"] = run_step("append_new", root, n, False)
    r["incremental_floor"] = run_step("incremental_floor", root, n, False)
    r["incremental"] = run_step("incremental", root, n, use_ray)
    r["read_past"] = run_step("read_past", root, n, False)
    r["erase_floor"] = run_step("erase_floor", root, n, False)
    r["erase"] = run_step("erase", root, n, use_ray)
    r["search"] = run_step("search", root, n, False)
    r["events"] = r["append"]["events"]
    shutil.rmtree(root, ignore_errors=True)
    return r


def report(label: str, results: dict[int, dict]) -> bool:
    """Prints one table and the targets; True where every correctness check held."""
    gib = 1024 ** 3
    base_n = min(results)
    per_event = {n: r["refold"]["seconds"] / r["events"] for n, r in results.items()}
    print(f"\n== {label} ==")
    print(f"{'events':>9} {'append s':>9} {'fold s':>8} {'refold s':>9} {'refold µs/ev':>13} {'vs base':>8} "
          f"{'peak RSS GiB':>13} {'incr 1% s':>10} {'erase s':>8} {'read ms':>8} {'floor s':>8} {'state MiB':>10}")
    ok = True
    for n in sorted(results):
        r = results[n]
        peak = max(r[s]["rss"] for s in ("fold", "refold", "incremental", "erase"))
        print(f"{r['events']:>9} {r['append']['seconds']:>9.2f} {r['fold']['seconds']:>8.2f} "
              f"{r['refold']['seconds']:>9.2f} {per_event[n] * 1e6:>13.1f} {per_event[n] / per_event[base_n]:>7.2f}x "
              f"{peak / gib:>13.2f} {r['incremental']['seconds']:>10.2f} {r['erase']['seconds']:>8.2f} "
              f"{r['read']['median'] * 1e3:>8.1f} {r['floor']['seconds']:>8.2f} {r['state_bytes'] / 2**20:>10.1f}")
    for n in sorted(results):
        r = results[n]
        refold_s = r["refold"]["seconds"]
        erase_refold = r["erase"]["refold_s"]
        checks = {
            "refold makes 0 extraction calls": r["refold"]["calls"] == 0,
            "incremental extracts exactly the new events": r["incremental"]["calls"] == r["append_new"]["events"],
            "erasure leaves 0 extraction calls": r["erase"]["after_calls"] == 0,
            "erasure erased X's events": r["erase"]["erased"] > 0,
        }
        ok &= all(checks.values())
        workers = (f" (driver; merge workers {r['refold']['worker_rss'] / gib:.2f} GiB)"
                   if "worker_rss" in r["refold"] else "")
        print(f"{r['events']} events: refold peak RSS {r['refold']['rss'] / gib:.2f} GiB{workers} (target <= 2 GiB at 1M); "
              f"refold / floor {refold_s / r['floor']['seconds']:.1f}x (target <= 20x); "
              f"refold / incremental 1% {refold_s / r['incremental']['seconds']:.1f}x (target >= 50x); "
              f"refold / whole erasure {refold_s / r['erase']['seconds']:.1f}x"
              + (f", / erasure refold step {refold_s / erase_refold:.1f}x (step {erase_refold:.2f} s, "
                 f"digest {r['erase']['digest_s'] or 0:.2f} s)" if erase_refold else "")
              + " (target >= 100x for the refold step); "
              f"read one subject: first {r['read']['first'] * 1e3:.1f} ms, median {r['read']['median'] * 1e3:.1f} ms "
              f"(target <= 50 ms), as a principal sees it {r['read']['principal_median'] * 1e3:.1f} ms")
        inc_floor, erase_floor_ = r["incremental_floor"], r["erase_floor"]
        print(f"  floors: incremental {inc_floor['floor_s']:.2f} s (read the {inc_floor['events']} new events "
              f"{inc_floor['read_s']:.2f} s, rules extraction {inc_floor['extract_s']:.2f} s, one cache commit "
              f"{inc_floor['commit_s']:.2f} s): incremental / floor {r['incremental']['seconds'] / inc_floor['floor_s']:.1f}x, "
              f"refold / floor {refold_s / inc_floor['floor_s']:.1f}x (the most any incremental fold could reach); "
              f"erasure step {erase_floor_['floor_s']:.2f} s (delete X's {erase_floor_['rows']} rows from one "
              f"table and vacuum): refold / floor {refold_s / erase_floor_['floor_s']:.1f}x")
        print("  peak RSS GiB per step: " + ", ".join(
            f"{step_} {r[step_]['rss'] / gib:.2f}" for step_ in ("append", "fold", "refold", "incremental", "erase", "read")))
        whole = (f"whole state facts() {r['read']['whole_s']:.2f} s ({r['read']['whole_rows']} rows)"
                 if "whole_s" in r["read"] else f"whole state not read (over {WHOLE_READ_MAX:,} events)")
        why_ = ""
        if "why_s" in r["read"]:
            why_ = f", why of a works_in fact {r['read']['why_s']:.2f} s after the read that returned it"
            if "why_cold_s" in r["read"]:
                why_ += f", {r['read']['why_cold_s']:.2f} s in a process that did not read it"
        print(f"  reads: {whole}{why_}")
        past = r["read_past"]
        head = past["head"]["median"]
        print(f"  past reads of one subject: as of the refold's position first {past['at_tag']['first'] * 1e3:.1f} ms, "
              f"median {past['at_tag']['median'] * 1e3:.1f} ms; halfway to the incremental fold's (overlay) "
              f"first {past['between']['first'] * 1e3:.1f} ms, median {past['between']['median'] * 1e3:.1f} ms; "
              f"at the head (the baseline, same process) median {head * 1e3:.1f} ms: as_of / head "
              f"{past['at_tag']['median'] / head:.1f}x at the tag, "
              f"{past['between']['median'] / head:.1f}x with the overlay")
        ix, sr = r["index"], r["search"]
        print(f"  search (hashing embedder): index build {ix['seconds']:.2f} s ({ix['facts']} facts, {ix['events']} "
              f"events, peak RSS {ix['rss'] / gib:.2f} GiB); first search after the incremental fold and the "
              f"erasure {sr['first']:.2f} s; query median {sr['median'] * 1e3:.1f} ms; right after an append "
              f"{sr['after_append']:.2f} s (peak RSS {sr['rss'] / gib:.2f} GiB)")
        print("  checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated event counts")
    parser.add_argument("--ray", action="store_true", help="also run the fold steps on a local Ray (2 workers)")
    parser.add_argument("--quick", action="store_true", help="1,000 and 4,000 events (for the test suite)")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(step(args.step, Path(args.root), args.n, args.ray)))
        return 0
    sizes = [1000, 4000] if args.quick else [int(s) for s in args.sizes.split(",")]
    ok = True
    with tempfile.TemporaryDirectory(prefix="refold-scale-") as tmp:
        modes = [False, True] if args.ray else [False]
        for use_ray in modes:
            results = {}
            for n in sizes:
                results[n] = measure(n, Path(tmp), use_ray)
                print(f"measured {n} events ({'ray' if use_ray else 'local'})", file=sys.stderr, flush=True)
            ok &= report("state tables, " + ("merge on Ray, 2 CPUs" if use_ray else "local, in-process"),
                         results)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    random.seed(0)
    sys.exit(main())
