"""The residue scanner: find given strings anywhere under a store, decoding what is encoded.

``scan(root, needles, canaries=...)`` reads EVERY file under ``root`` (hidden ones,
``_delta_log``, keys, receipts, index files, temp files left by a crash) and reports each place a
needle occurs, case-insensitively. Needles are names and match as whole words ("Tim" is not in
"timestamp"); canaries (unique phrases, identifiers such as e-mail addresses) match as plain
substrings. Both rules hold in every form below:

* raw bytes, in UTF-8, UTF-16 (LE/BE) and UTF-32 (LE/BE) — catches plain text anywhere, including
  uncompressed Parquet pages and footers, pickles, numpy string arrays, faiss metadata;
* Parquet files (data files and Delta checkpoints): every column of every row group is read back
  with pyarrow, so compressed pages (snappy, zstd, gzip, …) and dictionary pages are searched as
  values, nested lists/structs/maps included; footer statistics and key-value metadata too;
* JSON and JSON Lines (Delta commits, ``_last_checkpoint``, index metadata, receipts): every
  string value and key, with a JSON path; string values that are themselves JSON (Delta's
  ``stats``) are parsed and walked, which also undoes ``\\u00e9`` escapes;
* base64: runs of 16+ base64 characters inside string values and text files are decoded and the
  bytes searched;
* compressed streams (gzip, zstd, lz4 frame, bz2, xz, framed snappy, zip members, ``*.snappy``
  raw snappy) are decompressed and scanned like a file.

A hit names the file (relative to ``root``), a location (``byte offset 1234 (utf-16-le)``,
``row group 0, column content, row 3``, ``line 2, JSON path add.stats.minValues.kind``) and the
needle. One occurrence can be reported by several detectors (raw bytes and the Parquet reader);
the scanner over-reports rather than misses. Per file, detector and needle at most
:data:`MAX_HITS_PER_FILE` locations are listed.

What a byte scanner cannot see: text turned into numbers (embedding vectors) or into hashes. The
erasure procedure removes those by purging the stores that hold them, not by scanning.
"""

from __future__ import annotations

import base64
import binascii
import bz2
import gzip
import io
import json
import lzma
import os
import re
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from refold.fold.errors import ValidationError

MAX_HITS_PER_FILE = 200
MAX_EXPANDED_BYTES = 1 << 30
_MAX_DEPTH = 4
_ENCODINGS = ("utf-8", "utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")
_B64_RUN = re.compile(r"[A-Za-z0-9+/_-]{16,}={0,2}")
_HEX = re.compile(r"^[0-9a-fA-F]+$")
#: values worth a slower look: JSON escapes or a base64-looking run
_CANDIDATE = r"\\|[A-Za-z0-9+/_-]{16,}"
#: a value that is hex and nothing else (a hash, a salt, a hex id): its one run is a hex run,
#: which :meth:`_Scan.base64_runs` skips, and it is no JSON
_HEX_VALUE = r"^[0-9a-fA-F]+$"
#: the location a probe of one value reports its hits under (replaced by each row's)
_HERE = "\x00"


@dataclass(frozen=True, order=True)
class Hit:
    """One occurrence of ``needle`` in ``file`` (relative to the scanned root) at ``location``."""

    file: str
    location: str
    needle: str


@dataclass(frozen=True)
class ScanReport:
    """All hits of one scan, the number of files read and the files that could not be read."""

    root: str
    needles: tuple[str, ...]
    files: int
    hits: tuple[Hit, ...]
    errors: tuple[str, ...] = field(default=())

    @property
    def clean(self) -> bool:
        return not self.hits and not self.errors

    def as_json(self, *, include_needles: bool = True) -> dict:
        """JSON-ready; ``include_needles=False`` replaces each needle by its index (for receipts)."""
        index = {n: i for i, n in enumerate(self.needles)}
        return {
            "files": self.files,
            "needles": len(self.needles),
            "hits": [
                {"file": h.file, "location": h.location,
                 **({"needle": h.needle} if include_needles else {"needle_index": index[h.needle]})}
                for h in self.hits
            ],
            "errors": list(self.errors),
        }


