"""verify: recompute the chain from the stored rows and name the first bad seq.

Checks, in seq order: seqs contiguous from 0 with one row each (identical copies, as left by a
duplicated or replaced data file, are reported too); each non-tombstone commitment recomputed from its
fields; each ``prev_link`` equal to the previous row's link and each ``link`` recomputed; each
tombstone named, with the fields it kept, by the record of an erasure recorded in the chain after it
(:mod:`refold.fold.erasure_record`). Besides the rows: each data file's Delta statistics (min/max
per column, row count), which reads prune files by, against the file's actual rows; every published
head under ``receipts/heads`` (each line on its own: a malformed one is reported, named, and does
not hide the rest) and the head kept elsewhere (``against``) against the log, which catches a
removed newest commit; and whether an erasure recorded *after* that reference head tombstoned an
event the head vouched for (a forged erasure appended at the tail looks exactly like that).

Each commit's recorded head (its metadata) is checked against the rows too
(:func:`check_recorded_heads`).

Never raises on table content: whatever a row or a file holds becomes a finding.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from refold.fold.errors import IntegrityError, ValidationError
from refold.fold.chain import GENESIS, commitment_of, link_of
from refold.fold.erasure_record import Erased, ErasureRecord, tombstone_problem
from refold.fold.events import MAX_TIME, MIN_TIME, Event
from refold.storage.log.heads import publish_store_head, store_head_lines
from refold.storage.log.eventlog import EventLog, Head
from refold.storage.log.reader import HEAD_KEY
from refold.storage.log.schema import EVENTS_SCHEMA, stored_time_texts, table_to_events
from refold.storage.log.signing import (KEY_ENV, PUBLIC_KEY_FILE, HeadSigner, fingerprint, load_private, recorded_public_key,
                      signature_ok)
from refold.storage.log.verify_stats import statistics_problems
from refold.storage.log.checkpoints import CheckpointError, checkpoint_fields, open_checkpoint, parse_checkpoint
from refold.storage.log.tree_views import check_tree, tree_view

#: what a field may raise when a stored value has the wrong shape (a null inside a list, a
#: non-hex hash, a null where the header needs a value)
_MALFORMED = (TypeError, ValueError, AttributeError, OverflowError, KeyError)


@dataclass(frozen=True)
class VerifyReport:
    """Outcome of :func:`verify`; ``ok`` is False when ``first_bad_seq`` or ``problems`` are set."""

    ok: bool
    events: int
    head: Head | None
    first_bad_seq: int | None = None
    problems: tuple[str, ...] = field(default=())
    #: with ``signed_heads``: the key checked against ({"key": fingerprint, "key_from": "pinned" or
    #: "store"}) and the newest correctly signed head's seq ("signed_seq", None when there is none)
    signed: dict | None = None
    #: findings that are not problems (a published head a crash cut short)
    notes: tuple[str, ...] = field(default=())

    def as_json(self) -> dict:
        out = {
            "ok": self.ok,
            "events": self.events,
            "head": self.head.as_json() if self.head else None,
            "first_bad_seq": self.first_bad_seq,
            "problems": list(self.problems),
            "notes": list(self.notes),
        }
        if self.signed is not None:
            out["signed"] = dict(self.signed)
        return out


#: seq → canonical text of each stored time that Python's datetime could not hold as stored
StoredTimes = dict[int, dict[str, str]]


def _read_events(log: EventLog) -> tuple[list[Event], list[tuple[int | None, str]], StoredTimes]:
    """All events, reading file by file so one damaged file does not hide the others.

    A file that cannot be read, holds text that is not UTF-8, or a field that does not decode
    (a garbled ``fact``) is a finding named by its lowest seq, not a crash; so is a file whose
    statistics in the Delta log do not cover its rows. A time outside the range Python reads
    (stored by an older refold) comes back clamped; its stored text is returned too, so the
    commitment is checked against what was sealed.
    """
    dt = log.table()
    if not log.layout.is_local:
        table = log.arrow()
        return (*_decoded(table, "the log"), _stored_times(table))
    actions = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    events: list[Event] = []
    broken: list[tuple[int | None, str]] = []
    findings = []
    stored: StoredTimes = {}
    covered: set[int] = set()  # seqs held by a file whose statistics cover them
    for action in actions:
        path = Path(log.layout.events) / action["path"]
        try:
            table = pq.read_table(path).select(EVENTS_SCHEMA.names).cast(EVENTS_SCHEMA)
            table.validate(full=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is a finding, not a crash
            broken.append((action.get("min.seq"), f"data file {action['path']} unreadable: {exc}"))
            continue
        finding = statistics_problems(action, table)
        stored.update(_stored_times(table))
        found, bad = _decoded(table, f"data file {action['path']}")
        events += found
        broken += bad
        if finding is not None:
            findings.append(finding)
            covered.update(e.seq for e in found if e.seq not in finding.hidden)
        else:
            covered.update(e.seq for e in found)
    if findings:
        # a row is hidden only if no file whose statistics cover it holds it too (a stale copy
        # of a file, say, hides nothing: its rows are read from the original)
        for finding in findings:
            lost = sorted(finding.hidden - covered)
            broken.append((lost[0] if lost else None, finding.message))
    events.sort(key=lambda e: e.seq)
    return events, broken, stored


def _stored_times(table: pa.Table) -> StoredTimes:
    """The canonical text of the valid times outside [MIN_TIME, MAX_TIME] in ``table``, by seq."""
    out: StoredTimes = {}
    for name in ("valid_from", "valid_to"):
        column = table[name]
        outside = pc.or_(pc.less(column, pa.scalar(MIN_TIME, EVENTS_SCHEMA.field(name).type)),
                         pc.greater(column, pa.scalar(MAX_TIME, EVENTS_SCHEMA.field(name).type)))
        if not pc.any(outside).as_py():
            continue
        rows = table.filter(outside)
        for seq, text in zip(rows["seq"].to_pylist(), stored_time_texts(rows[name])):
            out.setdefault(seq, {})[name] = text
    return out


def _decoded(table: pa.Table, where: str) -> tuple[list[Event], list[tuple[int | None, str]]]:
    """The rows of ``table`` as events; rows without a seq, or that do not decode, as findings."""
    broken: list[tuple[int | None, str]] = []
    nulls = table["seq"].null_count
    if nulls:
        broken.append((None, f"{where}: {nulls} row(s) without a seq (a row was rewritten)"))
        table = table.filter(table["seq"].is_valid())
    try:
        return list(table_to_events(table)), broken
    except Exception:  # noqa: BLE001 - find the row that does not decode
        events = []
        for i in range(table.num_rows):
            row = table.slice(i, 1)
            try:
                events.extend(table_to_events(row))
            except Exception as exc:  # noqa: BLE001
                seq = row["seq"][0].as_py()
                broken.append((seq, f"seq {seq}: a stored field does not decode ({exc})"))
        return events, broken


@dataclass(frozen=True)
class _Recorded:
    """Erasure records found in the log: per seq, {erasure id: (entry, seq of the erasure event)}."""

    named: dict[int, dict[str, tuple[Erased, int]]]
    problems: list[tuple[int, str]]

    @classmethod
    def of(cls, events: list[Event]) -> "_Recorded":
        named: dict[int, dict[str, tuple[Erased, int]]] = {}
        problems = []
        for e in events:
            if e.kind != "erasure" or e.is_tombstone:
                continue
            try:
                record = ErasureRecord.parse(e.content)
            except ValueError as exc:
                problems.append((e.seq, f"seq {e.seq}: erasure {e.erasure_id!r} does not list the events it "
                                        f"erased ({exc}); its tombstones cannot be told from forged ones"))
                continue
            if record.erasure_id != e.erasure_id:
                problems.append((e.seq, f"seq {e.seq}: erasure record names erasure {record.erasure_id!r}, "
                                        f"the event {e.erasure_id!r}"))
                continue
            for entry in record.erased:
                named.setdefault(entry.seq, {})[record.erasure_id] = (entry, e.seq)
        return cls(named, problems)

    def entry(self, tombstone: Event) -> tuple[Erased | None, int | None]:
        found = self.named.get(tombstone.seq, {}).get(tombstone.erasure_id or "")
        return found if found else (None, None)


def verify(log: EventLog, *, against: Head | None = None, signed_heads: bool = False,
           public_key: Ed25519PublicKey | None = None) -> VerifyReport:
    """Recompute commitments and links; check statistics, tombstones and published heads; compare
    the tail with ``against`` (a head kept elsewhere) or the newest published head.

    ``first_bad_seq`` is the first position whose event is missing, altered, claimed by two
    different rows, or hidden from pruned reads by wrong statistics; when nothing else is wrong but
    some rows are stored twice (a data file copied, or one replaced by an older one), it is the
    first duplicated seq. A problem with a published-heads line alone leaves it None.

    ``signed_heads`` (implied by ``public_key``): the log must end at a head signed by the
    operator's key (:mod:`refold.storage.log.signing`): ``public_key`` when given (pinned by the
    caller), else the one the store records; events past the newest signed head are reported
    from the first of them, and that head is the reference for erasures recorded after it.
    """
    events, broken, stored = _read_events(log)
    problems: list[str] = [msg for _, msg in broken]
    bad: list[int] = [seq for seq, _ in broken if seq is not None]
    recorded = _Recorded.of(events)
    by_seq: dict[int, list[Event]] = {}
    for event in events:
        by_seq.setdefault(event.seq, []).append(event)
    if by_seq and min(by_seq) < 0:
        problems.append(f"seq {min(by_seq)}: negative positions do not exist")
        bad.append(0)
    prev = GENESIS
    last: Event | None = None
    duplicated: list[int] = []
    intact = not (by_seq and min(by_seq) < 0)  # until the walk below breaks
    for expected in range(max(by_seq, default=-1) + 1):
        rows = list(dict.fromkeys(by_seq.get(expected, ())))  # identical copies count once
        if not rows:
            problem: str | None = f"seq {expected}: missing (a row or a data file was removed)"
        elif len(rows) > 1:
            problem = f"seq {expected}: {len(rows)} different rows claim this position (a row was inserted)"
        else:
            problem = _check(rows[0], expected, prev, recorded, stored.get(expected))
        if problem:
            problems.append(problem)
            bad.append(expected)
            intact = False
            break
        if len(by_seq[expected]) > 1:
            duplicated.append(expected)
        prev, last = rows[0].link, rows[0]
    for seq, problem in recorded.problems:
        if last is not None and seq <= last.seq:  # (past the first break, the chain speaks first)
            problems.append(problem)
            bad.append(seq)
    if duplicated:
        problems.append(
            f"{len(duplicated)} event(s) stored more than once, from seq {duplicated[0]} to "
            f"{duplicated[-1]} (a data file was copied, or replaced by an older one)"
        )
        if not bad:
            bad.append(duplicated[0])
    notes: list[str] = []
    # (a store on object storage publishes its heads too: one object each)
    signed = _check_heads(log, against, by_seq, last if intact else None, recorded, problems, bad, notes,
                          signed_heads=signed_heads or public_key is not None, public_key=public_key)
    head_problems, head_bad = check_recorded_heads(log, events)
    problems += head_problems
    bad += head_bad
    if intact:  # the Merkle tree and the published checkpoints, against the chain's commitments
        _check_checkpoints(log, [by_seq[seq][0].commitment for seq in range(len(by_seq))], problems, bad, notes,
                           key=public_key, signed=signed_heads or public_key is not None)
    try:
        head = Head(last.seq, last.link, last.recorded_at, log.table().version()) if last else None
    except _MALFORMED:
        head = None
    first = min(bad) if bad else None
    return VerifyReport(ok=not problems, events=len(events), head=head, first_bad_seq=first,
                        problems=tuple(problems), signed=signed, notes=tuple(notes))


def _check_heads(log: EventLog, against: Head | None, by_seq: dict[int, list[Event]], last: Event | None,
                 recorded: _Recorded, problems: list[str], bad: list[int], notes: list[str], *, signed_heads: bool,
                 public_key: Ed25519PublicKey | None) -> dict | None:
    """Every published head, then ``against``, against the log (see the module docstring);
    ``last`` is the last event of an intact chain (None when the chain is broken or empty)."""
    chain_ok = last is not None or not by_seq
    last_seq = last.seq if last is not None else -1
    lines = store_head_lines(log.layout)
    heads_dir = "receipts/heads"
    published: list[Head] = []
    for line in lines:
        if line.head is None and line.torn:
            notes.append(f"{heads_dir}/{line.where}: a head cut short by a crash during its write; ignored")
            continue
        if line.head is None:
            problems.append(f"{heads_dir}/{line.where}: not a chain head ({line.error}); neither refold nor a "
                            "crash writes this: remove the line (keep a copy) and run verify again")
            continue
        if not chain_ok:
            continue  # the log itself is damaged: its heads say nothing more
        problem = _head_problem(line.head, by_seq, last_seq, "recorded head")
        if problem:
            problems.append(f"{heads_dir}/{line.where}: {problem}; if the log is intact, this line is "
                            "not a head refold published: remove it")
            bad.append(min(line.head.seq, last_seq + 1))
        else:
            published.append(line.head)
    signed, source = None, "the newest published head"
    if signed_heads:
        signed, newest_signed = _check_signatures(log, lines, public_key, last_seq if chain_ok else None,
                                                  problems, bad)
        if newest_signed is not None:  # the reference below: only a signed head vouches
            published, source = [newest_signed], "the newest signed head"
    if not chain_ok:
        return signed
    reference = against
    if against is not None:
        problem = _head_problem(against, by_seq, last_seq, "recorded head kept elsewhere")
        if problem:
            problems.append(problem)
            bad.append(min(against.seq, last_seq + 1))
            return signed
    elif published:
        reference = max(published, key=lambda h: (h.seq, h.table_version))
    if reference is None or reference.seq >= last_seq:
        return signed
    source = "the head kept elsewhere" if against is not None else source
    for seq in range(reference.seq + 1):
        event = by_seq[seq][0]
        if not event.is_tombstone:
            continue
        _, erasure_seq = recorded.entry(event)
        if erasure_seq is not None and erasure_seq > reference.seq:
            problems.append(
                f"seq {seq}: erased by erasure {event.erasure_id!r} recorded at seq {erasure_seq}, after "
                f"{source} (seq {reference.seq}), which vouches for this event; a forged erasure "
                "appended at the tail looks exactly like this. If the erasure is yours (see its receipt "
                "under receipts/), keep a head taken after it (`refold head STORE --json`)")
            bad.append(seq)
            return signed
    return signed


def _check_checkpoints(log: EventLog, commitments: list[str], problems: list[str], bad: list[int],
                       notes: list[str], *, key: Ed25519PublicKey | None, signed: bool) -> None:
    """Every checkpoint published with a head (refold.storage.log.checkpoints) against the Merkle tree
    of the log's commitments, and the stored tree (tiles, edge) against the same tree. With
    ``signed``, each checkpoint's signature must verify with ``key`` (default: the recorded key)."""
    heads_dir = "receipts/heads"
    lines = [line for line in store_head_lines(log.layout) if line.head is not None and line.checkpoint]
    parsed = []
    for line in lines:
        note = line.checkpoint or ""
        split = note.rfind("\n\n")
        try:
            checkpoint = parse_checkpoint(note[:split + 1] if split >= 0 else note)
        except CheckpointError as exc:
            problems.append(f"{heads_dir}/{line.where}: its checkpoint is not a signed checkpoint ({exc}); neither "
                            "refold nor a crash writes this")
            continue
        parsed.append((line, checkpoint))
    tree = check_tree(log.layout, commitments, [c.size for _, c in parsed])
    roots = tree.roots
    problems += tree.problems
    notes += tree.notes
    if tree.truncated_at is not None:
        bad.append(tree.truncated_at)
    if signed and key is None:
        try:
            key = recorded_public_key(log.layout)
        except ValidationError:
            key = None  # reported by the signature check of the heads
    for line, checkpoint in parsed:
        where = f"{heads_dir}/{line.where}"
        if checkpoint.size != line.head.seq + 1:
            problems.append(f"{where}: its checkpoint is of a tree of {checkpoint.size} leaves, the head it is "
                            f"published with ends at seq {line.head.seq}: the line was edited")
        elif checkpoint.size > len(commitments):
            problems.append(f"{where}: the checkpoint of {checkpoint.size} leaves is past the log's end "
                            f"({len(commitments)} events): the tail was truncated")
            bad.append(len(commitments))
        elif roots.get(checkpoint.size) != checkpoint.root:
            problems.append(f"{where}: the checkpoint of {checkpoint.size} leaves names another root than the "
                            "Merkle tree of the log's first events: the log was rewritten before that size, or the "
                            "checkpoint was edited")
        if signed and key is not None:
            try:
                open_checkpoint(line.checkpoint or "", key)
            except CheckpointError as exc:
                problems.append(f"{where}: checkpoint of {checkpoint.size} leaves: {exc}")


