"""The ``vllm`` adapter's Ray Data LLM processor, configured as intended, without a GPU.

vLLM cannot be installed here (CUDA only). What can be checked without it is checked for real:
the ``vLLMEngineProcessorConfig`` (a pydantic model from ``ray.data.llm``), the processor Ray
builds from it (stages, engine kwargs, actor pools, accelerator), and the row functions that turn
recorded requests into engine inputs and engine outputs into extractions. The only stand-in is the
engine's output row in the postprocess test (the keys vLLM's stage emits: ``generated_text``,
``num_input_tokens``, ``num_generated_tokens``). The same pipeline over HTTP runs for real against
the llama.cpp server.
"""

from __future__ import annotations

import json
import os

import pytest

from refold.extractors import get_extractor
from refold.extractors.vllm import (
    VLLMExtractor, build_processor, build_processor_config, engine_kwargs, http_postprocess_row,
    http_preprocess_row, postprocess_row, preprocess_row, preprocess_row_unstructured,
    run_processor, sampling_params,
)
from refold.fold.errors import ExtractionError
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request, canonical_json, default_model_spec, fact_schema
from refold.fold.spec import FoldSpec
from refold.extractors.models import DEFAULT_MODEL_ID, default_gguf_path, file_sha256
from tests.llm_server import llama_server  # noqa: F401 - fixture
from tests.test_extractor_contract import make_event

MODEL = "google/gemma-3-270m-it"
SPEC = FoldSpec(extractor="vllm", model=default_model_spec(MODEL, max_facts=3, max_tokens=128, seed=5))
EVENT = make_event(0, "chat_turn", "Caroline: I live in Boston.")
REQUEST = build_request(EVENT, SPEC)


def test_engine_kwargs_carry_parallelism_caching_length_and_structured_output_backend():
    assert engine_kwargs(tensor_parallel_size=4, enable_prefix_caching=False, max_model_len=2048,
                         structured_outputs_backend="guidance", extra={"gpu_memory_utilization": 0.8}) == {
        "tensor_parallel_size": 4, "enable_prefix_caching": False, "max_model_len": 2048,
        "structured_outputs_config": {"backend": "guidance"}, "gpu_memory_utilization": 0.8,
    }


def test_processor_config_one_fixed_engine_pool_per_replica():
    config = build_processor_config(MODEL, replicas=4, batch_size=32, tensor_parallel_size=2,
                                    accelerator_type="H100", enable_prefix_caching=True, max_model_len=4096)
    assert type(config).__module__ == "ray.data.llm" and type(config).__name__ == "vLLMEngineProcessorConfig"
    assert config.model_source == MODEL
    assert config.batch_size == 32 and config.accelerator_type == "H100"
    assert config.concurrency == (4, 4)
    assert config.get_concurrency() == {"min_size": 4, "max_size": 4}  # fixed: one engine per GPU set
    assert config.engine_kwargs == {
        "tensor_parallel_size": 2, "enable_prefix_caching": True, "max_model_len": 4096,
        "structured_outputs_config": {"backend": "xgrammar"}, "task_type": "generate",
    }
    assert config.should_continue_on_error is False  # a failed row fails the batch: nothing cached


def test_sampling_params_are_the_recorded_decoding_plus_the_schema():
    body = json.loads(REQUEST.payload)
    params = sampling_params(body)
    assert params == {"temperature": 0.0, "max_tokens": 128, "seed": 5,
                      "structured_outputs": {"json": canonical_json(fact_schema(3))}}
    assert "structured_outputs" not in sampling_params(body, structured=False)
    with pytest.raises(ExtractionError, match="logit_bias"):
        sampling_params({**body, "logit_bias": {}})


def test_preprocess_row_feeds_the_engine_the_recorded_messages():
    row = preprocess_row({"row": 0, "request": REQUEST.payload})
    assert row["messages"] == json.loads(REQUEST.payload)["messages"]
    assert json.loads(row["sampling_params"]["structured_outputs"]["json"]) == fact_schema(3)
    assert row["request"] == REQUEST.payload and row["row"] == 0
    assert "structured_outputs" not in preprocess_row_unstructured({"row": 0, "request": REQUEST.payload})["sampling_params"]


def test_postprocess_row_maps_engine_output_through_the_shared_parser_inputs():
    engine_row = {"row": 0, "request": REQUEST.payload, "num_input_tokens": 240, "num_generated_tokens": 19,
                  "generated_text": '{"facts": [{"subject": "Caroline", "relation": "lives_in", "object": "Boston"}]}'}
    out = postprocess_row(engine_row)
    assert out == {"row": 0, "request": REQUEST.payload, "raw_output": engine_row["generated_text"],
                   "tokens_in": 240, "tokens_out": 19}
    facts, rejected = parse_output(out["raw_output"], EVENT, SPEC)
    assert [(f.subject, f.relation, f.object) for f in facts] == [("Caroline", "lives_in", "Boston")]


