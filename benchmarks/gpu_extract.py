"""GPU extraction throughput with vLLM: structured output on/off × prefix caching on/off.

For a GPU node with ``refold[vllm]`` installed (vLLM 0.29, Ray 2.60). Builds N extraction
requests with refold's own prompt (``build_request``: the few-shot prefix is shared by every
request, the event comes last), runs them through vLLM's offline engine and prints, per setting,
requests/s, output tokens/s, prompt tokens/s, the share of answers that are valid JSON and the
grounded facts kept by refold's parser — then the ratios structured/unstructured and prefix
caching on/off. Each engine setting runs in its own subprocess (a clean GPU per engine); a warm-up
batch is excluded from timing.

    python benchmarks/gpu_extract.py [--model HF_ID_OR_PATH] [--events N] [--quick] [--tp N]
                                     [--engine offline|ray] [--replicas N] [--dry-run] [--json]

``--dry-run`` prints the plan, one request and the sampling parameters without importing vLLM
(works anywhere). ``--engine ray`` runs the same requests through refold's Ray Data LLM processor
(``refold.extractors.vllm``); its times include engine start-up.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone

from refold.fold.events import Event
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request, default_model_spec
from refold.fold.spec import FoldSpec

_NAMES = ["Caroline", "Melanie", "Dave", "Anna", "Jon", "Priya", "Tomas", "Ines", "Kofi", "Mei"]
_PLACES = ["Boston", "Portland", "Chicago", "Lisbon", "Oslo", "Denver", "Austin", "Berlin", "Accra"]
_ORGS = ["Acme Corp", "Nike", "Tejo Logistics", "Google", "St. Mary's Hospital", "Nokia", "Fiat"]
_TEMPLATES = [
    "{name}: I live in {place} and I work at {org}.",
    "{name} moved to {place} in {year}.",
    "{name}: haha yes, that was fun!",
    "{name} works for {org}, which is located in {place}.",
    "{name}: My sister {other} is a nurse in {place}.",
    "Meeting notes {year}: {name} joined {org} as an engineer.",
]


def make_events(n: int) -> list[Event]:
    recorded = datetime(2024, 1, 1, tzinfo=timezone.utc)
    out = []
    for i in range(n):
        text = _TEMPLATES[i % len(_TEMPLATES)].format(
            name=_NAMES[i % len(_NAMES)], other=_NAMES[(i + 3) % len(_NAMES)],
            place=_PLACES[(i * 7) % len(_PLACES)], org=_ORGS[(i * 5) % len(_ORGS)], year=2000 + i % 25)
        out.append(Event(seq=i, event_id=f"gpu-{i:05d}", recorded_at=recorded, table_version=i,
                         kind="chat_turn", tenant="bench", source=f"bench#{i}", content=text))
    return out


def make_spec(args) -> FoldSpec:
    return FoldSpec(extractor="vllm", model=default_model_spec(
        args.model, max_tokens=args.max_tokens, max_facts=args.max_facts))


def plan(args) -> list[dict]:
    return [{"prefix_caching": prefix, "structured": structured}
            for prefix in (True, False) for structured in (True, False)]


# -- one engine setting (runs in a subprocess) ---------------------------------------------------

def _score(events, spec, texts) -> dict:
    valid = kept = rejected = 0
    for event, text in zip(events, texts):
        try:
            json.loads(text)
            valid += 1
        except ValueError:
            pass
        facts, rejections = parse_output(text, event, spec)
        kept += len(facts)
        rejected += len(rejections)
    n = max(len(texts), 1)
    return {"valid_json_share": round(valid / n, 4), "facts_per_request": round(kept / n, 3),
            "rejections_per_request": round(rejected / n, 3)}


def run_offline(args, prefix_caching: bool) -> list[dict]:
    """Both structured modes on one vLLM offline engine (prefix caching is an engine setting)."""
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from refold.extractors.vllm import engine_kwargs, sampling_params

    spec = make_spec(args)
    events = make_events(args.events)
    bodies = [json.loads(build_request(e, spec).payload) for e in events]
    kwargs = engine_kwargs(tensor_parallel_size=args.tp, enable_prefix_caching=prefix_caching,
                           max_model_len=args.max_model_len, structured_outputs_backend=args.backend,
                           extra={"gpu_memory_utilization": args.gpu_memory_utilization, "seed": 0})
    llm = LLM(model=args.model, **kwargs)

    def params(body, structured):
        p = sampling_params(body, structured=structured)
        so = p.pop("structured_outputs", None)
        return SamplingParams(**p, structured_outputs=StructuredOutputsParams(**so) if so else None)

    results = []
    for structured in (True, False):
        warm = bodies[: min(16, len(bodies))]
        llm.chat([b["messages"] for b in warm], [params(b, structured) for b in warm], use_tqdm=False)
        started = time.perf_counter()
        outputs = llm.chat([b["messages"] for b in bodies], [params(b, structured) for b in bodies],
                           use_tqdm=False)
        seconds = time.perf_counter() - started
        tokens_in = sum(len(o.prompt_token_ids) for o in outputs)
        tokens_out = sum(len(o.outputs[0].token_ids) for o in outputs)
        texts = [o.outputs[0].text for o in outputs]
        results.append({"prefix_caching": prefix_caching, "structured": structured,
                        "requests": len(bodies), "seconds": round(seconds, 3),
                        "requests_per_s": round(len(bodies) / seconds, 2),
                        "output_tokens_per_s": round(tokens_out / seconds, 1),
                        "prompt_tokens_per_s": round(tokens_in / seconds, 1),
                        **_score(events, spec, texts)})
    return results


def run_ray(args, prefix_caching: bool) -> list[dict]:
    """Both structured modes through refold's Ray Data LLM processor (times include start-up)."""
    from refold.extractors.vllm import build_processor, build_processor_config, run_processor

    spec = make_spec(args)
    events = make_events(args.events)
    requests = [build_request(e, spec) for e in events]
    results = []
    for structured in (True, False):
        config = build_processor_config(args.model, replicas=args.replicas, batch_size=args.batch_size,
                                        tensor_parallel_size=args.tp, enable_prefix_caching=prefix_caching,
                                        max_model_len=args.max_model_len,
                                        structured_outputs_backend=args.backend)
        started = time.perf_counter()
        rows = run_processor(build_processor(config, spec, structured=structured), requests)
        seconds = time.perf_counter() - started
        results.append({"prefix_caching": prefix_caching, "structured": structured,
                        "requests": len(rows), "seconds": round(seconds, 3),
                        "requests_per_s": round(len(rows) / seconds, 2),
                        "output_tokens_per_s": round(sum(r["tokens_out"] for r in rows) / seconds, 1),
                        "prompt_tokens_per_s": round(sum(r["tokens_in"] for r in rows) / seconds, 1),
                        **_score(events, spec, [r["raw_output"] for r in rows])})
    return results


