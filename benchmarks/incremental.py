"""Incremental projection vs a full refold, measured in the same run.

Builds a store of N events (memory_written facts + chat turns, rules extractor), folds it,
snapshots it, then adds 1% new events and folds again:

* full refold      ``fold(full=True)``: ignores snapshots, re-merges every cached extraction
* from scratch     a copy of the log with an empty cache: extracts and merges everything
* incremental, in-process   the same Memory folds again (its own state is the resume point)
* incremental, new process  a fresh Memory resumes from the snapshot on disk

and prints the ratios plus the check that extraction calls == new events exactly, and where the
in-process incremental fold spends its time (the fold's own phase clock, plus the extraction
cache's commit measured around ``ExtractionCache.put``).

    python benchmarks/incremental.py [--events 20000] [--new-share 0.01] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import refold  # noqa: E402
from refold import projection  # noqa: E402
from refold.storage.cache import ExtractionCache  # noqa: E402
from snapshot_workload import CountingRules, append_all, events, median, ratio  # noqa: E402
from snapshot_workload import timed as _timed  # noqa: E402

#: what this benchmark measures is the graph engine and its snapshots
refold.Memory.fold_engine = "graph"


def timed(fn):
    """``snapshot_workload.timed`` after a full collection (not timed): each measured step pays
    for the collections its own allocations trigger and for none that earlier steps left pending
    (a full pass over this benchmark's heap costs 0.2-0.5 s; where a pending one landed depended
    on the steps before, and so on the flags). A full refold still triggers one of its own."""
    gc.collect()
    return _timed(fn)


class PhaseLog:
    """Collects each fold's phase timings (``Projection.timings``) and the seconds spent in cache
    writes, by wrapping ``refold.projection._project`` and ``ExtractionCache.put`` while active."""

    def __init__(self) -> None:
        self.folds: list[dict[str, float]] = []
        self._put = 0.0

    def __enter__(self) -> "PhaseLog":
        self._real = projection._project, ExtractionCache.put
        real_project, real_put = self._real

        def project(*args, **kwargs):
            self._put = 0.0
            done = real_project(*args, **kwargs)
            self.folds.append({**done.timings, "cache_write": self._put})
            return done

        def put(cache, *args, **kwargs):
            start = time.perf_counter()
            try:
                return real_put(cache, *args, **kwargs)
            finally:
                self._put += time.perf_counter() - start

        projection._project, ExtractionCache.put = project, put
        return self

    def __exit__(self, *exc) -> None:
        projection._project, ExtractionCache.put = self._real

    def summary(self) -> str:
        names = ["resume", "extract", "cache_write", "cache_read", "merge", "rollups"]
        parts = []
        for name in names:
            values = [f.get(name, 0.0) * 1000 for f in self.folds]
            label = "extract (incl. cache write)" if name == "extract" else name
            parts.append(f"{label} {statistics.median(values):.1f} [{min(values):.1f}-{max(values):.1f}]")
        return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--new-share", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3, help="incremental folds per mode (median)")
    parser.add_argument("--quick", action="store_true", help="2,000 events, one round (for the test suite)")
    args = parser.parse_args(argv)
    n, rounds = (2_000, 1) if args.quick else (args.events, args.rounds)
    new = max(int(n * args.new_share), 1)
    with tempfile.TemporaryDirectory(prefix="refold-bench-") as tmp:
        root = Path(tmp) / "store"
        mem = refold.init(root)
        append_all(mem, list(events(n, seed=1)))
        scratch_root = Path(tmp) / "scratch"
        shutil.copytree(root, scratch_root)  # the same log, no cache, no snapshots

        t_first, first = timed(lambda: mem.fold(snapshot_every=0))
        t_snap, info = timed(mem.snapshot)
        print(f"events: {first.events_folded}  facts: {first.facts}  derived: {first.derived_facts}  "
              f"first fold: {t_first:.2f} s  snapshot write: {t_snap:.2f} s "
              f"({info.nodes} nodes, {info.edges} facts)")

        warm, warm_ok, cold, cold_ok, started, moves = [], True, [], True, [], []
        phases = PhaseLog()
        for r in range(rounds):
            batch = list(events(new, seed=100 + r, people=n // 10, start=n + r * new))
            moves.append(sum(1 for e in batch if e.fact is not None and e.fact.relation == "located_in"))
            append_all(mem, batch)
            ext = CountingRules()
            with phases:
                t, report = timed(lambda: mem.fold(extractor=ext, snapshot_every=0))
            warm.append(t)
            warm_ok &= report.extraction_calls == ext.calls == new
        for r in range(rounds):
            mem.snapshot()
            append_all(mem, list(events(new, seed=200 + r, people=n // 10, start=2 * n + r * new)))
            ext = CountingRules()
            fresh = refold.Memory(root)
            t, report = timed(lambda: fresh.fold(extractor=ext, snapshot_every=0))
            cold.append(t)
            started.append(report.started_from)
            cold_ok &= report.extraction_calls == ext.calls == new and report.started_from >= 0

        ext = CountingRules()
        fresh = refold.Memory(root)
        t_full, full = timed(lambda: fresh.fold(extractor=ext, full=True, snapshot_every=0))
        assert full.extraction_calls == ext.calls == 0 and full.started_from == -1
        scratch = refold.Memory(scratch_root)
        t_scratch, from_scratch = timed(lambda: scratch.fold(snapshot_every=0))

        w, c = median(warm), median(cold)
        print(f"log: {full.events_folded} events; each incremental fold adds {new} new events "
              f"({args.new_share:.0%})")
        print(f"full refold (fold(full=True), re-merge from the cache): {t_full:.3f} s "
              f"(CPU {t_full.cpu:.3f} s), 0 extraction calls")
        print(f"from scratch (empty cache, extract + merge all): {t_scratch:.3f} s (CPU {t_scratch.cpu:.3f} s), "
              f"{from_scratch.extraction_calls} extraction calls")
        print(f"incremental, in-process (median of {rounds}): {w:.3f} s (CPU {w.cpu:.3f} s); rounds "
              + ", ".join(f"{t:.3f}" for t in warm))
        print(f"  in-process phases, ms median [range]: {phases.summary()}")
        print("  organisation moves per round (each re-derives works_in for its staff): "
              + ", ".join(map(str, moves)))
        print(f"incremental, new process from a snapshot (median of {rounds}): {c:.3f} s (CPU {c.cpu:.3f} s), "
              f"resumed from seq {started[-1]}; rounds " + ", ".join(f"{t:.3f}" for t in cold))
        print(f"extraction calls == new events exactly: in-process {'yes' if warm_ok else 'NO'}, "
              f"new process {'yes' if cold_ok else 'NO'} ({new} per fold)")
        print(f"ratio full refold / incremental in-process: {ratio(t_full, w)} (target >= 50x)")
        print(f"ratio full refold / incremental new process: {ratio(t_full, c)}")
        print(f"ratio from scratch / incremental in-process: {ratio(t_scratch, w)}")
        print(f"ratio from scratch / incremental new process: {ratio(t_scratch, c)}")
        return 0 if warm_ok and cold_ok else 1


if __name__ == "__main__":
    sys.exit(main())