def test_http_rows_send_the_recorded_body():
    row = http_preprocess_row({"row": 3, "request": REQUEST.payload})
    assert row["payload"] == json.loads(REQUEST.payload)
    out = http_postprocess_row({**row, "http_response": {
        "choices": [{"message": {"content": '{"facts": []}'}}], "usage": {"prompt_tokens": 9, "completion_tokens": 4}}})
    assert (out["row"], out["raw_output"], out["tokens_in"], out["tokens_out"]) == (3, '{"facts": []}', 9, 4)


def test_processor_for_another_model_than_the_spec_is_refused():
    config = build_processor_config("some/other-model")
    with pytest.raises(ExtractionError, match="spec names 'google/gemma-3-270m-it'"):
        build_processor(config, SPEC)
    extractor = VLLMExtractor(model_source="some/other-model")
    with pytest.raises(ExtractionError, match="input closure"):
        extractor.extract([EVENT], SPEC)


def test_registry_builds_the_extractor_without_touching_a_gpu():
    extractor = get_extractor("vllm", replicas=2, tensor_parallel_size=2, accelerator_type="L4", batch_size=16)
    assert isinstance(extractor, VLLMExtractor)
    config = extractor.processor_config(SPEC)
    assert config.model_source == MODEL and config.concurrency == (2, 2)
    assert config.engine_kwargs["tensor_parallel_size"] == 2 and config.accelerator_type == "L4"
    import pickle

    assert pickle.loads(pickle.dumps(extractor)).options == extractor.options


def test_default_spec_names_the_model_source():
    spec = VLLMExtractor(model_source=MODEL).default_spec(max_facts=3, max_tokens=128, seed=5)
    assert spec.hash == SPEC.hash  # same model, prompt and decoding: the same spec
    with pytest.raises(ExtractionError, match="needs model_source"):
        VLLMExtractor().default_spec()


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


@pytest.mark.ray
@pytest.mark.slow
def test_ray_builds_the_vllm_processor_as_configured(local_ray):
    config = build_processor_config(MODEL, replicas=2, batch_size=16, tensor_parallel_size=2,
                                    accelerator_type="H100", enable_prefix_caching=False)
    processor = build_processor(config, SPEC)
    assert processor.list_stage_names() == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage",
                                            "DetokenizeStage"]
    engine = processor.get_stage_by_name("vLLMEngineStage")
    assert engine.fn_constructor_kwargs["model"] == MODEL
    assert engine.fn_constructor_kwargs["batch_size"] == 16
    kwargs = engine.fn_constructor_kwargs["engine_kwargs"]
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["enable_prefix_caching"] is False
    assert kwargs["structured_outputs_config"] == {"backend": "xgrammar"}
    pool = engine.map_batches_kwargs["compute"]
    assert (pool.min_size, pool.max_size) == (2, 2)
    assert engine.map_batches_kwargs["accelerator_type"] == "H100"
    assert processor.preprocess is not None and processor.postprocess is not None


@pytest.mark.ray
@pytest.mark.llm
@pytest.mark.slow
def test_same_pipeline_over_http_against_a_real_llama_cpp_server(local_ray, llama_server):
    """The GPU pipeline's CPU twin: Ray Data LLM's HTTP processor, same row functions, real model."""
    from refold.extractors.vllm import build_http_processor

    spec = FoldSpec(extractor="openai", model=default_model_spec(
        DEFAULT_MODEL_ID, file_sha256(default_gguf_path()), max_tokens=48, max_facts=1,
        response_format="json_object"))
    events = [make_event(0, "chat_turn", "Dave: I moved to Chicago last year."),
              make_event(1, "document", "Melanie lives in Portland.")]
    requests = [build_request(e, spec) for e in events]
    rows = run_processor(build_http_processor(llama_server, concurrency=1, batch_size=2), requests)
    assert [r["request"] for r in rows] == [r.payload for r in requests]
    for event, row in zip(events, rows):
        assert row["tokens_in"] > 100 and row["tokens_out"] > 0
        facts, rejected = parse_output(row["raw_output"], event, spec)
        assert len(facts) + len(rejected) >= 1  # the model answered something the parser judged


@pytest.mark.slow
def test_gpu_benchmark_plans_without_vllm():
    """benchmarks/gpu_extract.py must --help and --dry-run on a machine without vLLM."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_extract.py"
    out = subprocess.run([sys.executable, str(script), "--dry-run", "--quick", "--tp", "2"],
                         capture_output=True, text=True, check=True).stdout
    assert "plan: 128 requests" in out and out.count("  run: ") == 4
    assert '"tensor_parallel_size": 2' in out and '"structured_outputs"' in out
