"""Agent tools: ``write_memory``, ``search_memory`` and ``why``, as JSON schemas and one handler.

    from refold import tools
    client.messages.create(..., tools=tools.anthropic_tools())           # Anthropic tool use
    client.chat.completions.create(..., tools=tools.openai_tools())      # OpenAI function calling
    ctx = tools.ToolContext(memory=mem, tenant="acme", principal="agent-7", trace_id="run-42")
    result = tools.handle(block.name, block.input, ctx)                  # a JSON-ready dict

The agent decides *what* to write, search and ask about; the :class:`ToolContext` (built by the
application, never by the model) decides *where*: the tenant, the principal whose access rules
apply, the source and trace recorded with every write, and who may read what the agent writes.
Input is validated against the tool's schema (JSON Schema 2020-12) and every problem is listed in
one :class:`refold.ValidationError`. A write appends a ``memory_written`` event to the log; like
everything derived, it becomes searchable after the next projection (fold).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator

from refold.fold.errors import EventValidationError, NotFoundError, ValidationError

if TYPE_CHECKING:
    from refold.memory import Memory

__all__ = ["TOOLS", "ToolContext", "anthropic_tools", "handle", "openai_tools", "tool_names"]

_NON_EMPTY = {"type": "string", "minLength": 1, "pattern": r"\S"}
_TIME = {"type": "string", "format": "date-time",
         "description": "ISO-8601 with a timezone, e.g. 2024-05-01T00:00:00+00:00"}

#: name → (description, input JSON Schema). The single source of both tool formats.
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "write_memory": (
        "Record one fact in long-term memory as (subject, relation, object), e.g. ('Alice', 'lives_in', "
        "'Berlin'). A justification is required: say why you believe it (who said it, where you read it). "
        "The write is appended to the memory log at once, but it becomes visible to search_memory only "
        "after the next projection (fold) of the log. For single-valued relations such as lives_in or "
        "works_at a newer fact supersedes the older one; the old one stays in history.",
        {
            "type": "object",
            "properties": {
                "subject": {**_NON_EMPTY, "description": "Who or what the fact is about, e.g. 'Alice'."},
                "relation": {**_NON_EMPTY, "description": "snake_case relation, e.g. lives_in, works_at, likes."},
                "object": {**_NON_EMPTY, "description": "The value, e.g. 'Berlin'."},
                "statement": {**_NON_EMPTY, "description": "The fact as a sentence, as it was stated "
                                                            "(defaults to 'subject relation object')."},
                "justification": {**_NON_EMPTY, "description": "Required: why you believe this fact."},
                "trace_id": {**_NON_EMPTY, "description": "Id of the agent run or trace that produced "
                                                          "the fact (defaults to the application's)."},
                "valid_from": {**_TIME, "description": "When the fact became true, if known (ISO-8601 "
                                                      "with a timezone)."},
            },
            "required": ["subject", "relation", "object", "justification"],
            "additionalProperties": False,
        },
    ),
    "search_memory": (
        "Search long-term memory for facts (or raw events) similar to a query. Returns current facts "
        "unless valid_at asks for another time; each result has a fact_id you can pass to why. Facts "
        "written with write_memory appear after the next projection (fold).",
        {
            "type": "object",
            "properties": {
                "query": {**_NON_EMPTY, "description": "What to look for, in plain words."},
                "k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5,
                      "description": "How many results (1-50, default 5)."},
                "kind": {"type": "string", "enum": ["facts", "events"], "default": "facts",
                         "description": "facts (default) or events (the raw texts)."},
                "valid_at": {**_TIME, "description": "Return facts that were true at this time instead "
                                                    "of current ones."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "why": (
        "Explain why memory holds a fact: its derivation and the source events (with source, trace, "
        "justification and the quoted text). Pass a fact_id from search_memory.",
        {
            "type": "object",
            "properties": {"fact_id": {**_NON_EMPTY, "description": "A fact id such as f_0123456789abcdef."}},
            "required": ["fact_id"],
            "additionalProperties": False,
        },
    ),
}


def tool_names() -> tuple[str, ...]:
    return tuple(TOOLS)


def anthropic_tools() -> list[dict[str, Any]]:
    """The tools in Anthropic's tool-use format: ``{name, description, input_schema}``."""
    return [{"name": n, "description": d, "input_schema": copy.deepcopy(s)} for n, (d, s) in TOOLS.items()]


def openai_tools() -> list[dict[str, Any]]:
    """The tools as OpenAI function schemas: ``{type: "function", function: {name, description, parameters}}``."""
    return [{"type": "function", "function": {"name": n, "description": d, "parameters": copy.deepcopy(s)}}
            for n, (d, s) in TOOLS.items()]


@dataclass(frozen=True)
class ToolContext:
    """What the application, not the model, decides for every tool call.

    ``tenant`` scopes reads and writes, and must name one: ``None`` (which would let a search
    see every tenant) or an empty name is refused with :class:`refold.ValidationError` when the
    context is built; a single-tenant application passes ``"default"``. ``principal`` is whose access rules searches obey (None:
    no principal filter, for trusted single-user agents). ``source`` and ``trace_id`` are recorded
    with writes (an input ``trace_id`` overrides the context's). ``readers`` become the written
    events' ``principals`` (empty: everyone in the tenant may read them) and ``subjects`` their
    data-subject ids (what erasure looks for). ``embedder`` is the search embedder (default MiniLM).
    """

    memory: "Memory"
    tenant: str = "default"
    principal: str | None = None
    source: str = "agent:write_memory"
    trace_id: str | None = None
    readers: tuple[str, ...] = ()
    embedder: Any = None
    subjects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not self.tenant.strip():
            raise ValidationError(
                f"ToolContext.tenant must name a tenant, got {self.tenant!r}: an agent's searches and "
                "writes are scoped to one tenant (None would search every tenant); pass tenant='default' "
                "for a single-tenant store"
            )