class _Matcher:
    """Case-insensitive search for a fixed set of needles in text and in raw bytes.

    ``words`` (names) match only as whole words: the characters just before and after an
    occurrence must not be letters, digits or ``_`` (where the needle itself begins or ends with
    one), so "Tim" finds "Tim," "Tim's" and "tim" but not "timestamp" or "createdTime". The other
    needles (canaries, identifiers) match as plain substrings.
    """

    def __init__(self, needles: Sequence[str], words: frozenset[str] = frozenset()):
        self.needles = tuple(needles)
        self.words = frozenset(n for n in self.needles if n in words)
        self._folded = [(n, n.casefold(), _word_pattern(n.casefold()) if n in self.words else None)
                        for n in self.needles]
        self._raw = [(n, enc, _byte_pattern(n, enc), _edges(n) if n in self.words else None)
                     for n in self.needles for enc in _ENCODINGS]
        # ASCII needles: the pattern of (needle, encoding) can only match where the lowered
        # bytes hold the needle lowered and encoded (each case variant of an ASCII letter is that
        # letter; bytes.lower() folds exactly ASCII letters), so a substring test, C-speed, picks
        # the few patterns worth running: an erasure batch scans for hundreds of needles
        # (their UTF-16/32 forms hold NUL bytes: only bytes with a NUL need those tested)
        ascii_ = all(n.isascii() for n in self.needles)
        self._utf8 = [(r[0].casefold().encode(), r) for r in self._raw if r[1] == "utf-8"] if ascii_ else None
        self._wide = [(r[0].casefold().encode(r[1]), r) for r in self._raw if r[1] != "utf-8"] if ascii_ else None
        #: every needle as one RE2 alternation (Arrow's regex kernels), characters as code points
        self.any_text = "|".join("".join(f"\\x{{{ord(c):x}}}" for c in n) for n in self.needles)

    def text(self, value: str) -> list[str]:
        folded = value.casefold()
        return [n for n, f, word in self._folded
                if f in folded and (word is None or word.search(folded) is not None)]

    def raw(self, data: bytes) -> Iterable[tuple[str, str, int]]:
        raw = self._raw
        if self._utf8 is not None:
            lowered = data.lower()
            raw = [r for form, r in self._utf8 if form in lowered]
            if b"\x00" in data:
                raw += [r for form, r in self._wide if form in lowered]
        for needle, enc, pattern, edges in raw:
            count = 0
            for match in pattern.finditer(data):
                if count >= MAX_HITS_PER_FILE:
                    break
                if edges is not None and not _bounded(data, match.start(), match.end(), enc, edges):
                    continue
                count += 1
                yield needle, enc, match.start()


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _edges(needle: str) -> tuple[bool, bool]:
    """Whether a word boundary is required before and after ``needle`` (a needle that begins or
    ends with punctuation, e.g. "@ann", is bounded on that side by itself)."""
    return _is_word_char(needle[0]), _is_word_char(needle[-1])


def _word_pattern(folded: str) -> re.Pattern[str]:
    before, after = _edges(folded)
    return re.compile(("(?<!\\w)" if before else "") + re.escape(folded) + ("(?!\\w)" if after else ""))


_UNIT = {"utf-8": 1, "utf-16-le": 2, "utf-16-be": 2, "utf-32-le": 4, "utf-32-be": 4}


def _bounded(data: bytes, start: int, end: int, encoding: str, edges: tuple[bool, bool]) -> bool:
    """Whether the bytes around ``data[start:end]``, decoded in ``encoding``, are no word
    characters. Bytes that do not decode count as a boundary: the scanner would rather report
    a name next to binary noise than miss it."""
    unit = _UNIT[encoding]
    if edges[0] and start > 0:
        before = data[max(0, start - 4):start] if unit == 1 else data[max(0, start - unit):start]
        char = before.decode(encoding, errors="replace")[-1:]
        if char and _is_word_char(char):
            return False
    if edges[1] and end < len(data):
        char = data[end:end + (4 if unit == 1 else unit)].decode(encoding, errors="replace")[:1]
        if char and _is_word_char(char):
            return False
    return True


