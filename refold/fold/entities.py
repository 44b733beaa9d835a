"""Deterministic entity resolution.

Rule: an entity is identified, within a tenant, by its *key*: the name casefolded, with accents
kept, punctuation other than inner hyphens/apostrophes/periods removed, a leading article ("the",
"a", "an") dropped and whitespace collapsed. "The Acme Corp." and "acme corp" are one entity; the
first surface form seen (in log order) becomes its display ``name`` and every other surface form is
kept in ``aliases``. Node ids are ``"<tenant>/<key>"`` so tenants never share a node.
"""

from __future__ import annotations

import re
import unicodedata

_ARTICLES = ("the ", "a ", "an ")
_PUNCT = re.compile(r"[^\w\s'\-.]", re.UNICODE)
_EDGE_PUNCT = re.compile(r"^[\s'\-.]+|[\s'\-.]+$")


def entity_key(name: str) -> str:
    """The normalised key of a surface name (see the module docstring)."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = _PUNCT.sub(" ", text)
    text = " ".join(text.split())
    text = _EDGE_PUNCT.sub("", text)
    for article in _ARTICLES:
        if text.startswith(article) and len(text) > len(article):
            text = text[len(article):]
            break
    return text


def node_id(tenant: str, name: str) -> str:
    return f"{tenant}/{entity_key(name)}"
