"""The three SHA-256 per event of a whole batch (see fold/chain.py): commitments and links.

storage/sealing.py prepares, column by column, what every event's hashes cover (salt, content,
the parts of its canonical header) and calls these. The native loop (storage/_sealhash.c, over
OpenSSL) assembles each row's header from its parts and hashes over the Arrow buffers without
the GIL: :func:`hash_in_background` starts it on native threads that never take the GIL (the
appending thread meanwhile makes the other columns, then hashes its own slice), and
:func:`commit_digests` hashes a batch at once. Where the native module was not built, hashlib
runs per value with the same bytes (tests compare them on random input).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from refold.fold.chain import DOMAIN

try:  # built at install from storage/_sealhash.c when a C compiler and OpenSSL headers are there
    from . import _sealhash
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _sealhash = None


def commit_digests(salts: bytes, contents: pa.Array, header: pa.Array | Sequence[str | bytes | pa.Array]
                   ) -> bytes:
    """Per row, H(DOMAIN ‖ header ‖ H(salt ‖ content)): 32 bytes each, one after the other.

    ``salts`` holds 16 bytes per row; ``contents`` is a string or binary array without nulls.
    ``header`` is an array of whole headers, or the parts every row's header is made of, in
    order: text that is the same in every row, or an array with each row's piece (no nulls; an
    integer array stands for its values in decimal).
    """
    n = len(contents)
    parts = [header] if isinstance(header, (pa.Array, pa.ChunkedArray)) else list(header)
    if _sealhash is None:
        sha = hashlib.sha256
        parts = [_text(p) for p in parts]
        whole = pc.binary_join_element_wise(*parts, "") if len(parts) > 1 else parts[0]
        digests = b"".join(sha(x).digest() for x in _concat(_fixed(salts, 16, n), contents))
        return b"".join(sha(x).digest() for x in _concat(DOMAIN, whole, _fixed(digests, 32, n)))
    slices = _native_slices(salts, contents, parts)
    # rows are independent (only the chain is sequential): native threads hash the other slices
    # while this thread hashes the first
    started = [_sealhash.start(*args) for args in slices[1:]]
    return b"".join([_sealhash.commit(*slices[0])] + [job.result() for job in started])


def hash_in_background(salts: bytes, contents: pa.Array, header: Sequence[str | bytes | pa.Array],
                        prev: bytes) -> Callable[[], tuple[bytes, bytes]]:
    """Start :func:`commit_digests` and :func:`chain_links` after ``prev``; return the call that
    waits for ``(commitments, chain)``.

    The hashing runs on native threads that never take the GIL (``_sealhash.start``), so what
    the caller does before calling back runs alongside, and a busy interpreter does not delay
    them; a batch with several slices keeps the first for the caller's thread, as
    :func:`commit_digests` does. Without the native module (hashlib holds the GIL per hash)
    everything is done before returning.
    """
    if _sealhash is None:
        commitments = commit_digests(salts, contents, header)
        done = commitments, chain_links(prev, commitments)
        return lambda: done
    slices = _native_slices(salts, contents, list(header))
    if len(slices) == 1:  # commitments and links in one job
        return _sealhash.start(*slices[0], prev).result
    started = [_sealhash.start(*args) for args in slices[1:]]

    def finish() -> tuple[bytes, bytes]:
        commitments = b"".join([_sealhash.commit(*slices[0])] + [job.result() for job in started])
        return commitments, chain_links(prev, commitments)
    return finish


def _native_slices(salts: bytes, contents: pa.Array, parts: list[str | bytes | pa.Array]) -> list[tuple]:
    """The native loop's arguments for each of :func:`_parts`' row ranges."""
    content = _plain_binary(contents)
    return [_slice_args(salts, content, [_native_part(p) for p in parts], a, b) for a, b in _parts(len(contents))]


def _native_part(part: str | bytes | pa.Array) -> bytes | pa.Array:
    """A header part as the native loop takes it: text as UTF-8, arrays in one chunk without
    nulls, strings as binary, integers as int64."""
    if isinstance(part, str):
        return part.encode()
    if isinstance(part, bytes):
        return part
    if isinstance(part, pa.ChunkedArray):
        part = part.combine_chunks()
    if part.null_count:
        raise ValueError("sealing: a hashed column holds nulls")
    if pa.types.is_integer(part.type):
        return part if part.type == pa.int64() else pc.cast(part, pa.int64())
    if pa.types.is_list(part.type):
        return part
    return _plain_binary(part)


def chain_links(prev: bytes, commitments: bytes) -> bytes:
    """``prev``, then each link H(link before ‖ commitment): 32 bytes each (one more than rows)."""
    if _sealhash is not None:
        return _sealhash.chain(prev, commitments)
    sha = hashlib.sha256
    chain = [prev]
    for i in range(0, len(commitments), 32):  # sequential by design: each link covers the one before
        prev = sha(prev + commitments[i:i + 32]).digest()
        chain.append(prev)
    return b"".join(chain)


#: rows per thread below which handing a slice to another thread costs more than it saves. A 1k
#: batch is two slices: the appending thread hashes its own once the other columns are made
#: (with the add action's statistics taken from what the sealer knows, that is soon; one slice
#: on the worker left it waiting ~0.3 ms: 1k appends 4.11 -> 3.99 ms, 30 alternating rounds)
PARALLEL_FROM = 256


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _parts(n: int) -> list[tuple[int, int]]:
    """``[start, stop)`` row ranges to hash in parallel: one per core, each >= PARALLEL_FROM rows."""
    k = max(1, min(_cores(), 8, n // PARALLEL_FROM))
    bounds = [n * i // k for i in range(k + 1)]
    return list(zip(bounds, bounds[1:]))


def _slice_args(salts: bytes, content: pa.Array, parts: list[bytes | pa.Array], a: int, b: int) -> tuple:
    """The native loop's arguments for rows ``[a, b)`` (parts as :func:`_native_part` makes them)."""
    return (b - a, salts[16 * a:16 * b], *_offsets_and_data(content), content.offset + a,
            [_piece(p, a) for p in parts], DOMAIN)


