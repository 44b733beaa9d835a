"""``openai``: any OpenAI-compatible chat-completions endpoint (vLLM serve, llama.cpp server, ...).

The recorded request payload is POSTed byte for byte to ``{base_url}/chat/completions``: what the
audit re-derives is exactly what the endpoint received. Use a spec whose wire form the server
understands (``default_model_spec(..., response_format="json_object")`` for the llama.cpp server,
the default ``"json_schema"`` for vLLM and OpenAI).

Options: ``base_url`` (``.../v1``), ``api_key`` (default ``$OPENAI_API_KEY``), ``model`` (the
served model's name; the spec must name the same), ``timeout`` (seconds per attempt),
``max_retries``, ``backoff_s`` (first retry delay, doubled each time) and ``response_format`` (the
wire form :meth:`OpenAIExtractor.default_spec` records).

Connection errors, timeouts, 429 and 5xx answers are retried ``max_retries`` times with
exponential backoff (tenacity; httpx's own transport retries cover connection errors only); after that, or on any other non-200 answer, an
:class:`~refold.fold.errors.ExtractionError` says what happened and what to do — nothing is
returned, so nothing is cached and a rerun redoes the work. A 200 answer whose content is not
valid JSON is the model's answer and is rejected by the parser (counted, kept for audit).

:func:`preprocess` and :func:`postprocess` are the request/response mapping shared with the
``vllm`` adapter and Ray Data LLM processors.
"""

from __future__ import annotations

import os
import time
from typing import Any

from refold.fold.errors import ExtractionError
from refold.fold.extract import ModelRequest
from refold.fold.spec import FoldSpec

from refold.extractors.llm import Completion, LLMExtractor

__all__ = ["OpenAIExtractor", "postprocess", "preprocess"]

_INSTALL_HINT = "pip install 'refold[openai]'"
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_START_HINT = ("start the server with `python -m llama_cpp.server --model MODEL.gguf --chat_format "
               "gemma --port 8000` or `vllm serve MODEL`, or pass --base-url")


def preprocess(request: ModelRequest) -> dict[str, Any]:
    """The chat-completions body of a recorded request (the JSON the endpoint receives)."""
    return request.as_dict()


def postprocess(response: dict[str, Any]) -> tuple[str, int, int]:
    """``(raw_text, tokens_in, tokens_out)`` from a chat-completions response.

    Raises ``ValueError`` when ``response`` is not a chat completion at all.
    """
    try:
        choice = response["choices"][0]
        content = choice["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a chat completion (no choices[0].message): {str(response)[:200]}") from exc
    usage = response.get("usage") or {}
    return (content or "", int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0))


class OpenAIExtractor(LLMExtractor):
    """HTTP extractor; ``base_url`` ends in ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``)."""

    name = "openai"
    engine = "openai-http"

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None,
                 model: str | None = None, timeout: float = 60.0, max_retries: int = 3,
                 backoff_s: float = 0.5, response_format: str = "json_schema") -> None:
        if not base_url:
            raise ExtractionError("the openai extractor needs base_url, e.g. http://127.0.0.1:8000/v1 "
                                  "(CLI: --base-url)")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        #: the wire form default_spec() records: "json_object" for the llama.cpp server
        self.response_format = response_format
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_client"] = None  # an open connection pool does not travel to a Ray actor
        return state

    def default_spec(self, model_id: str | None = None, *, file_hash: str = "",
                     **model_options: Any) -> FoldSpec:
        """A FoldSpec for the served model (``model_id`` defaults to the ``model`` option; the
        wire form to the ``response_format`` option)."""
        from refold.fold.prompts import default_model_spec

        model_options.setdefault("response_format", self.response_format)
        model_id = model_id or self.model
        if not model_id:
            raise ExtractionError("name the served model: OpenAIExtractor(..., model='NAME') or "
                                  "default_spec('NAME')")
        return FoldSpec(extractor=self.name, model=default_model_spec(model_id, file_hash, **model_options))

    def _check_spec(self, spec: FoldSpec) -> None:
        if self.model and spec.model and spec.model.model_id != self.model:
            raise ExtractionError(
                f"the spec names model {spec.model.model_id!r} but this extractor is configured for "
                f"{self.model!r}; build the spec for the served model (default_spec())"
            )

    def _meta(self) -> tuple[tuple[str, Any], ...]:
        return (("endpoint", self.base_url),)

    def _http(self) -> Any:
        if self._client is None:
            try:
                import httpx
            except ImportError as exc:
                raise ExtractionError(f"the openai extractor needs httpx: {_INSTALL_HINT}") from exc
            headers = {"Content-Type": "application/json"}
            if self.api_key:
                headers["Authorization"] = f"Bearer {self.api_key}"
            self._client = httpx.Client(timeout=self.timeout, headers=headers)
        return self._client

    def _complete(self, request: ModelRequest) -> Completion:
        import httpx
        from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

        client = self._http()
        url = f"{self.base_url}/chat/completions"
        body = request.payload.encode("utf-8")
        retrying = Retrying(retry=retry_if_exception_type(_Transient), stop=stop_after_attempt(self.max_retries + 1),
                            wait=wait_exponential(multiplier=self.backoff_s), reraise=True)
        try:
            for attempt in retrying:
                with attempt:
                    started = time.perf_counter()
                    try:
                        response = client.post(url, content=body)
                    except httpx.TransportError as exc:  # refused, reset, DNS, timeouts
                        raise _Transient(f"cannot reach {url} ({type(exc).__name__}: {exc})") from exc
                    latency = (time.perf_counter() - started) * 1000.0
                    if response.status_code in _RETRY_STATUS:
                        raise _Transient(f"{url} answered HTTP {response.status_code}: {response.text[:300]}")
                    if response.status_code != 200:
                        raise ExtractionError(f"{url} refused the request with HTTP {response.status_code}: "
                                              f"{response.text[:300]}{_format_hint(response.text)}")
                    try:
                        data = response.json()
                        text, tokens_in, tokens_out = postprocess(data)
                    except ValueError as exc:
                        raise ExtractionError(f"{url} answered 200 with a body that is not a chat completion "
                                              f"({exc}); is base_url an OpenAI-compatible /v1 endpoint?") from exc
                    meta = (("attempts", attempt.retry_state.attempt_number),
                            ("finish_reason", data["choices"][0].get("finish_reason")),
                            ("served_model", data.get("model")))
                    return Completion(text, tokens_in, tokens_out, latency, meta=meta)
        except _Transient as exc:
            problem = str(exc)
            hint = f"; {_START_HINT}" if problem.startswith("cannot reach") else _format_hint(problem)
            raise ExtractionError(f"{problem} after {self.max_retries + 1} attempts{hint}") from None


class _Transient(Exception):
    """A failure worth another attempt: no connection, a timeout, HTTP 429 or 5xx."""


def _format_hint(text: str) -> str:
    # the llama.cpp server answers a response_format it does not know with HTTP 500 (not 4xx)
    if "response_format" not in text:
        return ""
    return (" (the server refused the response_format wire form: build the spec with "
            "response_format='json_object' for the llama.cpp server, 'json_schema' otherwise; "
            "CLI: --option response_format=json_object)")
