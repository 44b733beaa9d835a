"""The run machinery the Ray fold runners share: connecting to Ray, streaming extraction rows into
the cache while a run goes, and turning Ray's failures back into refold errors.

:mod:`refold.jobs.ray_extract` (the actor-pool runner) and :mod:`refold.jobs.ray_llm` (the Ray Data
LLM processors) both use it; it imports neither, so the two runner modules do not import each other
in a cycle (``ray_extract`` hands ``vllm`` to ``ray_llm``).
"""

from __future__ import annotations

import logging
import os
import pickle
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from refold import faults
from refold.fold.errors import ExtractionError, RefoldError
from refold.fold.extract import Extraction
from refold.engine.progress import FoldProgress

__all__ = ["CacheWriter", "LOCAL_NUM_CPUS", "RunStats", "drain", "ensure_ray"]

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
    #: where the workers got their events: "store" (read by seq from the log table) or "driver"
    events_from: str = "driver"

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
            faults.point("jobs.cache_written")  # (tests pause a job here to stop it mid-extraction)
        self._pending, self._seqs, self._last = [], {}, time.monotonic()
        return inserted


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
