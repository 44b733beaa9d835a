"""Job configuration, read once at the edge, and the frame every job runs in.

A job (``refold job project | refold | erase | retain``, or ``python -m refold.jobs.<name>``, the
same click command) takes the store URI and its options as flags. Each flag's default comes from
the environment, read when the command is invoked:

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
                            ``AWS_*`` environment; defaults: refold.storage.files.options)
REFOLD_PROGRESS             ``0`` turns progress lines off
REFOLD_LOG_LEVEL            refold's log records on stderr from this level (default INFO:
                            what the job ran and its stages' timings)
==========================  ===============================================================

:func:`job_command` makes a job's click command (those flags, then the job's own);
:func:`run_job` runs the job body, prints ONE JSON summary on stdout (progress goes to stderr) and
returns the exit status: 0 on success, 1 on failure (the summary then carries ``"ok": false`` and
the error). A bad argument is one line on stderr and exit 2 (:class:`JobCommand`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from refold.fold.errors import RefoldError, StoreError, ValidationError

__all__ = ["JobCommand", "JobConfig", "job_command", "load_config", "removed_flag", "run_job"]

_log = logging.getLogger(__name__)


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
        object_store retries: :mod:`refold.storage.files.options`)."""
        from refold.storage.files.options import with_defaults

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


def _common_options() -> list[Callable]:
    """STORE and the flags every job takes, in --help order; defaults from the environment."""
    return [
        click.argument("store"),
        click.option("--storage-options", envvar="REFOLD_STORAGE_OPTIONS", show_envvar=True, metavar="JSON",
                     help="JSON object of object-store options (delta-rs's keys, e.g. AWS_ENDPOINT_URL)."),
        click.option("--no-progress", is_flag=True, default=lambda: _flag(os.environ.get("REFOLD_PROGRESS")) is False,
                     help="No progress lines on stderr (REFOLD_PROGRESS=0 too)."),
        click.option("--extractor", envvar="REFOLD_EXTRACTOR", show_envvar=True, default="rules", show_default=True,
                     help="rules | llamacpp | openai | vllm"),
        click.option("--options", envvar="REFOLD_EXTRACTOR_OPTIONS", show_envvar=True, metavar="JSON",
                     help="JSON object of extractor options."),
        click.option("--ray/--no-ray", "use_ray", envvar="REFOLD_RAY", show_envvar=True, default=None,
                     help="Shard extraction over a Ray actor pool, or extract in this process "
                          "(default: Ray where an address is known, as inside `ray job submit`)."),
        click.option("--address", envvar="REFOLD_RAY_ADDRESS", show_envvar=True,
                     help="Ray address (default: RAY_ADDRESS, else a local runtime)."),
        click.option("--batch-size", type=int, envvar="REFOLD_BATCH_SIZE", show_envvar=True, default=8,
                     show_default=True, help="Events per Ray batch."),
        click.option("--num-actors", type=int, envvar="REFOLD_NUM_ACTORS", show_envvar=True, default=2,
                     show_default=True, help="Extraction actors."),
        click.option("--cpus-per-actor", type=float, envvar="REFOLD_CPUS_PER_ACTOR", show_envvar=True, default=0.5,
                     show_default=True, help="CPUs per actor (1-CPU actors deadlock 2-CPU nodes)."),
        click.option("--gpus-per-actor", type=float, envvar="REFOLD_GPUS_PER_ACTOR", show_envvar=True, default=0.0,
                     show_default=True, help="GPUs per actor."),
        click.option("--flush-events", type=int, envvar="REFOLD_FLUSH_EVENTS", show_envvar=True, default=512,
                     show_default=True, help="Cache Ray extractions every N events ..."),
        click.option("--flush-seconds", type=float, envvar="REFOLD_FLUSH_SECONDS", show_envvar=True, default=5.0,
                     show_default=True, help="... or every S seconds (what a killed job can lose)."),
        click.option("--log-level", envvar="REFOLD_LOG_LEVEL", show_envvar=True, default="INFO", show_default=True,
                     type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
                     help="refold's log records on stderr from this level."),
    ]


