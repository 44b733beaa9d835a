"""Erasure receipts: what one erasure did, as a JSON document under ``receipts/<erasure_id>.json``.

A receipt holds no personal data: the opaque subject id, the erased events' seqs and the
pseudonyms of their ids (a keyed hash: a caller's id may be personal data, see
:mod:`refold.storage.erased_ids`) with their commitments (salted, so they cannot be reversed into
content), destroyed key ids, file names, counts, hashes, model ids and host names, and (keys in
KMS) the ARNs of KMS keys whose deletion it scheduled, with dates. In particular it does NOT hold
the names, aliases or canary strings the residue
scan looked for — only how many there were, and per hit the file, the location and the needle's
index. So :func:`verify_receipt` can re-run the residue scan only when the caller passes the
needles again (an operator keeps them with the erasure request, outside the store).

:func:`verify_receipt` re-checks what can be re-checked from the store alone: the chain verifies;
the erasure event is in the log; every erased event is a tombstone carrying the receipt's erasure
id and commitment (delete mode) or every destroyed key is gone and every erased event is
unreadable (shred mode), and every KMS key whose deletion it scheduled is still pending deletion
or deleted (a cancelled deletion would make the erased events readable again); the pre-erasure table version can no longer be loaded (delete mode);
with ``needles``, a fresh scan finds nothing; with ``refold``, the state digest matches (or the log
has grown since, which the report says).

The state digest is :data:`STATE_SCHEME` + the digest of the state tables (refold 0.2's receipts:
:data:`STATE1_SCHEME`, still recomputed). Receipts written before refold 0.2 may hold a digest of a retired scheme (:data:`RETIRED_SCHEMES`: the graph
engine's snapshot encoding, ``cols1:``, or a plain SHA-256 of its JSON): nothing computes those
any more, so their check is one line saying so, and every other check runs as for any receipt.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from refold.fold.errors import NotFoundError, StoreError
from refold.storage.layout import Layout

FORMAT = "refold-receipt/v1"
#: prefix of the state digest erasures write: the hash of the state tables' per-bucket hashes
#: (:meth:`refold.storage.state.StateStore.bucket_digest`, since refold 0.3)
STATE_SCHEME = "state2:"
#: prefix of the state digest of refold 0.2's receipts: one hash over every bucket's rows
#: (:meth:`refold.storage.state.StateStore.digest`); still recomputed by ``receipt verify``
STATE1_SCHEME = "state1:"
#: the schemes ``receipt verify`` recomputes
LIVE_SCHEMES = (STATE_SCHEME, STATE1_SCHEME)
#: digest schemes of receipts written before refold 0.2, which nothing computes any more:
#: prefix → what it digested ("": a plain SHA-256 in hex of the graph's canonical JSON)
RETIRED_SCHEMES = {
    "cols1:": "the graph engine's snapshot encoding",
    "": "the graph engine's canonical JSON",
}


def retired_scheme(digest: str | None) -> str | None:
    """How to name ``digest``'s scheme when it is one of :data:`RETIRED_SCHEMES` (else None)."""
    if not digest:
        return None
    if ":" in digest:
        prefix = digest.split(":", 1)[0] + ":"
        return f"{prefix!r} ({RETIRED_SCHEMES[prefix]})" if prefix in RETIRED_SCHEMES else None
    plain = len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
    return f"plain SHA-256 ({RETIRED_SCHEMES['']})" if plain else None


def fields_as_json(value: Any) -> dict[str, Any]:
    """A frozen dataclass of the erasure (plan, receipt) as JSON values: tuples become lists,
    mappings (also inside tuples) plain dicts."""
    out: dict[str, Any] = {}
    for f in fields(value):
        item = getattr(value, f.name)
        if isinstance(item, tuple):
            item = [dict(v) if isinstance(v, Mapping) else v for v in item]
        elif isinstance(item, Mapping):
            item = dict(item)
        out[f.name] = item
    return out

