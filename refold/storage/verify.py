"""verify: recompute the chain from the stored rows and name the first bad seq.

Checks, in seq order: seqs contiguous from 0 with one row each (identical copies, as left by a
duplicated or replaced data file, are reported too); each non-tombstone commitment recomputed from its
fields; each ``prev_link`` equal to the previous row's link and each ``link`` recomputed; each
tombstone covered by an ``erasure`` event with its erasure id; then the tail against the
newest published head (or a head kept elsewhere), which catches a removed newest commit; and
each commit's recorded head (its metadata) against the rows (:func:`check_recorded_heads`).
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from refold.fold.chain import GENESIS, commitment_of, link_of
from refold.fold.events import Event
from .log import EventLog, Head
from .log_reader import HEAD_KEY
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


def _read_events(log: EventLog) -> tuple[list[Event], list[tuple[int | None, str]]]:
    """All events, reading file by file so one damaged file does not hide the others.

    A file that cannot be read, holds text that is not UTF-8, or a field that does not decode
    (a garbled ``fact``) is a finding named by its lowest seq, not a crash.
    """
    dt = log._table()
    if not log.layout.is_local:
        return list(table_to_events(log.arrow())), []
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    events: list[Event] = []
    broken: list[tuple[int | None, str]] = []
    for action in actions:
        path = Path(log.layout.events) / action["path"]
        try:
            table = pq.read_table(path).select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA)
            table.validate(full=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a finding, not a crash
            broken.append((action.get("min.seq"), f"data file {action['path']} unreadable: {exc}"))
            continue
        try:
            events.extend(table_to_events(table))
        except Exception:  # noqa: BLE001 - find the row that does not decode
            for i in range(table.num_rows):
                row = table.slice(i, 1)
                try:
                    events.extend(table_to_events(row))
                except Exception as exc:  # noqa: BLE001
                    seq = row["seq"][0].as_py()
                    broken.append((seq, f"seq {seq}: a stored field does not decode ({exc})"))
    events.sort(key=lambda e: e.seq)
    return events, broken


def verify(log: EventLog, *, against: Head | None = None) -> VerifyReport:
    """Recompute commitments and links; compare the tail with ``against`` or the published head.

    ``first_bad_seq`` is the first position whose event is missing, altered, or claimed by two
    different rows; when nothing else is wrong but some rows are stored twice (a data file copied,
    or one replaced by an older one), it is the first duplicated seq.
    """
    events, broken = _read_events(log)
    problems: list[str] = [msg for _, msg in broken]
    bad: list[int] = [seq for seq, _ in broken if seq is not None]
    erasures = {e.erasure_id for e in events if e.kind == "erasure" and e.erasure_id}
    by_seq: dict[int, list[Event]] = {}
    for event in events:
        by_seq.setdefault(event.seq, []).append(event)
    if by_seq and min(by_seq) < 0:
        problems.append(f"seq {min(by_seq)}: negative positions do not exist")
        bad.append(0)
    prev = GENESIS
    last: Event | None = None
    duplicated: list[int] = []
    for expected in range(max(by_seq, default=-1) + 1):
        rows = list(dict.fromkeys(by_seq.get(expected, ())))  # identical copies count once
        if not rows:
            problem: str | None = f"seq {expected}: missing (a row or a data file was removed)"
        elif len(rows) > 1:
            problem = f"seq {expected}: {len(rows)} different rows claim this position (a row was inserted)"
        else:
            problem = _check(rows[0], expected, prev, erasures)
        if problem:
            problems.append(problem)
            bad.append(expected)
            break
        if len(by_seq[expected]) > 1:
            duplicated.append(expected)
        prev, last = rows[0].link, rows[0]
    if duplicated:
        problems.append(
            f"{len(duplicated)} event(s) stored more than once, from seq {duplicated[0]} to "
            f"{duplicated[-1]} (a data file was copied, or replaced by an older one)"
        )
        if not bad:
            bad.append(duplicated[0])
    reference = against or log.published_head()
    if reference is not None and not bad:
        last_seq = last.seq if last else -1
        if reference.seq > last_seq:
            problems.append(
                f"log ends at seq {last_seq} but the recorded head is at seq {reference.seq}: "
                "the tail was truncated"
            )
            bad.append(last_seq + 1)
        elif reference.seq >= 0 and by_seq[reference.seq][0].link != reference.link:
            problems.append(f"seq {reference.seq}: link differs from the recorded head "
                            "(the log was rewritten up to here)")
            bad.append(reference.seq)
    head_problems, head_bad = check_recorded_heads(log, events)
    problems += head_problems
    bad += head_bad
    head = Head(last.seq, last.link, last.recorded_at, log._table().version()) if last else None
    first = min(bad) if bad else None
    return VerifyReport(ok=not problems, events=len(events), head=head, first_bad_seq=first,
                        problems=tuple(problems))


def _check(event: Event, expected: int, prev: str, erasures: set[str]) -> str | None:
    if event.prev_link != prev:
        return f"seq {expected}: prev_link does not match the link of seq {expected - 1}"
    if event.is_tombstone:
        if event.erasure_id not in erasures:
            return f"seq {expected}: tombstone names erasure {event.erasure_id!r}, which the log does not record"
    else:
        try:
            commitment = commitment_of(event)
        except ValueError:
            return f"seq {expected}: content or salt missing or malformed in a non-tombstone event"
        if commitment != event.commitment:
            return f"seq {expected}: stored fields do not match the commitment (a byte was changed)"
    try:
        link = link_of(prev, event.commitment)
    except (TypeError, ValueError):
        return f"seq {expected}: the stored commitment is not a SHA-256 hash"
    if link != event.link:
        return f"seq {expected}: link does not match H(prev_link ‖ commitment)"
    return None


def check_recorded_heads(log: EventLog, events: list[Event]) -> tuple[list[str], list[int]]:
    """Each commit's recorded head against the rows: ``(problems, bad seqs)``.

    Every append (and compaction) records the chain head it produced in its commit's metadata.
    For each commit still in the Delta log whose head was written for that very version (a
    rebased OPTIMIZE carries a stale one, which is skipped), the last row appended at or before
    that version (``events`` sorted by seq; a row's ``table_version`` is the version of the
    append that wrote it) must have the head's seq and link. An edited head is otherwise
    invisible to the chain checks, and a tail re-sealed consistently is caught at the first
    recorded head it rewrote. The bad seq named is the first position the two disagree on.
    """
    problems: list[str] = []
    bad: list[int] = []
    versions = [e.table_version for e in events]
    for entry in log._table().history():
        raw = entry.get(HEAD_KEY)
        if raw is None:
            continue
        version = entry["version"]
        try:
            recorded = Head.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError):
            problems.append(f"commit {version}: the head in its metadata is malformed (the metadata was edited)")
            continue
        if recorded.table_version != version:
            continue
        i = bisect.bisect_right(versions, version)
        seq, link = (events[i - 1].seq, events[i - 1].link) if i else (-1, GENESIS)
        if recorded.seq != seq:
            problems.append(
                f"commit {version}: the head in its metadata (seq {recorded.seq}) does not match the rows "
                f"(seq {seq} at that version): the commit metadata was edited")
            bad.append(min(recorded.seq, seq) + 1)
        elif recorded.link != link:
            problems.append(
                f"commit {version}: the head in its metadata (seq {recorded.seq}) has another link than the "
                "row at that seq: the rows up to it were rewritten, or the commit metadata was edited")
            bad.append(seq)
    return problems, bad
