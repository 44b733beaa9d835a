"""``vllm``: batch extraction on GPU nodes with Ray Data LLM (one vLLM engine replica per GPU set).

The pipeline is ``ray.data.llm.build_processor(vLLMEngineProcessorConfig(...), preprocess=...,
postprocess=...)``. Rows carry the recorded request payload; :func:`preprocess_row` turns it into
the engine's ``messages`` + ``sampling_params`` (decoding parameters as recorded, the fact schema
as ``structured_outputs={"json": schema}``) and :func:`postprocess_row` maps the engine's output
back through the same :func:`~refold.extractors.openai.postprocess` the HTTP adapter uses.
:func:`build_http_processor` is the same pipeline against an OpenAI-compatible server
(``HttpRequestProcessorConfig``), which is how it runs on a CPU-only machine.

Replicas are a fixed actor pool: ``concurrency=(replicas, replicas)`` (an int ``n`` would mean an
autoscaling pool of 1..n engines). Each replica uses ``tensor_parallel_size`` GPUs.

vLLM itself is imported only inside the engine actors on GPU nodes (install ``refold[vllm]``
there); building the configuration needs only ``ray[data,llm]``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from refold.fold.errors import ExtractionError
from refold.fold.extract import ModelRequest
from refold.fold.prompts import canonical_json
from refold.fold.spec import FoldSpec

from refold.extractors.llamacpp import schema_of
from refold.extractors.llm import Completion, LLMExtractor
from refold.extractors.openai import postprocess, preprocess

__all__ = [
    "VLLMExtractor", "build_http_processor", "build_processor", "build_processor_config",
    "engine_kwargs", "http_postprocess_row", "http_preprocess_row", "postprocess_row",
    "preprocess_row", "sampling_params",
]

_INSTALL_HINT = "pip install 'refold[vllm]' (GPU nodes) or 'refold[ray]' (CPU, HTTP processor)"
#: recorded decoding parameters vLLM's SamplingParams takes under the same name
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "stop",
             "presence_penalty", "frequency_penalty", "repetition_penalty")


def engine_kwargs(*, tensor_parallel_size: int = 1, enable_prefix_caching: bool = True,
                  max_model_len: int = 4096, structured_outputs_backend: str = "xgrammar",
                  extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The vLLM engine arguments refold uses (``extra`` adds or overrides)."""
    kwargs: dict[str, Any] = {
        "tensor_parallel_size": tensor_parallel_size,
        "enable_prefix_caching": enable_prefix_caching,
        "max_model_len": max_model_len,
        "structured_outputs_config": {"backend": structured_outputs_backend},
    }
    kwargs.update(extra or {})
    return kwargs


def sampling_params(body: dict[str, Any], *, structured: bool = True) -> dict[str, Any]:
    """vLLM sampling parameters for a chat-completions body (the schema as structured output)."""
    unknown = sorted(set(body) - {"model", "messages", "response_format", *_SAMPLING})
    if unknown:
        raise ExtractionError(f"request has decoding parameter(s) {unknown} that vLLM does not take")
    params = {k: body[k] for k in _SAMPLING if k in body}
    if structured and body.get("response_format") is not None:
        # as a JSON string: a nested schema would not survive Arrow's struct inference intact
        params["structured_outputs"] = {"json": canonical_json(schema_of(body["response_format"]))}
    return params


def preprocess_row(row: dict[str, Any]) -> dict[str, Any]:
    """Ray Data LLM preprocess: a row with ``request`` (payload) → ``messages``/``sampling_params``."""
    body = preprocess(ModelRequest(event_ids=(), payload=row["request"]))
    return {**row, "messages": body["messages"], "sampling_params": sampling_params(body)}


def preprocess_row_unstructured(row: dict[str, Any]) -> dict[str, Any]:
    """As :func:`preprocess_row` without the schema constraint (benchmarks only)."""
    body = preprocess(ModelRequest(event_ids=(), payload=row["request"]))
    return {**row, "messages": body["messages"], "sampling_params": sampling_params(body, structured=False)}


def postprocess_row(row: dict[str, Any]) -> dict[str, Any]:
    """Ray Data LLM postprocess: engine output → ``raw_output``/``tokens_in``/``tokens_out``."""
    response = {
        "choices": [{"message": {"content": row.get("generated_text") or ""}}],
        "usage": {"prompt_tokens": row.get("num_input_tokens") or 0,
                  "completion_tokens": row.get("num_generated_tokens") or 0},
    }
    text, tokens_in, tokens_out = postprocess(response)
    return {"row": row["row"], "request": row["request"], "raw_output": text,
            "tokens_in": tokens_in, "tokens_out": tokens_out}


def http_preprocess_row(row: dict[str, Any]) -> dict[str, Any]:
    """HTTP processor preprocess: the recorded payload as the request body."""
    return {**row, "payload": preprocess(ModelRequest(event_ids=(), payload=row["request"]))}


def http_postprocess_row(row: dict[str, Any]) -> dict[str, Any]:
    """HTTP processor postprocess: the chat completion → ``raw_output``/``tokens_in``/``tokens_out``."""
    text, tokens_in, tokens_out = postprocess(row["http_response"])
    return {"row": row["row"], "request": row["request"], "raw_output": text,
            "tokens_in": tokens_in, "tokens_out": tokens_out}


