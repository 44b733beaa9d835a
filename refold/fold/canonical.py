"""Canonical JSON: the one encoding refold hashes, signs, binds as associated data or compares.

Keys sorted, compact separators (``,`` and ``:``), non-ASCII characters written as themselves,
the text encoded as UTF-8: ``json.dumps(value, sort_keys=True, separators=(",", ":"),
ensure_ascii=False).encode()``. These bytes are part of stored formats (a fold spec's hash, the
chain's event headers, an encrypted event's associated data and payload, a signed head), so they
never change.

A few older texts are encoded otherwise and keep their bytes because those bytes are committed
too: an erasure record's content (keys in insertion order), an extraction request's payload
(:func:`refold.fold.prompts.canonical_json`: a schema's properties in their declared order), the
entity summaries the state digest feeds. They are not this encoding; don't switch them.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]

_ENCODE = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def canonical_json(value: Any) -> bytes:
    """``value`` (JSON types only: dicts with string keys, lists, strings, numbers, booleans, None)
    as canonical JSON bytes."""
    return _ENCODE(value).encode("utf-8")
