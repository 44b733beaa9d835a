"""Ray Data LLM pipelines as fold runners: one processor over every missing event.

The GPU path (``vllm``) and its CPU twin (any OpenAI-compatible server, e.g. ``llama_cpp.server``)
are the same pipeline::

    events ─► rows {request payload, event} ─► build_processor(config, preprocess, postprocess)
           ─► map_batches(parse) ─► driver: cache put every 512 extractions / 5 s ─► the fold

* the request is built by :func:`refold.fold.prompts.build_request` on the driver (the exact bytes
  the audit re-derives); preprocess/postprocess are the shared row functions of
  :mod:`refold.extractors.vllm` (``vLLMEngineProcessorConfig``) or their HTTP twins
  (``HttpRequestProcessorConfig``), wrapped only to carry the event along;
* answers are parsed in Ray tasks by the shared parser (through the adapter's own extraction
  builder, so the cache rows are those the in-process adapter would write), and the driver writes
  them to the cache while the run goes (every 512 extractions or 5 s): ``ExtractionCache.put`` is
  idempotent, so a retried batch or a resubmitted job adds no rows and redoes only what is missing;
* events that need no model (``memory_written`` facts, erased content, refold's own kinds) are
  answered on the driver exactly as the adapter answers them.

``host`` in these extractions is the node that parsed the answer; ``meta`` names the pipeline and,
for HTTP, the endpoint (the recipient of the text, for erasure receipts).
"""

from __future__ import annotations

import pickle
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from refold.fold.errors import ExtractionError
from refold.fold.events import Event
from refold.fold.extract import Extraction, ModelRequest
from refold.fold.spec import FoldSpec

from refold.jobs.ray_stream import CacheWriter, RunStats, drain, ensure_ray

__all__ = ["ProcessorRunner", "http_processor", "http_runner", "vllm_runner"]


# -- row functions (module level: Ray pickles them by reference) -----------------------------------

def _http_pre(row: dict[str, Any]) -> dict[str, Any]:
    from refold.extractors.vllm import http_preprocess_row

    return http_preprocess_row(row)  # keeps every column, the event included


def _http_post(row: dict[str, Any]) -> dict[str, Any]:
    from refold.extractors.vllm import http_postprocess_row

    return {**http_postprocess_row(row), "event": row["event"]}


def _engine_pre(row: dict[str, Any]) -> dict[str, Any]:
    from refold.extractors.vllm import preprocess_row

    return preprocess_row(row)


def _engine_post(row: dict[str, Any]) -> dict[str, Any]:
    from refold.extractors.vllm import postprocess_row

    return {**postprocess_row(row), "event": row["event"]}


def http_processor(base_url: str, *, batch_size: int = 8, concurrency: int = 1, qps: int | None = None,
                   max_retries: int = 3, api_key: str | None = None) -> Any:
    """The Ray Data LLM processor for an OpenAI-compatible ``base_url`` (``.../v1``).

    ``HttpRequestProcessorConfig`` + ``build_processor`` with refold's shared request/response
    mapping; rows need ``request`` (the recorded payload), ``row`` and ``event`` columns.
    """
    try:
        import ray.data.llm as llm
    except ImportError as exc:
        raise ExtractionError(f"Ray Data LLM is missing ({exc}): pip install 'refold[ray]'") from exc
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    config = llm.HttpRequestProcessorConfig(
        url=f"{base_url.rstrip('/')}/chat/completions", headers=headers, batch_size=batch_size,
        concurrency=concurrency, qps=qps, max_retries=max_retries)
    return llm.build_processor(config, preprocess=_http_pre, postprocess=_http_post)


def _parse_batch(batch, *, extractor, spec: FoldSpec, pipeline: str):
    """Parse a batch of answers into extractions with the adapter's own builder (Ray tasks)."""
    import pyarrow as pa

    from refold.extractors.llm import Completion

    host = socket.gethostname()
    events, out = [], []
    for row in batch.to_pylist():
        event: Event = pickle.loads(row["event"])
        request = ModelRequest(event_ids=(event.event_id,), payload=row["request"])
        completion = Completion(row["raw_output"], int(row["tokens_in"] or 0),
                                int(row["tokens_out"] or 0), meta=(("pipeline", pipeline),))
        events.append(event)
        out.append(extractor.from_completion(event, spec, request, completion, host))
    return pa.table({
        "extraction": [pickle.dumps(x) for x in out],
        "seq": [e.seq for e in events],
        "calls": [1] * len(out),
        "rejected": [len(x.rejected) for x in out],
    })


