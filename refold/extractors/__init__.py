"""Adapters behind the extractor port, and the registry that names them.

``get_extractor("rules")`` returns the deterministic rules extractor of the core
(:mod:`refold.fold.extractors.rules`); the LLM adapters (``llamacpp``, ``openai``, ``vllm``), which
do IO, live here, outside the pure core, and are imported by dotted path only when asked for, so
their heavy dependencies are never imported by accident and the registry works before they are
installed.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from refold.fold.errors import ExtractionError, ValidationError
from refold.fold.extract import Extractor

__all__ = ["available_extractors", "get_extractor"]

#: name → "module:Class" of the adapter (imported lazily).
_REGISTRY: dict[str, str] = {
    "llamacpp": "refold.extractors.llamacpp:LlamaCppExtractor",
    "openai": "refold.extractors.openai:OpenAIExtractor",
    "rules": "refold.fold.extractors.rules:RulesExtractor",
    "vllm": "refold.extractors.vllm:VLLMExtractor",
}


def available_extractors() -> tuple[str, ...]:
    """The names :func:`get_extractor` accepts, sorted."""
    return tuple(sorted(_REGISTRY))


def get_extractor(name: str, /, **options: Any) -> Extractor:
    """A new extractor of the adapter called ``name``, built with keyword ``options``.

    Raises :class:`ValidationError` for an unknown name or an option the adapter does not take,
    and :class:`ExtractionError` when the adapter's module cannot be imported.
    """
    target = _REGISTRY.get(name)
    if target is None:
        raise ValidationError(
            f"unknown extractor {name!r}; available extractors: {', '.join(available_extractors())}"
        )
    module_name, _, class_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ExtractionError(
            f"extractor {name!r} could not be imported ({exc}); install its extra, e.g. "
            f"pip install 'refold[{name}]'"
        ) from exc
    cls = getattr(module, class_name)
    try:  # check the options against the signature, so a TypeError inside __init__ stays one
        inspect.signature(cls).bind(**options)
    except TypeError as exc:
        raise ValidationError(f"extractor {name!r}: bad option(s) {sorted(options)}: {exc}") from None
    return cls(**options)
