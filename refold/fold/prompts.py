"""One prompt, one schema, one request builder for every LLM backend.

:func:`build_request` is the ONLY constructor of :class:`~refold.fold.extract.ModelRequest`: a
pure function of one event's log fields (content, kind, valid_from) and the spec's
:class:`~refold.fold.spec.ModelSpec` (template, few-shot examples, decoding parameters, model id,
fact limit). There is no parameter for other text, so nothing outside the log and the spec can
reach a model; ``refold audit`` calls it again and compares bytes.

The payload is an OpenAI chat-completions body in canonical JSON (sorted keys, compact):
``{"model", "messages", "response_format", <decoding params>}``. Gemma's chat template has no
system role, so the whole prompt is one user message: the instructions, the few-shot examples,
then the event. The shared prefix (everything before the event) is identical across events, which
is what prefix caching in vLLM and llama.cpp reuses.

``response_format`` comes in one of two wire forms, picked by the decoding parameter
``response_format`` (so it is part of the spec and of the audit):

* ``"json_schema"`` (default): OpenAI's ``{"type": "json_schema", "json_schema": {...}}``, for
  OpenAI, vLLM serve and Ray Data LLM;
* ``"json_object"``: ``{"type": "json_object", "schema": {...}}``, the only form the llama.cpp
  server (``python -m llama_cpp.server``) accepts.

The schema (:func:`fact_schema`) is the same in both.
"""

from __future__ import annotations

import json
from string import Template
from typing import Any

from refold.fold.errors import ValidationError
from refold.fold.events import Event
from refold.fold.extract import ModelRequest
from refold.fold.spec import FoldSpec, ModelSpec

__all__ = [
    "DEFAULT_FEW_SHOT", "DEFAULT_MAX_FACTS", "DEFAULT_PROMPT_TEMPLATE", "DEFAULT_PROMPT_VERSION",
    "RESPONSE_FORMATS", "build_request", "canonical_json", "default_model_spec", "fact_schema",
    "render_prompt", "response_schema",
]

#: Bump when the template, the examples or the rendering below change.
DEFAULT_PROMPT_VERSION = "facts-v1"
DEFAULT_MAX_FACTS = 4
RESPONSE_FORMATS = ("json_schema", "json_object")
#: Decoding parameters that are not sampling parameters: they select the wire form only.
_FORMAT_KEY = "response_format"

#: ``$examples``, ``$text`` and ``$max_facts`` are filled by :func:`render_prompt`. A template
#: is a :class:`string.Template`, so JSON braces in it need no escaping.
DEFAULT_PROMPT_TEMPLATE = """\
Extract the facts (subject, relation, object) that the text states. Copy subjects and objects \
from the text. Use short snake_case relations such as lives_in, works_at, likes, has_pet. \
Add valid_from (YYYY-MM-DD) only when the text states a date. Write at most $max_facts facts. \
If the text states nothing, give an empty list.

Examples:

$examples

Now the real text. Only use words from this text.

$text"""

#: (event text, JSON answer) pairs. Data, not code: they are part of the spec and its hash.
DEFAULT_FEW_SHOT: tuple[tuple[str, str], ...] = (
    ("Jon: haha yes, that was fun!", '{"facts": []}'),
    ("Bob: I work at Acme in Denver.",
     '{"facts": [{"subject": "Bob", "relation": "works_at", "object": "Acme"}, '
     '{"subject": "Acme", "relation": "located_in", "object": "Denver"}]}'),
    ("Maria lives in Lisbon. Her sister Ines is a teacher.",
     '{"facts": [{"subject": "Maria", "relation": "lives_in", "object": "Lisbon"}, '
     '{"subject": "Ines", "relation": "sister_of", "object": "Maria"}, '
     '{"subject": "Ines", "relation": "job_title", "object": "teacher"}]}'),
)

_DATE_PATTERN = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"


def fact_schema(max_items: int) -> dict[str, Any]:
    """The JSON schema of a model answer: ``{"facts": [{subject, relation, object, valid_from?}]}``.

    ``maxItems`` is not optional: small models repeat a fact until ``max_tokens`` without it.
    String lengths are capped for the same reason.
    """
    if max_items < 0:
        raise ValidationError(f"max_facts must be >= 0, got {max_items}")
    text = {"type": "string", "minLength": 1, "maxLength": 80}
    item = {
        "type": "object",
        "properties": {
            "subject": text,
            "relation": {"type": "string", "minLength": 1, "maxLength": 48},
            "object": text,
            "valid_from": {"type": "string", "pattern": _DATE_PATTERN},
        },
        "required": ["subject", "relation", "object"],
        "additionalProperties": False,
    }
    return {
        "type": "object",
        "properties": {"facts": {"type": "array", "minItems": 0, "maxItems": max_items, "items": item}},
        "required": ["facts"],
        "additionalProperties": False,
    }


def response_schema(spec: FoldSpec) -> dict[str, Any]:
    """The schema for ``spec`` (its model's ``max_facts``)."""
    return fact_schema(_model(spec).max_facts)


