"""The extractor port: events (+ spec) in, extractions out.

Every adapter (``rules``, ``llamacpp``, ``openai``, ``vllm``) implements :class:`Extractor`.
Contract:

* ``extract(events, spec)`` returns exactly one :class:`Extraction` per input event, in order;
* it reads nothing but the events and the spec (input closure). A model is reached only through a
  :class:`ModelRequest` built by :func:`refold.fold.prompts.build_request` from the event and the
  spec; the request is recorded in the extraction so ``refold audit`` can re-derive it byte for byte;
* an extractor instance is picklable (it runs inside Ray actors); heavy resources (a model) are
  loaded lazily on first use, not in ``__init__``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from refold.fold.events import Event
from refold.fold.spec import FoldSpec


@dataclass(frozen=True)
class ExtractedFact:
    """One fact an extractor found in one event."""

    subject: str
    relation: str
    object: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    confidence: float = 1.0


@dataclass(frozen=True)
class ModelRequest:
    """The exact bytes sent to a model, and the events they were built from.

    ``payload`` is canonical JSON (messages, response schema, decoding parameters, model id).
    Build these only with :func:`refold.fold.prompts.build_request`.
    """

    event_ids: tuple[str, ...]
    payload: str

    @property
    def request_id(self) -> str:
        return hashlib.sha256(self.payload.encode()).hexdigest()[:24]

    def as_dict(self) -> dict[str, Any]:
        return json.loads(self.payload)


@dataclass(frozen=True)
class Rejection:
    """Model output the parser refused, and why (kept for audit; never silently dropped)."""

    reason: str  # "invalid_json" | "schema" | "ungrounded" | "degenerate" | "duplicate" | "model_error" | "empty"
    detail: str


@dataclass(frozen=True)
class Extraction:
    """What one extractor made of one event under one spec."""

    event_id: str
    spec_hash: str
    facts: tuple[ExtractedFact, ...] = ()
    request: ModelRequest | None = None
    raw_output: str | None = None
    rejected: tuple[Rejection, ...] = ()
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    model_id: str | None = None
    engine: str = "rules"
    host: str | None = None
    meta: tuple[tuple[str, Any], ...] = field(default=())


@runtime_checkable
class Extractor(Protocol):
    """Port: turn events into extractions (see the module docstring for the contract)."""

    name: str

    def extract(self, events: Sequence[Event], spec: FoldSpec) -> list[Extraction]: ...


#: Kinds whose content the extractor reads.
EXTRACTABLE = frozenset({"observation", "document", "chat_turn", "memory_written", "tool_call"})


def needs_extraction(event: "Event") -> bool:
    """Whether the fold asks an extractor about ``event``: an extractable kind with readable content."""
    return event.kind in EXTRACTABLE and event.content is not None
