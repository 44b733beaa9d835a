"""Facts an event states itself, which need no model: the read path's overlay (docs/fold.md, "Reads").

A ``memory_written`` event carries its fact (``event.fact``); every extractor takes it as stated
(the rules extractor, and the model adapters without a model call), so a read can merge it before
any fold has extracted the event. A ``retraction`` event needs no extraction at all (the merge
closes the fact it names). Pure: no IO.
"""

from __future__ import annotations

from refold.fold.events import Event
from refold.fold.extract import ExtractedFact, Extraction
from refold.fold.spec import FoldSpec

__all__ = ["stated_extraction"]


def stated_extraction(event: Event, spec: FoldSpec) -> Extraction | None:
    """The extraction of a ``memory_written`` event's own fact under ``spec`` (the facts every
    extractor returns for it), or None when ``event`` states no fact (its facts need a model)."""
    if event.kind != "memory_written" or event.fact is None or event.content is None:
        return None
    fact = event.fact
    return Extraction(event_id=event.event_id, spec_hash=spec.hash, engine="event",
                      facts=(ExtractedFact(fact.subject, spec.canonical_relation(fact.relation), fact.object,
                                           valid_from=event.valid_from, valid_to=event.valid_to),))
