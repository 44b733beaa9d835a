"""The ``openai`` adapter against a real llama.cpp server, and against a stub that misbehaves.

The stub (tests/llm_server.py) stands in only for endpoint failures a real server cannot be made
to produce on demand (garbage output, 5xx, a non-chat body); everything about real extraction
runs against ``python -m llama_cpp.server`` with the packaged model.
"""

from __future__ import annotations

import json
import pickle
import socket

import pytest

from refold.extractors import get_extractor
from refold.extractors.openai import OpenAIExtractor, postprocess, preprocess
from refold.fold.errors import ExtractionError
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request
from refold.extractors.models import DEFAULT_MODEL_ID, default_gguf_path, file_sha256
from refold.storage.cache.table import ExtractionCache
from refold.storage.layout import Layout
from tests.llm_server import free_port, llama_server, stub_server  # noqa: F401 - fixtures
from tests.test_extractor_contract import ExtractorContract, make_event

EVENTS = [
    make_event(0, "chat_turn", "Caroline: I live in Boston and I work at Acme Corp."),
    make_event(1, "document", "Melanie lives in Portland. She works for Nike."),
    make_event(2, "tool_call", "Dave: I moved to Chicago last year."),
    make_event(3, "chat_turn", "Anna is married to Tom Berg."),
    make_event(4, "observation", "The weather was fine today."),
]


def _spec(extractor: OpenAIExtractor, **options):
    options = {"response_format": "json_object", "max_tokens": 64, "max_facts": 2, **options}
    return extractor.default_spec(DEFAULT_MODEL_ID, file_hash=file_sha256(default_gguf_path()), **options)


def _stub_extractor(stub, **options) -> OpenAIExtractor:
    return OpenAIExtractor(stub.base_url, **{"max_retries": 2, "backoff_s": 0.01, "timeout": 5, **options})


# -- against a real llama.cpp server -------------------------------------------------------------

@pytest.mark.llm
@pytest.mark.slow
def test_extracts_from_a_real_llama_cpp_server(llama_server, tmp_path):
    # a generous timeout: the 2-core test machine is shared, and a timed-out request is retried
    extractor = get_extractor("openai", base_url=llama_server, model=DEFAULT_MODEL_ID, timeout=300)
    spec = _spec(extractor)
    out = extractor.extract(EVENTS, spec)
    assert [x.event_id for x in out] == [e.event_id for e in EVENTS]
    for event, x in zip(EVENTS, out):
        assert x.request == build_request(event, spec)  # what was sent is re-derivable
        assert (x.facts, x.rejected) == parse_output(x.raw_output, event, spec)
        assert x.model_id == DEFAULT_MODEL_ID and x.engine == "openai-http"
        assert x.host == socket.gethostname()
        assert x.tokens_in > 100 and x.tokens_out > 0 and x.latency_ms > 0
        meta = dict(x.meta)
        assert meta["endpoint"] == llama_server and meta["attempts"] == 1
        assert meta["file_hash"] == spec.model.file_hash and meta["prompt_version"] == spec.model.prompt_version
        assert meta["finish_reason"] in {"stop", "length"}
    assert sum(len(x.facts) for x in out) >= 1  # the weak model does find something
    # the cache keeps everything an auditor needs, unchanged
    cache = ExtractionCache(Layout(str(tmp_path / "store")))
    assert cache.put(out, seqs={e.event_id: e.seq for e in EVENTS}) == len(EVENTS)
    assert cache.get(spec.hash) == {x.event_id: x for x in out}


@pytest.mark.llm
def test_wrong_wire_form_for_the_server_is_a_clear_error(llama_server):
    extractor = OpenAIExtractor(llama_server, max_retries=0)
    spec = _spec(extractor, response_format="json_schema")  # llama.cpp's server refuses this form
    with pytest.raises(ExtractionError, match="response_format='json_object'"):
        extractor.extract(EVENTS[:1], spec)


# -- endpoint failures ---------------------------------------------------------------------------

def test_endpoint_down_is_a_clear_error_after_retries():
    extractor = OpenAIExtractor(f"http://127.0.0.1:{free_port()}/v1", max_retries=2, backoff_s=0.01, timeout=2)
    with pytest.raises(ExtractionError) as info:
        extractor.extract(EVENTS[:1], _spec(extractor))
    message = str(info.value)
    assert "cannot reach" in message and "after 3 attempts" in message
    assert "python -m llama_cpp.server" in message and "--base-url" in message


def test_garbage_output_is_a_counted_rejection_and_the_recorded_bytes_are_what_was_sent(stub_server):
    stub_server.answer_content("Sure! Here are the facts: {subject: Caroline")
    extractor = _stub_extractor(stub_server)
    spec = _spec(extractor)
    [x] = extractor.extract(EVENTS[:1], spec)
    assert stub_server.bodies == [x.request.payload.encode("utf-8")]
    assert x.facts == () and [r.reason for r in x.rejected] == ["invalid_json"]
    assert x.raw_output == "Sure! Here are the facts: {subject: Caroline"
    assert (x.tokens_in, x.tokens_out) == (11, 7)
    assert dict(x.meta)["served_model"] == "stub-model"


def test_ungrounded_output_is_rejected_not_kept(stub_server):
    stub_server.answer_content(json.dumps({"facts": [
        {"subject": "Caroline", "relation": "lives_in", "object": "Boston"},
        {"subject": "Caroline", "relation": "lives_in", "object": "Paris"}]}))
    extractor = _stub_extractor(stub_server)
    [x] = extractor.extract(EVENTS[:1], _spec(extractor))
    assert [(f.subject, f.object) for f in x.facts] == [("Caroline", "Boston")]
    assert [r.reason for r in x.rejected] == ["ungrounded"]


