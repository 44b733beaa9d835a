"""Chain heads: the newest log position, and its publication under ``receipts/heads/``.

Each append publishes the head it created so ``verify`` can tell a truncated tail — a removed
newest commit — from a short log. A head kept *outside* the store (``refold head --json``) is the
stronger check (`verify --against`).

Publication is one JSON line appended to ``receipts/heads/heads.jsonl`` through a descriptor each
process keeps open (``O_APPEND``: a line is one ``write``, so lines of concurrent writers do not
interleave). A file per head (what stores made before 2026-12 hold: ``<table version>.json``,
still read) cost a file creation, a rename and a listing per append — ~1.3 ms on this machine's
ext4, a quarter of a 1k-event append. When the journal passes :data:`ROTATE_AT` bytes, the writer
that notices rewrites it with the newest heads (temporary file + rename); other processes see the
new file at their next publication (inode check). Publishing stays best effort: a head appended
to the old file in the instant of a rotation is lost, as one would be by a crash, and the reader
falls back to the newest head that is there.
"""

from __future__ import annotations

import json
import os
import threading
import warnings
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from refold.storage.files.modes import file_mode, make_dirs

_HEAD_GLOB = "[0-9]" * 20 + ".json"  # receipts/heads/<table version, 20 digits>.json (older stores)
JOURNAL = "heads.jsonl"
#: journal size that triggers a rotation (~6k heads); the rotation keeps the newest ``keep``
ROTATE_AT = 1 << 20
#: how much of the journal's end a reader parses: heads of concurrent writers can land a little
#: out of order, never by hundreds of lines
_TAIL = 16 * 1024


