"""Sharded extraction on Ray: events in, extractions out, cached while the run goes.

:func:`ray_runner` returns the ``runner`` that :func:`refold.engine.extraction.extract_missing` (and
``Memory.fold(runner=...)``, ``refold fold --ray``) calls with the events that have no cached
extraction. It shards them over a Ray Data ``map_batches`` with an actor pool
(``compute=ActorPoolStrategy(size=num_actors)``): each actor builds the extractor once (a model is
loaded once per actor, lazily, on its first batch) and extracts batches. The driver streams the
results into the store's cache every ``flush_events`` extractions or ``flush_seconds`` seconds
(:class:`CacheWriter`). ``ExtractionCache.put`` is idempotent (a MERGE that inserts only missing
keys), so

* a batch retried on a restarted actor (Ray Data restarts dead pool actors and retries their
  batches by default) or sent twice adds no rows;
* killing the whole run keeps everything cached up to the last flush, and the next run extracts
  only the rest.

Where the workers get their events: with ``events_from`` (the store's root URI and storage
options: what a job passes for a delete-mode store) a batch carries only the events' seqs, and
each actor reads its batch's rows from the log table itself (a pruned read of those seqs through
the URI, so a store on object storage is read from the bucket on whatever node the actor runs;
an actor finding other rows than the driver asked for fails the batch). Without it (a shred-mode
store, whose content the driver decrypts with keys workers should not need, or a caller with no
store) events travel as pickled :class:`~refold.fold.events.Event` values in an Arrow binary
column. Extractions come back to the driver as pickled values either way; the driver writes them
to the cache (one writer: see :class:`CacheWriter`) and returns them in input order.

Actors ask for a fraction of a CPU (``num_cpus_per_actor=0.5`` by default): on a 2-core machine
an actor pool of two 1-CPU actors leaves no CPU for Ray Data's read task and the pool deadlocks.

``vllm`` is different: its engines are Ray Data LLM stages, so :func:`ray_runner` hands it to
:func:`refold.jobs.ray_llm.vllm_runner` (one processor over all events). The same pipeline over
HTTP (``HttpRequestProcessorConfig``, e.g. against ``llama_cpp.server`` on a CPU machine) is
:func:`refold.jobs.ray_llm.http_runner`.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from refold.fold.errors import ExtractionError, RefoldError, ValidationError
from refold.fold.events import Event
from refold.fold.extract import Extraction, Extractor
from refold.fold.spec import FoldSpec

# the run machinery shared with ray_llm (re-exported: it is part of this module's public surface)
from refold.jobs.ray_stream import CacheWriter, RunStats, _import_ray, drain, ensure_ray

__all__ = ["CacheWriter", "RayRunner", "RunStats", "drain", "ensure_ray", "ray_runner", "spec_for"]


def spec_for(extractor: Extractor) -> FoldSpec:
    """The spec :meth:`Memory.fold` would use for ``extractor`` when given none."""
    if hasattr(extractor, "default_spec"):
        return extractor.default_spec()
    return FoldSpec(extractor=extractor.name)


class _ExtractBatch:
    """The actor behind ``map_batches``: builds the extractor once, then extracts batches.

    A batch is an Arrow table with an ``event`` column of pickled events; the answer has one row
    per event with the pickled extraction.
    """

    def __init__(self, *, extractor: str | Extractor, options: Mapping[str, Any], spec: FoldSpec,
                 events_from: tuple[str, Mapping[str, str] | None] | None = None):
        if isinstance(extractor, str):
            from refold.extractors import get_extractor

            extractor = get_extractor(extractor, **dict(options))
        self.extractor = extractor
        self.spec = spec
        self.events_from = events_from
        self._log = None

    def _read(self, seqs: list[int]) -> list[Event]:
        """The log's events at ``seqs`` (in that order), read from the store by this actor."""
        import pyarrow.compute as pc

        from refold.storage.layout import Layout
        from refold.storage.log.eventlog import EventLog
        from refold.storage.log.schema import table_to_events

        if self._log is None:  # (its table handle is the process's, brought up to date per read)
            root, storage_options = self.events_from
            self._log = EventLog(Layout(root), storage_options=dict(storage_options or {}) or None)
        rows = self._log.arrow(filter=pc.field("seq").isin(seqs), prune=[{"seq": (min(seqs), max(seqs))}])
        by_seq = {e.seq: e for e in table_to_events(rows)}
        missing = [s for s in seqs if s not in by_seq]
        if missing:
            raise ExtractionError(f"the log at {self.events_from[0]} holds no event at seq {missing[0]} "
                                  f"({len(missing)} missing of {len(seqs)}): it changed while the fold ran "
                                  "(an erasure?); run the fold again")
        return [by_seq[s] for s in seqs]

    def __call__(self, batch):
        import pyarrow as pa

        try:
            if "seq" in batch.column_names:
                events: list[Event] = self._read(batch.column("seq").to_pylist())
            else:
                events = [pickle.loads(b) for b in batch.column("event").to_pylist()]
            results = self.extractor.extract(events, self.spec)
            if len(results) != len(events):
                raise ExtractionError(
                    f"extractor {self.extractor.name!r} returned {len(results)} extraction(s) for "
                    f"{len(events)} event(s); the port requires exactly one per event")
        except RefoldError as exc:
            # sent back as data: Ray re-wraps a task's exception and drops its type and cause
            return pa.table({"extraction": pa.array([None], pa.binary()), "seq": [-1], "calls": [0],
                             "rejected": [0], "error": [f"{type(exc).__name__}\n{exc}"]})
        return pa.table({
            "extraction": pa.array([pickle.dumps(x) for x in results], pa.binary()),
            "seq": [e.seq for e in events],
            "calls": [int(x.request is not None) for x in results],
            "rejected": [len(x.rejected) for x in results],
            "error": pa.array([None] * len(results), pa.string()),
        })