@dataclass
class ProcessorRunner:
    """A fold ``runner`` that sends every event needing a model through one Ray Data LLM processor.

    ``make_processor`` builds the processor (on the driver, once per call); ``extractor`` is the
    adapter whose extraction builder turns answers into cache rows (``OpenAIExtractor`` for HTTP,
    ``VLLMExtractor`` for the engine). Parsing runs in Ray tasks; the driver writes the cache
    while the run goes (:class:`~refold.jobs.ray_stream.CacheWriter`).
    """

    make_processor: Callable[[], Any]
    extractor: Any
    spec: FoldSpec
    pipeline: str
    cache: Any | None = None
    address: str | None = None
    progress: bool = True
    batch_size: int = 8
    flush_events: int = 512
    flush_seconds: float = 5.0
    last: RunStats = field(default_factory=RunStats)

    def resolved_spec(self) -> FoldSpec:
        return self.spec

    def __call__(self, events: Sequence[Event]) -> list[Extraction]:
        from refold.fold.prompts import build_request

        events = list(events)
        started = time.monotonic()
        host = socket.gethostname()
        direct: dict[str, Extraction] = {}
        rows = []
        for event in dict((e.event_id, e) for e in events).values():
            answer = self.extractor.without_model(event, self.spec, host)
            if answer is not None:
                direct[event.event_id] = answer
            else:
                rows.append({"row": len(rows), "request": build_request(event, self.spec).payload,
                             "event": pickle.dumps(event)})
        stats = RunStats(events=len(events))
        writer = CacheWriter(self.cache, every_events=self.flush_events, every_seconds=self.flush_seconds)
        writer.add(list(direct.values()), {e.event_id: e.seq for e in events if e.event_id in direct})
        found = dict(direct)
        if rows:
            ensure_ray(self.address)
            import ray

            ds = self.make_processor()(ray.data.from_items(rows))
            ds = ds.map_batches(_parse_batch, batch_size=self.batch_size, batch_format="pyarrow",
                                num_cpus=0.25, fn_kwargs={"extractor": self.extractor, "spec": self.spec,
                                                          "pipeline": self.pipeline})
            found.update(drain(ds, total=len(events), label=f"extracting ({self.pipeline})",
                               progress=self.progress, writer=writer, stats=stats,
                               done=len(events) - len(rows)))
        else:
            writer.flush()
            stats.rows_inserted, stats.cache_writes = writer.inserted, writer.writes
        stats.seconds = time.monotonic() - started
        self.last = stats
        missing = [e.event_id for e in events if e.event_id not in found]
        if missing:
            raise ExtractionError(f"the {self.pipeline} pipeline returned nothing for {len(missing)} "
                                  f"event(s) (first: {missing[0]}); run the fold again to retry them")
        return [found[e.event_id] for e in events]


def http_runner(base_url: str, spec: FoldSpec, *, cache: Any | None = None, address: str | None = None,
                progress: bool = True, batch_size: int = 8, concurrency: int = 1,
                qps: int | None = None, max_retries: int = 3, api_key: str | None = None,
                flush_events: int = 512, flush_seconds: float = 5.0) -> ProcessorRunner:
    """A runner over an OpenAI-compatible server through ``HttpRequestProcessorConfig``.

    Extractions are those of the ``openai`` adapter for the same server (same requests, same
    parser, same cache rows); ``spec`` must be an ``openai`` spec naming the served model.
    """
    from refold.extractors.openai import OpenAIExtractor

    return ProcessorRunner(
        make_processor=lambda: http_processor(base_url, batch_size=batch_size, concurrency=concurrency,
                                              qps=qps, max_retries=max_retries, api_key=api_key),
        extractor=OpenAIExtractor(base_url, api_key=api_key), spec=spec,
        pipeline="ray.data.llm:http", cache=cache, address=address, progress=progress,
        batch_size=batch_size, flush_events=flush_events, flush_seconds=flush_seconds)


def vllm_runner(options: dict[str, Any], spec: FoldSpec, *, cache: Any | None = None,
                address: str | None = None, progress: bool = True, flush_events: int = 512,
                flush_seconds: float = 5.0) -> ProcessorRunner:
    """A runner over vLLM engines (``vLLMEngineProcessorConfig``; GPU nodes, ``refold[vllm]``).

    ``options`` are the ``vllm`` adapter's (model_source, replicas, batch_size,
    tensor_parallel_size, accelerator_type, ...); ``spec`` must name the model that runs.
    """
    from refold.extractors.vllm import VLLMExtractor, build_processor_config

    extractor = VLLMExtractor(**options)
    config = extractor.processor_config(spec)
    named = spec.model.model_id if spec.model else None
    if named != config.model_source:  # input closure: the spec names the model that runs
        raise ExtractionError(f"the vllm engines would run {config.model_source!r} but the spec names "
                              f"{named!r}; build the spec for that model")

    def make() -> Any:
        import ray.data.llm as llm

        return llm.build_processor(build_processor_config(config.model_source, **extractor.options),
                                   preprocess=_engine_pre, postprocess=_engine_post)

    return ProcessorRunner(make_processor=make, extractor=extractor, spec=spec,
                           pipeline="ray.data.llm:vllm", cache=cache, address=address,
                           progress=progress, batch_size=int(extractor.options["batch_size"]),
                           flush_events=flush_events, flush_seconds=flush_seconds)
