"""Running the fold against a store: the IO around the pure core.

    events (log, decrypted in shred mode)
      → extraction cache: extract only events with no row for this spec (in process, or on Ray)
      → the partitioned merge into the state tables (refold.engine.fold)

Every derived artefact is keyed by the spec hash; the spec is recorded in the log (kind
``spec_changed``) before the fold first uses it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


from refold.fold.events import Event
from refold.fold.extract import Extraction, Extractor, needs_extraction
from refold.fold.spec import FoldSpec
from refold.engine.progress import FoldProgress
from refold.storage.cache.table import ExtractionCache




@dataclass(frozen=True)
class FoldReport:
    """Counts a fold prints."""

    events_folded: int
    extraction_calls: int
    facts: int
    derived_facts: int
    rejected_outputs: int
    last_seq: int
    spec_hash: str
    #: log seq of the tagged state version the fold started from (-1: from the beginning of the log)
    started_from: int = -1
    #: partitions a partitioned full fold found already written by a killed run of the same log
    reused_partitions: int = 0

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


#: The least time between two cache writes of one fold's extraction loop (see extract_missing).
MIN_FLUSH_SECONDS = 1.0


def extract_missing(events: Sequence[Event], *, spec: FoldSpec, extractor: Extractor,
                    cache: ExtractionCache, batch_size: int = 16, progress: bool = False,
                    runner: Callable[[list[Event]], list[Extraction]] | None = None,
                    flush_events: int = 512, flush_seconds: float = 5.0,
                    collect: dict[str, Extraction] | None = None,
                    cached: set[str] | None = None) -> tuple[int, int]:
    """Extract and cache every extractable event with no row for ``spec``.

    Returns (extraction calls, rejected outputs). ``runner`` replaces the in-process loop (Ray).
    Results are written to the cache every ``flush_events`` events or ``flush_seconds`` seconds
    (and at the end), but not more than once a second: each cache write is a Delta commit
    (~15 ms, and it grows with the table), so writing every small batch made a 20k-event fold
    spend minutes committing and a fast extractor (rules: 512 events in ~10 ms) commit far more
    than it extracted, while a crash still loses at most a few seconds of extraction.
    ``collect``, when given, also receives by event id every new extraction that landed in the
    cache (so the caller need not read them back); a key another writer cached first is left out
    of it, for the caller to read that writer's row back, as every later fold will. ``cached``:
    ids the caller already knows are in the cache (then the cache is not asked again).
    """
    wanted = [e.event_id for e in events if needs_extraction(e)]
    todo_ids = set(cache.missing(spec.hash, wanted)) if cached is None else set(wanted) - cached
    todo = [e for e in events if e.event_id in todo_ids]
    if not todo:
        return 0, 0
    seqs = {e.event_id: e.seq for e in todo}

    def cache_them(results: list[Extraction]) -> None:
        landed = cache.insert(results, seqs=seqs)
        if collect is not None:
            collect.update((x.event_id, x) for x in landed)

    if runner is not None:
        results = runner(todo)
        cache_them(results)
        return len(todo), sum(len(x.rejected) for x in results)
    rejected = 0
    pending: list[Extraction] = []
    flushed = time.monotonic()
    with FoldProgress(len(todo), enabled=progress) as bar:
        for start in range(0, len(todo), batch_size):
            chunk = todo[start:start + batch_size]
            results = extractor.extract(chunk, spec)
            pending.extend(results)
            waited = time.monotonic() - flushed
            if waited >= flush_seconds or (len(pending) >= flush_events and waited >= MIN_FLUSH_SECONDS):
                cache_them(pending)
                pending, flushed = [], time.monotonic()
            bad = sum(len(x.rejected) for x in results)
            rejected += bad
            bar.advance(len(chunk), calls=sum(1 for x in results if x.request is not None), rejected=bad)
        if pending:
            cache_them(pending)
    return len(todo), rejected