def _log_to_stderr(level: str) -> None:
    """Send refold's log records from ``level`` up to stderr (the library configures no handler;
    other libraries stay at WARNING)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("refold").setLevel(level.upper())


class JobCommand(click.Command):
    """A job's click command: its callback returns the exit status (:func:`run_job`'s), and a bad
    argument is ONE line on stderr, ``<command>: error: <what is wrong>``, exit 2 — a job's log is
    read in a Ray dashboard or a scheduler's output, where a usage block would bury that line."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _BadArgument(exc.format_message(), ctx) from exc

    def invoke(self, ctx: click.Context) -> Any:
        ctx.exit(super().invoke(ctx))


class _BadArgument(click.UsageError):
    def show(self, file=None) -> None:
        click.echo(f"{self.ctx.command_path}: error: {self.format_message()}", file=file, err=True)


def job_command(name: str) -> Callable[[Callable[..., int]], JobCommand]:
    """Decorator: ``fn`` becomes the click command of job ``name``, taking STORE and the flags every
    job takes (above), then ``fn``'s own options. ``fn`` gets the common flags as keyword arguments,
    to hand to :func:`run_job`, and returns the exit status."""

    def decorate(fn: Callable[..., int]) -> JobCommand:
        for option in reversed(_common_options()):  # click lists the options applied last first
            fn = option(fn)
        return click.command(name, cls=JobCommand, context_settings={"help_option_names": ["-h", "--help"]})(fn)

    return decorate


def removed_flag(*decls: str, message: str, takes_value: bool = False) -> Callable:
    """A flag removed in refold 0.2: hidden from --help; given, it fails with ``message`` (which
    names what replaced it), exit 2."""

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None and value is not False:
            raise click.UsageError(message, ctx)

    return click.option(*decls, is_flag=not takes_value, hidden=True, expose_value=False, callback=refuse)


def load_config(flags: Mapping[str, Any]) -> JobConfig:
    """The :class:`JobConfig` of a job's common flags (other keys are ignored). Ray is on by default
    where a cluster is known: ``--address``, or ``RAY_ADDRESS``, which ``ray job submit`` sets."""
    use_ray = flags["use_ray"]
    if use_ray is None:
        use_ray = bool(flags["address"]) or bool(os.environ.get("RAY_ADDRESS"))
    return JobConfig(
        store=flags["store"], extractor=flags["extractor"],
        options=_json_object(flags["options"], name="--options"), use_ray=use_ray,
        address=flags["address"], batch_size=flags["batch_size"], num_actors=flags["num_actors"],
        cpus_per_actor=flags["cpus_per_actor"], gpus_per_actor=flags["gpus_per_actor"],
        flush_events=flags["flush_events"], flush_seconds=flags["flush_seconds"],
        storage_options=_json_object(flags["storage_options"], name="--storage-options") or None,
        progress=not flags["no_progress"],
    )


def run_job(name: str, body: Callable[[JobConfig], Mapping[str, Any]], flags: Mapping[str, Any]) -> int:
    """Run ``body`` on the :class:`JobConfig` of ``flags``, print the JSON summary; return the exit
    status.

    ``body`` returns the job's part of the summary; a failure in it is reported in the summary
    (``"ok": false``, the error, and for unexpected errors the traceback on stderr).
    """
    started = time.monotonic()
    summary: dict[str, Any] = {"job": name, "ok": False}
    status = 1
    _log_to_stderr(flags.get("log_level") or "INFO")
    _log.info("job %s: started", name)
    try:
        cfg = load_config(flags)
        summary["config"] = cfg.as_json()
        part = dict(body(cfg))
        ok = bool(part.pop("ok", True))  # a body may report a partial failure (erase: a subject)
        summary.update(part)
        summary["ok"] = ok
        status = 0 if ok else 1
    except RefoldError as exc:
        summary["error"] = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a job reports every failure in its summary
        from refold.storage.files.options import store_error

        known = store_error(flags["store"], exc)  # the object store's failure, said in one line
        if known is not None:
            summary["error"] = f"{type(known).__name__}: {known}"
        else:
            summary["error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc(file=sys.stderr)
    if not summary["ok"] and summary.get("error"):
        print(f"error: {summary['error']}", file=sys.stderr, flush=True)
    summary["seconds"] = round(time.monotonic() - started, 3)
    _log.info("job %s: %s in %.3fs", name, "done" if summary["ok"] else "failed", summary["seconds"])
    print(json.dumps(summary, sort_keys=True, default=str), flush=True)
    return status