@dataclass(frozen=True)
class Head:
    """The newest position of the log: last seq (-1 when empty), its link, record time and table version."""

    seq: int
    link: str
    recorded_at: datetime
    table_version: int

    def as_json(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "link": self.link,
            "recorded_at": self.recorded_at.isoformat(),
            "table_version": self.table_version,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> "Head":
        return cls(
            seq=int(value["seq"]),
            link=str(value["link"]),
            recorded_at=datetime.fromisoformat(value["recorded_at"]),
            table_version=int(value["table_version"]),
        )


@dataclass(frozen=True)
class HeadLine:
    """One entry of the published heads as ``verify`` reads them: where it is (``heads.jsonl
    line 7``, or a legacy file's name) and the head, or why it is not one."""

    where: str
    head: Head | None
    error: str | None = None
    #: the start of a head a crash cut short (or a legacy file it left empty): no claim, not an error
    torn: bool = False
    #: a signed head's Ed25519 signature (hex) and its key's fingerprint (refold.storage.log.signing)
    signature: str | None = None
    key: str | None = None
    #: the signed checkpoint of the tree of seq + 1 leaves published with it, a C2SP signed note
    #: (refold.storage.log.checkpoints); None on unsigned lines and lines of older refolds
    checkpoint: str | None = None


def _strict_head(value: Any) -> Head:
    """A head from parsed JSON, refusing what no writer produces (ValueError saying what)."""
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in ("seq", "link", "recorded_at", "table_version") if k not in value]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    seq, link, version = value["seq"], value["link"], value["table_version"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < -1:
        raise ValueError(f"seq {seq!r} is not a log position")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ValueError(f"table_version {version!r} is not a table version")
    if not isinstance(link, str) or len(link) != 64 or any(c not in "0123456789abcdef" for c in link):
        raise ValueError("link is not a SHA-256 hash in hex")
    if not isinstance(value["recorded_at"], str):
        raise ValueError("recorded_at is not a time")
    return Head.from_json(value)


def read_head_lines(folder: str | os.PathLike) -> list[HeadLine]:
    """Every published head in ``folder`` (the whole journal, then files of older stores), each
    parsed on its own so that one bad line is reported without hiding the others."""
    folder = Path(folder)
    out: list[HeadLine] = []
    try:
        text = (folder / JOURNAL).read_bytes()
    except FileNotFoundError:
        text = b""
    for number, line in enumerate(text.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{JOURNAL} line {number}"
        try:
            value = json.loads(line)
            head = _strict_head(value)
            signature, key, checkpoint = value.get("sig"), value.get("key"), value.get("checkpoint")
            if not all(v is None or isinstance(v, str) for v in (signature, key, checkpoint)):
                raise ValueError("sig, key or checkpoint is not a string")
            out.append(HeadLine(where, head, signature=signature, key=key, checkpoint=checkpoint))
        except (ValueError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            out.append(HeadLine(where, None, str(exc), torn=_cut_short(line)))
    for path in sorted(folder.glob(_HEAD_GLOB)) if folder.exists() else ():
        try:
            text = path.read_bytes()
            out.append(HeadLine(path.name, _strict_head(json.loads(text))))
        except (OSError, ValueError, TypeError) as exc:
            out.append(HeadLine(path.name, None, str(exc), torn=_cut_short(text) if not isinstance(exc, OSError)
                                else False))
    return out


_LINE_START = b'{"seq": '  # how every head refold writes begins (json.dumps of Head.as_json)


def _cut_short(text: bytes) -> bool:
    """Whether ``text``, which does not parse, is what a write cut short by a crash leaves: empty,
    or the beginning of a head as refold writes it (no closing brace)."""
    text = text.strip()
    if _LINE_START.startswith(text):
        return True
    return text.startswith(_LINE_START) and not text.endswith(b"}")


def publish_head(folder: str | os.PathLike, head: Head, *, keep: int = 16, signer=None,
                 extra: dict[str, Any] | None = None) -> None:
    """Append ``head`` to the folder's journal, signed when a ``signer``
    (:class:`~refold.storage.log.signing.HeadSigner`) is given, with ``extra`` fields (a signed
    checkpoint). Best effort: the commit already landed, so a failure here warns instead of
    failing the append."""
    line = head.as_json()
    if signer is not None:
        line.update(signer.sign(head))
    if extra:
        line.update(extra)
    try:
        _journal(Path(folder)).append(line, keep=keep)
    except OSError as exc:
        warnings.warn(f"refold: could not publish the chain head of version "
                      f"{head.table_version} under {folder}: {exc}", RuntimeWarning, stacklevel=3)


def read_published_head(folder: str | os.PathLike) -> Head | None:
    """The newest readable head published in ``folder`` (None when none was published)."""
    folder = Path(folder)
    if not folder.exists():
        return None
    heads = _journal_tail(folder / JOURNAL)
    for path in reversed(sorted(folder.glob(_HEAD_GLOB))):  # a store from before the journal
        try:
            heads.append(Head.from_json(json.loads(path.read_text())))
            break
        except (OSError, ValueError, KeyError):
            continue  # a file a crash left empty: the one before
    return max(heads, key=lambda h: h.table_version, default=None)


class _Journal:
    """One process's open descriptor on a folder's journal (shared by its threads)."""

    def __init__(self, folder: Path):
        self.path = folder / JOURNAL
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.inode: int | None = None

    def append(self, value: dict[str, Any], *, keep: int) -> None:
        # the newline goes first: a line a crash cut short is closed by the next one, not joined
        line = ("\n" + json.dumps(value)).encode()
        with self.lock:
            self._open_current()
            os.write(self.fd, line)
            if os.lseek(self.fd, 0, os.SEEK_CUR) > ROTATE_AT:
                self._rotate(keep)

    def _open_current(self) -> None:
        """Open the journal, or reopen it when another process rotated (replaced) it."""
        try:
            current = os.stat(self.path).st_ino
        except FileNotFoundError:
            current = None
        if self.fd is not None and current == self.inode:
            return
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        make_dirs(self.path.parent)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode(self.path.parent))
        self.inode = os.fstat(self.fd).st_ino

    def _rotate(self, keep: int) -> None:
        # the lines as written (a signed head keeps its signature), newest heads last
        newest = sorted(_journal_tail(self.path, raw=True), key=lambda v: v[0].table_version)[-keep:]
        tmp = self.path.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{JOURNAL}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, file_mode(self.path.parent))
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("".join("\n" + json.dumps(value) for _, value in newest))
        os.replace(tmp, self.path)
        for old in sorted(self.path.parent.glob(_HEAD_GLOB)):  # superseded by the journal
            old.unlink(missing_ok=True)
        os.close(self.fd)
        self.fd = None


_JOURNALS: dict[Path, _Journal] = {}
_JOURNALS_LOCK = threading.Lock()


def _journal(folder: Path) -> _Journal:
    journal = _JOURNALS.get(folder)
    if journal is None:
        with _JOURNALS_LOCK:  # one journal per real folder, however it is spelled
            key = folder.resolve()
            journal = _JOURNALS.get(key) or _Journal(key)
            _JOURNALS[key] = _JOURNALS[folder] = journal
    return journal


def _journal_tail(path: Path, *, raw: bool = False) -> list:
    """The heads in the last :data:`_TAIL` bytes of a journal; lines a crash cut short are skipped.
    ``raw``: (head, the line's parsed JSON) pairs."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL))
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return []
    if size > _TAIL:
        lines = lines[1:]  # the first line read may be the end of a longer one
    heads: list = []
    for line in lines:
        try:
            value = json.loads(line)
            head = Head.from_json(value)
        except (ValueError, KeyError, TypeError):
            continue
        heads.append((head, value) if raw else head)
    return heads


# -- a store on object storage ----------------------------------------------------------------
#
# A bucket has no append: there, each published head is its own object, named by its table
# version (the format of the per-head files older local stores hold) and written with a
# conditional put (If-None-Match: *), so two writers can never overwrite each other's head —
# and they never try to: delta-rs gives each commit its own version. Like the journal's rotation,
# each publication removes the head ``keep`` versions older, so about ``keep`` heads stay.

HEADS = "receipts/heads"  # the heads' prefix under the store root


def publish_store_head(layout, head: Head, *, keep: int = 16, signer=None,
                       extra: dict[str, Any] | None = None) -> None:
    """Publish ``head`` for the store ``layout`` names: the journal of a local store, one
    create-if-absent object per head on object storage. Best effort, like :func:`publish_head`."""
    if layout.is_local:
        publish_head(layout.heads, head, keep=keep, signer=signer, extra=extra)
        return
    from refold.fold.errors import StoreError

    value = head.as_json()
    if signer is not None:
        value.update(signer.sign(head))
    if extra:
        value.update(extra)
    key = f"{HEADS}/{head.table_version:020d}.json"
    try:
        layout.files().create(key, json.dumps(value).encode())
        if head.table_version >= keep:
            layout.files().delete(f"{HEADS}/{head.table_version - keep:020d}.json")
    except StoreError as exc:  # ObjectExistsError included: the object that is there stays
        warnings.warn(f"refold: could not publish the chain head of version {head.table_version} "
                      f"under {layout.heads}: {exc}", RuntimeWarning, stacklevel=3)


def store_head_lines(layout) -> list[HeadLine]:
    """Every published head of the store ``layout`` names (see :func:`read_head_lines`)."""
    if layout.is_local:
        return read_head_lines(layout.heads)
    files = layout.files()
    out: list[HeadLine] = []
    for key in files.list(HEADS):
        name = key.rsplit("/", 1)[-1]
        if not Path(name).match(_HEAD_GLOB):
            continue
        text = files.get(key) or b""
        try:
            value = json.loads(text)
            head = _strict_head(value)
            checkpoint = value.get("checkpoint")
            out.append(HeadLine(name, head, signature=value.get("sig"), key=value.get("key"),
                                checkpoint=checkpoint if isinstance(checkpoint, str) else None))
        except (ValueError, TypeError) as exc:
            out.append(HeadLine(name, None, str(exc), torn=_cut_short(text)))
    return out


def store_published_head(layout) -> Head | None:
    """The newest readable head published for the store ``layout`` names (None: none)."""
    if layout.is_local:
        return read_published_head(layout.heads)
    return max((line.head for line in store_head_lines(layout) if line.head is not None),
               key=lambda h: h.table_version, default=None)
