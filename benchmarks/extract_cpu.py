"""Extraction throughput on CPU: rules vs the packaged llama.cpp model, in process vs a Ray pool.

Runs the same 40 synthetic events (chat turns, documents, tool calls; a few with nothing to
extract) through

* ``rules`` in process (the baseline every ratio is against),
* ``llamacpp`` in process (packaged Gemma 3 270M, grammar-constrained JSON),
* both again on a Ray actor pool of 2 (``refold.jobs.ray_extract.ray_runner``, 0.5 CPU per actor),

and prints events/s, model calls, output tokens, kept facts and rejected outputs per mode, with
ratios. The llama.cpp model is loaded before timing (its load time is printed separately); Ray's
start-up is excluded, actor start-up (and each actor's model load) is included, as in a real fold.

    python benchmarks/extract_cpu.py [--quick] [--no-ray] [--events N] [--max-tokens N] [--json]

``--quick``: 8 events, answers of at most 2 facts and 64 tokens.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone

from refold.extractors import get_extractor
from refold.fold.events import Event, Fact
from refold.fold.spec import FoldSpec

_NAMES = ["Caroline", "Melanie", "Dave", "Anna", "Jon", "Priya", "Tomas", "Ines"]
_PLACES = ["Boston", "Portland", "Chicago", "Lisbon", "Oslo", "Denver", "Austin", "Berlin"]
_ORGS = ["Acme Corp", "Nike", "Tejo Logistics", "Google", "St. Mary's Hospital", "Nokia"]
_TEMPLATES = [
    ("chat_turn", "{name}: I live in {place} and I work at {org}."),
    ("document", "{name} moved to {place} last spring."),
    ("chat_turn", "{name}: haha yes, that was fun!"),
    ("tool_call", "{name} works for {org}, which is located in {place}."),
    ("chat_turn", "{name}: My risk tolerance is high now."),
]


def make_events(n: int) -> list[Event]:
    """``n`` deterministic events; every 10th is a memory_written event (no model call)."""
    recorded = datetime(2024, 1, 1, tzinfo=timezone.utc)
    events = []
    for i in range(n):
        name, place, org = _NAMES[i % len(_NAMES)], _PLACES[(i * 3) % len(_PLACES)], _ORGS[i % len(_ORGS)]
        if i % 10 == 9:
            kind, content = "memory_written", f"{name} said they live in {place}."
            fact = Fact(name, "lives_in", place)
        else:
            kind, template = _TEMPLATES[i % len(_TEMPLATES)]
            content, fact = template.format(name=name, place=place, org=org), None
        events.append(Event(seq=i, event_id=f"bench-{i:03d}", recorded_at=recorded, table_version=i,
                            kind=kind, tenant="bench", source=f"bench#{i}", content=content, fact=fact,
                            justification="benchmark" if fact else None))
    return events


def _summary(mode: str, extractions, seconds: float) -> dict:
    return {
        "mode": mode, "events": len(extractions), "seconds": round(seconds, 3),
        "events_per_s": round(len(extractions) / seconds, 3) if seconds > 0 else float("inf"),
        "model_calls": sum(1 for x in extractions if x.request is not None),
        "tokens_out": sum(x.tokens_out for x in extractions),
        "facts": sum(len(x.facts) for x in extractions),
        "rejected": sum(len(x.rejected) for x in extractions),
    }


def _timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="8 events, at most 2 facts / 64 tokens per answer")
    parser.add_argument("--no-ray", action="store_true", help="in-process modes only")
    parser.add_argument("--events", type=int, default=None, help="number of events (default 40)")
    parser.add_argument("--max-tokens", type=int, default=None, help="output token limit (default 256)")
    parser.add_argument("--max-facts", type=int, default=None, help="facts per answer (default 4)")
    parser.add_argument("--actors", type=int, default=2, help="Ray actor pool size (default 2)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    n = args.events or (8 if args.quick else 40)
    max_tokens = args.max_tokens or (64 if args.quick else 256)
    max_facts = args.max_facts or (2 if args.quick else 4)  # a short answer must still fit
    events = make_events(n)
    rows: list[dict] = []

    rules = get_extractor("rules")
    rules_spec = FoldSpec()
    out, seconds = _timed(lambda: rules.extract(events, rules_spec))
    rows.append(_summary("rules in-process", out, seconds))

    llama = get_extractor("llamacpp")
    llama_spec = llama.default_spec(max_tokens=max_tokens, max_facts=max_facts)
    _, load_s = _timed(llama._load)  # model load is a one-off per process/actor: reported apart
    out, seconds = _timed(lambda: llama.extract(events, llama_spec))
    rows.append(_summary("llamacpp in-process", out, seconds))

    if not args.no_ray:
        from refold.jobs.ray_extract import ensure_ray, ray_runner

        ensure_ray()
        for name, spec, batch in (("rules", rules_spec, 8), ("llamacpp", llama_spec, 4)):
            runner = ray_runner(name, spec=spec, num_actors=args.actors, batch_size=batch, progress=False)
            out, seconds = _timed(lambda: runner(events))
            rows.append(_summary(f"{name} ray pool of {args.actors}", out, seconds))

    base = rows[0]["events_per_s"]
    by_mode = {r["mode"]: r for r in rows}
    for row in rows:
        row["vs_rules_in_process"] = round(row["events_per_s"] / base, 5) if base else None
    ratios = {}
    ray_llama = by_mode.get(f"llamacpp ray pool of {args.actors}")
    if ray_llama:
        ratios["llamacpp ray/in-process"] = round(ray_llama["events_per_s"] / by_mode["llamacpp in-process"]["events_per_s"], 3)
        ratios["rules ray/in-process"] = round(by_mode[f"rules ray pool of {args.actors}"]["events_per_s"] / base, 5)
    ratios["rules/llamacpp in-process"] = round(base / by_mode["llamacpp in-process"]["events_per_s"], 1)
    result = {"events": n, "max_tokens": max_tokens, "max_facts": max_facts, "model_load_s": round(load_s, 2), "rows": rows, "ratios": ratios}

    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{n} events, llamacpp max_tokens={max_tokens} max_facts={max_facts}, "
          f"model load {load_s:.2f} s (excluded)")
    header = f"{'mode':<26}{'events/s':>10}{'seconds':>9}{'calls':>7}{'tok out':>9}{'facts':>7}{'rejected':>9}{'vs rules':>10}"
    print(header)
    for r in rows:
        print(f"{r['mode']:<26}{r['events_per_s']:>10.2f}{r['seconds']:>9.2f}{r['model_calls']:>7}"
              f"{r['tokens_out']:>9}{r['facts']:>7}{r['rejected']:>9}{r['vs_rules_in_process']:>10.3g}")
    for name, value in ratios.items():
        print(f"ratio {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
