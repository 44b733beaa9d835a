"""A CLI command that reads a snapshot exits cleanly, every time.

Reading a snapshot once parsed Python-owned bytes with multi-threaded Arrow decoding; when an
Arrow worker thread dropped the last reference during interpreter shutdown, the process aborted
after its output was complete (``terminate called without an active exception``, exit 134, in
about 1 of 8-30 runs). The abort is a race, so the command runs many times, a few at once (more
scheduling noise). Real store, real snapshot, the installed console script; nothing is mocked.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import refold
from refold.storage.snapshot_files import _read_buffer

REFOLD = str(Path(sys.executable).with_name("refold"))
RUNS, AT_ONCE = 30, 3


def test_refold_facts_on_a_store_with_a_snapshot_exits_0_every_time(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([{"kind": "memory_written", "content": f"P{i} lives in C{i % 7}", "source": "chat#1",
                 "fact": {"subject": f"P{i}", "relation": "lives_in", "object": f"C{i % 7}"},
                 "justification": "stated"} for i in range(300)])
    assert mem.snapshot() is not None
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    failures = []
    for start in range(0, RUNS, AT_ONCE):
        procs = [subprocess.Popen([REFOLD, "facts", mem.root], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env) for _ in range(AT_ONCE)]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            if proc.returncode != 0 or b"P299" not in out:
                failures.append((proc.returncode, err.decode(errors="replace")[-300:]))
    assert not failures, f"{len(failures)} of {RUNS} runs failed: {failures[:3]}"


def test_snapshot_files_are_read_into_buffers_arrow_owns(tmp_path):
    """The cause, checked directly: what Arrow decodes from is allocated from Arrow's own memory
    pool (Python ``bytes`` wrapped for Arrow are not: the pool does not grow)."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 100_000)
    before = pa.total_allocated_bytes()
    buffer = _read_buffer(path)
    assert pa.total_allocated_bytes() - before >= 100_000
    assert buffer.to_pybytes() == b"x" * 100_000
    before = pa.total_allocated_bytes()
    wrapped = pa.py_buffer(path.read_bytes())  # what the check tells apart
    assert pa.total_allocated_bytes() == before and wrapped.size == 100_000