def _piece(part: bytes | pa.Array, a: int) -> bytes | tuple:
    """A header part for the native loop from row ``a`` on: text as it is, a string column as
    (offsets, data, first row), an int64 column as (values, first row), a list column as
    (list offsets, item offsets, item data, first row, first item)."""
    if isinstance(part, bytes):
        return part
    if part.type == pa.int64():
        return part.buffers()[1], part.offset + a
    if pa.types.is_list(part.type):
        items = part.values
        return (part.buffers()[1], *_offsets_and_data(items), part.offset + a, items.offset)
    return (*_offsets_and_data(part), part.offset + a)


def native_commit(salts: bytes, content: pa.Array, parts: list[bytes | pa.Array], a: int, b: int) -> bytes:
    """The native loop over rows ``[a, b)`` on this thread: their commitments."""
    return _sealhash.commit(*_slice_args(salts, _plain_binary(content), [_native_part(p) for p in parts], a, b))


def _plain_binary(values: pa.Array) -> pa.Array:
    """``values`` as a binary array with int32 offsets and no nulls (what the native loop reads)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if values.null_count:
        raise ValueError("sealing: a hashed column holds nulls")
    if values.type == pa.binary():
        return values
    if values.type == pa.string():
        return values.view(pa.binary())  # the same buffers: a cast's kernel dispatch costs ~7 us
    return pc.cast(values, pa.binary())


def _text(part: str | bytes | pa.Array) -> str | bytes | pa.Array:
    """A header part as text, as the native loop writes it: an integer column's values in
    decimal, a list column's lists as JSON arrays of their items between quotes."""
    if isinstance(part, (pa.Array, pa.ChunkedArray)) and pa.types.is_integer(part.type):
        return pc.cast(part, pa.string())
    if isinstance(part, (pa.Array, pa.ChunkedArray)) and pa.types.is_list(part.type):
        quoted = pc.binary_join_element_wise('["', pc.binary_join(part, '","'), '"]', "")
        return pc.if_else(pc.equal(pc.list_value_length(part), 0), "[]", quoted)
    return part


def _offsets_and_data(values: pa.Array) -> tuple[pa.Buffer, pa.Buffer | bytes]:
    _, offsets, data = values.buffers()
    return offsets, b"" if data is None else data


def _fixed(data: bytes, width: int, n: int) -> pa.Array:
    """``n`` binary values of ``width`` bytes each, cut from ``data`` without copying."""
    return pa.FixedSizeBinaryArray.from_buffers(pa.binary(width), n, [None, pa.py_buffer(data)])


def _concat(*parts: pa.Array | bytes) -> list[bytes]:
    """Per row, the bytes of ``parts`` one after the other (strings as UTF-8)."""
    binary = [p if isinstance(p, bytes) else pc.cast(p, pa.binary()) for p in parts]
    return pc.binary_join_element_wise(*binary, b"").to_pylist()
