"""Running the fold against a store: the IO around the pure core.

    events (log, decrypted in shred mode)
      → extraction cache: extract only events with no row for this spec (in process, or on Ray)
      → the partitioned merge into the state tables (refold.state_fold)

Every derived artefact is keyed by the spec hash; the spec is recorded in the log (kind
``spec_changed``) before the fold first uses it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import networkx as nx

from refold.fold.events import Event, NewEvent
from refold.fold.extract import Extraction, Extractor
from refold.fold.spec import FoldSpec
from refold.progress import FoldProgress
from refold.storage.cache import ExtractionCache

if TYPE_CHECKING:
    from refold.memory import Memory

#: Kinds whose content the extractor reads.
EXTRACTABLE = frozenset({"observation", "document", "chat_turn", "memory_written", "tool_call"})
SPEC_SOURCE = "refold:spec"


@dataclass(frozen=True)
class FoldState:
    """The whole folded state at a log position under one spec, as a networkx view
    (:meth:`refold.memory.Memory.state`). ``graph`` is not to be mutated."""

    spec: FoldSpec
    graph: nx.MultiDiGraph
    last_seq: int
    stats: dict[str, int] = field(default_factory=dict)
    #: extractable events up to ``last_seq`` whose facts need an extraction no fold has made yet:
    #: a read merges them with no facts (docs/fold.md, "Reads"); ``refold fold`` extracts them
    pending: int = 0

    @property
    def spec_hash(self) -> str:
        return self.spec.hash


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


def needs_extraction(event: Event) -> bool:
    return event.kind in EXTRACTABLE and event.content is not None


def recorded_specs(mem: "Memory") -> dict[str, FoldSpec]:
    """Specs recorded in the log, by hash, in log order."""
    rows = mem.log_store.rows_of_kinds(["spec_changed"], columns=["content"])
    return {} if rows is None else specs_from(rows["content"].to_pylist())


def specs_from(contents: Sequence[str | None]) -> dict[str, FoldSpec]:
    """The specs ``spec_changed`` events' contents hold (in order; None: an erased one), by hash."""
    specs: dict[str, FoldSpec] = {}
    for content in contents:
        if content:
            spec = FoldSpec.from_json(json.loads(content))
            specs[spec.hash] = spec
    return specs


def newest_spec(specs: dict[str, FoldSpec]) -> FoldSpec:
    """The current spec: the newest recorded, or the default (rules) spec when none is."""
    return list(specs.values())[-1] if specs else FoldSpec()


def record_spec(mem: "Memory", spec: FoldSpec) -> bool:
    """Append a ``spec_changed`` event unless this spec is already in the log. True if appended."""
    if spec.hash in recorded_specs(mem):
        return False
    event = NewEvent(kind="spec_changed", content=spec.canonical_bytes().decode(),
                     source=f"{SPEC_SOURCE}/{spec.hash}", event_id=f"spec-{spec.hash}")
    # bypass the protector: a spec holds no personal data and must stay readable for audits
    mem.log_store.append([event], protect=False)
    return True


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


def parse_time_or_none(value: str | datetime | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    from refold.fold.errors import ValidationError
    from refold.fold.events import parse_time

    try:
        return parse_time(value, line=None, name="valid_at")
    except ValidationError as exc:
        raise ValidationError(f"valid_at {value!r} is not a timezone-aware ISO-8601 time "
                              "(e.g. 2024-01-01T00:00:00+00:00)") from exc
