"""The shared base of the LLM extractors (``llamacpp``, ``openai``, ``vllm``).

:class:`LLMExtractor` implements the extract port once: for each event it builds the request with
:func:`~refold.fold.prompts.build_request` (the only way to a model), hands the batch to the
backend hook :meth:`LLMExtractor._complete_many`, and parses every answer with
:func:`~refold.fold.parse.parse_output`. A backend only turns requests into :class:`Completion`
values. Events that are not free text never reach a model:

* tombstones, erased content (``None``) and refold's own kinds (``spec_changed``, ``erasure``,
  ``tombstone``) give an empty extraction (``engine="none"``);
* ``memory_written`` events carry their fact already: it is used as stated (``engine="event"``);
* ``retraction`` events carry the fact they retract; the merge reads it from the event, so the
  extraction is empty (``engine="none"``).

Errors: a backend raises :class:`~refold.fold.errors.ExtractionError` when it cannot run at all
(model missing, endpoint down); nothing is returned and nothing should be cached, so a rerun
redoes it. A deterministic per-request failure (the prompt does not fit the context) is a
:class:`Completion` with ``error`` set and becomes a ``model_error`` rejection, kept for audit.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from refold.fold.errors import ExtractionError
from refold.fold.events import Event
from refold.fold.extract import ExtractedFact, Extraction, ModelRequest, Rejection
from refold.fold.parse import parse_output
from refold.fold.prompts import build_request
from refold.fold.spec import FoldSpec

__all__ = ["Completion", "LLMExtractor", "NO_MODEL_KINDS"]

#: Kinds whose content is not free text for a model (see the module docstring).
NO_MODEL_KINDS = frozenset({"spec_changed", "erasure", "tombstone", "retraction"})


@dataclass(frozen=True)
class Completion:
    """What a backend returned for one request."""

    text: str | None
    tokens_in: int = 0
    tokens_out: int = 0
    latency_ms: float = 0.0
    #: set when the model could not answer this request (and never will: e.g. context overflow)
    error: str | None = None
    #: engine facts worth auditing: finish reason, served model, endpoint, attempts, ...
    meta: tuple[tuple[str, Any], ...] = ()


class LLMExtractor:
    """Base class; subclasses set ``name``/``engine`` and implement :meth:`_complete`."""

    name = "llm"
    engine = "llm"

    # -- backend hooks -------------------------------------------------------------------------
    def _complete(self, request: ModelRequest) -> Completion:
        raise NotImplementedError

    def _complete_many(self, requests: Sequence[ModelRequest]) -> list[Completion]:
        """Answer a batch, in order. Backends that batch (vLLM) override this."""
        return [self._complete(r) for r in requests]

    def _check_spec(self, spec: FoldSpec) -> None:
        """Refuse a spec this backend cannot honour (e.g. a model file with another hash)."""

    def _meta(self) -> tuple[tuple[str, Any], ...]:
        """Per-extractor audit facts added to every model extraction's meta."""
        return ()

    def model_id_for(self, spec: FoldSpec) -> str | None:
        return spec.model.model_id if spec.model else None

    # -- the port ------------------------------------------------------------------------------
    def extract(self, events: Sequence[Event], spec: FoldSpec) -> list[Extraction]:
        """One extraction per event, in order (the port's contract, see ``refold.fold.extract``)."""
        if spec.model is None:
            raise ExtractionError(
                f"the {self.name} extractor needs a spec with a model; build one with "
                f"{type(self).__name__}.default_spec() or refold.fold.prompts.default_model_spec()"
            )
        host = socket.gethostname()
        results: list[Extraction | None] = []
        pending: list[tuple[int, Event, ModelRequest]] = []
        for event in events:
            direct = self.without_model(event, spec, host)
            if direct is None:
                pending.append((len(results), event, build_request(event, spec)))
            results.append(direct)
        if pending:
            self._check_spec(spec)
            completions = self._complete_many([request for _, _, request in pending])
            if len(completions) != len(pending):
                raise ExtractionError(f"{self.name}: backend returned {len(completions)} answers "
                                      f"for {len(pending)} requests")
            for (slot, event, request), completion in zip(pending, completions):
                results[slot] = self.from_completion(event, spec, request, completion, host)
        return [r for r in results if r is not None]

    def without_model(self, event: Event, spec: FoldSpec, host: str) -> Extraction | None:
        """The extraction of an event that needs no model call (a written memory states its fact;
        an erased event or a kind the model never reads is skipped), or None: ask the model.
        (:meth:`extract` and the Ray pipelines that batch the calls themselves both use it.)"""
        if event.kind == "memory_written" and event.fact is not None and event.content is not None:
            fact = event.fact
            return Extraction(
                event_id=event.event_id, spec_hash=spec.hash, engine="event", host=host,
                facts=(ExtractedFact(fact.subject, spec.canonical_relation(fact.relation), fact.object,
                                     valid_from=event.valid_from, valid_to=event.valid_to),),
            )
        if event.content is None or event.is_tombstone or event.kind in NO_MODEL_KINDS:
            reason = "erased" if event.content is None else f"kind {event.kind}"
            return Extraction(event_id=event.event_id, spec_hash=spec.hash, engine="none", host=host,
                              meta=(("skipped", reason),))
        return None

    def from_completion(self, event: Event, spec: FoldSpec, request: ModelRequest,
                        completion: Completion, host: str) -> Extraction:
        """The extraction of ``event`` from the model's answer to ``request`` (parsed and checked
        against ``spec``; a failed call becomes a rejection)."""
        if completion.error is not None:
            facts: tuple[ExtractedFact, ...] = ()
            rejected: tuple[Rejection, ...] = (Rejection("model_error", completion.error),)
        else:
            facts, rejected = parse_output(completion.text, event, spec)
        model = spec.model
        meta = {"file_hash": model.file_hash, "prompt_version": model.prompt_version,
                **dict(self._meta()), **dict(completion.meta)}
        return Extraction(
            event_id=event.event_id, spec_hash=spec.hash, facts=facts, request=request,
            raw_output=completion.text, rejected=rejected, tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out, latency_ms=round(completion.latency_ms, 3),
            model_id=self.model_id_for(spec), engine=self.engine, host=host,
            meta=tuple(sorted(meta.items())),
        )
