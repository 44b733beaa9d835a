"""``refold fold --ray --extractor vllm``: one Ray Data LLM processor over all events, configured
as intended, its answers parsed into cache rows — checked without a GPU.

vLLM cannot run here (CUDA only). Ray builds the real processor from the real
``vLLMEngineProcessorConfig``; the one stand-in is the engine's output row fed to the caching
stage (the keys vLLM's stage emits: ``generated_text``, ``num_input_tokens``,
``num_generated_tokens``), as in tests/test_llm_vllm.py.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import refold
from refold.extractors.vllm import VLLMExtractor, postprocess_row, preprocess_row
from refold.fold.errors import ExtractionError
from refold.fold.prompts import build_request, default_model_spec
from refold.fold.spec import FoldSpec
from refold.jobs.ray_extract import ray_runner
from refold.jobs.ray_llm import ProcessorRunner, _engine_post, _engine_pre, _parse_batch

MODEL = "google/gemma-3-270m-it"
SPEC = FoldSpec(extractor="vllm", model=default_model_spec(MODEL, max_facts=3, max_tokens=128))
OPTIONS = {"model_source": MODEL, "replicas": 2, "batch_size": 16, "tensor_parallel_size": 2,
           "accelerator_type": "L4"}


@pytest.fixture(scope="session")
def ray_session():
    from refold.jobs.ray_extract import ensure_ray

    ensure_ray()
    import ray

    return ray


def test_vllm_goes_to_one_processor_not_an_actor_pool_of_engines():
    runner = ray_runner("vllm", OPTIONS, spec=SPEC, progress=False)
    assert isinstance(runner, ProcessorRunner)
    assert runner.pipeline == "ray.data.llm:vllm" and runner.batch_size == 16
    with pytest.raises(ExtractionError, match="spec names"):
        ray_runner("vllm", {**OPTIONS, "model_source": "other/model"}, spec=SPEC)
    with pytest.raises(ExtractionError, match="naming the model"):
        ray_runner("vllm", OPTIONS, spec=FoldSpec(extractor="vllm"))


@pytest.mark.ray
@pytest.mark.slow
def test_processor_is_built_as_configured(ray_session):
    processor = ray_runner("vllm", OPTIONS, spec=SPEC, progress=False).make_processor()
    assert processor.list_stage_names() == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage",
                                            "DetokenizeStage"]
    engine = processor.get_stage_by_name("vLLMEngineStage")
    assert engine.fn_constructor_kwargs["model"] == MODEL
    assert engine.fn_constructor_kwargs["batch_size"] == 16
    assert engine.fn_constructor_kwargs["engine_kwargs"]["tensor_parallel_size"] == 2
    pool = engine.map_batches_kwargs["compute"]
    assert (pool.min_size, pool.max_size) == (2, 2)  # one fixed engine replica per GPU set
    assert engine.map_batches_kwargs["accelerator_type"] == "L4"


def test_rows_carry_the_event_through_the_shared_row_functions(mem):
    mem.append({"kind": "chat_turn", "content": "Caroline: I live in Boston.", "source": "chat#1"})
    (event,) = mem.events()
    row = {"row": 0, "request": build_request(event, SPEC).payload, "event": pickle.dumps(event)}
    pre = _engine_pre(row)
    assert pre == preprocess_row(row)  # the vllm adapter's own preprocess, event kept
    engine_out = {**pre, "generated_text": '{"facts": [{"subject": "Caroline", "relation": "lives_in", '
                                           '"object": "Boston"}]}',
                  "num_input_tokens": 300, "num_generated_tokens": 20}
    post = _engine_post(engine_out)
    assert {k: v for k, v in post.items() if k != "event"} == postprocess_row(engine_out)
    assert pickle.loads(post["event"]) == event


def test_parse_stage_builds_the_adapters_extractions(mem):
    mem.append([{"kind": "chat_turn", "content": "Caroline: I live in Boston.", "source": "chat#1"},
                {"kind": "document", "content": "Melanie works at Acme.", "source": "doc#1"}])
    events = mem.events()
    answers = ['{"facts": [{"subject": "Caroline", "relation": "lives_in", "object": "Boston"}]}',
               'not json at all']
    batch = pa.Table.from_pylist([
        {"row": i, "request": build_request(e, SPEC).payload, "event": pickle.dumps(e),
         "raw_output": text, "tokens_in": 300, "tokens_out": 20}
        for i, (e, text) in enumerate(zip(events, answers))
    ])
    out = _parse_batch(batch, extractor=VLLMExtractor(**OPTIONS), spec=SPEC, pipeline="ray.data.llm:vllm")
    assert out["seq"].to_pylist() == [e.seq for e in events]
    assert out["calls"].to_pylist() == [1, 1] and out["rejected"].to_pylist() == [0, 1]
    first, second = (pickle.loads(b) for b in out["extraction"].to_pylist())
    assert [(f.subject, f.relation, f.object) for f in first.facts] == [("Caroline", "lives_in", "Boston")]
    assert first.engine == "vllm" and first.model_id == MODEL and first.tokens_in == 300
    assert dict(first.meta)["pipeline"] == "ray.data.llm:vllm"
    assert first.request.payload == build_request(events[0], SPEC).payload
    assert second.facts == () and second.rejected[0].reason == "invalid_json"
    assert second.raw_output == "not json at all"  # kept for audit
