"""Test servers for the LLM adapters: a real llama.cpp server, and a scripted HTTP stub.

``llama_server`` (session scope) starts ``python -m llama_cpp.server`` on 127.0.0.1 with the
packaged Gemma 3 270M and yields its ``/v1`` base URL. ``stub_server`` answers each POST with the
next scripted (status, body) pair and records the raw request bodies: it stands in for an endpoint
that misbehaves (garbage output, 5xx, wrong protocol), which a real model server cannot be made
to do on demand.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """Base URL of a real llama.cpp OpenAI-compatible server running the packaged model."""
    from refold.extractors.models import default_gguf_path

    port = free_port()
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llama_cpp.server", "--model", str(default_gguf_path()),
             "--chat_format", "gemma", "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048"],
            stdout=out, stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama.cpp server did not start in 120 s: {log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class StubServer:
    """Scripted answers; ``bodies`` are the raw bytes of every POST received."""

    def __init__(self) -> None:
        self.answers: deque[tuple[int, str]] = deque()
        self.bodies: list[bytes] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                stub.bodies.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                status, body = stub.answers.popleft() if stub.answers else (500, "no answer scripted")
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):  # keep test output quiet
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, status: int, body: str | dict) -> None:
        self.answers.append((status, body if isinstance(body, str) else json.dumps(body)))

    def answer_content(self, content: str, *, prompt_tokens: int = 11, completion_tokens: int = 7) -> None:
        """A well-formed chat completion whose message content is ``content``."""
        self.answer(200, {"id": "x", "object": "chat.completion", "model": "stub-model",
                          "choices": [{"index": 0, "finish_reason": "stop",
                                       "message": {"role": "assistant", "content": content}}],
                          "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}})

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stub_server():
    stub = StubServer()
    yield stub
    stub.close()
