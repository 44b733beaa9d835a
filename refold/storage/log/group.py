"""Group commit: many concurrent callers of one process, one Delta commit per group.

A single-event append costs a whole Delta commit (a data file, a commit file, a published head),
so a process whose threads append events one at a time (an agent server with many sessions) is
bound by commit latency. :class:`GroupCommit` sits in front of an :class:`~refold.storage.log.eventlog.EventLog`:
each caller queues its batch; one caller (the leader) takes what is queued, appends it as one
batch and hands every caller its seqs. Callers that arrive while a commit is in flight wait and
form the next group, which the first of them leads once the commit is done.

The guarantees are those of :meth:`EventLog.append`, because a group is one such append: each
caller's events are contiguous and in order, ids already in the log return their original seq,
an ambiguous commit is resolved before anyone is answered. If the merged batch is refused (an id
reused with different content, or an error after which the batch did not land), the leader
appends the group's batches one by one, so only the caller at fault gets the error and the rest
are answered as if they had appended alone.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from refold.fold.errors import RefoldError
from refold.fold.events import NewEvent, check_times

from refold.storage.log.eventlog import EventLog


@dataclass(eq=False)
class _Ticket:
    batch: list[NewEvent]
    wake: threading.Event = field(default_factory=threading.Event)  # done, or made the leader
    done: bool = False
    seqs: list[int] | None = None
    error: BaseException | None = None


class GroupCommit:
    """Concurrent ``append`` calls share Delta commits. Thread-safe; one per process and log."""

    def __init__(self, log: EventLog, *, max_events: int = 10_000, protect: bool = True):
        self.log = log
        self.max_events = max_events  # a group closes before it exceeds this many events
        self.protect = protect
        self.commits = 0  # merged appends done (for benchmarks and tests)
        self._queue: deque[_Ticket] = deque()
        self._queue_lock = threading.Lock()
        self._leading = False  # a leader is committing; newcomers queue and wait

    def append(self, batch: Sequence[NewEvent]) -> list[int]:
        """Append ``batch`` (atomically, in order) in the next group commit; return its seqs."""
        if not batch:
            return []
        batch = list(batch)
        check_times(batch)  # a bad event fails its own caller here, never another's group
        ticket = _Ticket(batch)
        with self._queue_lock:
            self._queue.append(ticket)
            lead, self._leading = not self._leading, True
        if not lead:
            ticket.wake.wait()  # answered, or handed the lead by the previous leader
        if not ticket.done:
            self._lead(ticket)
        if ticket.error is not None:
            raise ticket.error
        assert ticket.seqs is not None
        return ticket.seqs

    def _lead(self, mine: _Ticket) -> None:
        """Commit groups until ``mine`` is answered, then hand the lead to the next in line."""
        try:
            while not mine.done:
                with self._queue_lock:
                    group = self._take()
                self._commit(group)
        finally:
            with self._queue_lock:
                if self._queue:
                    self._queue[0].wake.set()  # it leads the group that queued meanwhile
                else:
                    self._leading = False

    def _take(self) -> list[_Ticket]:
        group: list[_Ticket] = []
        size = 0
        while self._queue and (not group or size + len(self._queue[0].batch) <= self.max_events):
            ticket = self._queue.popleft()
            group.append(ticket)
            size += len(ticket.batch)
        return group

    def _commit(self, group: list[_Ticket]) -> None:
        try:
            merged = [e for ticket in group for e in ticket.batch]
            try:
                seqs = self.log.append(merged, protect=self.protect)
                self.commits += 1
            except RefoldError:
                if len(group) == 1:
                    raise
                self._one_by_one(group)
                return
            start = 0
            for ticket in group:
                ticket.seqs = seqs[start:start + len(ticket.batch)]
                start += len(ticket.batch)
        except BaseException as exc:  # noqa: BLE001 - every waiting caller must hear of it
            for ticket in group:
                if ticket.seqs is None and ticket.error is None:
                    ticket.error = exc
        finally:
            for ticket in group:
                ticket.done = True
                ticket.wake.set()

    def _one_by_one(self, group: list[_Ticket]) -> None:
        for ticket in group:
            try:
                ticket.seqs = self.log.append(ticket.batch, protect=self.protect)
                self.commits += 1
            except RefoldError as exc:
                ticket.error = exc
