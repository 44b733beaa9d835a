"""The chain head each commit records in its metadata is checked, never trusted (issue #16 item 3).

Every append's commit carries the head it produced (``refold.head`` in its commitInfo). Someone
who can write ``_delta_log`` can edit it; an appender that believed the edited head would write a
second row at an existing seq and report success, and ``verify`` (which reads rows) would not see
the edit. Here the commit files and statistics are edited with plain Python (json, no refold
code), as a tamperer would; the appender must refuse with ``IntegrityError`` and write nothing,
and ``verify`` must name the commit. Real stores in tmp_path; the CLI runs in a subprocess.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import refold
from refold.fold.errors import IntegrityError
from refold.fold.events import NewEvent


def _event(i: int) -> NewEvent:
    return NewEvent(kind="chat_turn", content=f"turn {i}", source="chat#1", event_id=f"e-{i:03d}")


def _store(path: Path) -> refold.Memory:
    mem = refold.init(path)
    for start in (0, 5, 10):  # versions 1, 2, 3: five events each
        mem.append([_event(i) for i in range(start, start + 5)])
    return mem


def _commit(mem: refold.Memory, version: int) -> Path:
    return Path(mem.layout.events) / "_delta_log" / f"{version:020d}.json"


def _edit(path: Path, change) -> None:
    """Rewrite one commit file with ``change(action)`` applied to each of its JSON lines."""
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for action in lines:
        change(action)
    path.write_text("".join(json.dumps(a) + "\n" for a in lines))


def _head_seq_minus_one(action: dict) -> None:
    info = action.get("commitInfo")
    if info and "refold.head" in info:
        head = json.loads(info["refold.head"])
        head["seq"] -= 1
        info["refold.head"] = json.dumps(head)


def test_an_edited_newest_head_is_refused_by_the_appender_and_named_by_verify(tmp_path):
    mem = _store(tmp_path / "store")
    _edit(_commit(mem, 3), _head_seq_minus_one)  # says the log ends at seq 13; its rows end at 14

    report = refold.Memory(mem.root).verify()
    assert not report.ok and report.first_bad_seq == 14
    assert any("commit 3" in p and "metadata" in p for p in report.problems), report.problems

    with pytest.raises(IntegrityError, match="commit 3 .* does not match the rows") as caught:
        refold.Memory(mem.root).append([_event(99)])  # a fresh writer: it reads the head from disk
    assert caught.value.first_bad_seq == 14
    log = refold.Memory(mem.root).log()
    assert log["seq"].to_list() == list(range(15))  # nothing written: no second row at seq 14


def test_an_edited_older_head_is_named_by_verify_and_does_not_block_appends(tmp_path):
    mem = _store(tmp_path / "store")
    _edit(_commit(mem, 2), _head_seq_minus_one)
    report = refold.Memory(mem.root).verify()
    assert not report.ok and report.first_bad_seq == 9
    assert any("commit 2" in p for p in report.problems), report.problems
    assert refold.Memory(mem.root).append([_event(15)]) == [15]  # the newest head is sound


def test_edited_statistics_that_hide_the_last_rows_are_refused(tmp_path):
    """The newest commit's head and its add action's statistics edited together (seq 13 as the
    end): the file's own rows still end at 14, so the appender refuses."""
    mem = _store(tmp_path / "store")

    def hide_last(action: dict) -> None:
        _head_seq_minus_one(action)
        add = action.get("add")
        if add:
            stats = json.loads(add["stats"])
            stats["maxValues"]["seq"] -= 1
            stats["numRecords"] -= 1
            add["stats"] = json.dumps(stats)

    _edit(_commit(mem, 3), hide_last)
    with pytest.raises(IntegrityError, match="statistics of data file"):
        refold.Memory(mem.root).append([_event(99)])
    assert refold.Memory(mem.root).log()["seq"].to_list() == list(range(15))


def test_a_removed_row_is_refused_by_the_appender(tmp_path):
    """Rows missing below the last one (a DELETE outside refold): the row count no longer reaches
    the last seq, so the appender refuses instead of extending a log with a hole."""
    from deltalake import DeltaTable

    mem = _store(tmp_path / "store")
    DeltaTable(mem.layout.events).delete("seq = 3")
    with pytest.raises(IntegrityError, match="holds 14 rows but its last seq is 14"):
        refold.Memory(mem.root).append([_event(99)])


@pytest.mark.slow
def test_the_cli_refuses_to_append_in_one_line_and_verify_exits_1(tmp_path):
    mem = _store(tmp_path / "store")
    _edit(_commit(mem, 3), _head_seq_minus_one)
    script = str(Path(sys.executable).with_name("refold"))
    batch = tmp_path / "batch.jsonl"
    batch.write_text(json.dumps({"kind": "chat_turn", "content": "late", "source": "chat#2"}) + "\n")
    appended = subprocess.run([script, "append", str(mem.root), str(batch)], capture_output=True, text=True)
    assert appended.returncode == 2, appended
    assert len(appended.stderr.strip().splitlines()) == 1 and "refold verify" in appended.stderr
    verified = subprocess.run([script, "verify", str(mem.root)], capture_output=True, text=True)
    assert verified.returncode == 1 and "commit 3" in verified.stdout + verified.stderr, verified
