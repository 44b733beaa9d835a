"""Sharded extraction on Ray: events in, extractions out, cached while the run goes.

:func:`ray_runner` returns the ``runner`` that :func:`refold.folding.extract_missing` (and
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

Events travel as pickled :class:`~refold.fold.events.Event` values in an Arrow binary column;
extractions come back the same way, and the runner returns them in input order.

Actors ask for a fraction of a CPU (``num_cpus_per_actor=0.5`` by default): on a 2-core machine
an actor pool of two 1-CPU actors leaves no CPU for Ray Data's read task and the pool deadlocks.

``vllm`` is different: its engines are Ray Data LLM stages, so :func:`ray_runner` hands it to
:func:`refold.jobs.ray_llm.vllm_runner` (one processor over all events). The same pipeline over
HTTP (``HttpRequestProcessorConfig``, e.g. against ``llama_cpp.server`` on a CPU machine) is
:func:`refold.jobs.ray_llm.http_runner`.
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from refold.fold.errors import ExtractionError, RefoldError, ValidationError
from refold.fold.events import Event
from refold.fold.extract import Extraction, Extractor
from refold.fold.spec import FoldSpec
from refold.progress import FoldProgress

__all__ = ["CacheWriter", "RayRunner", "RunStats", "drain", "ensure_ray", "ray_runner", "spec_for"]

_INSTALL_HINT = "install the Ray extra: pip install 'refold[ray]'"
#: CPUs a local runtime started by refold gets (a laptop default; a cluster decides its own).
LOCAL_NUM_CPUS = 2


def _import_ray():
    try:
        import ray
        import ray.data  # noqa: F401 - fails without the `data` extra
    except ImportError as exc:
        raise ExtractionError(f"Ray is not installed ({exc}); {_INSTALL_HINT}") from exc
    return ray


def ensure_ray(address: str | None = None, *, num_cpus: int | None = None) -> None:
    """Connect this process to Ray once; reuse a runtime it is already connected to.

    ``address`` (or ``RAY_ADDRESS``, set inside ``ray job submit``) connects to that cluster;
    otherwise a runtime left by ``ray start`` on this machine is joined, or a local one is started
    with ``num_cpus`` (default :data:`LOCAL_NUM_CPUS`) and no dashboard.
    """
    ray = _import_ray()
    if ray.is_initialized():
        return
    quiet = {"ignore_reinit_error": True, "logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address or os.environ.get("RAY_ADDRESS"):
            ray.init(address=address, **quiet)
        else:
            try:
                ray.init(num_cpus=num_cpus or LOCAL_NUM_CPUS, include_dashboard=False, **quiet)
            except ValueError as exc:
                if "existing cluster" not in str(exc):
                    raise
                # `ray start` left a runtime on this machine and ray.init found it: join it as is
                ray.init(**quiet)
    except ConnectionError as exc:
        raise ExtractionError(
            f"cannot connect to Ray at {address or os.environ.get('RAY_ADDRESS')}: {exc}; start it "
            "with `ray start --head` or drop --address to use a local runtime"
        ) from exc
    ctx = ray.data.DataContext.get_current()
    # refold draws its own progress (FoldProgress); Ray Data's bars would interleave with it
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False


def spec_for(extractor: Extractor) -> FoldSpec:
    """The spec :meth:`Memory.fold` would use for ``extractor`` when given none."""
    if hasattr(extractor, "default_spec"):
        return extractor.default_spec()
    return FoldSpec(extractor=extractor.name)


@dataclass
class RunStats:
    """What the last run did (printed by jobs and benchmarks)."""

    events: int = 0
    batches: int = 0
    calls: int = 0
    rejected: int = 0
    rows_inserted: int = 0
    cache_writes: int = 0
    seconds: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def as_json(self) -> dict[str, Any]:
        return {**self.__dict__, "events_per_s": round(self.events_per_s, 2)}


class CacheWriter:
    """Writes extractions to the cache as they arrive: every ``every_events`` extractions or
    ``every_seconds`` seconds, and on :meth:`flush`.

    One writer (the driver) instead of one per actor: each cache write is a Delta MERGE whose cost
    grows with the table, and concurrent writers conflict and retry, so per-batch writes from N
    actors cost N times the commits and contend; a run killed part-way loses at most the last
    ``every_seconds`` of extraction. ``put`` is idempotent, so a duplicated or retried batch adds
    no rows.
    """

    def __init__(self, cache: Any | None, *, every_events: int = 512, every_seconds: float = 5.0):
        self.cache = cache
        self.every_events = every_events
        self.every_seconds = every_seconds
        self.inserted = 0
        self.writes = 0
        self._pending: list[Extraction] = []
        self._seqs: dict[str, int] = {}
        self._last = time.monotonic()

    def add(self, extractions: Sequence[Extraction], seqs: Mapping[str, int]) -> None:
        if self.cache is None:
            return
        self._pending.extend(extractions)
        self._seqs.update(seqs)
        if len(self._pending) >= self.every_events or time.monotonic() - self._last >= self.every_seconds:
            self.flush()

    def flush(self) -> int:
        """Write what is pending; return the rows inserted now."""
        inserted = 0
        if self.cache is not None and self._pending:
            inserted = self.cache.put(self._pending, seqs=self._seqs)
            self.inserted += inserted
            self.writes += 1
        self._pending, self._seqs, self._last = [], {}, time.monotonic()
        return inserted


class _ExtractBatch:
    """The actor behind ``map_batches``: builds the extractor once, then extracts batches.

    A batch is an Arrow table with an ``event`` column of pickled events; the answer has one row
    per event with the pickled extraction.
    """

    def __init__(self, *, extractor: str | Extractor, options: Mapping[str, Any], spec: FoldSpec):
        if isinstance(extractor, str):
            from refold.extractors import get_extractor

            extractor = get_extractor(extractor, **dict(options))
        self.extractor = extractor
        self.spec = spec

    def __call__(self, batch):
        import pyarrow as pa

        events: list[Event] = [pickle.loads(b) for b in batch.column("event").to_pylist()]
        try:
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


def _error_from_row(text: str) -> RefoldError:
    """The refold error an actor sent back as ``"ClassName\nmessage"``."""
    from refold.fold import errors

    name, _, message = text.partition("\n")
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, RefoldError):
        try:
            return cls(message)
        except TypeError:  # a subclass with a richer constructor
            pass
    return ExtractionError(message)


def drain(ds, *, total: int, label: str, progress: bool, writer: CacheWriter, stats: RunStats,
          done: int = 0) -> dict[str, Extraction]:
    """Stream a dataset of extraction rows (``extraction``, ``seq``, ``calls``, ``rejected``, and
    optionally ``error``) into ``writer``, with progress; return the extractions by event id.

    ``done``: events of ``total`` answered before the stream (shown as done). On a failure, what
    arrived is cached first, then the refold error is raised (an actor's own, or an
    :class:`ExtractionError` naming Ray's)."""
    found: dict[str, Extraction] = {}
    with FoldProgress(total, label=label, enabled=progress) as bar:
        if done:
            bar.advance(done)
        try:
            for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                if "error" in batch.column_names and batch.column("error").null_count < batch.num_rows:
                    raise _error_from_row(next(e for e in batch.column("error").to_pylist() if e))
                got = [pickle.loads(blob) for blob in batch.column("extraction").to_pylist()]
                writer.add(got, dict(zip((x.event_id for x in got), batch.column("seq").to_pylist())))
                found.update((x.event_id, x) for x in got)
                calls = sum(batch.column("calls").to_pylist())
                rejected = sum(batch.column("rejected").to_pylist())
                stats.batches += 1
                stats.calls += calls
                stats.rejected += rejected
                bar.advance(batch.num_rows, calls=calls, rejected=rejected)
        except Exception as exc:
            try:  # what arrived is good work: keep it for the rerun
                writer.flush()
            except Exception:  # noqa: BLE001 - the run's own error is the one to report
                pass
            if isinstance(exc, RefoldError):
                raise
            raise _as_refold_error(exc) from exc
    writer.flush()
    stats.rows_inserted += writer.inserted
    stats.cache_writes += writer.writes
    return found


def _as_refold_error(exc: BaseException) -> BaseException:
    """The refold error behind a Ray failure (Ray wraps a UDF's exception twice), else an
    :class:`ExtractionError` naming it."""
    seen, current = set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RefoldError):
            return current
        current = getattr(current, "cause", None) or current.__cause__
    first = str(exc).strip().splitlines()[-1] if str(exc).strip() else ""
    return ExtractionError(f"extraction on Ray failed ({type(exc).__name__}: {first[:300]}); what was "
                           "extracted before the failure is cached: run the fold again to resume")