def _byte_pattern(needle: str, encoding: str) -> re.Pattern[bytes]:
    if encoding == "utf-8" and needle.isascii():
        return re.compile(re.escape(needle.encode()), re.IGNORECASE)
    parts = []
    for ch in needle:
        variants = {ch, ch.lower(), ch.upper(), ch.casefold(), ch.title()}
        encoded = sorted({v.encode(encoding) for v in variants}, key=len, reverse=True)
        parts.append("(?:" + "|".join(re.escape(e.decode("latin-1")) for e in encoded) + ")")
    return re.compile("".join(parts).encode("latin-1"), re.DOTALL)


class _Scan:
    def __init__(self, root: Path, matcher: _Matcher):
        self.root = root
        self.matcher = matcher
        self.hits: set[Hit] = set()
        self.errors: list[str] = []

    def add(self, file: str, location: str, needle: str) -> None:
        self.hits.add(Hit(file, location, needle))

    # -- blobs --------------------------------------------------------------------------------------

    def blob(self, data: bytes, file: str, prefix: str = "", depth: int = 0) -> None:
        for needle, enc, offset in self.matcher.raw(data):
            self.add(file, f"{prefix}byte offset {offset} ({enc})", needle)
        if depth > _MAX_DEPTH:
            return
        expanded = _expand(data, file)
        if expanded is not None:
            for label, inner in expanded:
                self.blob(inner, file, f"{prefix}{label}, ", depth + 1)
            return
        if data[:4] == b"PAR1" and data[-4:] == b"PAR1":
            self.parquet(data, file, prefix)
            return
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return
        self.text_file(text, file, prefix, depth)

    def text_file(self, text: str, file: str, prefix: str, depth: int) -> None:
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                self.json_value(json.loads(text), file, f"{prefix}JSON path ", "", depth)
                return
            except ValueError:
                pass
            lines = text.splitlines()
            parsed = []
            for line in lines:
                if not line.strip():
                    parsed.append(None)
                    continue
                try:
                    parsed.append(json.loads(line))
                except ValueError:
                    parsed = []
                    break
            if parsed:
                for number, value in enumerate(parsed, start=1):
                    if value is not None:
                        self.json_value(value, file, f"{prefix}line {number}, JSON path ", "", depth)
                return
        self.base64_runs(text, file, f"{prefix}text, ", depth)

    def json_value(self, value, file: str, prefix: str, path: str, depth: int) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                sub = f"{path}.{key}" if path else str(key)
                for needle in self.matcher.text(str(key)):
                    self.add(file, f"{prefix}{sub} (key)", needle)
                self.json_value(item, file, prefix, sub, depth)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.json_value(item, file, prefix, f"{path}[{i}]", depth)
        elif isinstance(value, str):
            self.string(value, file, f"{prefix}{path or '$'}", depth)

    def string(self, value: str, file: str, location: str, depth: int, *, searched: bool = False) -> None:
        """A decoded string value: search it, then what it may encode (JSON, base64)."""
        if not searched:
            for needle in self.matcher.text(value):
                self.add(file, location, needle)
        if depth > _MAX_DEPTH:
            return
        stripped = value.strip()
        if stripped[:1] in ("{", "[") and len(stripped) > 1:
            try:
                inner = json.loads(stripped)
            except ValueError:
                inner = None
            if isinstance(inner, (dict, list)):
                self.json_value(inner, file, f"{location} → JSON path ", "", depth + 1)
                return
        self.base64_runs(value, file, f"{location}, ", depth)

    def base64_runs(self, text: str, file: str, prefix: str, depth: int) -> None:
        for match in _B64_RUN.finditer(text):
            token = match.group(0)
            if _HEX.match(token):
                continue  # hashes and ids: hex decodes to noise
            decoded = _b64decode(token)
            if decoded:
                self.blob(decoded, file, f"{prefix}base64 at char {match.start()} → ", depth + 1)

    # -- parquet ------------------------------------------------------------------------------------

    def parquet(self, data: bytes, file: str, prefix: str) -> None:
        try:
            pf = pq.ParquetFile(pa.BufferReader(data))
        except Exception as exc:  # noqa: BLE001 - a damaged file is reported, not fatal
            self.errors.append(f"{file}: not readable as Parquet ({exc}); scanned as raw bytes only")
            return
        meta = pf.metadata
        for key, value in (meta.metadata or {}).items():
            for part, label in ((key, "key"), (value, "value")):
                text = part.decode("utf-8", "replace")
                for needle in self.matcher.text(text):
                    self.add(file, f"{prefix}parquet metadata {label} {key.decode('utf-8', 'replace')}", needle)
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                column = group.column(c)
                stats = column.statistics
                if stats is not None and stats.has_min_max:
                    for label, value in (("min", stats.min), ("max", stats.max)):
                        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                        for needle in self.matcher.text(text):
                            self.add(file, f"{prefix}row group {g}, column {column.path_in_schema}, "
                                           f"statistics {label}", needle)
            try:
                # one thread: ``data`` is Python-owned bytes, which must not outlive their
                # owner on an Arrow worker thread (an abort at interpreter shutdown)
                table = pf.read_row_group(g, use_threads=False)
            except Exception as exc:  # noqa: BLE001
                self.errors.append(f"{file}: row group {g} unreadable ({exc})")
                continue
            for name, chunked in zip(table.column_names, table.columns):
                array = chunked.combine_chunks() if chunked.num_chunks != 1 else chunked.chunk(0)
                rows = pa.array(range(len(array)), pa.int64())
                self.array(array, rows, file, f"{prefix}row group {g}, column {name}")

    def array(self, array: pa.Array, rows: pa.Int64Array, file: str, where: str) -> None:
        """Search ``array``; ``rows[i]`` is the row-group row that value ``i`` belongs to."""
        t = array.type
        if pa.types.is_dictionary(t):
            self.array(array.dictionary_decode(), rows, file, where)
        elif pa.types.is_string_view(t):
            self.strings(array.cast(pa.large_string()), rows, file, where)
        elif pa.types.is_binary_view(t):
            self.array(array.cast(pa.large_binary()), rows, file, where)
        elif pa.types.is_string(t) or pa.types.is_large_string(t):
            self.strings(array, rows, file, where)
        elif pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
            for i, value in enumerate(array.to_pylist()):
                if value:
                    for needle, enc, offset in self.matcher.raw(value):
                        self.add(file, f"{where}, row {rows[i].as_py()}, byte offset {offset} ({enc})", needle)
        elif pa.types.is_map(t):  # as the list of (key, value) structs it is
            self.array(array.cast(pa.list_(pa.struct([t.key_field, t.item_field]))), rows, file, where)
        elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            flat = pc.list_flatten(array)
            self.array(flat, rows.take(pc.list_parent_indices(array)), file, f"{where}[]")
        elif pa.types.is_struct(t):
            for i in range(t.num_fields):
                self.array(pc.struct_field(array, [i]), rows, file, f"{where}.{t.field(i).name}")

    def strings(self, array: pa.Array, rows: pa.Int64Array, file: str, where: str) -> None:
        if len(array) == 0 or array.null_count == len(array):
            return
        # one kernel pass for every needle first: a column none of them occurs in (most, after
        # an erasure) skips the pass per needle
        anywhere = pc.any(pc.match_substring_regex(array, self.matcher.any_text, ignore_case=True)).as_py()
        for needle in self.matcher.needles if anywhere else ():
            mask = pc.match_substring(array, needle, ignore_case=True)
            found = pc.indices_nonzero(mask)
            if needle in self.matcher.words and len(found):
                # the kernel preselects; the word rule is checked on those values only (Arrow's
                # regex engine has no look-behind, and "word character" must mean what it means
                # everywhere else in the scan)
                values = array.take(found).to_pylist()
                found = pa.array([i for i, v in zip(found.to_pylist(), values)
                                  if needle in self.matcher.text(v)], pa.uint64())
            for i in found.to_pylist()[:MAX_HITS_PER_FILE]:
                self.add(file, f"{where}, row {rows[i].as_py()}", needle)
        # hex-only values are left out by a kernel too, not by a Python call each (they are
        # three quarters of a store's candidates: every event's salt, commitment and links)
        candidates = pc.and_not(pc.match_substring_regex(array, _CANDIDATE), pc.match_substring_regex(array, _HEX_VALUE))
        indices = pc.indices_nonzero(candidates)
        if len(indices):
            # a value repeated over many rows (node ids in the state tables) is decoded once, and
            # what it holds is reported at every row that holds it
            held: dict[str, list[tuple[str, str]]] = {}
            for i, value in zip(rows.take(indices).to_pylist(), array.take(indices).to_pylist()):
                if value not in held:
                    probe = _Scan(self.root, self.matcher)
                    probe.string(value, file, _HERE, 1, searched=True)
                    held[value] = [(h.location[len(_HERE):], h.needle) for h in probe.hits]
                    self.errors.extend(e for e in probe.errors if e not in self.errors)
                for rest, needle in held[value]:
                    self.add(file, f"{where}, row {i}{rest}", needle)