def _check_signatures(log: EventLog, lines, public_key: Ed25519PublicKey | None, last_seq: int | None,
                      problems: list[str], bad: list[int]) -> tuple[dict, Head | None]:
    """Signed published heads (see :func:`verify`): (the report's ``signed``, the newest head
    correctly signed, None when there is none). ``last_seq`` None: the chain is broken."""
    key_from = "pinned"
    if public_key is None:
        key_from = "store"
        try:
            public_key = recorded_public_key(log.layout)
        except ValidationError as exc:
            problems.append(f"receipts/heads/{PUBLIC_KEY_FILE}: {exc}")
            return {"key": None, "key_from": key_from, "signed_seq": None}, None
        if public_key is None:
            problems.append("the store records no head-signing key: set one up with `refold signing-key "
                            "STORE --key PATH`, or pass the operator's public key with --public-key")
            return {"key": None, "key_from": key_from, "signed_seq": None}, None
    key = fingerprint(public_key)
    newest: Head | None = None
    for line in lines:
        if line.head is None or line.signature is None:
            continue  # malformed lines are reported already; unsigned ones predate the key
        if line.key != key or not signature_ok(public_key, line.head, line.signature):
            whose = "another key" if line.key != key else "this key, but does not verify"
            problems.append(f"receipts/heads/{line.where}: head at seq {line.head.seq} is signed by {whose} "
                            f"(key {key[:16]}…): a forged or altered head")
            continue
        if newest is None or line.head.seq > newest.seq:
            newest = line.head
    out = {"key": key, "key_from": key_from, "signed_seq": newest.seq if newest else None}
    if last_seq is None:
        return out, newest
    covered = newest.seq if newest is not None else -1
    if covered < last_seq:
        problems.append(
            f"seq {covered + 1}: events {covered + 1}..{last_seq} are not covered by a head signed with key "
            f"{key[:16]}… ({key_from}): appended without the signing key (a forged tail), or their head was "
            f"never published (a crash right after the commit). If they are yours, check them and sign the "
            f"current head: `refold sign-head STORE` with {KEY_ENV} set")
        bad.append(covered + 1)
    return out, newest