@dataclass(frozen=True)
class Receipt:
    """One erasure's record (see the module docstring for what it may and may not contain)."""

    erasure_id: str
    subject_id: str
    mode: str
    status: str  # "erased" | "noop"
    started_at: str
    completed_at: str
    head_before: Mapping[str, Any] | None = None
    head_after: Mapping[str, Any] | None = None
    #: erased events as {"event_id" (its pseudonym), "seq", "commitment", "how": "tombstone" | "shredded"}
    events: tuple[Mapping[str, Any], ...] = ()
    destroyed_key_ids: tuple[str, ...] = ()
    #: shred mode: how the keys were destroyed (:meth:`refold.storage.keys.port.KeyStore.destruction`):
    #: ``{"key_store": "file" | "kms", "how", ...}``; a per-subject KMS store adds
    #: ``kms_key_deletions``: ``[{"kms_key_id", "deletion_date", "pending_window_days", "state"}]``
    key_store: Mapping[str, Any] = field(default_factory=dict)
    erasure_event_seq: int | None = None
    #: per derived store: {"store", "rows", "detail"}
    purged: tuple[Mapping[str, Any], ...] = ()
    #: data and log files physically removed, relative to the store root
    removed_files: tuple[str, ...] = ()
    #: per Delta table: checkpoint version and log cleanup
    delta: Mapping[str, Any] = field(default_factory=dict)
    spec_hash: str | None = None
    state_digest: str | None = None
    #: model (extraction) calls the erasure's refold made: 0 when every surviving event's cached
    #: extraction was reused; None in receipts written before this field existed
    extraction_calls: int | None = None
    scan: Mapping[str, Any] = field(default_factory=dict)
    #: model engines / hosts that processed the erased events: {"engine", "model_id", "host", "events"}
    engines: tuple[Mapping[str, Any], ...] = ()
    out_of_scope: tuple[str, ...] = ()
    previous_erasure_id: str | None = None
    notes: tuple[str, ...] = ()
    #: the batch this erasure ran in (:mod:`refold.erasure.batch`), else None
    batch_id: str | None = None
    #: seconds each step took (``scan`` is the residue scan: the proof; the other steps are the
    #: work), and ``total``; a resumed erasure's steps are timed in the run that did them
    timings: Mapping[str, float] = field(default_factory=dict)
    format: str = FORMAT

    @property
    def event_ids(self) -> tuple[str, ...]:
        return tuple(e["event_id"] for e in self.events)

    def as_json(self) -> dict[str, Any]:
        return fields_as_json(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> "Receipt":
        if value.get("format") != FORMAT:
            raise StoreError(f"not a refold receipt (format {value.get('format')!r}, expected {FORMAT!r})")
        kwargs = {}
        for f in fields(cls):
            if f.name in value:
                item = value[f.name]
                kwargs[f.name] = tuple(item) if isinstance(item, list) else item
        return cls(**kwargs)

    def write(self, layout: Layout) -> Path | str:
        layout.files().put_json(_key(self.erasure_id), self.as_json())
        return receipt_path(layout, self.erasure_id)


def _key(erasure_id: str) -> str:
    return f"receipts/{erasure_id}.json"


def receipt_path(layout: Layout, erasure_id: str) -> Path | str:
    """Where the receipt lives: a local path, or its object URI on object storage."""
    if layout.is_local:
        return Path(layout.receipts) / f"{erasure_id}.json"
    return layout.files().url(_key(erasure_id))


def load_receipt(path: str | Path, *, layout: Layout | None = None) -> Receipt:
    """The receipt at a local ``path``, or (``layout`` given) at an object URI of that store."""
    where = str(path)
    if layout is not None and not layout.is_local and where.startswith(layout.root.rstrip("/") + "/"):
        data = layout.files().get(where[len(layout.root.rstrip("/")) + 1:])
    else:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            data = None
    if data is None:
        raise NotFoundError(f"no receipt at {path}; list them under STORE/receipts/")
    return _parse(where, data)


def _parse(where: str, data: bytes) -> Receipt:
    try:
        return Receipt.from_json(json.loads(data))
    except ValueError as exc:
        raise StoreError(f"{where} is not valid JSON ({exc})") from exc


def list_receipts(layout: Layout) -> list[Receipt]:
    """Completed receipts of a store, oldest first (pending journals are not receipts)."""
    files = layout.files()
    out = []
    for key in files.list("receipts"):
        if key.count("/") != 1 or not key.endswith(".json") or key.endswith(".pending.json"):
            continue
        data = files.get(key)
        if data is None:
            continue
        try:
            out.append(_parse(files.url(key), data))
        except (StoreError, NotFoundError):
            continue
    return sorted(out, key=lambda r: r.started_at)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class ReceiptReport:
    """Outcome of :func:`verify_receipt`: ``ok`` when every check passed."""

    erasure_id: str
    checks: tuple[Check, ...]
    #: the receipt's record of the erasure refold's model calls (None: not recorded)
    extraction_calls: int | None = None

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def as_json(self) -> dict[str, Any]:
        return {"erasure_id": self.erasure_id, "ok": self.ok, "extraction_calls": self.extraction_calls,
                "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks]}


def verify_receipt(root: str | Path, receipt: str | Path | Receipt, *,
                   refold: Callable[[str], Any] | None = None, needles: Iterable[str] = (),
                   canaries: Iterable[str] = (), keystore=None,
                   storage_options: dict[str, str] | None = None) -> ReceiptReport:
    """Re-check a receipt against the store at ``root`` (see the module docstring).

    ``needles`` (names, matched as whole words) and ``canaries`` (matched as substrings) are
    scanned for as :func:`refold.erasure.scan.scan_report` does."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from refold.fold.events import Event
    from refold.storage.keys.crypto import open_event
    from refold.storage.erased_ids import is_pseudonym
    from refold.storage.keys.select import open_keystore
    from refold.storage.layout import read_settings
    from refold.storage.log.schema import table_to_events
    from refold.storage.log.eventlog import EventLog
    from refold.erasure.scan import scan_report
    from refold.storage.log.verify import verify

    rec = receipt if isinstance(receipt, Receipt) else load_receipt(receipt, layout=Layout(str(root), storage_options))
    layout = Layout(str(root), storage_options)
    log = EventLog(layout, storage_options=storage_options)
    checks: list[Check] = []
    report = verify(log)
    checks.append(Check("chain", report.ok, "; ".join(report.problems) or f"{report.events} events verify"))
    if rec.status == "noop":
        checks.append(Check("noop", True, f"nothing to erase; see erasure {rec.previous_erasure_id}"))
        return ReceiptReport(rec.erasure_id, tuple(checks), rec.extraction_calls)
    # erased events are found by position: the receipt names them by the pseudonyms of their ids
    # (refold.storage.erased_ids), and a shredded event's row keeps its own id
    erasure = next(iter(log.events_by_id(None, [rec.erasure_id])), None)
    seqs = sorted({int(e["seq"]) for e in rec.events})
    by_seq: dict[int, Event] = {e.seq: e for e in table_to_events(
        log.arrow(filter=pc.field("seq").isin(seqs)))} if seqs else {}
    checks.append(Check("erasure event", erasure is not None and erasure.kind == "erasure"
                        and erasure.erasure_id == rec.erasure_id,
                        f"seq {erasure.seq}" if erasure else "the log has no erasure event with this id"))
    bad = []
    if rec.destroyed_key_ids or any(e.get("how") == "shredded" for e in rec.events):
        keystore = keystore or open_keystore(layout, read_settings(layout))
        alive = [k for k in rec.destroyed_key_ids if keystore.exists(k)]
        checks.append(Check("keys destroyed", not alive,
                            f"{len(rec.destroyed_key_ids)} key(s) gone" if not alive else f"still present: {alive}"))
        deletions = (rec.key_store or {}).get("kms_key_deletions") or ()
        state_of = getattr(keystore, "kms_key_state", None)  # only a KMS key store can answer
        if deletions and state_of is not None:
            states = {d["kms_key_id"]: state_of(d["kms_key_id"]) for d in deletions}
            wrong = [f"{k} is {s}" for k, s in states.items() if s not in ("PendingDeletion", "deleted")]
            checks.append(Check("KMS key deletions", not wrong, "; ".join(wrong) or
                                f"{len(states)} KMS key(s) pending deletion or deleted"))
    for item in rec.events:
        event = by_seq.get(int(item["seq"]))
        if event is None:
            bad.append(f"seq {item['seq']}: missing from the log")
        elif event.commitment != item["commitment"]:  # the commitment covers the original id
            bad.append(f"seq {item['seq']}: commitment differs from the receipt")
        elif item.get("how") == "tombstone":
            # an event two subjects of one batch shared is tombstoned once, by the first
            # subject's erasure: the other's receipt names that erasure on the event
            by = item.get("erasure_id") or rec.erasure_id
            if not (event.is_tombstone and event.erasure_id == by):
                bad.append(f"seq {event.seq}: not a tombstone of this erasure")
            elif is_pseudonym(item["event_id"]) and event.event_id != item["event_id"]:
                bad.append(f"seq {event.seq}: the tombstone's id differs from the receipt")
            elif any([event.content, event.source, event.salt, event.justification, event.fact,
                      event.subjects, event.principals]):
                bad.append(f"seq {event.seq}: tombstone still carries data")
        elif open_event(event, keystore) is not None:
            bad.append(f"seq {event.seq}: still readable")
    checks.append(Check("events erased", not bad,
                        "; ".join(bad[:5]) or f"{len(rec.events)} event(s) erased"))
    before = (rec.head_before or {}).get("table_version")
    if rec.mode == "delete" and any(e.get("how") == "tombstone" for e in rec.events) and before is not None:
        try:
            DeltaTable(layout.events, version=int(before), storage_options=storage_options)
            readable = True
        except Exception:  # noqa: BLE001 - any failure to load is the expected outcome
            readable = False
        checks.append(Check("old versions unreadable", not readable,
                            f"table version {before} {'can still be loaded' if readable else 'cannot be loaded'}"))
    needles = [n for n in needles if n]
    canaries = [c for c in canaries if c]
    if needles or canaries:
        scan = scan_report(root, needles, canaries=canaries, storage_options=storage_options)
        where = ", ".join(f"{h.file} @ {h.location}" for h in scan.hits[:5])
        checks.append(Check("residue scan", not scan.hits,
                            f"{len(scan.hits)} hit(s) in {scan.files} files" + (f": {where}" if where else "")))
    if refold is not None and rec.state_digest is not None:
        checks.append(_digest_check(rec, refold, grew=(report.head.seq if report.head else -1)
                                    > int((rec.head_after or {}).get("seq", -1)), checked=checks))
    return ReceiptReport(rec.erasure_id, tuple(checks), rec.extraction_calls)


def _digest_check(rec: Receipt, refold: Callable[[str], Any], *, grew: bool, checked: list[Check]) -> Check:
    """The state digest check: ``refold``'s digest of the state tables against the receipt's. A
    receipt of a retired scheme (:data:`RETIRED_SCHEMES`) is not refolded: it gets a one-line
    note naming the checks that still ran (``checked``), not a failure; a digest of no scheme
    refold ever wrote fails."""
    scheme = next((s for s in LIVE_SCHEMES if rec.state_digest.startswith(s)), None)
    if scheme is None:
        retired = retired_scheme(rec.state_digest)
        if retired is None:
            return Check("state digest", False, f"unknown digest scheme (refold writes {STATE_SCHEME!r}): not a "
                                                "digest refold wrote; compare the receipt with its copies")
        kept = ", ".join(c.name for c in checked)
        return Check("state digest", True, f"digest scheme {retired} is retired since refold 0.2 and not "
                                           f"recomputed; still checked: {kept}")
    outcome = refold(scheme)
    digest = getattr(outcome, "state_digest", outcome)
    if digest == rec.state_digest:
        return Check("state digest", True, "refolded state matches")
    return Check("state digest", grew, "the log grew since the erasure; the digest is not comparable" if grew
                 else "refolded state differs from the receipt")