def _b64decode(token: str) -> bytes | None:
    bare = token.rstrip("=")
    padded = bare + "=" * (-len(bare) % 4)
    try:
        if "-" in token or "_" in token:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def _read_stream(data: bytes, compression: str) -> bytes:
    stream = pa.input_stream(pa.BufferReader(data), compression=compression)
    return stream.read(MAX_EXPANDED_BYTES)


def _varint(data: bytes) -> tuple[int, int]:
    value = shift = 0
    for i, byte in enumerate(data[:10]):
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise ValueError("bad varint")


def _raw_snappy(data: bytes) -> bytes:
    size, _ = _varint(data)
    if size > MAX_EXPANDED_BYTES:
        raise ValueError("too large")
    return pa.decompress(data, size, codec="snappy", asbytes=True)


def _framed_snappy(data: bytes) -> bytes:
    out, pos = bytearray(), 0
    while pos + 4 <= len(data) and len(out) < MAX_EXPANDED_BYTES:
        kind, length = data[pos], int.from_bytes(data[pos + 1:pos + 4], "little")
        body = data[pos + 4:pos + 4 + length]
        pos += 4 + length
        if kind == 0x00:
            out += _raw_snappy(body[4:])  # 4-byte masked CRC first
        elif kind == 0x01:
            out += body[4:]
    return bytes(out)


