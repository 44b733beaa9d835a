"""CPU end to end of the GPU pipeline: Ray Data LLM against a real llama.cpp server.

The vLLM pipeline with its engine swapped for ``HttpRequestProcessorConfig`` pointed at
``python -m llama_cpp.server`` running the packaged Gemma 3 270M (the shared fixture in
tests/llm_server.py): recorded requests in, the shared parser out, every batch cached where it
was parsed, then the fold. Nothing is mocked; ``max_tokens`` is low to keep it fast.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

import refold
from refold.extractors.openai import OpenAIExtractor
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request
from refold.jobs.ray_llm import http_processor, http_runner
from refold.extractors.models import DEFAULT_MODEL_ID, default_gguf_path, file_sha256
from tests.llm_server import llama_server  # noqa: F401 - fixture

pytestmark = [pytest.mark.ray, pytest.mark.llm, pytest.mark.slow]


@pytest.fixture(scope="session")
def ray_session():
    from refold.jobs.ray_extract import ensure_ray

    ensure_ray()
    import ray

    return ray


def _sample(n: int) -> list[dict]:
    text = resources.files("refold").joinpath("data/sample_events.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()][:n]


@pytest.fixture(scope="module")
def spec(llama_server):
    extractor = OpenAIExtractor(llama_server, model=DEFAULT_MODEL_ID)
    # json_object: the wire form the llama.cpp server takes; one fact, 48 tokens keep it fast
    return extractor.default_spec(file_hash=file_sha256(default_gguf_path()), max_tokens=48,
                                  max_facts=1, response_format="json_object")


def test_processor_is_the_http_llm_pipeline(ray_session, llama_server):
    processor = http_processor(llama_server, batch_size=4, concurrency=1)
    stage = processor.get_stage_by_name("HttpRequestStage")
    assert stage.fn_constructor_kwargs["url"] == f"{llama_server}/chat/completions"
    assert processor.preprocess is not None and processor.postprocess is not None


def test_http_pipeline_extracts_caches_and_folds(ray_session, llama_server, spec, tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_sample(20))
    runner = http_runner(llama_server, spec, cache=mem.cache, batch_size=4, progress=False)
    extractor = OpenAIExtractor(llama_server, model=DEFAULT_MODEL_ID)
    report = mem.fold(extractor=extractor, spec=spec, runner=runner)

    events = {e.event_id: e for e in mem.events()}
    extractable = [e for e in events.values() if e.kind != "spec_changed" and e.content is not None]
    assert report.extraction_calls == len(extractable)
    assert runner.last.calls >= 10  # the model answered the free-text events over HTTP
    rows = mem.cache.frame()
    assert rows.height == rows["event_id"].n_unique() == len(extractable)

    model_rows = rows.filter(rows["engine"] == "openai-http")
    assert model_rows.height == runner.last.calls
    cached = mem.cache.get(spec.hash)
    for row in model_rows.iter_rows(named=True):
        event = events[row["event_id"]]
        # the exact bytes the audit re-derives from log + spec, and the shared parser's verdict
        assert row["request"] == build_request(event, spec).payload
        assert row["tokens_in"] > 50 and row["tokens_out"] > 0
        assert json.loads(row["meta"])["pipeline"] == "ray.data.llm:http"
        facts, rejected = parse_output(row["raw_output"], event, spec)
        assert cached[event.event_id].facts == facts and cached[event.event_id].rejected == rejected
    assert report.rejected_outputs == runner.last.rejected
    assert mem.audit().ok

    # the fold used them: facts from the memory_written events at least, and every fact traced
    facts = mem.facts()
    assert facts.height >= 1
    assert all(set(s) <= set(events) for s in facts["sources"].to_list())

    # nothing missing any more: a second fold makes no model call
    again = http_runner(llama_server, spec, cache=mem.cache, progress=False)
    assert mem.fold(extractor=extractor, spec=spec, runner=again).extraction_calls == 0


def test_pipeline_rows_equal_the_in_process_adapter(ray_session, llama_server, spec, tmp_path):
    """Same server, same requests, greedy decoding: the Ray pipeline's cache rows are the ones the
    ``openai`` adapter writes in process (raw output, facts, rejections, tokens)."""
    mem = refold.init(tmp_path / "store")
    mem.append([e for e in _sample(32) if e["kind"] in ("chat_turn", "document")][:2])
    events = mem.events()
    runner = http_runner(llama_server, spec, progress=False)
    via_ray = runner(events)
    in_process = OpenAIExtractor(llama_server, model=DEFAULT_MODEL_ID).extract(events, spec)
    for a, b in zip(via_ray, in_process):
        assert (a.event_id, a.request, a.raw_output, a.facts, a.rejected) == \
            (b.event_id, b.request, b.raw_output, b.facts, b.rejected)
        assert (a.tokens_in, a.tokens_out, a.engine, a.model_id) == (b.tokens_in, b.tokens_out, b.engine, b.model_id)
