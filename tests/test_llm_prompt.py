"""build_request: the only way to a model, a pure and byte-stable function of (event, spec)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from refold.fold.errors import ValidationError
from refold.fold.prompts import (
    DEFAULT_FEW_SHOT, DEFAULT_PROMPT_VERSION, build_request, canonical_json, default_model_spec,
    fact_schema,
)
from refold.fold.spec import FoldSpec
from tests.test_extractor_contract import make_event

SPEC = FoldSpec(extractor="openai", model=default_model_spec("test-model", "ab" * 32))
EVENT = make_event(3, "chat_turn", "Caroline: I live in Boston.", source="chat#3")


def _body(spec: FoldSpec = SPEC, event=EVENT) -> dict:
    return json.loads(build_request(event, spec).payload)


def test_request_cites_its_event_and_is_deterministic():
    first, second = build_request(EVENT, SPEC), build_request(EVENT, SPEC)
    assert first == second
    assert first.event_ids == (EVENT.event_id,)
    assert first.request_id == second.request_id and len(first.request_id) == 24


def test_payload_is_canonical_json_with_the_declared_fields():
    request = build_request(EVENT, SPEC)
    body = json.loads(request.payload)
    assert canonical_json(body) == request.payload  # re-serialising changes no byte
    assert " " not in request.payload.split('"messages"')[0]  # compact
    assert set(body) == {"model", "messages", "response_format", "max_tokens", "temperature", "seed"}
    assert body["model"] == "test-model"
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.0, 256, 0)
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == fact_schema(SPEC.model.max_facts)
    assert [m["role"] for m in body["messages"]] == ["user"]  # Gemma has no system role


def test_schema_properties_keep_their_declared_order_for_grammar_decoders():
    schema = _body()["response_format"]["json_schema"]["schema"]
    item = schema["properties"]["facts"]["items"]
    assert list(item["properties"]) == ["subject", "relation", "object", "valid_from"]
    assert list(item) == sorted(item)  # everything else is sorted


def test_schema_bounds_the_number_of_facts():
    spec = SPEC.with_(model=replace(SPEC.model, max_facts=2))
    facts = _body(spec)["response_format"]["json_schema"]["schema"]["properties"]["facts"]
    assert (facts["minItems"], facts["maxItems"]) == (0, 2)


def test_json_object_wire_form_for_llama_cpp_server():
    spec = FoldSpec(model=default_model_spec("m", response_format="json_object"))
    response_format = _body(spec)["response_format"]
    assert response_format == {"type": "json_object", "schema": fact_schema(spec.model.max_facts)}
    # the wire-form selector is not sent as a sampling parameter
    assert set(_body(spec)) == {"model", "messages", "response_format", "max_tokens", "temperature", "seed"}


def test_few_shot_examples_and_the_event_are_in_the_payload():
    content = _body()["messages"][0]["content"]
    for text, answer in DEFAULT_FEW_SHOT:
        assert f"Text: {text}\nJSON: {answer}" in content
    assert content.endswith("Text: Caroline: I live in Boston.\nJSON:")
    # the event comes last, after the shared prefix that prefix caching reuses
    assert content.index(DEFAULT_FEW_SHOT[-1][1]) < content.index("Caroline")


def test_event_text_with_template_syntax_is_inserted_verbatim():
    event = make_event(1, "document", "Costs $text and ${max_facts} {facts} $$ 100%")
    content = _body(event=event)["messages"][0]["content"]
    assert "Text: Costs $text and ${max_facts} {facts} $$ 100%\nJSON:" in content


def test_stated_valid_time_is_shown_but_record_position_is_not():
    dated = make_event(1, "chat_turn", "Ann: I moved.", valid_from=datetime(2023, 4, 5, tzinfo=timezone.utc))
    assert "Date: 2023-04-05\nText: Ann: I moved." in _body(event=dated)["messages"][0]["content"]
    # seq, table version and record time are log positions, not content: the request ignores them
    moved = replace(EVENT, seq=99, table_version=42, recorded_at=datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert build_request(moved, SPEC).payload == build_request(EVENT, SPEC).payload


@pytest.mark.parametrize("change", [
    lambda m: replace(m, model_id="other-model"),
    lambda m: replace(m, prompt_template=m.prompt_template + "\nBe brief."),
    lambda m: replace(m, few_shot=m.few_shot[:1]),
    lambda m: replace(m, few_shot=(("Zed: I live in Oslo.", '{"facts": []}'),) + m.few_shot[1:]),
    lambda m: replace(m, decoding=tuple((k, 0.5 if k == "temperature" else v) for k, v in m.decoding)),
    lambda m: replace(m, decoding=tuple((k, 64 if k == "max_tokens" else v) for k, v in m.decoding)),
    lambda m: replace(m, max_facts=7),
], ids=["model", "template", "fewer-shots", "other-shot", "temperature", "max_tokens", "max_facts"])
def test_request_changes_when_the_spec_changes(change):
    other = SPEC.with_(model=change(SPEC.model))
    assert other.hash != SPEC.hash
    assert build_request(EVENT, other).payload != build_request(EVENT, SPEC).payload


def test_request_rebuilt_from_the_recorded_spec_is_identical():
    """The audit reads the spec back from its spec_changed event (canonical JSON)."""
    recorded = FoldSpec.from_json(json.loads(SPEC.canonical_bytes()))
    assert recorded.hash == SPEC.hash
    assert build_request(EVENT, recorded).payload == build_request(EVENT, SPEC).payload


_CHILD = """
import json, sys
from refold.fold.spec import FoldSpec
from refold.fold.prompts import build_request
from tests.test_extractor_contract import make_event
spec = FoldSpec.from_json(json.loads(sys.argv[1]))
sys.stdout.write(build_request(make_event(3, "chat_turn", sys.argv[2], source="chat#3"), spec).payload)
"""


@pytest.mark.slow
def test_request_bytes_are_identical_in_a_fresh_process():
    content = "Zoë: I live in Malmö — 東京 too. {\"x\": 1}"
    here = build_request(make_event(3, "chat_turn", content, source="chat#3"), SPEC).payload
    out = subprocess.run([sys.executable, "-c", _CHILD, SPEC.canonical_bytes().decode(), content],
                         capture_output=True, check=True, env={"PYTHONHASHSEED": "12345", "PATH": ""},
                         cwd=str(__import__("pathlib").Path(__file__).resolve().parents[1]))
    assert out.stdout.decode("utf-8") == here


def test_refuses_what_it_cannot_build():
    with pytest.raises(ValidationError, match="names no model"):
        build_request(EVENT, FoldSpec())
    with pytest.raises(ValidationError, match="no content"):
        build_request(replace(EVENT, content=None), SPEC)
    with pytest.raises(ValidationError, match=r"\$text"):
        build_request(EVENT, SPEC.with_(model=replace(SPEC.model, prompt_template="no slot")))
    with pytest.raises(ValidationError, match="placeholder"):
        build_request(EVENT, SPEC.with_(model=replace(SPEC.model, prompt_template="$text $unknown")))
    with pytest.raises(ValidationError, match="response_format"):
        default_model_spec("m", response_format="xml")


def test_default_model_spec_names_its_prompt_version_and_greedy_decoding():
    model = default_model_spec("m", "f" * 64, max_tokens=64, seed=7)
    assert model.prompt_version == DEFAULT_PROMPT_VERSION
    assert model.decoding_params == {"max_tokens": 64, "temperature": 0.0, "seed": 7,
                                     "response_format": "json_schema"}
    assert model.file_hash == "f" * 64