# -- driver --------------------------------------------------------------------------------------

def _ratios(rows: list[dict]) -> dict:
    get = {(r["prefix_caching"], r["structured"]): r for r in rows}
    out = {}
    for prefix in (True, False):
        a, b = get.get((prefix, True)), get.get((prefix, False))
        if a and b:
            key = f"structured/unstructured (prefix caching {'on' if prefix else 'off'})"
            out[key] = {"requests_per_s": round(a["requests_per_s"] / b["requests_per_s"], 3),
                        "output_tokens_per_s": round(a["output_tokens_per_s"] / b["output_tokens_per_s"], 3)}
    for structured in (True, False):
        a, b = get.get((True, structured)), get.get((False, structured))
        if a and b:
            key = f"prefix caching on/off ({'structured' if structured else 'unstructured'})"
            out[key] = {"requests_per_s": round(a["requests_per_s"] / b["requests_per_s"], 3),
                        "prompt_tokens_per_s": round(a["prompt_tokens_per_s"] / b["prompt_tokens_per_s"], 3)}
    return out


def _dry_run(args) -> int:
    from refold.extractors.vllm import engine_kwargs, sampling_params

    spec = make_spec(args)
    request = build_request(make_events(1)[0], spec)
    body = json.loads(request.payload)
    print(f"plan: {args.events} requests, model {args.model}, engine {args.engine}, tp {args.tp}, "
          f"max_tokens {args.max_tokens}, max_facts {args.max_facts}")
    for setting in plan(args):
        print(f"  run: prefix_caching={setting['prefix_caching']!s:<5} structured={setting['structured']}")
    kwargs = engine_kwargs(tensor_parallel_size=args.tp, enable_prefix_caching=True,
                           max_model_len=args.max_model_len, structured_outputs_backend=args.backend)
    print("engine kwargs:", json.dumps(kwargs))
    print("sampling params (structured):", json.dumps(sampling_params(body))[:300], "...")
    print("sampling params (unstructured):", json.dumps(sampling_params(body, structured=False)))
    prompt = body["messages"][0]["content"]
    print(f"prompt: {len(prompt)} chars; shared prefix {prompt.index('Text: ' + make_events(1)[0].content)} chars")
    print(f"request {request.request_id}: {request.payload[:160]}...")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="google/gemma-3-270m-it", help="HF id or local path")
    parser.add_argument("--events", type=int, default=None, help="requests per run (default 1024)")
    parser.add_argument("--quick", action="store_true", help="128 requests")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--max-facts", type=int, default=4)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--tp", type=int, default=1, help="tensor parallel size")
    parser.add_argument("--backend", default="xgrammar", help="structured output backend")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    parser.add_argument("--engine", choices=("offline", "ray"), default="offline")
    parser.add_argument("--replicas", type=int, default=1, help="engine replicas (--engine ray)")
    parser.add_argument("--batch-size", type=int, default=64, help="rows per batch (--engine ray)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; import no vLLM")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.events = args.events or (128 if args.quick else 1024)

    if args.dry_run:
        return _dry_run(args)
    if args._worker is not None:  # one engine setting, in this process
        prefix = json.loads(args._worker)["prefix_caching"]
        rows = (run_offline if args.engine == "offline" else run_ray)(args, prefix)
        print("RESULT " + json.dumps(rows))
        return 0
    try:
        import vllm  # noqa: F401 - fail early with a clear message
    except ImportError:
        print("vLLM is not installed: pip install 'refold[vllm]' on a GPU node (or use --dry-run)",
              file=sys.stderr)
        return 2

    rows: list[dict] = []
    passthrough = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--json"]
    for prefix in (True, False):
        cmd = [sys.executable, os.path.abspath(__file__), *passthrough,
               "--_worker", json.dumps({"prefix_caching": prefix})]
        done = subprocess.run(cmd, capture_output=True, text=True)
        line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("RESULT ")), None)
        if done.returncode != 0 or line is None:
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
            return done.returncode or 1
        rows.extend(json.loads(line[len("RESULT "):]))
    ratios = _ratios(rows)
    if args.json:
        print(json.dumps({"rows": rows, "ratios": ratios}, indent=2))
        return 0
    print(f"{args.events} requests, {args.model}, engine {args.engine}, tp {args.tp}")
    print(f"{'prefix':<8}{'structured':<12}{'req/s':>9}{'out tok/s':>11}{'prompt tok/s':>14}{'valid JSON':>12}{'facts/req':>11}")
    for r in rows:
        print(f"{'on' if r['prefix_caching'] else 'off':<8}{'on' if r['structured'] else 'off':<12}"
              f"{r['requests_per_s']:>9.1f}{r['output_tokens_per_s']:>11.0f}{r['prompt_tokens_per_s']:>14.0f}"
              f"{r['valid_json_share']:>12.2%}{r['facts_per_request']:>11.2f}")
    for name, values in ratios.items():
        print(f"ratio {name}: " + ", ".join(f"{k} {v}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