def _gzip(data: bytes) -> bytes:
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
        return fh.read(MAX_EXPANDED_BYTES)


_MAGIC: tuple[tuple[bytes, str, Callable[[bytes], bytes]], ...] = (
    (b"\x1f\x8b", "gzip stream", _gzip),
    (b"\x28\xb5\x2f\xfd", "zstd stream", lambda d: _read_stream(d, "zstd")),
    (b"\x04\x22\x4d\x18", "lz4 stream", lambda d: _read_stream(d, "lz4")),
    (b"BZh", "bz2 stream", lambda d: bz2.BZ2Decompressor().decompress(d, MAX_EXPANDED_BYTES)),
    (b"\xfd7zXZ\x00", "xz stream", lambda d: lzma.LZMADecompressor().decompress(d, MAX_EXPANDED_BYTES)),
    (b"\xff\x06\x00\x00sNaPpY", "snappy stream", _framed_snappy),
)


def _expand(data: bytes, file: str) -> list[tuple[str, bytes]] | None:
    """Decompressed contents when ``data`` is a compressed stream or archive, else None."""
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                return [(f"zip member {info.filename}", archive.read(info))
                        for info in archive.infolist() if not info.is_dir()]
        except (zipfile.BadZipFile, OSError, ValueError):
            return None
    for magic, label, decode in _MAGIC:
        if data.startswith(magic):
            try:
                return [(label, decode(data))]
            except Exception:  # noqa: BLE001 - not really that format: the raw scan already ran
                return None
    if file.endswith((".snappy", ".sz")) and not data.startswith(b"PAR1"):
        try:
            return [("raw snappy", _raw_snappy(data))]
        except Exception:  # noqa: BLE001
            return None
    return None


