"""Erasure refold vs a full rebuild from the cache, measured in the same run.

Builds a store of N events (rules extractor) with two data subjects of 0.1% of the log each:
X, whose events all lie near the END of the log (the last 4%), and Z, whose events are spread
over the whole log. Folds it (snapshots every 1000 events, the newest 4 kept), then for each
subject runs the real erasure procedure (``refold.erasing.erase``: tombstones, cache and snapshot
purge, scrub, refold, residue scan, receipt) and afterwards times, each in a fresh Memory (as the
erasure job's own process would):

* erasure refold   ``fold()``: resumes from the newest snapshot that survived the purge (before
                   the subject's first event) and re-merges cached extractions of the surviving
                   events after it
* full rebuild     ``fold(full=True)``: re-merges every cached extraction from the start

Both must make 0 extraction calls. X is the case snapshots are for; Z shows the limit (its first
event is older than every kept snapshot, so its refold is a full rebuild).

    python benchmarks/erasure_refold.py [--events 20000] [--quick]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import refold  # noqa: E402
from refold import erasing  # noqa: E402
from refold.storage.snapshots import SnapshotStore  # noqa: E402
from snapshot_workload import CountingRules, append_all, events, median, ratio, timed  # noqa: E402


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


def measure(root: Path, rounds: int):
    """(median erasure-refold time, median full-rebuild time, resumed-from seq, 0 calls both)."""
    inc, full, ok, started = [], [], True, -1
    for _ in range(rounds):
        ext = CountingRules()
        t, report = timed(lambda: refold.Memory(root).fold(extractor=ext, snapshot_every=0))
        inc.append(t)
        started = report.started_from
        ok &= report.extraction_calls == ext.calls == 0
        ext = CountingRules()
        t, report = timed(lambda: refold.Memory(root).fold(extractor=ext, full=True, snapshot_every=0))
        full.append(t)
        ok &= report.extraction_calls == ext.calls == 0
    return median(inc), median(full), started, ok


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
        print(f"log: {first.events_folded} events, {first.facts} facts, {first.derived_facts} derived; "
              f"snapshots at {kept} (every {every}, newest 4 kept)")
        all_ok = True
        for subject, label in (("s-x", "near the end"), ("s-z", "spread over the log")):
            ids = [e.event_id for e in log if subject in e.subjects]
            first_seq = min(seqs[i] for i in ids)
            t_erase, receipt = timed(lambda: erasing.erase(refold.Memory(root), subject))
            purged = [p for p in receipt.purged if p["store"] == "snapshots"]
            t_inc, t_full, started, ok = measure(root, rounds)
            all_ok &= ok
            print(f"subject {subject} ({label}): {len(ids)} events = {len(ids) / len(log):.2%} of the log, "
                  f"first at seq {first_seq}; erasure procedure {t_erase:.1f} s, snapshots purged: "
                  f"{purged[0]['rows'] if purged else 0}")
            print(f"  erasure refold: {t_inc:.3f} s (CPU {t_inc.cpu:.3f} s), resumed from seq {started}; "
                  f"full rebuild from the cache: {t_full:.3f} s (CPU {t_full.cpu:.3f} s); "
                  f"extraction calls 0 in both: {'yes' if ok else 'NO'}")
            target = " (target >= 20x)" if subject == "s-x" else ""
            print(f"  ratio full rebuild / erasure refold ({label}): {ratio(t_full, t_inc)}{target}")
            # the refold made new snapshots past the erasure for the next subject to resume from
            refold.Memory(root).fold(snapshot_every=every)
        return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
