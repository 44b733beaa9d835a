"""How the fold scales with the size of the store: 10k, 100k and 1M events.

For each size N, on a fresh store of the synthetic workload (``snapshot_workload.events``: people
moving and changing jobs, organisations located in cities; rules extractor; appends in batches of
1,000), with one data subject X whose events (0.1% of the log) are spread over the whole log:

* append           appending the N events (batches of 1,000)
* fold             ``fold()`` from scratch: extract every event (rules) and merge
* refold           ``fold(full=True)`` in a fresh process: re-merge every cached extraction
* incremental      append 1,000 new events (1% of the smallest sizes), then ``fold()`` in a fresh
                   process; then the first search after it, in another (the stored index brought up
                   to date with the fold's changes: ``search_first``)
* read             one subject's current facts (``facts(subject=…, current_only=True)``) in a warm
                   process: the first read, then the median of 20 (also of 20 reads with a
                   ``principal``: reader scoping); then, in the same process, the
                   whole state's facts (``facts()``, up to 300k events) and ``why`` of one compose
                   roll-up (``works_in``) fact after the read that returned it; then ``why`` of the
                   same fact in a fresh process that never read it (``why``)
* read_past        after the incremental fold, in a fresh process: one subject's facts as of a
                   past log version (``facts(subject=…, as_of=…)``): at the refold's position (time
                   travel to that tagged state version) and halfway to the incremental fold's (that
                   version plus the read overlay of the events between), first read and median of
                   20; then, in the same process, the median of the same 20 subjects' reads at the
                   head (no ``as_of``): the baseline of the as_of / head ratios printed
* index            the vector index stored (``mem.index(embedder="hashing")``: every item embedded),
                   in a fresh process after the read step
* erasure          ``erase("s-x")`` (X: 0.1% of the log, so it grows with the store), then one
                   ordinary subject (~10 events; the erasure after another, so the receipt's digest
                   rehashes only changed buckets), then a batch of 100 ordinary subjects, each in a
                   fresh process, delete mode, no registry entry (no residue scan in the
                   erasure): seconds, the receipt's ``timings`` per step, Delta data files
                   rewritten (files of the log, cache and state tables replaced) per erased event,
                   and the extraction calls of the fold after (0)
* search           in a fresh process after the erasures: an agent's first search, the median of
                   20 queries, and the median of 5 searches each right after an append
* scan             the residue scan alone (``refold.erasure.scan.scan`` of X's name over every file
                   of the store: the proof), against reading every file once with pyarrow
                   (``floors.read_every_file``: bytes, and every Parquet file decoded)
* shred            the same workload in a shred-mode store: append (against the delete-mode
                   append), fold, refold from cache, and erasing one ordinary subject
* floor            what any merge must at least do: polars reading the cached extractions and
                   sorting their facts by (tenant, subject, relation, seq)
* incremental_floor / erase_floor   what any incremental fold, and any erasure's state step, must
                   at least do, with plain tools (benchmarks/floors.py): read the new events,
                   extract them (rules) and commit the extractions once; delete X's rows from the
                   facts table and vacuum it

The last table prints issue #35's rows at each size and their growth from the smallest size to
the largest: what an erasure, an incremental fold and a read cost should follow the work (the
new events, the erased subjects), not the store.

Every step runs in its own child process, so "peak RSS" is that process's own high-water mark
(``ru_maxrss``, interpreter and imports included); with ``--ray`` the refold also prints the
highest peak of the Ray worker processes that ran its merge tasks
(``ray_merger().worker_peak_rss``). Cost per event is relative to the smallest N. Every fold
writes the state tables (the one engine) and tags a state version. ``--ray`` runs the fold steps
a second time with the merge as Ray tasks on a local Ray runtime with 2 CPUs and prints both.
Ratios are printed against the targets of issues #17 and #35; nothing is asserted on time.

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
#: events appended before the incremental fold (issue #35: "an incremental fold of 1,000 new events")
NEW_EVENTS = 1000
#: ordinary subjects erased as one batch
BATCH = 100
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


def _ordinary(mem, n: int, count: int) -> list[str]:
    """Up to ``count`` ordinary subjects (not X; ~10 events each): the first ones tagged from seq
    n/3 on (fewer where the log holds fewer)."""
    found: dict[str, None] = {}
    since = n // 3
    while len(found) < count and since < n:
        for subjects in mem.log(since=since, until=since + 1000)["subjects"].to_list():
            found.update((s, None) for s in subjects or () if s != SUBJECT[0])
        since += 1000
    return list(found)[:count]


def _data_files(root: Path) -> set[str]:
    """Every data file of every Delta table under ``root`` (the log, the cache, the state tables)."""
    from deltalake import DeltaTable

    return {uri for log in root.rglob("_delta_log") for uri in DeltaTable(str(log.parent)).file_uris()}


def step(name: str, root: Path, n: int, use_ray: bool, arg: str = "") -> dict:
    from floors import erase_floor, erase_rows_floor, floor, incremental_floor
    from snapshot_workload import CountingRules, append_all

    import refold

    out: dict = {}
    start = time.perf_counter()
    if name == "append":
        mem = refold.init(root, mode=arg or "delete")
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
        new = min(NEW_EVENTS, max(n // 100, 1))
        out["events"] = append_all(refold.open(root), workload(new, seed=12, start=10 * n, with_subject=False))
    elif name == "incremental":
        ext = CountingRules()
        opts = _fold_options(use_ray)
        start = time.perf_counter()
        report = refold.open(root).fold(extractor=ext, **opts)
        out.update(calls=ext.calls, folded=report.events_folded)
    elif name == "erase":  # arg: "" for X, or "ordinary" for the first subject of seq n/3
        mem = refold.open(root)
        subject = _ordinary(mem, n, 1)[0] if arg == "ordinary" else SUBJECT[0]
        before = _data_files(root)
        start = time.perf_counter()
        receipt = mem.erase(subject)
        took = time.perf_counter() - start
        out.update(erased=len(receipt.events), timings=dict(receipt.timings),
                   rewritten=len(before - _data_files(root)))
        ext = CountingRules()
        refold.open(root).fold(extractor=ext)
        out.update(after_calls=ext.calls, seconds=took, rss=_rss())
        return out
    elif name == "erase_batch":
        mem = refold.open(root)
        subjects = _ordinary(mem, n, BATCH)
        before = _data_files(root)
        start = time.perf_counter()
        result = mem.erase(subjects)
        took = time.perf_counter() - start
        out.update(subjects=len(subjects), erased=sum(len(r.events) for r in result.receipts),
                   calls=sum(r.extraction_calls or 0 for r in result.receipts),
                   timings=dict(result.summary.get("timings", {})), rewritten=len(before - _data_files(root)),
                   seconds=took, rss=_rss())
        return out
    elif name == "scan":  # the residue scan alone (the proof an erasure's receipt carries), then the plain read
        from floors import read_every_file

        from refold.erasure.scan import scan_report

        report = scan_report(root, [SUBJECT[1]])
        out.update(scan_s=time.perf_counter() - start, clean=report.clean, files=report.files,
                   read=read_every_file(root))
    elif name == "search_first":  # the first search after the incremental fold (the index follows it)
        t0 = time.perf_counter()
        refold.open(root).search("where does Person7 work", k=5, embedder="hashing")
        out["first"] = time.perf_counter() - t0
    elif name == "why":  # arg: a compose roll-up's fact id; in a process that never read it
        t0 = time.perf_counter()
        refold.open(root).why(arg)
        out["why_s"] = time.perf_counter() - t0
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
        derived = []
        for person in [name_, *(f"Person{i}" for i in range(READS))]:  # the first with a works_in roll-up
            derived = mem.facts(subject=person, relation="works_in")["fact_id"].to_list()
            if derived:
                break
        if derived:
            t0 = time.perf_counter()
            mem.why(derived[len(derived) // 2])
            out.update(why_s=time.perf_counter() - t0, why_fact=derived[len(derived) // 2])
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
        out.update(erase_floor(root, SUBJECT[1]))
    elif name == "erase_rows_floor":  # on a copy: arg "one" (the ordinary subject) or "batch"
        out.update(erase_rows_floor(root, _ordinary(refold.open(root), n, 1 if arg == "one" else BATCH)))
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


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


# -- the driver ------------------------------------------------------------------------------------

def run_step(name: str, root: Path, n: int, use_ray: bool, arg: str = "") -> dict:
    cmd = [sys.executable, __file__, "--step", name, "--root", str(root), "--n", str(n), "--arg", arg]
    if use_ray:
        cmd.append("--ray")
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"step {name} at {n} events failed:\n{done.stdout}{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _on_copy(root: Path, run) -> dict:
    """``run(copy)`` on a copy of the store at ``root`` (removed after)."""
    copy = root.with_name(root.name + "-copy")
    shutil.copytree(root, copy)
    try:
        return run(copy)
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def measure(n: int, work: Path, use_ray: bool) -> dict:
    root = work / f"store-{n}-{'ray' if use_ray else 'local'}"
    shutil.rmtree(root, ignore_errors=True)
    r = {name: run_step(name, root, n, use_ray) for name in ("append", "fold", "refold")}
    r["floor"] = run_step("floor", root, n, False)
    r["read"] = run_step("read", root, n, False)
    if "why_fact" in r["read"]:
        r["why"] = run_step("why", root, n, False, r["read"]["why_fact"])
    r["index"] = run_step("index", root, n, False)
    r["state_bytes"] = _du(root / "state")
    r["append_new"] = run_step("append_new", root, n, False)
    r["incremental_floor"] = run_step("incremental_floor", root, n, False)
    r["incremental"] = run_step("incremental", root, n, use_ray)
    r["search_first"] = run_step("search_first", root, n, False)
    r["read_past"] = run_step("read_past", root, n, False)
    r["erase_floor"] = run_step("erase_floor", root, n, False)
    r["erase"] = run_step("erase", root, n, use_ray)
    r["floor_one"] = _on_copy(root, lambda copy: run_step("erase_rows_floor", copy, n, False, "one"))
    r["erase_one"] = run_step("erase", root, n, False, "ordinary")
    r["floor_batch"] = _on_copy(root, lambda copy: run_step("erase_rows_floor", copy, n, False, "batch"))
    r["erase_batch"] = run_step("erase_batch", root, n, False)
    r["search"] = run_step("search", root, n, False)
    r["scan"] = run_step("scan", root, n, False)
    r["events"] = r["append"]["events"]
    shutil.rmtree(root, ignore_errors=True)
    if not use_ray:  # the same workload in a shred-mode store: appends, and erasing one subject
        shred = work / f"store-{n}-shred"
        r["shred"] = {name: run_step(name, shred, n, False, arg)
                      for name, arg in (("append", "shred"), ("fold", ""), ("refold", ""), ("erase", "ordinary"))}
        shutil.rmtree(shred, ignore_errors=True)
    return r


def report(label: str, results: dict[int, dict]) -> bool:
    """Prints one table and the targets; True where every correctness check held."""
    gib = 1024 ** 3
    base_n = min(results)
    per_event = {n: r["refold"]["seconds"] / r["events"] for n, r in results.items()}
    print(f"\n== {label} ==")
    print(f"{'events':>9} {'append s':>9} {'fold s':>8} {'refold s':>9} {'refold µs/ev':>13} {'vs base':>8} "
          f"{'peak RSS GiB':>13} {'incr s':>10} {'erase s':>8} {'read ms':>8} {'floor s':>8} {'state MiB':>10}")
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
        erase_refold = r["erase"]["timings"].get("refold")
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
              f"refold / incremental {r['append_new']['events']} {refold_s / r['incremental']['seconds']:.1f}x; "
              f"refold / whole erasure {refold_s / r['erase']['seconds']:.1f}x"
              + (f", / erasure refold step {refold_s / erase_refold:.1f}x (refold + digest {erase_refold:.2f} s, "
                 f"purge {r['erase']['timings'].get('purge', 0):.2f} s)" if erase_refold else "")
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
            if "why" in r:
                why_ += f", {r['why']['why_s']:.2f} s in a fresh process that did not read it"
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
              f"events, peak RSS {ix['rss'] / gib:.2f} GiB); first search after the incremental fold "
              f"{r['search_first']['first']:.2f} s, after the erasures {sr['first']:.2f} s; query median {sr['median'] * 1e3:.1f} ms; right after an append "
              f"{sr['after_append']:.2f} s (peak RSS {sr['rss'] / gib:.2f} GiB)")
        print("  checks: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items()))
    return ok


def report_delta(results: dict[int, dict]) -> None:
    """The rows of issue #35 (costs that should follow the work, not the store) and their growth."""
    sizes = sorted(results)
    shred = all("shred" in results[n] for n in sizes)
    rows: dict[str, dict[int, float]] = {
        "refold from cache": {n: results[n]["refold"]["seconds"] for n in sizes},
        "incremental fold of new events": {n: results[n]["incremental"]["seconds"] for n in sizes},
        "first search after it": {n: results[n]["search_first"]["first"] for n in sizes},
        "one subject's read, warm (median)": {n: results[n]["read"]["median"] for n in sizes},
        "erase one subject (ordinary)": {n: results[n]["erase_one"]["seconds"] for n in sizes},
        f"erase {BATCH} subjects as one batch": {n: results[n]["erase_batch"]["seconds"] for n in sizes},
        "floor: one subject's rows deleted + vacuum": {n: results[n]["floor_one"]["seconds"] for n in sizes},
        "floor: the batch's rows deleted + vacuum": {n: results[n]["floor_batch"]["seconds"] for n in sizes},
        "residue scan alone": {n: results[n]["scan"]["scan_s"] for n in sizes},
        "read every file once": {n: results[n]["scan"]["read"]["seconds"] for n in sizes},
    }
    if all("why" in results[n] for n in sizes):
        rows["why of a compose roll-up, fresh process"] = {n: results[n]["why"]["why_s"] for n in sizes}
    if shred:
        rows["append (delete mode)"] = {n: results[n]["append"]["seconds"] for n in sizes}
        rows["append (shred mode)"] = {n: results[n]["shred"]["append"]["seconds"] for n in sizes}
        rows["refold from cache (shred mode)"] = {n: results[n]["shred"]["refold"]["seconds"] for n in sizes}
        rows["erase one subject (shred mode)"] = {n: results[n]["shred"]["erase"]["seconds"] for n in sizes}
    print("\n== what an erasure, an incremental fold and a read cost as the store grows (issue #35) ==")
    print(f"{'step':<42}" + "".join(f"{n:>12,}" for n in sizes) + f"{'growth':>9}")
    for label, by_n in rows.items():
        growth = by_n[sizes[-1]] / by_n[sizes[0]] if by_n[sizes[0]] else float("nan")
        print(f"{label:<42}" + "".join(f"{by_n[n]:>11.3f}s" for n in sizes) + f"{growth:>8.1f}x")
    for n in sizes:
        r = results[n]
        refold_s, one, batch = r["refold"]["seconds"], r["erase_one"], r["erase_batch"]
        per_event = lambda e: e["rewritten"] / e["erased"] if e["erased"] else float("nan")
        f_one, f_batch = r["floor_one"], r["floor_batch"]
        line = (f"{n:,} events: refold / erase one {refold_s / one['seconds']:.1f}x (target >= 10x), "
                f"erase one / its floor {one['seconds'] / f_one['seconds']:.2f}x (floor {f_one['seconds']:.2f} s, "
                f"{f_one['rewritten']} files; target <= 2x where 10x lies beyond it); "
                f"refold / batch of {batch['subjects']} {refold_s / batch['seconds']:.1f}x (target >= 5x, "
                f"{batch['calls']} extraction calls), batch / its floor {batch['seconds'] / f_batch['seconds']:.2f}x "
                f"(floor {f_batch['seconds']:.2f} s, {f_batch['rewritten']} files); files rewritten per erased event: one subject "
                f"{per_event(one):.2f} ({one['rewritten']} files, {one['erased']} events), batch "
                f"{per_event(batch):.2f} ({batch['rewritten']} files, {batch['erased']} events); residue scan / "
                f"read every file {r['scan']['scan_s'] / r['scan']['read']['seconds']:.1f}x (target <= 3x; "
                f"{r['scan']['read']['files']} files, {r['scan']['read']['bytes'] / 2**20:.0f} MiB, "
                f"{'clean' if r['scan']['clean'] else 'RESIDUE'})")
        if "shred" in r:
            sh = r["shred"]
            line += (f"; shred mode: append / delete-mode append {sh['append']['seconds'] / r['append']['seconds']:.1f}x "
                     f"(target <= 3x), refold / erase one {sh['refold']['seconds'] / sh['erase']['seconds']:.1f}x "
                     f"(target >= 20x)")
        print(line)
        steps = ", ".join(f"{k} {v:.2f}" for k, v in sorted(one["timings"].items(), key=lambda kv: -kv[1])[:7])
        print(f"  erase one, by step (s): {steps}")
        steps = ", ".join(f"{k} {v:.2f}" for k, v in sorted(batch["timings"].items(), key=lambda kv: -kv[1])[:7])
        print(f"  batch, by step (s): {steps}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="comma-separated event counts")
    parser.add_argument("--ray", action="store_true", help="also run the fold steps on a local Ray (2 workers)")
    parser.add_argument("--quick", action="store_true", help="1,000 and 4,000 events (for the test suite)")
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--arg", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        print(json.dumps(step(args.step, Path(args.root), args.n, args.ray, args.arg)))
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
            if not use_ray:
                report_delta(results)
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    random.seed(0)
    sys.exit(main())