def test_5xx_is_retried_with_backoff(stub_server):
    stub_server.answer(503, "busy")
    stub_server.answer_content('{"facts": []}')
    extractor = _stub_extractor(stub_server)
    [x] = extractor.extract(EVENTS[:1], _spec(extractor))
    assert len(stub_server.bodies) == 2 and stub_server.bodies[0] == stub_server.bodies[1]
    assert dict(x.meta)["attempts"] == 2 and x.rejected == ()


def test_persistent_5xx_gives_up_with_the_status(stub_server):
    for _ in range(3):
        stub_server.answer(500, "boom")
    extractor = _stub_extractor(stub_server)
    with pytest.raises(ExtractionError, match="HTTP 500: boom after 3 attempts"):
        extractor.extract(EVENTS[:1], _spec(extractor))
    assert len(stub_server.bodies) == 3


def test_4xx_is_not_retried(stub_server):
    stub_server.answer(400, '{"error": "bad model"}')
    extractor = _stub_extractor(stub_server)
    with pytest.raises(ExtractionError, match="refused the request with HTTP 400"):
        extractor.extract(EVENTS[:1], _spec(extractor))
    assert len(stub_server.bodies) == 1


def test_a_body_that_is_not_a_chat_completion_is_an_error_not_a_cached_answer(stub_server):
    stub_server.answer(200, "<html>proxy login</html>")
    extractor = _stub_extractor(stub_server)
    with pytest.raises(ExtractionError, match="not a chat completion"):
        extractor.extract(EVENTS[:1], _spec(extractor))


def test_spec_for_another_model_is_refused_before_sending(stub_server):
    extractor = _stub_extractor(stub_server, model="some-other-model")
    with pytest.raises(ExtractionError, match="configured for 'some-other-model'"):
        extractor.extract(EVENTS[:1], _spec(OpenAIExtractor(stub_server.base_url)))
    assert stub_server.bodies == []


def test_options_and_pickling(stub_server):
    with pytest.raises(ExtractionError, match="needs base_url"):
        OpenAIExtractor()
    extractor = _stub_extractor(stub_server, api_key="sk-test")
    stub_server.answer_content('{"facts": []}')
    spec = _spec(extractor)
    extractor.extract(EVENTS[:1], spec)  # opens the HTTP client
    copy = pickle.loads(pickle.dumps(extractor))
    assert copy._client is None and copy.base_url == stub_server.base_url and copy.api_key == "sk-test"
    stub_server.answer_content('{"facts": []}')
    assert copy.extract(EVENTS[:1], spec)[0].request == build_request(EVENTS[0], spec)


def test_fold_caches_llm_extractions_and_the_audit_rederives_every_request(mem, stub_server):
    """End to end through the store: fold with the HTTP adapter, then `refold audit`."""
    mem.append([{"kind": "chat_turn", "content": f"Ann: I live in Oslo, flat {i}.", "source": f"chat#{i}"}
                for i in range(3)])
    for _ in range(3):
        stub_server.answer_content(json.dumps({"facts": [
            {"subject": "I", "relation": "lives_in", "object": "Oslo"},
            {"subject": "Ann", "relation": "lives_in", "object": "Paris"}]}))
    extractor = _stub_extractor(stub_server, model="stub-model")
    spec = extractor.default_spec(max_tokens=32)
    report = mem.fold(extractor=extractor, spec=spec)
    assert report.extraction_calls == 3 and report.rejected_outputs == 3  # one "Paris" per event
    cached = mem.cache.get(spec.hash)
    assert sorted(x.request.payload.encode() for x in cached.values()) == sorted(stub_server.bodies)
    assert {(f.subject, f.relation, f.object) for x in cached.values() for f in x.facts} == {("Ann", "lives_in", "Oslo")}
    audit = mem.audit()
    assert audit.ok and audit.requests == 3


def test_default_spec_records_the_configured_wire_form():
    extractor = get_extractor("openai", base_url="http://unused/v1", model="served",
                              response_format="json_object")
    spec = extractor.default_spec(max_tokens=32)
    assert spec.extractor == "openai" and spec.model.model_id == "served"
    assert spec.model.decoding_params["response_format"] == "json_object"
    assert json.loads(build_request(EVENTS[0], spec).payload)["response_format"]["type"] == "json_object"
    assert OpenAIExtractor("http://unused/v1").default_spec("m").model.decoding_params["response_format"] == "json_schema"
    with pytest.raises(ExtractionError, match="name the served model"):
        OpenAIExtractor("http://unused/v1").default_spec()


def test_preprocess_and_postprocess_are_the_shared_mapping():
    spec = _spec(OpenAIExtractor("http://unused/v1"))
    request = build_request(EVENTS[0], spec)
    assert preprocess(request) == json.loads(request.payload)
    response = {"choices": [{"message": {"content": '{"facts": []}'}}], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    assert postprocess(response) == ('{"facts": []}', 5, 3)
    assert postprocess({"choices": [{"message": {"content": None}}]}) == ("", 0, 0)
    with pytest.raises(ValueError, match="not a chat completion"):
        postprocess({"error": "x"})


class TestOpenAIContract(ExtractorContract):
    """The port's contract for the HTTP adapter, against a stub answering every request with no
    facts (port plumbing: order, spec hash, pickling); model behaviour is tested above."""

    deterministic = True

    @pytest.fixture
    def extractor(self, stub_server):
        for _ in range(64):
            stub_server.answer(200, {"choices": [{"message": {"content": '{"facts": []}'}}],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
        return _stub_extractor(stub_server)

    @pytest.fixture
    def spec(self, extractor):
        return extractor.default_spec("stub-model")
