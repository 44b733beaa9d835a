"""Folding with sharded extraction on Ray vs in process, cache writes included.

benchmarks/extract_cpu.py measures the extractors alone; this one measures what ``refold fold``
does: extract the events with no cached extraction, write them to the extraction cache (Delta
MERGEs every 512 extractions or 5 s, while the run goes), merge.
All modes fold the same events into fresh stores in the same run:

* ``in-process``: ``mem.fold()`` (the baseline every ratio is against);
* ``ray pool of N``: ``mem.fold(runner=ray_runner(..., num_actors=N, cache=mem.cache))``, for N
  in ``--actors`` (default 1 and 2). Ray's own start-up is excluded (printed apart); actor
  start-up is included, as in a real fold;
* ``resume``: a Ray fold over a store where half the events are cached already (the cost of
  starting a killed run again: only the missing half is extracted).

    python benchmarks/extract_ray.py [--quick] [--events N] [--batch-size N] [--actors 1,2]
                                     [--extractor rules|llamacpp] [--json]

``--quick``: 40 events (the test suite runs it once). With ``--extractor llamacpp`` use few
events (e.g. ``--events 12``): the packaged model answers a few events per second at best.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import refold
from refold.extractors import get_extractor
from refold.jobs.ray_extract import ensure_ray, ray_runner, spec_for

_PEOPLE = ("Caroline", "Melanie", "Dave", "Anna", "Jon", "Priya")
_LINES = ("I live in {city}.", "I work at {org}.", "{org} is located in {city}.",
          "I moved to {city}.", "My sister is {name}.", "haha yes, that was fun!")
_CITIES = ("Boston", "Portland", "Chicago", "Lisbon", "Oslo")
_ORGS = ("Acme", "Globex", "Initech")


def make_events(n: int) -> list[dict]:
    return [{"kind": "chat_turn", "source": f"bench#{i}", "event_id": f"bench-{i:05d}",
             "content": f"{_PEOPLE[i % 6]}: " + _LINES[i % 6].format(
                 city=_CITIES[i % 5], org=_ORGS[i % 3], name=_PEOPLE[(i + 1) % 6])}
            for i in range(n)]


def _fold(root: Path, events: list[dict], extractor: str, options: dict, runner_args: dict | None,
          batch_size: int, *, precached: int = 0) -> dict:
    mem = refold.init(root)
    mem.append(events)
    ext = get_extractor(extractor, **options)
    spec = spec_for(ext)
    if precached:  # a run killed half-way: the first part is in the cache already
        mem.cache.put(ext.extract(mem.events()[:precached], spec),
                      seqs={e.event_id: e.seq for e in mem.events()[:precached]})
    runner = None
    if runner_args is not None:
        runner = ray_runner(extractor, options, cache=mem.cache, spec=spec, batch_size=batch_size,
                            progress=False, **runner_args)
    started = time.perf_counter()
    report = mem.fold(extractor=ext, spec=spec, runner=runner)
    seconds = time.perf_counter() - started
    frame = mem.cache.frame()
    assert frame.height == frame["event_id"].n_unique() == len(events), "cache rows != events"
    return {"seconds": round(seconds, 3), "extracted": report.extraction_calls,
            "events_per_s": round(report.extraction_calls / seconds, 2) if seconds else None,
            "facts": report.facts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40 events")
    parser.add_argument("--events", type=int, default=None, help="events per mode (default 200)")
    parser.add_argument("--batch-size", type=int, default=16, help="events per batch (and cache put)")
    parser.add_argument("--actors", default="1,2", help="actor pool sizes, comma-separated")
    parser.add_argument("--extractor", default="rules", help="rules | llamacpp")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    n = args.events or (40 if args.quick else 200)
    events = make_events(n)
    sizes = [int(s) for s in args.actors.split(",") if s]

    started = time.perf_counter()
    ensure_ray()
    ray_start_s = time.perf_counter() - started
    rows = []
    with tempfile.TemporaryDirectory(prefix="refold-bench-ray-") as tmp:
        tmp_path = Path(tmp)
        rows.append({"mode": "in-process", **_fold(tmp_path / "a", events, args.extractor, {}, None,
                                                   args.batch_size)})
        for size in sizes:
            rows.append({"mode": f"ray pool of {size}", **_fold(
                tmp_path / f"ray{size}", events, args.extractor, {}, {"num_actors": size}, args.batch_size)})
        rows.append({"mode": f"resume (ray pool of {sizes[-1]})", **_fold(
            tmp_path / "resume", events, args.extractor, {}, {"num_actors": sizes[-1]}, args.batch_size,
            precached=n // 2)})
    base = rows[0]["events_per_s"]
    for row in rows:
        row["vs_in_process"] = round(row["events_per_s"] / base, 3) if base and row["events_per_s"] else None
    result = {"events": n, "extractor": args.extractor, "batch_size": args.batch_size,
              "ray_start_s": round(ray_start_s, 2), "rows": rows}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{n} events, extractor {args.extractor}, batch size {args.batch_size}, "
          f"Ray start {ray_start_s:.1f} s (excluded)")
    print(f"{'mode':<28}{'extracted':>10}{'seconds':>9}{'events/s':>10}{'vs in-process':>15}")
    for r in rows:
        print(f"{r['mode']:<28}{r['extracted']:>10}{r['seconds']:>9.2f}{r['events_per_s']:>10.2f}"
              f"{r['vs_in_process']:>15.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
