"""``llamacpp``: a GGUF model in process via llama-cpp-python, JSON-schema-constrained.

The default model is the packaged Gemma 3 270M (Q4_K_M, 253 MB; see :mod:`refold.extractors.models`). It is
weak — it copies few-shot examples and invents facts, which the parser's grounding check then
rejects — but it is real, offline and CPU-only, so the whole LLM path runs and is tested anywhere.
Any other GGUF can be configured with ``model_path``.

The recorded request payload is translated into ``Llama.create_chat_completion`` arguments: the
messages, the decoding parameters, and the schema as llama.cpp's grammar-constrained
``response_format={"type": "json_object", "schema": ...}`` (whichever wire form the spec uses).
The model is loaded on first use, once per instance, and is not pickled (Ray actors load their
own). Before the first call the file's SHA-256 is checked against the spec's ``file_hash``, so a
spec never claims a model that did not run.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from refold.fold.errors import ExtractionError
from refold.fold.extract import ModelRequest
from refold.fold.prompts import default_model_spec
from refold.fold.spec import FoldSpec

from refold.extractors.llm import Completion, LLMExtractor

__all__ = ["LLM_EXTRACTOR_VERSION", "LlamaCppExtractor"]

LLM_EXTRACTOR_VERSION = "1"
_INSTALL_HINT = "pip install 'refold[llamacpp]'"
#: request keys that are decoding parameters create_chat_completion understands
_SAMPLING = ("temperature", "top_p", "top_k", "min_p", "max_tokens", "seed", "stop",
             "presence_penalty", "frequency_penalty", "repeat_penalty")


class LlamaCppExtractor(LLMExtractor):
    """In-process llama.cpp extractor; options are keyword-only (the registry passes them)."""

    name = "llamacpp"
    engine = "llama.cpp"

    def __init__(self, *, model_path: str | Path | None = None, n_ctx: int = 2048,
                 n_threads: int | None = None, chat_format: str = "gemma") -> None:
        self.model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.chat_format = chat_format
        self._llm: Any = None
        self._file_hash: str | None = None
        self._lock = threading.Lock()  # a Llama context is not safe for concurrent calls

    # -- pickling: Ray actors get the configuration, not the loaded model ------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_llm"] = None
        state["_file_hash"] = None  # each copy verifies the file on its own node
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # -- model identity ------------------------------------------------------------------------
    def resolved_model_path(self) -> Path:
        """The GGUF this extractor runs (the packaged one unless ``model_path`` was given)."""
        if self.model_path is not None:
            if not self.model_path.is_file():
                raise ExtractionError(f"model file {self.model_path} does not exist; pass model_path= "
                                      "an existing .gguf file, or omit it for the packaged model")
            return self.model_path
        from refold.extractors.models import default_gguf_path

        return default_gguf_path()

    def file_hash(self) -> str:
        if self._file_hash is None:
            from refold.extractors.models import file_sha256

            self._file_hash = file_sha256(self.resolved_model_path())
        return self._file_hash

    def default_spec(self, **model_options: Any) -> FoldSpec:
        """A FoldSpec naming this extractor's model file (id = file stem, hash = its SHA-256).

        ``model_options`` go to :func:`~refold.fold.prompts.default_model_spec` (e.g.
        ``max_tokens``, ``max_facts``). The wire form is ``json_object`` so the same spec also
        works against ``python -m llama_cpp.server``.
        """
        model_options.setdefault("response_format", "json_object")
        path = self.resolved_model_path()
        model = default_model_spec(path.stem, self.file_hash(), **model_options)
        return FoldSpec(extractor=self.name, extractor_version=LLM_EXTRACTOR_VERSION, model=model)

    def _check_spec(self, spec: FoldSpec) -> None:
        want = spec.model.file_hash if spec.model else ""
        have = self.file_hash()
        if want != have:
            raise ExtractionError(
                f"the spec names model file hash {want or '(none)'!r} but {self.resolved_model_path()} "
                f"has {have}; build the spec with LlamaCppExtractor(...).default_spec() so it names "
                "the model that runs"
            )

    def _meta(self) -> tuple[tuple[str, Any], ...]:
        import llama_cpp

        return (("engine_version", f"llama-cpp-python {llama_cpp.__version__}"),
                ("model_file", self.resolved_model_path().name))

    # -- the backend ---------------------------------------------------------------------------
    def _load(self) -> Any:
        if self._llm is None:
            try:
                from llama_cpp import Llama
            except ImportError as exc:
                raise ExtractionError(f"the llamacpp extractor needs llama-cpp-python: {_INSTALL_HINT}") from exc
            path = self.resolved_model_path()
            try:
                self._llm = Llama(model_path=str(path), n_ctx=self.n_ctx, n_threads=self.n_threads,
                                  chat_format=self.chat_format, verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise ExtractionError(f"llama.cpp could not load {path}: {exc}; is it a GGUF file?") from exc
        return self._llm

    def _complete(self, request: ModelRequest) -> Completion:
        kwargs = chat_kwargs(request)
        with self._lock:
            llm = self._load()
            started = time.perf_counter()
            try:
                response = llm.create_chat_completion(**kwargs)
            except ValueError as exc:
                # e.g. "Requested tokens (2300) exceed context window of 2048": this request will
                # never fit this engine, so it is an answer (a rejection), not a retryable failure
                return Completion(None, latency_ms=_ms(started), error=f"llama.cpp: {exc}")
            latency = _ms(started)
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return Completion(
            text=choice["message"].get("content") or "",
            tokens_in=int(usage.get("prompt_tokens", 0)), tokens_out=int(usage.get("completion_tokens", 0)),
            latency_ms=latency, meta=(("finish_reason", choice.get("finish_reason")),),
        )


def chat_kwargs(request: ModelRequest) -> dict[str, Any]:
    """``create_chat_completion`` arguments for a recorded request (a pure translation)."""
    payload = request.as_dict()
    unknown = sorted(set(payload) - {"model", "messages", "response_format", *_SAMPLING})
    if unknown:
        raise ExtractionError(f"request has decoding parameter(s) {unknown} that llama.cpp does not "
                              f"take; use {sorted(_SAMPLING)}")
    kwargs: dict[str, Any] = {k: payload[k] for k in _SAMPLING if k in payload}
    kwargs["messages"] = payload["messages"]
    response_format = payload.get("response_format")
    if response_format is not None:
        kwargs["response_format"] = {"type": "json_object", "schema": schema_of(response_format)}
    return kwargs


def schema_of(response_format: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema inside either wire form of ``response_format``."""
    if response_format.get("type") == "json_schema":
        return response_format["json_schema"]["schema"]
    if response_format.get("type") == "json_object" and "schema" in response_format:
        return response_format["schema"]
    raise ExtractionError(f"response_format {response_format!r} carries no JSON schema")


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000.0
