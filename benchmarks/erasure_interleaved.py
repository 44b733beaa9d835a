"""Erasing one speaker of a conversation whose turns alternate with the other speaker's, against
the same turns stored contiguously (one speaker's turns first), measured in the same run.

Each case builds a fresh store (2,000 earlier events, then the conversation appended ``--batch``
turns at a time, as a chat arrives; the log compacts its small files as usual), then
erases speaker A at the log level (:func:`refold.erasure.procedure.erase`: erasure event,
tombstones, vacuum and log cleanup; no derived stores, no refold, no scan), and reports the whole
erasure and its tombstone commit. Before, the tombstone commit was one overwrite whose predicate
held an OR term per run of erased seqs (hundreds when they alternate); now it rewrites the data
files that hold erased rows, whatever their pattern.

    python benchmarks/erasure_interleaved.py [--turns 700] [--batch 10] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refold  # noqa: E402
from refold.erasure import procedure as erasure_mod  # noqa: E402
from refold.storage.log.verify import verify  # noqa: E402

A, B = "s-a11e", "s-b0b0"


def turns(n: int, *, interleaved: bool) -> list[dict]:
    """``n`` chat turns, alternating between two speakers (or A's half first, then B's)."""
    out = [{"kind": "chat_turn", "content": f"{'Ada' if i % 2 == 0 else 'Bo'}: turn {i} about topic {i % 17}.",
            "source": f"conv#1:{i}", "subjects": [A if i % 2 == 0 else B], "event_id": f"conv-1-{i:05d}"}
           for i in range(n)]
    if not interleaved:
        out = out[0::2] + out[1::2]
    return out


def run_case(n: int, *, interleaved: bool, batch: int, earlier: int) -> tuple[float, float, int]:
    """(whole erasure, tombstone commit, events erased) in seconds for a fresh store."""
    with tempfile.TemporaryDirectory() as tmp:
        mem = refold.init(Path(tmp) / "store")
        # a few earlier batches, so the log has more than the conversation's file
        for k in range(0, earlier, 500):
            mem.append([{"kind": "observation", "content": f"earlier note {j}", "source": "notes",
                         "event_id": f"pre-{j:06d}"} for j in range(k, min(k + 500, earlier))])
        conversation = turns(n, interleaved=interleaved)
        for i in range(0, n, batch):
            mem.append(conversation[i:i + batch])
        spent = {"tombstones": 0.0}
        original = erasure_mod._Run._tombstones

        def timed_tombstones(self):
            start = time.perf_counter()
            try:
                return original(self)
            finally:
                spent["tombstones"] += time.perf_counter() - start

        erasure_mod._Run._tombstones = timed_tombstones
        try:
            start = time.perf_counter()
            receipt = erasure_mod.erase(mem.log_store, A, mode="delete", orphan_grace_hours=0)
            whole = time.perf_counter() - start
        finally:
            erasure_mod._Run._tombstones = original
        report = verify(mem.log_store)
        if not report.ok:
            raise SystemExit(f"verify failed after the erasure: {report.problems}")
        rows = mem.log_store.arrow(columns=["kind", "subjects"])
        left = sum(1 for k, s in zip(rows["kind"].to_pylist(), rows["subjects"].to_pylist())
                   if k != "tombstone" and A in (s or ()))
        if left:
            raise SystemExit(f"{left} event(s) of A still readable")
        return whole, spent["tombstones"], len(receipt.events)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=700, help="turns in the conversation (half are A's)")
    parser.add_argument("--batch", type=int, default=10, help="turns per append")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (best is reported)")
    parser.add_argument("--quick", action="store_true", help="120 turns after 200 events, one run (test suite)")
    args = parser.parse_args()
    n, repeat, earlier = (120, 1, 200) if args.quick else (args.turns, args.repeat, 2000)
    results = {}
    for name, interleaved in (("interleaved", True), ("contiguous", False)):
        runs = [run_case(n, interleaved=interleaved, batch=args.batch, earlier=earlier) for _ in range(repeat)]
        whole, tomb, erased = min(runs)
        results[name] = (whole, tomb)
        print(f"{name:<11}: erased {erased} of {n} turns: whole erasure {whole:.3f} s, "
              f"tombstone commit {tomb:.3f} s (best of {repeat})")
    ratio = results["interleaved"][0] / results["contiguous"][0]
    print(f"ratio interleaved / contiguous (whole erasure): {ratio:.1f}x; verify ok, nothing of A readable: yes")


if __name__ == "__main__":
    main()