_VALIDATORS = {name: Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
               for name, (_, schema) in TOOLS.items()}


def _check(name: str, payload: Any) -> dict[str, Any]:
    if not isinstance(payload, Mapping):
        raise ValidationError(f"{name}: input must be a JSON object, got {type(payload).__name__}")
    payload = dict(payload)
    problems = []
    for err in sorted(_VALIDATORS[name].iter_errors(payload), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in err.path) or "input"
        if err.validator == "format":
            continue  # times are parsed below, with the same rules and words whatever is installed
        if err.validator == "pattern" or (err.validator == "minLength" and err.instance == ""):
            message = "must not be empty or blank"
        else:
            message = err.message
        problems.append(f"{where}: {message}")
    for key in ("valid_from", "valid_at"):
        # format "date-time" is only checked when rfc3339-validator is installed, and more loosely
        # than the log accepts (no range): parse ourselves, as validate_event will
        if isinstance(payload.get(key), str) and not any(p.startswith(f"{key}:") for p in problems):
            try:
                from refold.fold.events import parse_time

                payload[key] = parse_time(payload[key], line=None, name=key)
            except EventValidationError as exc:
                problems.append(f"{key}: {exc.reason}")
    if problems:
        raise ValidationError(f"{name}: invalid input ({len(problems)} problem(s)): " + "; ".join(problems))
    return payload


def _context(context: ToolContext | Mapping[str, Any]) -> ToolContext:
    if isinstance(context, ToolContext):
        return context
    if isinstance(context, Mapping) and "memory" in context:
        try:
            return ToolContext(**context)
        except TypeError as exc:
            raise ValidationError(f"bad tool context: {exc}") from exc
    raise ValidationError("context must be a ToolContext (or a dict with at least 'memory')")


def _json(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    return value


def handle(name: str, input: Mapping[str, Any], context: ToolContext | Mapping[str, Any]) -> dict[str, Any]:  # noqa: A002
    """Run one tool call and return a JSON-ready result; raise :class:`ValidationError` for bad
    input (all problems listed) and :class:`NotFoundError` for an unknown fact id."""
    if name not in TOOLS:
        raise ValidationError(f"unknown tool {name!r}; refold's tools are {', '.join(TOOLS)}")
    ctx = _context(context)
    args = _check(name, input)
    return {"write_memory": _write, "search_memory": _search, "why": _why}[name](args, ctx)


def _write(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    trace_id = args.get("trace_id") or ctx.trace_id
    if not trace_id:
        raise ValidationError("write_memory: trace_id missing; pass it in the input or set ToolContext.trace_id")
    fact = {k: args[k].strip() for k in ("subject", "relation", "object")}
    statement = args.get("statement") or f"{fact['subject']} {fact['relation'].replace('_', ' ')} {fact['object']}"
    event: dict[str, Any] = {
        "kind": "memory_written", "content": statement, "source": ctx.source, "tenant": ctx.tenant,
        "fact": fact, "justification": args["justification"].strip(), "trace_id": trace_id,
    }
    if ctx.readers:
        event["principals"] = list(ctx.readers)
    if ctx.subjects:
        event["subjects"] = list(ctx.subjects)
    if args.get("valid_from") is not None:
        event["valid_from"] = args["valid_from"].isoformat()
    try:
        from refold.fold.events import validate_event

        new = validate_event(event)
    except EventValidationError as exc:
        raise ValidationError(f"write_memory: {exc}") from exc
    [seq] = ctx.memory.append(new)
    return {"status": "recorded", "event_id": new.event_id, "seq": seq, "trace_id": trace_id,
            "note": "searchable after the next projection (fold)"}


def _search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    kind = args.get("kind", "facts")
    frame = ctx.memory.search(args["query"], k=args.get("k", 5), tenant=ctx.tenant, principal=ctx.principal,
                              valid_at=args.get("valid_at"), kind=kind, embedder=ctx.embedder,
                              trace_id=ctx.trace_id)  # a traced search is recorded (refold.replay)
    keep = (["fact_id", "subject", "relation", "object", "score", "valid_from", "valid_to"] if kind == "facts"
            else ["event_id", "kind", "source", "seq", "score", "text"])
    return {"kind": kind, "results": _json(frame.select(keep).to_dicts())}


def _why(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    from refold.fold.queries import find_edge

    fact_id = args["fact_id"].strip()
    # the principal's view: facts it may not read are absent, closings it may not see undone
    graph = ctx.memory.graph(principal=ctx.principal)
    try:
        edge = find_edge(graph, fact_id)
    except NotFoundError:
        edge = None
    # a fact of another tenant, or one the principal may not read, is reported as unknown
    if edge is None or edge["tenant"] != ctx.tenant:
        raise NotFoundError(f"why: no fact with id {fact_id!r} in this memory; use an id returned by search_memory")
    return _json(ctx.memory.why(fact_id, principal=ctx.principal))
