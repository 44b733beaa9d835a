"""The Memory facade: one store, opened once, with the verbs a notebook or an agent needs."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import polars as pl

from refold.fold.errors import StoreError, ValidationError
from refold.fold.events import (
    DEFAULT_MAX_CONTENT_BYTES, NewEvent, parse_jsonl, validate_event,
)
from refold.storage.layout import Layout, Mode, read_settings, write_settings
from refold.storage.log import EventLog, Head
from refold.storage.verify import VerifyReport, verify


class Memory:
    """A refold store: the event log and everything folded from it.

    Create with :func:`refold.open` or :func:`refold.init`.
    """

    def __init__(self, root: str | Path, *, storage_options: dict[str, str] | None = None,
                 max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES):
        self.layout = Layout(str(root))
        self.storage_options = storage_options
        self.max_content_bytes = max_content_bytes
        self.settings = read_settings(self.layout)
        self.log_store = EventLog(self.layout, storage_options=storage_options,
                                  protector=self._protector())

    @property
    def root(self) -> str:
        return self.layout.root

    @property
    def mode(self) -> Mode:
        return self.settings.get("mode", "delete")

    def _protector(self):
        if self.mode == "shred":
            from refold.storage.crypto import shred_protector

            return shred_protector(self.layout)
        from refold.storage.log import _plain

        return _plain

    # -- the log ----------------------------------------------------------------------------------

    def append(self, events: NewEvent | Mapping[str, Any] | Iterable[NewEvent | Mapping[str, Any]],
               *, ingestion_run: str | None = None) -> list[int]:
        """Validate and append events (dicts in the JSONL input format, or :class:`NewEvent`).

        Returns the seq of each event. All or nothing: one invalid event rejects the batch.
        """
        if isinstance(events, (NewEvent, Mapping)):
            events = [events]
        batch: list[NewEvent] = []
        for number, item in enumerate(events, start=1):
            if isinstance(item, NewEvent):
                batch.append(item)
            else:
                batch.append(validate_event(item, line=number, max_content_bytes=self.max_content_bytes,
                                            ingestion_run=ingestion_run))
        return self.log_store.append(batch)

    def append_jsonl(self, lines: Iterable[str] | str | Path, *, ingestion_run: str | None = None) -> list[int]:
        """Append events from JSON Lines (an iterable of lines, a text, or a file path)."""
        if isinstance(lines, Path):
            lines = lines.read_text(encoding="utf-8").splitlines()
        elif isinstance(lines, str):
            lines = lines.splitlines()
        batch = parse_jsonl(lines, max_content_bytes=self.max_content_bytes, ingestion_run=ingestion_run)
        return self.log_store.append(batch)

    def log(self, *, since: int | None = None, until: int | None = None,
            as_of: int | str | datetime | None = None) -> pl.DataFrame:
        """The log as a polars DataFrame (``since`` inclusive, ``until`` exclusive, ``as_of`` record time)."""
        return self.log_store.read(since=since, until=until, as_of=as_of)

    def verify(self, *, against: Head | str | Path | None = None) -> VerifyReport:
        """Recompute the chain; ``against`` is a head (or a JSON file of one) kept elsewhere."""
        if isinstance(against, (str, Path)):
            try:
                against = Head.from_json(json.loads(Path(against).read_text()))
            except (OSError, ValueError, KeyError) as exc:
                raise ValidationError(
                    f"cannot read a chain head from {against}: {exc}; save one with `refold head STORE --json`"
                ) from exc
        return verify(self.log_store, against=against)

    def head(self) -> Head:
        """The newest position of the log (seq -1 when empty)."""
        return self.log_store.head()

    def __repr__(self) -> str:
        return f"Memory({self.root!r}, mode={self.mode!r})"


def init(root: str | Path, *, mode: Mode = "delete", storage_options: dict[str, str] | None = None) -> Memory:
    """Create a new store at ``root`` (erasure ``mode`` is fixed here) and open it."""
    layout = Layout(str(root))
    if layout.is_local and Path(layout.settings).exists():
        raise StoreError(f"{root} is already a refold store; open it with refold.open({str(root)!r})")
    write_settings(layout, mode)
    EventLog.create(layout, storage_options=storage_options)
    return Memory(root, storage_options=storage_options)


def open(root: str | Path, *, create: bool = True, mode: Mode = "delete",
         storage_options: dict[str, str] | None = None) -> Memory:  # noqa: A001 - the public verb
    """Open the store at ``root``; create it (with ``mode``) when absent and ``create`` is true."""
    layout = Layout(str(root))
    if create and layout.is_local and not Path(layout.settings).exists():
        return init(root, mode=mode, storage_options=storage_options)
    return Memory(root, storage_options=storage_options)
