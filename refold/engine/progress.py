"""Progress for long folds: a rich bar on a terminal, plain periodic lines otherwise.

Shows events done/total, events/s, model calls, rejected outputs and ETA.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class FoldProgress:
    """Context manager; call :meth:`advance` after each batch. ``enabled=False`` prints nothing."""

    def __init__(self, total: int, *, label: str = "extracting", enabled: bool = True,
                 stream: TextIO | None = None, every_s: float = 5.0):
        self.total = total
        self.label = label
        self.enabled = enabled and total > 0
        self.stream = stream or sys.stderr
        self.every_s = every_s
        self.done = self.calls = self.rejected = 0
        self._start = self._last = time.monotonic()
        self._rich = None
        self._task = None

    def __enter__(self) -> "FoldProgress":
        if self.enabled and self.stream.isatty():
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                       TimeRemainingColumn)

            self._rich = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[rate]:.1f} ev/s"), TextColumn("calls {task.fields[calls]}"),
                TextColumn("rejected {task.fields[rejected]}"), TimeRemainingColumn(),
                console=Console(file=self.stream), transient=False,
            )
            self._rich.start()
            self._task = self._rich.add_task(self.label, total=self.total, rate=0.0, calls=0, rejected=0)
        return self

    def advance(self, events: int, *, calls: int = 0, rejected: int = 0) -> None:
        self.done += events
        self.calls += calls
        self.rejected += rejected
        if not self.enabled:
            return
        now = time.monotonic()
        rate = self.done / max(now - self._start, 1e-9)
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, rate=rate, calls=self.calls,
                              rejected=self.rejected)
        elif now - self._last >= self.every_s or self.done >= self.total:
            self._last = now
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            print(f"{self.label}: {self.done}/{self.total} events, {rate:.1f} ev/s, "
                  f"calls {self.calls}, rejected {self.rejected}, eta {eta:.0f}s",
                  file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()
