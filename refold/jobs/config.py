"""Job configuration, read once at the edge, and the frame every job runs in.

A job (``python -m refold.jobs.project | refold | erase``) takes the store URI and its options as
flags. Each flag's default comes from the environment, read once when the job starts:

==========================  ===============================================================
REFOLD_EXTRACTOR            extractor name (``rules``, ``llamacpp``, ``openai``, ``vllm``)
REFOLD_EXTRACTOR_OPTIONS    JSON object of extractor options, e.g. ``{"base_url": "..."}``
REFOLD_RAY_ADDRESS          Ray address for sharded extraction (``RAY_ADDRESS``, which
                            ``ray job submit`` sets for the job's driver, is used otherwise)
REFOLD_RAY                  ``1``/``0``: shard extraction on Ray (default: on when an
                            address is known, i.e. inside ``ray job submit``)
REFOLD_BATCH_SIZE           events per Ray batch (default 8)
REFOLD_NUM_ACTORS           extraction actors (default 2)
REFOLD_CPUS_PER_ACTOR       CPUs per actor (default 0.5; 1-CPU actors deadlock 2-CPU nodes)
REFOLD_GPUS_PER_ACTOR       GPUs per actor (default 0)
REFOLD_FLUSH_EVENTS         write Ray extractions to the cache every N (default 512) ...
REFOLD_FLUSH_SECONDS        ... or every S seconds (default 5): a killed job loses at most that
REFOLD_STORAGE_OPTIONS      JSON object of object-store options for the store (delta-rs's
                            keys, e.g. ``AWS_ENDPOINT_URL``; unset ones come from the
                            ``AWS_*`` environment; defaults: refold.storage.store_options)
REFOLD_PROGRESS             ``0`` turns progress lines off
==========================  ===============================================================

:func:`run_job` parses, runs the job body, prints ONE JSON summary on stdout (progress goes to
stderr) and returns the exit status: 0 on success, 1 on failure (the summary then carries
``"ok": false`` and the error), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refold.fold.errors import RefoldError, StoreError, ValidationError

__all__ = ["JobConfig", "job_parser", "load_config", "run_job"]


def _json_object(text: str | None, *, name: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValidationError(f"{name} is not valid JSON ({exc}); pass an object like "
                              '\'{"base_url": "http://127.0.0.1:8000/v1"}\'') from exc
    if not isinstance(value, dict):
        raise ValidationError(f"{name} must be a JSON object, not {type(value).__name__}")
    return value


def _flag(value: str | None) -> bool | None:
    if value is None or value == "":
        return None
    return value.strip().lower() not in ("0", "false", "no", "off")


@dataclass(frozen=True)
class JobConfig:
    """Everything a job needs besides the log (see the module docstring for the sources)."""

    store: str
    extractor: str = "rules"
    options: Mapping[str, Any] = field(default_factory=dict)
    use_ray: bool = False
    address: str | None = None
    batch_size: int = 8
    num_actors: int = 2
    cpus_per_actor: float = 0.5
    gpus_per_actor: float = 0.0
    flush_events: int = 512
    flush_seconds: float = 5.0
    storage_options: Mapping[str, str] | None = None
    progress: bool = True

    def open_store(self):
        """The store; refuses to create one (a job runs against an existing store)."""
        from refold.memory import Memory, open as open_memory
        from refold.storage.layout import Layout

        layout = Layout(self.store)
        if not layout.is_local:
            # refold.open checks the bucket first: a missing bucket, refused credentials or an
            # unreachable endpoint fail here with one line naming the URI and what to set
            return open_memory(self.store, storage_options=self.options_for_store())
        if not Path(layout.settings).exists():
            hint = ""
            if not Path(self.store).is_absolute():
                hint = (" — a relative path is resolved in the job's working directory, which under "
                        "`ray job submit --working-dir` is a copy of your folder; pass an absolute path")
            raise StoreError(f"no refold store at {self.store}{hint}; create it with "
                             f"`refold init {self.store}`")
        return Memory(self.store, storage_options=self.options_for_store())

    def options_for_store(self) -> dict[str, str] | None:
        """``storage_options`` with refold's defaults for the store's URI (conditional put on S3,
        object_store retries: :mod:`refold.storage.store_options`)."""
        from refold.storage.store_options import with_defaults

        return with_defaults(self.store, self.storage_options)

    def runner(self, mem):
        """A Ray extraction runner writing to ``mem``'s cache, or None when Ray is off.

        In a delete-mode store its actors read their events from the log through the store URI
        (only seqs leave the driver); a shred-mode store's events are decrypted by the driver and
        sent to the actors, which then need no keys."""
        if not self.use_ray:
            return None
        from refold.jobs.ray_extract import ray_runner

        events_from = (mem.layout.root, mem.storage_options) if mem.mode == "delete" else None

        return ray_runner(self.extractor, self.options, address=self.address, progress=self.progress,
                          batch_size=self.batch_size, num_actors=self.num_actors,
                          num_cpus_per_actor=self.cpus_per_actor,
                          num_gpus_per_actor=self.gpus_per_actor, cache=mem.cache,
                          flush_events=self.flush_events, flush_seconds=self.flush_seconds,
                          events_from=events_from)

    def as_json(self) -> dict[str, Any]:
        return {"store": self.store, "extractor": self.extractor, "options": sorted(self.options),
                "ray": self.use_ray, "address": self.address, "batch_size": self.batch_size,
                "num_actors": self.num_actors}


def job_parser(prog: str, description: str, *, env: Mapping[str, str] | None = None,
               extraction: bool = True) -> argparse.ArgumentParser:
    """The common flags (store, extractor, Ray, progress), defaults read from ``env``."""
    env = os.environ if env is None else env
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("store", help="store root: an absolute path or an object-store URI")
    parser.add_argument("--storage-options", default=env.get("REFOLD_STORAGE_OPTIONS"),
                        help="JSON object of object-store options")
    parser.add_argument("--no-progress", action="store_true",
                        default=_flag(env.get("REFOLD_PROGRESS")) is False)
    if extraction:
        parser.add_argument("--extractor", default=env.get("REFOLD_EXTRACTOR", "rules"),
                            help="rules | llamacpp | openai | vllm")
        parser.add_argument("--options", default=env.get("REFOLD_EXTRACTOR_OPTIONS"),
                            help="JSON object of extractor options")
        ray = parser.add_mutually_exclusive_group()
        ray.add_argument("--ray", dest="use_ray", action="store_true", default=None,
                         help="shard extraction over a Ray actor pool")
        ray.add_argument("--no-ray", dest="use_ray", action="store_false",
                         help="extract in this process")
        parser.add_argument("--address", default=env.get("REFOLD_RAY_ADDRESS") or None,
                            help="Ray address (default: RAY_ADDRESS, else a local runtime)")
        parser.add_argument("--batch-size", type=int, default=int(env.get("REFOLD_BATCH_SIZE", 8)))
        parser.add_argument("--num-actors", type=int, default=int(env.get("REFOLD_NUM_ACTORS", 2)))
        parser.add_argument("--cpus-per-actor", type=float,
                            default=float(env.get("REFOLD_CPUS_PER_ACTOR", 0.5)))
        parser.add_argument("--gpus-per-actor", type=float,
                            default=float(env.get("REFOLD_GPUS_PER_ACTOR", 0)))
        parser.add_argument("--flush-events", type=int, default=int(env.get("REFOLD_FLUSH_EVENTS", 512)),
                            help="cache Ray extractions every N events ...")
        parser.add_argument("--flush-seconds", type=float,
                            default=float(env.get("REFOLD_FLUSH_SECONDS", 5)),
                            help="... or every S seconds (what a killed job can lose)")
    parser.set_defaults(_env_ray=_flag(env.get("REFOLD_RAY")),
                        _env_address_known=bool(env.get("RAY_ADDRESS")))
    return parser


def load_config(args: argparse.Namespace) -> JobConfig:
    """The :class:`JobConfig` of parsed arguments (flags win over the environment)."""
    storage_options = _json_object(args.storage_options, name="--storage-options") or None
    if not hasattr(args, "extractor"):
        return JobConfig(store=args.store, storage_options=storage_options,
                         progress=not args.no_progress)
    use_ray = args.use_ray
    if use_ray is None:
        use_ray = args._env_ray
    if use_ray is None:  # on by default where a cluster is known
        use_ray = bool(args.address) or args._env_address_known
    return JobConfig(
        store=args.store, extractor=args.extractor,
        options=_json_object(args.options, name="--options"), use_ray=use_ray,
        address=args.address, batch_size=args.batch_size, num_actors=args.num_actors,
        cpus_per_actor=args.cpus_per_actor, gpus_per_actor=args.gpus_per_actor,
        flush_events=args.flush_events, flush_seconds=args.flush_seconds, storage_options=storage_options, progress=not args.no_progress,
    )


def run_job(name: str, body: Callable[[JobConfig, argparse.Namespace], dict[str, Any]],
            parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, *,
            stdout=None) -> int:
    """Parse ``argv``, run ``body``, print the JSON summary; return the exit status.

    ``body`` returns the job's part of the summary; a failure in it is reported in the summary
    (``"ok": false``, the error, and for unexpected errors the traceback on stderr).
    """
    stdout = stdout or sys.stdout
    args = parser.parse_args(argv)  # exits 2 on bad arguments, as argparse does
    started = time.monotonic()
    summary: dict[str, Any] = {"job": name, "ok": False}
    status = 1
    try:
        cfg = load_config(args)
        summary["config"] = cfg.as_json()
        part = dict(body(cfg, args))
        ok = bool(part.pop("ok", True))  # a body may report a partial failure (erase: a subject)
        summary.update(part)
        summary["ok"] = ok
        status = 0 if ok else 1
    except RefoldError as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a job reports every failure in its summary
        from refold.storage.store_options import store_error

        known = store_error(args.store, exc)  # the object store's failure, said in one line
        if known is not None:
            summary["error"] = f"{type(known).__name__}: {known}"
        else:
            summary["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
    if not summary["ok"] and summary.get("error"):
        print(f"error: {summary['error']}", file=sys.stderr, flush=True)
    summary["seconds"] = round(time.monotonic() - started, 3)
    print(json.dumps(summary, sort_keys=True, default=str), file=stdout, flush=True)
    return status
