"""Agent tools: ``write_memory``, ``retract_memory``, ``search_memory``, ``memory_as_of`` and
``why``, as JSON schemas and one handler.

    from refold.agent import tools
    client.messages.create(..., tools=tools.anthropic_tools())           # Anthropic tool use
    client.chat.completions.create(..., tools=tools.openai_tools())      # OpenAI function calling
    tools.mcp_tools()                                                    # MCP tools/list entries
    ctx = tools.ToolContext(memory=mem, tenant="acme", principal="agent-7")
    result = tools.handle(block.name, block.input, ctx)                  # a JSON-ready dict

:data:`TOOLS` is the one source of every form: the Anthropic, OpenAI and MCP lists are generated
from it (``refold mcp STORE`` serves the same schemas, see :mod:`refold.agent.mcp_server`).

The agent decides *what* to write, retract, search and ask about; the :class:`ToolContext` (built
by the application, never by the model) decides *where*: the tenant, the principal whose access
rules apply, the source recorded with every write, and who may read what the agent writes. Every
write (``write_memory``, ``retract_memory``) must carry a justification and the trace id of the
agent run that made it; the schemas mark both required. Input is validated against the tool's
schema (JSON Schema 2020-12) and every problem is listed in one :class:`refold.ValidationError`.
A write appends a ``memory_written`` event to the log and a retraction a ``retraction`` event
(which closes the fact: it gets a ``valid_to`` and stays in history); like everything derived,
every read sees them at once (they state their fact: no extraction needed; docs/fold.md, "Reads").
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

__all__ = ["READ_ONLY", "TOOLS", "ToolContext", "anthropic_tools", "handle", "mcp_tools", "openai_tools", "tool_names"]

_NON_EMPTY = {"type": "string", "minLength": 1, "pattern": r"\S"}
_TIME = {"type": "string", "format": "date-time",
         "description": "ISO-8601 with a timezone, e.g. 2024-05-01T00:00:00+00:00"}
_JUSTIFICATION = {**_NON_EMPTY, "description": "Required: why you believe this (who said it, where you read it)."}
_TRACE = {**_NON_EMPTY, "description": "Required: the id of your agent run or trace, recorded with the write "
                                       "so that an auditor can find every write of one run."}
_FACT_FIELDS = {
    "subject": {**_NON_EMPTY, "description": "Who or what the fact is about, e.g. 'Alice'."},
    "relation": {**_NON_EMPTY, "description": "snake_case relation, e.g. lives_in, works_at, likes."},
    "object": {**_NON_EMPTY, "description": "The value, e.g. 'Berlin'."},
}
#: the fact fields every fact-returning tool reports
_FACT_RESULT = ["fact_id", "subject", "relation", "object", "valid_from", "valid_to"]

#: name → (description, input JSON Schema). The single source of every tool format
#: (Anthropic, OpenAI, MCP) and of the input validation.
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "write_memory": (
        "Record one fact in long-term memory as (subject, relation, object), e.g. ('Alice', 'lives_in', "
        "'Berlin'). A justification is required: say why you believe it (who said it, where you read it); "
        "so is trace_id, the id of your run. The write is appended to the memory log at once, and it "
        "is visible to the next search_memory call at once. For single-valued "
        "relations such as lives_in or works_at a newer fact supersedes the older one; the old one stays "
        "in history.",
        {
            "type": "object",
            "properties": {
                **_FACT_FIELDS,
                "statement": {**_NON_EMPTY, "description": "The fact as a sentence, as it was stated "
                                                            "(defaults to 'subject relation object')."},
                "justification": _JUSTIFICATION,
                "trace_id": _TRACE,
                "valid_from": {**_TIME, "description": "When the fact became true, if known (ISO-8601 "
                                                      "with a timezone)."},
            },
            "required": ["subject", "relation", "object", "justification", "trace_id"],
            "additionalProperties": False,
        },
    ),
    "retract_memory": (
        "Retract a fact that is wrong or no longer true: name it by fact_id (from search_memory or "
        "memory_as_of) or by subject, relation and object. A justification (why it is wrong or over) "
        "and trace_id are required. The fact is closed, not deleted: it gets a valid_to and stays in "
        "history, so memory_as_of still shows what was known before. Takes effect from the next "
        "projection (fold).",
        {
            "type": "object",
            "properties": {
                "fact_id": {**_NON_EMPTY, "description": "The fact to retract, e.g. f_0123456789abcdef "
                                                         "(or give subject, relation and object instead)."},
                **_FACT_FIELDS,
                "justification": _JUSTIFICATION,
                "trace_id": _TRACE,
                "valid_to": {**_TIME, "description": "When the fact stopped being true, if known "
                                                    "(defaults to the time of the retraction)."},
            },
            "required": ["justification", "trace_id"],
            "additionalProperties": False,
        },
    ),
    "search_memory": (
        "Search long-term memory for facts (or raw events) similar to a query. Returns current facts "
        "unless valid_at asks for another time; each result has a fact_id you can pass to why. Facts "
        "written with write_memory appear at once; pending_extraction counts newer log events whose "
        "facts await extraction by the next fold.",
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
                "trace_id": {**_NON_EMPTY, "description": "The id of your agent run or trace: the search "
                             "and what it returned are then recorded, so that an auditor can replay what "
                             "this run was shown."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    ),
    "memory_as_of": (
        "What memory held at a past moment (record time): the facts that were current in memory as "
        "it stood at as_of, optionally only about one subject or one relation. Use it to answer "
        "'what did we know on <date>' or to see a fact before it was retracted or superseded.",
        {
            "type": "object",
            "properties": {
                "as_of": {**_TIME, "description": "The moment, ISO-8601 with a timezone, e.g. "
                                                 "2024-05-01T00:00:00+00:00."},
                "subject": {**_NON_EMPTY, "description": "Only facts about this subject (name or alias)."},
                "relation": {**_NON_EMPTY, "description": "Only facts with this relation, e.g. lives_in."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50,
                          "description": "At most this many facts (1-200, default 50), newest first."},
            },
            "required": ["as_of"],
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


#: tools that only read; the others append to the log (never destructively: a retraction closes
#: a fact, history keeps it)
READ_ONLY = frozenset({"search_memory", "memory_as_of", "why"})


def mcp_tools() -> list[dict[str, Any]]:
    """The tools as MCP ``tools/list`` entries: ``{name, description, inputSchema, annotations}``
    (the annotations tell a client which tools only read)."""
    return [{"name": n, "description": d, "inputSchema": copy.deepcopy(s),
             "annotations": {"readOnlyHint": n in READ_ONLY, "destructiveHint": False,
                             "idempotentHint": n in READ_ONLY, "openWorldHint": False}}
            for n, (d, s) in TOOLS.items()]


@dataclass(frozen=True)
class ToolContext:
    """What the application, not the model, decides for every tool call.

    ``tenant`` scopes reads and writes, and must name one: ``None`` (which would let a search
    see every tenant) or an empty name is refused with :class:`refold.ValidationError` when the
    context is built; a single-tenant application passes ``"default"``. ``principal`` is whose
    access rules reads obey (None: no principal filter, for trusted single-user agents).
    ``source`` is recorded with writes (default ``agent:<tool name>``). ``readers`` become the
    written events' ``principals`` (empty: everyone in the tenant may read them) and ``subjects``
    their data-subject ids (what erasure looks for). ``embedder`` is the search embedder (default
    MiniLM). The trace id is not here: every write's input carries its own (the schemas require it).
    """

    memory: "Memory"
    tenant: str = "default"
    principal: str | None = None
    source: str | None = None
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
_TIME_FIELDS = ("valid_from", "valid_to", "valid_at", "as_of")


def _check(name: str, payload: Any) -> dict[str, Any]:
    if not isinstance(payload, Mapping):
        raise ValidationError(f"{name}: input must be a JSON object, got {type(payload).__name__}")
    payload = dict(payload)
    problems = []
    for err in sorted(_VALIDATORS[name].iter_errors(payload), key=lambda e: list(e.path)):
        where = "/".join(str(p) for p in err.path) or "input"
        if err.validator == "format" and where in _TIME_FIELDS:
            continue  # checked below with refold's own parser and message, whatever jsonschema has installed
        if err.validator == "pattern" or (err.validator == "minLength" and err.instance == ""):
            message = "must not be empty or blank"
        else:
            message = err.message
        problems.append(f"{where}: {message}")
    for key in _TIME_FIELDS:
        # jsonschema checks format "date-time" only when rfc3339-validator happens to be installed,
        # and then with a terser message: parse ourselves, always
        if isinstance(payload.get(key), str) and not any(p.startswith(f"{key}:") for p in problems):
            try:
                from refold.fold.events import parse_time

                payload[key] = parse_time(payload[key], line=None, name=key)
            except EventValidationError as exc:
                problems.append(f"{key}: {exc.reason}")
    if name == "retract_memory":
        named = [k for k in ("subject", "relation", "object") if k in payload]
        if "fact_id" in payload and named:
            problems.append("input: give either fact_id or subject, relation and object, not both")
        elif "fact_id" not in payload and len(named) < 3:
            missing = [k for k in ("subject", "relation", "object") if k not in payload]
            problems.append("input: name the fact to retract by fact_id, or by subject, relation and object "
                            f"(missing: {', '.join(missing)})")
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
    return _HANDLERS[name](args, ctx)


def _append(tool: str, event: dict[str, Any], ctx: ToolContext) -> tuple[Any, int]:
    """Validate and append one event written by ``tool`` in ``ctx``'s scope: (new event, seq)."""
    event = {**event, "source": ctx.source or f"agent:{tool}", "tenant": ctx.tenant}
    if ctx.readers:
        event["principals"] = list(ctx.readers)
    if ctx.subjects:
        event["subjects"] = list(ctx.subjects)
    try:
        from refold.fold.events import validate_event

        new = validate_event(event)
    except EventValidationError as exc:
        raise ValidationError(f"{tool}: {exc}") from exc
    [seq] = ctx.memory.append(new)
    return new, seq