def _head_problem(head: Head, by_seq: dict[int, list[Event]], last_seq: int, what: str) -> str | None:
    if head.seq > last_seq:
        return (f"log ends at seq {last_seq} but the {what} is at seq {head.seq}: the tail was truncated")
    if head.seq >= 0 and by_seq[head.seq][0].link != head.link:
        return f"seq {head.seq}: link differs from the {what} (the log was rewritten up to here)"
    if head.seq == -1 and head.link != GENESIS:
        return f"the {what} at seq -1 does not name the empty chain"
    return None


def _check(event: Event, expected: int, prev: str, recorded: _Recorded,
           stored_times: dict[str, str] | None = None) -> str | None:
    if event.prev_link != prev:
        return f"seq {expected}: prev_link does not match the link of seq {expected - 1}"
    if event.is_tombstone:
        entry, erasure_seq = recorded.entry(event)
        problem = tombstone_problem(event, entry, erasure_seq)
        if problem:
            return problem
    else:
        try:
            commitment = commitment_of(event, stored_times=stored_times)
        except _MALFORMED as exc:
            return f"seq {expected}: a stored field is missing or malformed ({exc})"
        if commitment != event.commitment:
            return f"seq {expected}: stored fields do not match the commitment (a byte was changed)"
    try:
        link = link_of(prev, event.commitment)
    except _MALFORMED:
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
    # a malformed row (no table_version) counts as older than any commit: it is reported elsewhere
    versions = [e.table_version if isinstance(e.table_version, int) else -1 for e in events]
    for entry in log.table().history():
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


