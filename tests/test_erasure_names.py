"""A subject whose name is a short word ("Tim"): the residue scan matches names as whole words,
so Delta's own ``timestamp``/``createdTime`` and the word "time" are not residue, while "tim,"
or "Tim's" left anywhere still are; canaries still match inside words. Runs the console script
in subprocesses, against a real store."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import refold
SCRIPT = str(Path(sys.executable).parent / "refold")


def _sh(*args, code: int) -> subprocess.CompletedProcess:
    proc = subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def _store(root: Path) -> refold.Memory:
    mem = refold.init(root)
    mem.append([
        {"kind": "chat_turn", "content": "Tim: I paint at this time of year.", "source": "chat#1",
         "subjects": ["s-7c1e"], "event_id": "t-1"},
        {"kind": "chat_turn", "content": "Ann: what time is it? timestamps confuse me.", "source": "chat#1",
         "subjects": ["s-4d2a"], "event_id": "a-1"},
        {"kind": "chat_turn", "content": "Tim: sometimes I sell zephyrmarmalade jars.", "source": "chat#1",
         "subjects": ["s-7c1e"], "event_id": "t-2"},
        {"kind": "chat_turn", "content": "Ann: Tim's paintings are great, tell tim, please.",
         "source": "chat#1", "subjects": ["s-4d2a"], "event_id": "a-2"},
        {"kind": "chat_turn", "content": "Ann: I bought zephyrmarmalade too.", "source": "chat#1",
         "subjects": ["s-4d2a"], "event_id": "a-3"},
    ])
    mem.register_subject("s-7c1e", "Tim")
    mem.register_subject("s-4d2a", "Ann")
    mem.fold()
    return mem


@pytest.mark.slow
def test_erasing_tim_leaves_no_false_residue(tmp_path):
    root = _store(tmp_path / "store").root
    before = json.loads(_sh("scan", root, "--needle", "Tim", "--json", code=1).stdout)
    assert before["hits"] and all("timestamp" not in h["location"].lower() for h in before["hits"])

    done = _sh("erase", root, "--subject", "s-7c1e", "--include-mentions", "--json", code=0)
    receipt = json.loads(done.stdout)
    assert receipt["status"] == "erased" and len(receipt["events"]) == 3 and receipt["scan"]["hits"] == []
    assert receipt["scan"]["files"] > 0 and receipt["scan"]["needles"] == 1
    verified = _sh("receipt", "verify", root, receipt["erasure_id"], "--needle", "Tim", "--no-refold", code=0)
    assert "ok   residue scan" in verified.stdout
    _sh("scan", root, "--needle", "Tim", code=0)
    # the canary is still inside a word of Ann's remaining turn: found as a substring only
    _sh("scan", root, "--needle", "marmalade", code=0)
    assert "zephyrmarmalade" not in _sh("scan", root, "--canary", "marmalade", code=1).stdout

    # a name that does remain, as a word, is still found
    refold.open(root).append([{"kind": "chat_turn", "content": "Ann: I told tim, finally.",
                               "source": "chat#2", "subjects": ["s-4d2a"], "event_id": "a-4"}])
    again = _sh("receipt", "verify", root, receipt["erasure_id"], "--needle", "Tim", "--no-refold", code=1)
    assert "FAIL residue scan" in again.stdout


@pytest.mark.slow
def test_erasing_tim_without_mentions_reports_them(tmp_path):
    root = _store(tmp_path / "store").root
    done = json.loads(_sh("erase", root, "--subject", "s-7c1e", "--json", code=1).stdout)
    # only Ann's turn that names Tim ("Tim's", "tim,") is left: every hit is in event data
    assert done["scan"]["hits"] and all(h["file"].startswith("events/") for h in done["scan"]["hits"])