def _write(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    fact = {k: args[k].strip() for k in ("subject", "relation", "object")}
    statement = args.get("statement") or f"{fact['subject']} {fact['relation'].replace('_', ' ')} {fact['object']}"
    event: dict[str, Any] = {"kind": "memory_written", "content": statement, "fact": fact,
                             "justification": args["justification"].strip(), "trace_id": args["trace_id"].strip()}
    if args.get("valid_from") is not None:
        event["valid_from"] = args["valid_from"].isoformat()
    new, seq = _append("write_memory", event, ctx)
    return {"status": "recorded", "event_id": new.event_id, "seq": seq, "trace_id": new.trace_id,
            "note": "visible to the next search_memory; its fact needs no extraction"}


def _visible_facts(ctx: ToolContext, **filters: Any) -> Any:
    """Facts of the context's tenant that its principal may see (a polars frame)."""
    return ctx.memory.facts(tenant=ctx.tenant, principal=ctx.principal, **filters)


def _retract(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    import polars as pl

    if "fact_id" in args:
        fact_id = args["fact_id"].strip()
        match = _visible_facts(ctx, current_only=True).filter(pl.col("fact_id") == fact_id)
        if match.is_empty():
            # a closed fact, another tenant's, or one the principal may not read: all "not current"
            raise NotFoundError(f"retract_memory: no current fact with id {fact_id!r} in this memory (it may "
                                "already be closed); use an id returned by search_memory")
        row = match.row(0, named=True)
        fact = {k: row[k] for k in ("subject", "relation", "object")}
    else:
        fact = {k: args[k].strip() for k in ("subject", "relation", "object")}
        from refold.fold.entities import entity_key

        # the merge matches a retraction by normalised subject and object names and canonical relation
        match = _visible_facts(ctx, subject=fact["subject"], relation=fact["relation"], current_only=True)
        match = match.filter(pl.col("object").map_elements(entity_key, return_dtype=pl.Utf8)
                             == entity_key(fact["object"]))
        if match.is_empty():
            raise NotFoundError(f"retract_memory: no current fact ({fact['subject']}, {fact['relation']}, "
                                f"{fact['object']}) in this memory; search_memory lists current facts")
    justification = args["justification"].strip()
    event: dict[str, Any] = {
        "kind": "retraction", "fact": fact, "justification": justification, "trace_id": args["trace_id"].strip(),
        "content": f"retracted: {fact['subject']} {fact['relation'].replace('_', ' ')} {fact['object']}",
    }
    if args.get("valid_to") is not None:
        event["valid_from"] = args["valid_to"].isoformat()  # a retraction's valid time closes the fact
    new, seq = _append("retract_memory", event, ctx)
    return {"status": "recorded", "event_id": new.event_id, "seq": seq, "trace_id": new.trace_id,
            "retracts": sorted(match["fact_id"].to_list()),
            "note": "the fact is closed for the next search_memory; it stays in history"}


def _search(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    kind = args.get("kind", "facts")
    frame = ctx.memory.search(args["query"], k=args.get("k", 5), tenant=ctx.tenant, principal=ctx.principal,
                              valid_at=args.get("valid_at"), kind=kind, embedder=ctx.embedder,
                              trace_id=args.get("trace_id"))  # a traced search is recorded (refold.search.replay)
    keep = ([*_FACT_RESULT[:4], "score", *_FACT_RESULT[4:]] if kind == "facts"
            else ["event_id", "kind", "source", "seq", "score", "text"])
    return {"kind": kind, "results": _json(frame.select(keep).to_dicts()),
            "pending_extraction": ctx.memory.pending()}


def _as_of(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    when = args["as_of"]
    frame = _visible_facts(ctx, as_of=when, subject=args.get("subject"), relation=args.get("relation"),
                           current_only=True)
    facts = frame.sort("recorded_seq", descending=True).select(_FACT_RESULT).to_dicts()
    limit = args.get("limit", 50)
    return {"as_of": when.isoformat(), "count": len(facts), "truncated": len(facts) > limit,
            "facts": _json(facts[:limit]), "pending_extraction": ctx.memory.pending(as_of=when)}


def _why(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    fact_id = args["fact_id"].strip()
    unknown = NotFoundError(f"why: no fact with id {fact_id!r} in this memory; use an id returned by search_memory")
    # the principal's view of the fact and its inputs only (never the whole store): a fact the
    # principal may not read is unknown, closings it may not see are undone
    try:
        answer = ctx.memory.why(fact_id, principal=ctx.principal)
    except NotFoundError:
        raise unknown from None
    if answer["tenant"] != ctx.tenant:  # a fact of another tenant is reported as unknown too
        raise unknown
    return {**_json(answer), "pending_extraction": ctx.memory.pending()}


_HANDLERS = {"write_memory": _write, "retract_memory": _retract, "search_memory": _search,
             "memory_as_of": _as_of, "why": _why}