@dataclass
class RayRunner:
    """A ``runner`` for :func:`refold.folding.extract_missing` that extracts on Ray.

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
        rows = [{"event": pickle.dumps(e)} for e in events]
        # a block per batch, so every actor of the pool has work from the start
        blocks = max(1, min(-(-len(rows) // self.batch_size), 200))
        ds = ray.data.from_items(rows, override_num_blocks=blocks)
        ds = ds.map_batches(
            _ExtractBatch,
            fn_constructor_kwargs={"extractor": self.extractor, "options": dict(self.options),
                                   "spec": spec},
            batch_size=self.batch_size,
            batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=self.num_actors),
            num_cpus=self.num_cpus_per_actor,
            num_gpus=self.num_gpus_per_actor or None,
            # Ray Data's actor pools default to max_restarts=-1 and max_task_retries=-1: a dead
            # actor is restarted and its batch retried (passing them here is deprecated in 2.60)
        )
        stats = RunStats(events=len(events))
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
               flush_seconds: float = 5.0) -> Callable[[list[Event]], list[Extraction]]:
    """A runner that extracts events on a Ray actor pool (see the module docstring).

    ``extractor_name`` is a registry name (built in each actor with ``options``) or a picklable
    extractor instance. Pass ``cache`` (the store's :class:`ExtractionCache`) so extractions are
    cached while the run goes (every ``flush_events`` or ``flush_seconds``); pass ``spec`` when the fold is given one (otherwise the
    extractor's default spec is used, as ``Memory.fold`` does). Ray is started on first call.
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
                     cache=cache, spec=spec, flush_events=flush_events, flush_seconds=flush_seconds)
