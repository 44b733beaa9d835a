"""Helpers for the event-log tests: stores with one data file per batch, and tampering tools."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

import refold

def _event(i: int, **extra) -> dict:
    return {"kind": "chat_turn", "content": f"event {i} says hello", "source": f"chat#{i}"} | extra


def _store(root: Path, batches=(5, 5, 5, 5)) -> refold.Memory:
    """A store with one commit (and one data file) per batch: v1 = seqs 0..4, v2 = 5..9, …"""
    mem = refold.init(root)
    n = 0
    for size in batches:
        mem.append([_event(n + i, subjects=[f"subj-{(n + i) % 3}"]) for i in range(size)])
        n += size
    return mem


def _actions(mem: refold.Memory) -> list[dict]:
    table = pa.table(DeltaTable(mem.layout.events).get_add_actions(flatten=True))
    return sorted(table.to_pylist(), key=lambda a: a["min.seq"])


def _file_of(mem: refold.Memory, seq: int) -> Path:
    for action in _actions(mem):
        if action["min.seq"] <= seq <= action["max.seq"]:
            return Path(mem.layout.events) / action["path"]
    raise AssertionError(f"no data file holds seq {seq}")


def _rewrite(path: Path, change) -> None:
    """Rewrite one data file under its own name with ``change(rows)`` applied (plain pyarrow)."""
    table = pq.read_table(path)
    rows = table.to_pylist()
    change(rows)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)


def _row(rows: list[dict], seq: int) -> dict:
    return next(r for r in rows if r["seq"] == seq)


def _flip(text: str, at: int = 3) -> str:
    """``text`` with one character replaced (one byte for ASCII text)."""
    return text[:at] + ("x" if text[at] != "x" else "y") + text[at + 1:]


def _bad(mem: refold.Memory, seq: int, *words: str, against=None):
    report = mem.verify(against=against)
    assert not report.ok
    assert report.first_bad_seq == seq, report.problems
    text = " ".join(report.problems)
    for word in words:
        assert word in text, report.problems
    return report


@pytest.fixture()
def mem(tmp_path):
    m = _store(tmp_path / "store")
    assert m.verify().ok
    return m


def _plain_delta_files(table_dir: Path) -> list[str]:
    """The live data files of a Delta table, from its log alone: the newest checkpoint (a parquet
    file) if any, then every later commit JSON, replaying add and remove actions."""
    log = table_dir / "_delta_log"
    live: dict[str, dict] = {}
    start = -1
    if (log / "_last_checkpoint").exists():
        start = json.loads((log / "_last_checkpoint").read_text())["version"]
        checkpoint = pq.read_table(log / f"{start:020d}.checkpoint.parquet", columns=["add"])
        for add in checkpoint["add"].to_pylist():
            if add:
                live[add["path"]] = add
    for commit in sorted(log.glob("[0-9]" * 20 + ".json")):
        if int(commit.stem) <= start:
            continue
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live[action["add"]["path"]] = action["add"]
            elif "remove" in action:
                live.pop(action["remove"]["path"], None)
    return [str(table_dir / unquote(path)) for path in live]
