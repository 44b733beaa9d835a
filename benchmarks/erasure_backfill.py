"""Erasure backfill: the same subjects erased as ONE batch against one erasure each, on two
copies of the same store, measured in the same run.

The store: ``--subjects`` registered subjects, ``--per-subject`` chat turns each (the rules
extractor turns them into facts: where they live, where they work), appended in batches of 500
with every tenth turn tagged with two subjects (a shared event) and folded (extraction cache,
state tables; the fold's tagged state version is the snapshot). The folder is copied twice;
on one copy ``mem.erase([...])`` erases ``--erase`` subjects as one batch, on the other
``mem.erase(s)`` runs once per subject. Both runs pass the subjects' names as scan needles (from
the registry). Printed: both times, their ratio (target >= 10x), each side's extraction calls
(target 0) and whether both copies end with the same facts (``mem.facts()``, read from the state
tables), pass ``verify`` and hold nothing of the erased subjects.

    python benchmarks/erasure_backfill.py [--subjects 200] [--per-subject 15] [--erase 100] [--quick]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import refold  # noqa: E402
from refold.erasure.scan import scan  # noqa: E402

CITIES = ("Lisbon", "Oslo", "Quito", "Hanoi", "Lagos", "Perth", "Tromso", "Cusco", "Recife", "Bergen")
ORGS = ("Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vehement", "Stark", "Wonka")


def name_of(i: int) -> str:
    return f"Person{i:04d} Zeb{chr(97 + i % 26)}{chr(97 + i // 26 % 26)}"


def build(root: Path, subjects: int, per_subject: int) -> refold.Memory:
    mem = refold.init(root)
    events = []
    for i in range(subjects):
        first = name_of(i).split()[0]
        for k in range(per_subject):
            what = (f"I live in {CITIES[(i + k) % len(CITIES)]}." if k % 2 == 0
                    else f"I work at {ORGS[(i * 3 + k) % len(ORGS)]}.")
            tags = [f"s-{i:04d}"] + ([f"s-{(i + 1) % subjects:04d}"] if k % 10 == 9 else [])
            events.append({"kind": "chat_turn", "content": f"{first}: {what}", "source": f"chat#{i}:{k}",
                           "subjects": tags, "event_id": f"ev-{i:04d}-{k:03d}"})
    # turns arrive interleaved across subjects, as conversations do
    events.sort(key=lambda e: (e["event_id"][8:], e["event_id"][3:7]))
    for start in range(0, len(events), 500):
        mem.append(events[start:start + 500])
    for i in range(subjects):
        first, last = name_of(i).split()
        mem.register_subject(f"s-{i:04d}", f"{first} {last}", aliases=[first])
    mem.fold()
    return mem


def facts(mem: refold.Memory) -> set[tuple]:
    """Every fact of the store (history included), read from the state tables."""
    return {(r["subject"], r["relation"], r["object"], tuple(sorted(r["sources"])))
            for r in mem.facts().iter_rows(named=True)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=200)
    parser.add_argument("--per-subject", type=int, default=15)
    parser.add_argument("--erase", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20 subjects, 5 erased (the suite's run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.subjects, args.per_subject, args.erase = 20, 10, 5
    chosen = [f"s-{i:04d}" for i in range(0, 2 * args.erase, 2)][:args.erase]  # every other subject
    names = [n for i in range(0, 2 * args.erase, 2) for n in name_of(i).split()[:1]]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        start = time.perf_counter()
        build(base, args.subjects, args.per_subject)
        print(f"store: {args.subjects} subjects x {args.per_subject} turns = "
              f"{args.subjects * args.per_subject} events, built and folded in {time.perf_counter() - start:.1f} s")
        batch_root, single_root = Path(tmp) / "batch", Path(tmp) / "single"
        shutil.copytree(base, batch_root)
        shutil.copytree(base, single_root)

        mem = refold.open(batch_root, create=False)
        start = time.perf_counter()
        result = mem.erase(chosen)
        batch_s = time.perf_counter() - start
        batch_calls = result.summary["extraction_calls"]

        mem = refold.open(single_root, create=False)
        start = time.perf_counter()
        receipts = [mem.erase(s) for s in chosen]
        single_s = time.perf_counter() - start
        single_calls = sum(r.extraction_calls or 0 for r in receipts)

        a, b = refold.open(batch_root, create=False), refold.open(single_root, create=False)
        same = facts(a) == facts(b)
        ok = a.verify().ok and b.verify().ok
        clean = not scan(batch_root, names) and not scan(single_root, names)
        steps = ", ".join(f"{k} {v:.2f}" for k, v in result.summary["timings"].items())
    print(f"erase {len(chosen)} subjects: one batch {batch_s:.2f} s, one by one {single_s:.2f} s; "
          f"ratio {single_s / batch_s:.1f}x")
    print(f"extraction calls: batch {batch_calls}, one by one {single_calls}")
    print(f"batch steps (s): {steps}")
    print(f"same facts: {'yes' if same else 'NO'}; verify ok: {'yes' if ok else 'NO'}; "
          f"names left: {'none' if clean else 'SOME'}")
    return 0 if same and ok and clean and batch_calls == 0 and single_calls == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