def _check_needles(needles: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for n in needles:
        if not isinstance(n, str) or not n.strip():
            raise ValidationError(f"needle: expected a non-empty string, got {n!r}")
        if n not in out:
            out.append(n)
    return tuple(out)


def scan_report(root: str | os.PathLike, needles: Iterable[str] = (), *, canaries: Iterable[str] = (),
                exclude: Iterable[str] = (), storage_options: dict[str, str] | None = None) -> ScanReport:
    """Scan every file under ``root``; ``exclude`` lists relative paths to skip.

    On object storage (``s3://…`` with ``storage_options``) every object under the prefix is
    listed and read, and on a versioned S3 bucket every old version and delete marker too: a hit
    in an old version names it ``KEY@version=ID``
    (:mod:`refold.storage.files.versions`).

    ``needles`` are names: each matches as a whole word, case-insensitively ("Tim" is found in
    "Tim's" and "tim," but not in "timestamp"). ``canaries`` (unique phrases, identifiers, ids)
    match anywhere, as substrings, case-insensitively. The report lists the needles first, then
    the canaries; a string given as both counts as a canary.
    """
    exact = _check_needles(canaries)
    words = _check_needles(needles)
    wanted = tuple(dict.fromkeys([*words, *exact]))
    if not wanted:
        raise ValidationError("give at least one needle (a name) or canary (a substring) to scan for")
    base = Path(root)
    skip = {Path(p).as_posix() for p in exclude}
    state = _Scan(base, _Matcher(wanted, frozenset(words) - frozenset(exact)))
    if "://" in str(root) and not str(root).startswith("file://"):
        files = _scan_objects(str(root), storage_options, skip, state)
        return ScanReport(str(root), wanted, files, tuple(sorted(state.hits)), tuple(state.errors))
    files = 0
    if not base.exists():
        raise ValidationError(f"{root} does not exist; nothing to scan")
    for folder, dirs, names in os.walk(base, followlinks=False):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            rel = path.relative_to(base).as_posix()
            if rel in skip:
                continue
            if path.is_symlink():
                state.errors.append(f"{rel}: a symbolic link, not followed")
                continue
            try:
                data = path.read_bytes()
            except OSError as exc:
                state.errors.append(f"{rel}: unreadable ({exc})")
                continue
            files += 1
            state.blob(data, rel)
    return ScanReport(str(root), wanted, files, tuple(sorted(state.hits)), tuple(state.errors))


def _scan_objects(root: str, options: dict[str, str] | None, skip: set[str], state: _Scan) -> int:
    """Scan every object (and old object version) under an object-store root; returns how many."""
    from refold.fold.errors import StoreError

    from refold.storage.files.versions import old_versions, read_version
    from refold.storage.files.objects import store_files

    objects = store_files(root, options)
    count = 0
    for key in objects.list():
        if key in skip:
            continue
        data = objects.get(key)
        if data is None:
            continue  # deleted since the listing
        count += 1
        state.blob(data, key)
    try:
        versions = list(old_versions(root, options))
    except StoreError as exc:
        state.errors.append(f"old object versions not scanned: {exc}")
        return count
    for version in versions:
        if version.delete_marker or version.key in skip:
            continue
        try:
            data = read_version(root, version, options)
        except StoreError as exc:
            state.errors.append(f"{version.key}@version={version.version_id}: unreadable ({exc})")
            continue
        count += 1
        state.blob(data, f"{version.key}@version={version.version_id}")
    return count


def scan(root: str | os.PathLike, needles: Iterable[str] = (), *, canaries: Iterable[str] = (),
         exclude: Iterable[str] = (), storage_options: dict[str, str] | None = None) -> list[Hit]:
    """Every hit under ``root`` (see :func:`scan_report` for how needles and canaries match and
    the module docstring for what is decoded)."""
    return list(scan_report(root, needles, canaries=canaries, exclude=exclude,
                            storage_options=storage_options).hits)
