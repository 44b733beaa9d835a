"""The read path's answer past the folded state: no extraction, no write (docs/fold.md, "Reads").

    live fold up to the first event with no cached extraction (kept: it is the fold's own state)
      → a copy of it, advanced by the events after that point, each with the extraction a read
        may make without a model and without writing:
          memory_written: its stated fact (refold.fold.stated); retraction: none needed;
          under the rules spec: the rules extractor in memory (deterministic, no model)
      → every other extractable event is merged with no facts and counted as pending

The copy is never kept as the live fold and never cached on disk, so a later :meth:`Memory.fold`
still extracts (and caches) every pending event and folds the log exactly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import networkx as nx

from refold.fold.events import Event
from refold.fold.extract import Extraction
from refold.fold.incremental import LiveFold
from refold.fold.spec import FoldSpec
from refold.fold.stated import stated_extraction
from refold.folding import needs_extraction

__all__ = ["overlay"]


def overlay(live: LiveFold, rest: Sequence[Event], spec: FoldSpec) -> tuple[nx.MultiDiGraph, LiveFold, int]:
    """(graph, the advanced copy, pending count): ``live`` (not changed) advanced by ``rest``."""
    rules = None
    if spec.extractor == "rules":
        from refold.extractors import get_extractor

        rules = get_extractor("rules")
    copy = LiveFold.resume(spec, live.detached_graph(), dataclasses.replace(live.builder.stats),
                           contained=live.contained, link=live.link, started_from=live.started_from)
    pending = 0
    for event in rest:
        extraction: Extraction | None = None
        if needs_extraction(event):
            extraction = rules.extract([event], spec)[0] if rules is not None else stated_extraction(event, spec)
            if extraction is None:
                pending += 1
        copy.apply(event, extraction)
    copy.refresh()
    return copy.graph, copy, pending
