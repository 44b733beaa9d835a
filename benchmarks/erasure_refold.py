"""Erasure refold vs a full rebuild from the cache, measured in the same run.

Builds a store of N events (rules extractor) with two data subjects of 0.1% of the log each:
X, whose events all lie near the END of the log (the last 4%), and Z, whose events are spread
over the whole log. Folds it (snapshots every 1000 events, the newest 4 kept). Then, per subject,
on copies of that store (one per round), runs the real erasure procedure
(``refold.erasing.erase``: tombstones, snapshot patch, cache and snapshot purge, scrub, refold,
residue scan, receipt) and times, each in a fresh process state (a new ``Memory``, as the erasure
job's own process would be):

* erasure refold   the decremental patch inside the procedure: the newest snapshot loses the
                   subject's events (only the keys they touched are re-merged, from the cache)
                   and is written back in place — the folded state without the subject, stored
* refold step      the procedure's own refold after the patch, for the receipt: resume from the
                   patched snapshot, fold the log's tail, digest the state
* whole erasure    ``erase()`` end to end (tombstones, scrubs, purges, refold step, scan, receipt)
* resume           a fresh ``fold()`` afterwards: loads the patched snapshot, replays the tail
* previous path    ``erase(decremental=False)``: every snapshot holding the subject is purged and
                   ``fold()`` resumes from the newest clean one, re-merging cached extractions
* full rebuild     ``fold(full=True)``: re-merges every cached extraction from the start; and the
                   state digest of its result (what a refold step without the patch would add)

All make 0 extraction calls; the patched state must equal the full rebuild (state digest).

    python benchmarks/erasure_refold.py [--events 20000] [--rounds 3] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import refold  # noqa: E402
from refold import erasing  # noqa: E402
from refold.erasing.snapshot_patch import SnapshotPatcher  # noqa: E402
from refold.storage.snapshots import SnapshotStore  # noqa: E402
from snapshot_workload import CountingRules, Seconds, append_all, events, median, ratio, timed  # noqa: E402

#: what this benchmark measures is the graph engine and its snapshots
refold.Memory.fold_engine = "graph"


def build_log(n: int) -> list:
    """``n`` workload events with X's share in the last 4% and Z's spread over the whole log."""
    share = max(n // 1000, 1)
    log = list(events(n, seed=5))
    x_events = list(events(share, seed=6, start=n, subject=("s-x", "Xavier Quill")))
    z_events = list(events(share, seed=7, start=2 * n, subject=("s-z", "Zelda Brook")))
    rng = random.Random(8)
    tail_start = n - max(n // 25, share)
    for e in x_events:
        log.insert(rng.randrange(tail_start, len(log)), e)
    step = len(log) // share
    for i, e in enumerate(z_events):
        log.insert(i * step + rng.randrange(step), e)
    return log


class _StepTimer:
    """Times the patch (:meth:`SnapshotPatcher.purge`) and the refold step
    (:func:`refold.erasing.refold_outcome`) inside the real procedure."""

    def __init__(self) -> None:
        self.seconds: dict[str, list[Seconds]] = {"patch": [], "refold": []}
        self.detail = ""

    def __enter__(self):
        self.real = (SnapshotPatcher.purge, erasing.refold_outcome)
        purge, outcome = self.real

        def timed_purge(patcher, ids):
            took, result = timed(lambda: purge(patcher, ids))
            self.seconds["patch"].append(took)
            self.detail = result.detail[0] if result.detail else ""
            return result

        def timed_outcome(mem, **kw):
            took, result = timed(lambda: outcome(mem, **kw))
            self.seconds["refold"].append(took)
            return result

        SnapshotPatcher.purge = timed_purge
        erasing.refold_outcome = timed_outcome
        return self

    def __exit__(self, *exc) -> None:
        SnapshotPatcher.purge, erasing.refold_outcome = self.real


def _sum(a: Seconds, b: Seconds) -> Seconds:
    out = Seconds(a + b)
    out.cpu = a.cpu + b.cpu
    return out


def measure(base: Path, work: Path, subject: str, rounds: int) -> dict:
    """Median times (s) of the patch, the refold step, the whole erasure, the resume after it, the
    previous path and the full rebuild (with and without its state digest)."""
    out: dict = {k: [] for k in ("patch", "refold", "erase", "patch+refold", "resume", "old", "old_erase",
                                 "full", "digest", "full+digest")}
    out.update(ok=True, equal=True)
    for r in range(rounds):
        for decremental in (True, False):
            root = work / f"{subject}-{r}-{decremental}"
            shutil.copytree(base, root)
            gc.collect()  # the previous round's folds are gone: each step starts from a fresh process state
            with _StepTimer() as timer:
                t_erase, _ = timed(lambda: erasing.erase(refold.Memory(root), subject, decremental=decremental))
            ext = CountingRules()
            t, report = timed(lambda: refold.Memory(root).fold(extractor=ext, snapshot_every=0))
            out["ok"] &= report.extraction_calls == ext.calls == 0
            if decremental:
                out["patch"] += timer.seconds["patch"]
                out["refold"] += timer.seconds["refold"]
                out["patch+refold"].append(_sum(timer.seconds["patch"][0], timer.seconds["refold"][0]))
                out["erase"].append(t_erase)
                out["detail"] = timer.detail
                out["resume"].append(t)
                out["resumed_from"] = report.started_from
                ext = CountingRules()
                fresh = refold.Memory(root)
                t, report = timed(lambda: fresh.fold(extractor=ext, full=True, snapshot_every=0))
                d, full_outcome = timed(lambda: erasing.refold_outcome(fresh))  # digest of the rebuilt state
                out["full"].append(t)
                out["digest"].append(d)
                out["full+digest"].append(_sum(t, d))
                out["ok"] &= report.extraction_calls == ext.calls == 0
                patched = refold.Memory(root)
                out["equal"] &= erasing.refold_outcome(patched).state_digest == full_outcome.state_digest
                del fresh, patched
            else:
                out["old"].append(t)
                out["old_erase"].append(t_erase)
                out["old_from"] = report.started_from
            shutil.rmtree(root)
    return {k: median(v) if isinstance(v, list) and v else v for k, v in out.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="2,000 events, one round (for the test suite)")
    args = parser.parse_args(argv)
    n, rounds = (2_000, 1) if args.quick else (args.events, args.rounds)
    every = 100 if args.quick else 1000
    with tempfile.TemporaryDirectory(prefix="refold-bench-") as tmp:
        root = Path(tmp) / "store"
        mem = refold.init(root)
        log = build_log(n)
        append_all(mem, log)
        first = mem.fold(snapshot_every=every)
        seqs = {e.event_id: e.seq for e in mem.events()}
        kept = [s.last_seq for s in SnapshotStore(mem.layout).list()]
        subjects = {s: [e.event_id for e in log if s in e.subjects] for s in ("s-x", "s-z")}
        total = len(log)
        # the build's fold and log go before anything is timed: every measured step starts from a
        # fresh Memory, and a heap holding another 20k-event fold slowed both sides (collector
        # passes over it) unlike the erasure job's own process
        del mem, log
        gc.collect()
        print(f"log: {first.events_folded} events, {first.facts} facts, {first.derived_facts} derived; "
              f"snapshots at {kept} (every {every}, newest 4 kept)")
        all_ok = True
        for subject, label in (("s-x", "near the end"), ("s-z", "spread over the log")):
            ids = subjects[subject]
            first_seq = min(seqs[i] for i in ids)
            m = measure(root, Path(tmp), subject, rounds)
            all_ok &= m["ok"] and m["equal"]
            p, full = m["patch"], m["full"]
            print(f"subject {subject} ({label}): {len(ids)} events = {len(ids) / total:.2%} of the log, "
                  f"first at seq {first_seq}")
            print(f"  erasure refold (decremental patch): {p:.3f} s (CPU {p.cpu:.3f} s): {m['detail']}")
            print(f"  the procedure's refold step after it (resume + tail + state digest): {m['refold']:.3f} s")
            print(f"  whole erasure end to end: {m['erase']:.3f} s (previous path: {m['old_erase']:.3f} s)")
            print(f"  then a fresh fold resumes from seq {m['resumed_from']}: {m['resume']:.3f} s")
            print(f"  previous path (purge + refold from seq {m['old_from']}): {m['old']:.3f} s")
            print(f"  full rebuild from the cache: {full:.3f} s (CPU {full.cpu:.3f} s); its state digest "
                  f"{m['digest']:.3f} s")
            print(f"  extraction calls 0 everywhere: {'yes' if m['ok'] else 'NO'}; patched state == full "
                  f"rebuild: {'yes' if m['equal'] else 'NO'}")
            print(f"  ratio full rebuild / erasure refold ({label}): {ratio(full, p)} (target >= 20x)")
            print(f"  ratio full rebuild + digest / patch + refold step ({label}): "
                  f"{ratio(m['full+digest'], m['patch+refold'])}")
            print(f"  ratio full rebuild / previous path ({label}): {ratio(full, m['old'])}")
        return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