def build_processor_config(model_source: str, *, replicas: int = 1, batch_size: int = 64,
                           tensor_parallel_size: int = 1, accelerator_type: str | None = None,
                           enable_prefix_caching: bool = True, max_model_len: int = 4096,
                           structured_outputs_backend: str = "xgrammar",
                           extra_engine_kwargs: dict[str, Any] | None = None) -> Any:
    """A ``vLLMEngineProcessorConfig``: ``replicas`` engines of ``tensor_parallel_size`` GPUs each."""
    llm = _ray_llm()
    return llm.vLLMEngineProcessorConfig(
        model_source=model_source,
        engine_kwargs=engine_kwargs(tensor_parallel_size=tensor_parallel_size,
                                    enable_prefix_caching=enable_prefix_caching,
                                    max_model_len=max_model_len,
                                    structured_outputs_backend=structured_outputs_backend,
                                    extra=extra_engine_kwargs),
        concurrency=(replicas, replicas),
        batch_size=batch_size,
        accelerator_type=accelerator_type,
    )


def build_processor(config: Any, spec: FoldSpec, *, structured: bool = True) -> Any:
    """The Ray Data LLM processor for ``config``; refuses a config that runs another model."""
    _check_model(config.model_source, spec)
    return _ray_llm().build_processor(
        config, preprocess=preprocess_row if structured else preprocess_row_unstructured,
        postprocess=postprocess_row,
    )


def build_http_processor(base_url: str, *, concurrency: int = 1, batch_size: int = 8,
                         api_key: str | None = None) -> Any:
    """The same pipeline against an OpenAI-compatible server (CPU machines, vLLM serve)."""
    llm = _ray_llm()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    config = llm.HttpRequestProcessorConfig(url=f"{base_url.rstrip('/')}/chat/completions",
                                            headers=headers, concurrency=concurrency,
                                            batch_size=batch_size)
    return llm.build_processor(config, preprocess=http_preprocess_row, postprocess=http_postprocess_row)


def run_processor(processor: Any, requests: Sequence[ModelRequest]) -> list[dict[str, Any]]:
    """Run ``requests`` through a processor; the output rows in request order."""
    import ray

    ds = ray.data.from_items([{"row": i, "request": r.payload} for i, r in enumerate(requests)])
    rows = processor(ds).take_all()
    rows.sort(key=lambda r: r["row"])
    if [r["row"] for r in rows] != list(range(len(requests))):
        raise ExtractionError(f"processor returned {len(rows)} rows for {len(requests)} requests")
    return rows


class VLLMExtractor(LLMExtractor):
    """Ray Data LLM extractor; options are keyword-only (the registry passes them)."""

    name = "vllm"
    engine = "vllm"

    def __init__(self, *, model_source: str | None = None, replicas: int = 1, batch_size: int = 64,
                 tensor_parallel_size: int = 1, accelerator_type: str | None = None,
                 enable_prefix_caching: bool = True, max_model_len: int = 4096,
                 structured_outputs_backend: str = "xgrammar",
                 extra_engine_kwargs: dict[str, Any] | None = None) -> None:
        self.model_source = model_source
        self.options = dict(replicas=replicas, batch_size=batch_size,
                            tensor_parallel_size=tensor_parallel_size, accelerator_type=accelerator_type,
                            enable_prefix_caching=enable_prefix_caching, max_model_len=max_model_len,
                            structured_outputs_backend=structured_outputs_backend,
                            extra_engine_kwargs=dict(extra_engine_kwargs or {}))
        self._spec_model: str | None = None

    def default_spec(self, **model_options: Any) -> FoldSpec:
        """A FoldSpec naming ``model_source`` with refold's prompt (``json_schema`` wire form)."""
        from refold.fold.prompts import default_model_spec

        if not self.model_source:
            raise ExtractionError("the vllm extractor needs model_source= (a Hugging Face id or a "
                                  "local model folder) to build its default spec")
        return FoldSpec(extractor=self.name, model=default_model_spec(self.model_source, **model_options))

    def processor_config(self, spec: FoldSpec) -> Any:
        source = self.model_source or (spec.model.model_id if spec.model else None)
        if not source:
            raise ExtractionError("the vllm extractor needs model_source= or a spec naming a model")
        return build_processor_config(source, **self.options)

    def _check_spec(self, spec: FoldSpec) -> None:
        if self.model_source:
            _check_model(self.model_source, spec)
        self._spec_model = spec.model.model_id if spec.model else None

    def _complete_many(self, requests: Sequence[ModelRequest]) -> list[Completion]:
        spec_model = self._spec_model
        if spec_model is None:
            raise ExtractionError("internal: _complete_many called before _check_spec")
        config = build_processor_config(self.model_source or spec_model, **self.options)
        processor = _ray_llm().build_processor(config, preprocess=preprocess_row,
                                               postprocess=postprocess_row)
        started = time.perf_counter()
        rows = run_processor(processor, requests)
        total_ms = (time.perf_counter() - started) * 1000.0
        meta = (("batch_latency_ms", round(total_ms, 3)), ("batch_size", len(requests)),
                ("replicas", self.options["replicas"]))
        return [Completion(r["raw_output"], int(r["tokens_in"]), int(r["tokens_out"]),
                           total_ms / max(len(requests), 1), meta=meta) for r in rows]


def _check_model(model_source: str, spec: FoldSpec) -> None:
    named = spec.model.model_id if spec.model else None
    if named != model_source:
        raise ExtractionError(f"the processor runs {model_source!r} but the spec names {named!r}; "
                              "the spec must name the model that runs (input closure)")


def _ray_llm() -> Any:
    try:
        import ray.data.llm as llm
    except ImportError as exc:
        raise ExtractionError(f"the vllm extractor needs Ray Data LLM: {_INSTALL_HINT}") from exc
    return llm