@dataclass
class RayRunner:
    """A ``runner`` for :func:`refold.engine.extraction.extract_missing` that extracts on Ray.

    Build with :func:`ray_runner`. Calling it with events returns one extraction per event, in
    input order; with ``cache`` set, they are written to it while the run goes (see
    :class:`CacheWriter`) and all of them are by the time it returns.
    """

    extractor: str | Extractor
    options: Mapping[str, Any] = field(default_factory=dict)
    address: str | None = None
    progress: bool = True
    batch_size: int = 8
    num_actors: int = 2
    num_cpus_per_actor: float = 0.5
    num_gpus_per_actor: float = 0.0
    cache: Any | None = None
    spec: FoldSpec | None = None
    flush_events: int = 512
    flush_seconds: float = 5.0
    events_from: tuple[str, Mapping[str, str] | None] | None = None
    last: RunStats = field(default_factory=RunStats)

    def resolved_spec(self) -> FoldSpec:
        """The spec extractions are made under (built from the extractor when not given).

        Builds the extractor here too, so a bad name or option fails on the driver with its own
        error instead of as dying actors (adapters load models lazily: this is cheap)."""
        ext = self.extractor
        if isinstance(ext, str):
            from refold.extractors import get_extractor

            ext = get_extractor(ext, **dict(self.options))
        if self.spec is None:
            self.spec = spec_for(ext)
        return self.spec

    def __call__(self, events: Sequence[Event]) -> list[Extraction]:
        events = list(events)
        if not events:
            return []
        spec = self.resolved_spec()
        ensure_ray(self.address)
        ray = _import_ray()
        started = time.monotonic()
        if self.events_from is not None:  # the actors read their events from the store
            rows: list[dict[str, Any]] = [{"seq": e.seq} for e in events]
        else:
            rows = [{"event": pickle.dumps(e)} for e in events]
        # a block per batch, so every actor of the pool has work from the start
        blocks = max(1, min(-(-len(rows) // self.batch_size), 200))
        ds = ray.data.from_items(rows, override_num_blocks=blocks)
        ds = ds.map_batches(
            _ExtractBatch,
            fn_constructor_kwargs={"extractor": self.extractor, "options": dict(self.options),
                                   "spec": spec, "events_from": self.events_from},
            batch_size=self.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=self.num_actors),
            num_cpus=self.num_cpus_per_actor,
            num_gpus=self.num_gpus_per_actor or None,
            # Ray Data's actor pools default to max_restarts=-1 and max_task_retries=-1: a dead
            # actor is restarted and its batch retried (passing them here is deprecated in 2.60)
        )
        stats = RunStats(events=len(events), events_from="store" if self.events_from else "driver")
        writer = CacheWriter(self.cache, every_events=self.flush_events, every_seconds=self.flush_seconds)
        found = drain(ds, total=len(events), label="extracting on ray", progress=self.progress,
                      writer=writer, stats=stats)
        stats.seconds = time.monotonic() - started
        self.last = stats
        missing = [e.event_id for e in events if e.event_id not in found]
        if missing:
            raise ExtractionError(f"Ray extraction returned nothing for {len(missing)} event(s) "
                                  f"(first: {missing[0]}); run the fold again to retry them")
        return [found[e.event_id] for e in events]


def ray_runner(extractor_name: str | Extractor, options: Mapping[str, Any] | None = None, *,
               address: str | None = None, progress: bool = True, batch_size: int = 8,
               num_actors: int = 2, num_cpus_per_actor: float = 0.5, num_gpus_per_actor: float = 0.0,
               cache: Any | None = None, spec: FoldSpec | None = None, flush_events: int = 512,
               flush_seconds: float = 5.0, events_from: tuple[str, Mapping[str, str] | None] | None = None
               ) -> Callable[[list[Event]], list[Extraction]]:
    """A runner that extracts events on a Ray actor pool (see the module docstring).

    ``extractor_name`` is a registry name (built in each actor with ``options``) or a picklable
    extractor instance. Pass ``cache`` (the store's :class:`ExtractionCache`) so extractions are
    cached while the run goes (every ``flush_events`` or ``flush_seconds``); pass ``spec`` when the fold is given one (otherwise the
    extractor's default spec is used, as ``Memory.fold`` does). ``events_from``: the store's
    (root URI, storage options), so each actor reads its batch's events from the log itself and
    only seqs travel (for a store whose stored content is what the extractor reads: delete mode).
    Ray is started on first call.
    """
    if extractor_name == "vllm":
        # vLLM engines are Ray Data LLM stages themselves: one processor over all events, not an
        # actor pool of extractors (each would start its own engines)
        from refold.extractors import get_extractor
        from refold.jobs.ray_llm import vllm_runner

        spec = spec or spec_for(get_extractor("vllm", **dict(options or {})))
        if spec.model is None:
            raise ExtractionError("the vllm extractor needs a spec naming the model: pass spec=FoldSpec("
                                  "extractor='vllm', model=default_model_spec(MODEL_ID))")
        return vllm_runner(dict(options or {}), spec, cache=cache, address=address, progress=progress,
                           flush_events=flush_events, flush_seconds=flush_seconds)
    if batch_size < 1 or num_actors < 1 or num_cpus_per_actor <= 0:
        raise ValidationError("ray_runner: batch_size and num_actors must be >= 1 and "
                              "num_cpus_per_actor > 0 (e.g. 0.5 on a 2-core machine)")
    return RayRunner(extractor=extractor_name, options=dict(options or {}), address=address,
                     progress=progress, batch_size=batch_size, num_actors=num_actors,
                     num_cpus_per_actor=num_cpus_per_actor, num_gpus_per_actor=num_gpus_per_actor,
                     cache=cache, spec=spec, flush_events=flush_events, flush_seconds=flush_seconds,
                     events_from=events_from)
