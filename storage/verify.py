"""verify: recompute the chain from the stored rows and name the first bad seq.

Checks, in seq order: seqs contiguous from 0; each non-tombstone commitment recomputed from its
fields; each ``prev_link`` equal to the previous row's link and each ``link`` recomputed; each
tombstone covered by an ``erasure`` event with its erasure id; and finally the tail against the
newest published head (or a head kept elsewhere), which catches a removed newest commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from refold.fold.chain import GENESIS, commitment_of, link_of
from refold.fold.events import Event
from .log import EventLog, Head
from .schema import EVENTS_SCHEMA, table_to_events


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify`; ``ok`` is False when ``first_bad_seq`` or ``problems`` are set."""

    ok: bool
    events: int
    head: Head | None
    first_bad_seq: int | None = None
    problems: tuple[str, ...] = field(default=())

    def as_json(self) -> dict:
        return {
            "ok": self.ok,
            "events": self.events,
            "head": self.head.as_json() if self.head else None,
            "first_bad_seq": self.first_bad_seq,
            "problems": list(self.problems),
        }


def _read_rows(log: EventLog) -> tuple[pa.Table, list[tuple[int | None, str]]]:
    """All rows, reading file by file so one damaged file does not hide the others."""
    dt = log._table()
    if not log.layout.is_local:
        return log.arrow(), []
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    tables, broken = [], []
    for action in actions:
        path = Path(log.layout.events) / action["path"]
        try:
            table = pq.read_table(path)
            tables.append(table.select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA))
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a finding, not a crash
            broken.append((action.get("min.seq"), f"data file {action['path']} unreadable: {exc}"))
    table = pa.concat_tables(tables) if tables else EVENTS_SCHEMA.empty_table()
    return table.sort_by("seq"), broken


def verify(log: EventLog, *, against: Head | None = None) -> VerifyReport:
    """Recompute commitments and links; compare the tail with ``against`` or the published head."""
    table, broken = _read_rows(log)
    problems: list[str] = [msg for _, msg in broken]
    bad: list[int] = [seq for seq, _ in broken if seq is not None]
    events = list(table_to_events(table))
    erasures = {e.erasure_id for e in events if e.kind == "erasure" and e.erasure_id}
    prev = GENESIS
    last: Event | None = None
    for expected, event in enumerate(events):
        problem = _check(event, expected, prev, erasures)
        if problem:
            problems.append(problem)
            bad.append(min(expected, event.seq))
            break
        prev, last = event.link, event
    reference = against or log.published_head()
    if reference is not None and not bad:
        last_seq = last.seq if last else -1
        if reference.seq > last_seq:
            problems.append(
                f"log ends at seq {last_seq} but the recorded head is at seq {reference.seq}: "
                "the tail was truncated"
            )
            bad.append(last_seq + 1)
        elif reference.seq >= 0 and events[reference.seq].link != reference.link:
            problems.append(f"seq {reference.seq}: link differs from the recorded head")
            bad.append(reference.seq)
    head = Head(last.seq, last.link, last.recorded_at, log._table().version()) if last else None
    first = min(bad) if bad else None
    return VerifyReport(ok=not problems, events=len(events), head=head, first_bad_seq=first,
                        problems=tuple(problems))


def _check(event: Event, expected: int, prev: str, erasures: set[str]) -> str | None:
    if event.seq != expected:
        what = "missing" if event.seq > expected else "duplicated or out of order"
        return f"seq {expected}: {what} (found seq {event.seq} in its place)"
    if event.prev_link != prev:
        return f"seq {expected}: prev_link does not match the link of seq {expected - 1}"
    if event.is_tombstone:
        if event.erasure_id not in erasures:
            return f"seq {expected}: tombstone names erasure {event.erasure_id!r}, which the log does not record"
    else:
        try:
            commitment = commitment_of(event)
        except ValueError:
            return f"seq {expected}: content or salt missing from a non-tombstone event"
        if commitment != event.commitment:
            return f"seq {expected}: stored fields do not match the commitment (a byte was changed)"
    if link_of(prev, event.commitment) != event.link:
        return f"seq {expected}: link does not match H(prev_link ‖ commitment)"
    return None