def default_model_spec(
    model_id: str,
    file_hash: str = "",
    *,
    prompt_version: str = DEFAULT_PROMPT_VERSION,
    prompt_template: str = DEFAULT_PROMPT_TEMPLATE,
    few_shot: tuple[tuple[str, str], ...] = DEFAULT_FEW_SHOT,
    max_tokens: int = 256,
    temperature: float = 0.0,
    seed: int = 0,
    max_facts: int = DEFAULT_MAX_FACTS,
    grounding_threshold: float = 0.6,
    response_format: str = "json_schema",
) -> ModelSpec:
    """A :class:`ModelSpec` with refold's prompt, examples and greedy decoding.

    ``model_id`` is what the engine calls the model (a Hugging Face id for vLLM, any name for
    llama.cpp); ``file_hash`` is the SHA-256 of the weights file when there is one.
    """
    if response_format not in RESPONSE_FORMATS:
        raise ValidationError(f"response_format {response_format!r}: use one of {RESPONSE_FORMATS}")
    decoding = {"max_tokens": int(max_tokens), "temperature": float(temperature), "seed": int(seed),
                _FORMAT_KEY: response_format}
    return ModelSpec(
        model_id=model_id, file_hash=file_hash, prompt_version=prompt_version,
        prompt_template=prompt_template, few_shot=tuple(tuple(p) for p in few_shot),
        decoding=tuple(sorted(decoding.items())), max_facts=max_facts,
        grounding_threshold=grounding_threshold,
    )


def render_event(event: Event) -> str:
    """The event as the prompt shows it: its text, after the source-stated date if there is one."""
    lines = []
    if event.valid_from is not None:
        lines.append(f"Date: {event.valid_from.date().isoformat()}")
    lines.append(f"Text: {event.content}")
    return "\n".join(lines) + "\nJSON:"


def render_prompt(event: Event, model: ModelSpec) -> str:
    """The user message for ``event``: template with examples, fact limit and the event filled in."""
    template = model.prompt_template or DEFAULT_PROMPT_TEMPLATE
    if "$text" not in template and "${text}" not in template:
        raise ValidationError("the prompt template must contain $text (where the event goes)")
    examples = "\n\n".join(f"Text: {text}\nJSON: {answer}" for text, answer in model.few_shot)
    try:
        return Template(template).substitute(
            examples=examples, text=render_event(event), max_facts=model.max_facts
        )
    except (KeyError, ValueError) as exc:
        raise ValidationError(
            f"prompt template has an unknown or malformed placeholder ({exc}); it may use "
            "$examples, $text and $max_facts, and $$ for a literal dollar sign"
        ) from None


def canonical_json(value: Any) -> str:
    """The one serialisation of request payloads: compact, UTF-8 kept, keys sorted.

    One exception: the members of a JSON schema's ``properties`` keep their declared order,
    because grammar-constrained decoders (llama.cpp, xgrammar) generate properties in that order
    and "subject, relation, object" reads better to a model than the alphabetical order.
    """
    return json.dumps(_ordered(value), separators=(",", ":"), ensure_ascii=False)


def _ordered(value: Any, declared: bool = False) -> Any:
    if isinstance(value, dict):
        items = value.items() if declared else sorted(value.items())
        return {k: _ordered(v, declared=not declared and k == "properties") for k, v in items}
    if isinstance(value, (list, tuple)):
        return [_ordered(v) for v in value]
    return value


def build_request(event: Event, spec: FoldSpec) -> ModelRequest:
    """The request for one event under ``spec`` (see the module docstring for the payload)."""
    model = _model(spec)
    if event.content is None:
        raise ValidationError(f"event {event.event_id} has no content (erased?); there is nothing "
                              "to send to a model")
    decoding = dict(model.decoding)
    form = decoding.pop(_FORMAT_KEY, "json_schema")
    schema = fact_schema(model.max_facts)
    if form == "json_schema":
        response_format = {"type": "json_schema",
                           "json_schema": {"name": "facts", "schema": schema, "strict": False}}
    elif form == "json_object":
        response_format = {"type": "json_object", "schema": schema}
    else:
        raise ValidationError(f"decoding response_format {form!r}: use one of {RESPONSE_FORMATS}")
    clash = sorted(set(decoding) & {"model", "messages"})
    if clash:
        raise ValidationError(f"decoding parameters may not set {clash}")
    payload = {
        **decoding,
        "model": model.model_id,
        "messages": [{"role": "user", "content": render_prompt(event, model)}],
        "response_format": response_format,
    }
    return ModelRequest(event_ids=(event.event_id,), payload=canonical_json(payload))


def _model(spec: FoldSpec) -> ModelSpec:
    if spec.model is None:
        raise ValidationError(
            f"spec for extractor {spec.extractor!r} names no model; an LLM extractor needs "
            "FoldSpec(model=default_model_spec(...))"
        )
    return spec.model