def sign_current_head(log, key_path: str | os.PathLike | None = None) -> Head:
    """Publish the log's current head signed with the operator's key (``key_path``, else
    ``REFOLD_SIGNING_KEY``), after a full ``verify`` passes: signing vouches for every event up
    to the head, so a log that does not verify is refused (IntegrityError naming the problem).

    For setting up signing on a log that already has events, and for the events of an append
    whose signed head was never published (a crash right after its commit)."""
    path = key_path or os.environ.get(KEY_ENV)
    if not path:
        raise ValidationError(f"no signing key: pass --key PATH or set {KEY_ENV}")
    private = load_private(path, "given" if key_path else KEY_ENV)
    recorded = recorded_public_key(log.layout)
    key = fingerprint(private.public_key())
    if recorded is None or fingerprint(recorded) != key:
        raise ValidationError(f"{log.layout.root} does not record this key ({key[:16]}…); record it first with "
                              f"`refold signing-key {log.layout.root} --key {path}`")
    report = verify(log)
    if not report.ok:
        raise IntegrityError(f"the log does not verify, so its head is not signed: {report.problems[0]}",
                             first_bad_seq=report.first_bad_seq)
    head = log.head()
    signer = HeadSigner(private, key)
    size = head.seq + 1  # the checkpoint of the same events rides with the signed head
    publish_store_head(log.layout, head, signer=signer,
                       extra=checkpoint_fields(signer, size, tree_view(log, size).root()))
    return head
