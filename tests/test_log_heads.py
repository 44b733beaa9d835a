"""Published chain heads (storage/heads.py): the journal under receipts/heads/.

Real files in tmp_path, real processes for the concurrent writers; nothing is mocked.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

import refold
from refold.fold.events import NewEvent
from refold.storage.log import heads
from refold.storage.log.heads import JOURNAL, Head, publish_head, read_published_head

NOW = datetime(2026, 12, 2, tzinfo=timezone.utc)


def _head(version: int) -> Head:
    return Head(seq=version * 10, link=f"{version:064x}", recorded_at=NOW, table_version=version)


def _lines(folder: Path) -> list[str]:
    return [line for line in (folder / JOURNAL).read_text().splitlines() if line]


def test_the_newest_published_head_is_read_back(tmp_path):
    assert read_published_head(tmp_path / "none") is None
    for version in (1, 2, 3):
        publish_head(tmp_path, _head(version))
    assert read_published_head(tmp_path) == _head(3)
    assert len(_lines(tmp_path)) == 3


def test_heads_landing_out_of_order_still_give_the_newest(tmp_path):
    """Concurrent writers can publish in a different order than their versions landed."""
    for version in (5, 7, 6):
        publish_head(tmp_path, _head(version))
    assert read_published_head(tmp_path) == _head(7)


def test_a_line_a_crash_cut_short_is_skipped(tmp_path):
    publish_head(tmp_path, _head(1))
    with open(tmp_path / JOURNAL, "a") as f:
        f.write("\n" + json.dumps(_head(2).as_json())[:40])  # the write was interrupted
    assert read_published_head(tmp_path) == _head(1)
    publish_head(tmp_path, _head(3))  # starts a line of its own after the fragment
    assert read_published_head(tmp_path) == _head(3)


def test_heads_of_a_store_from_before_the_journal_are_still_read(tmp_path):
    """Older stores hold one file per table version; the newest of both kinds wins."""
    (tmp_path / f"{4:020d}.json").write_text(json.dumps(_head(4).as_json()))
    (tmp_path / f"{9:020d}.json").write_text("")  # a crash left it empty: the one before counts
    assert read_published_head(tmp_path) == _head(4)
    publish_head(tmp_path, _head(5))
    assert read_published_head(tmp_path) == _head(5)


def test_rotation_keeps_the_newest_heads_and_writers_follow_it(tmp_path, monkeypatch):
    monkeypatch.setattr(heads, "ROTATE_AT", 2_000)
    (tmp_path / f"{1:020d}.json").write_text(json.dumps(_head(1).as_json()))
    for version in range(2, 60):
        publish_head(tmp_path, _head(version), keep=4)
    assert len(_lines(tmp_path)) < 20 and read_published_head(tmp_path) == _head(59)
    assert not list(tmp_path.glob("*[0-9].json"))  # the old per-version files went with the rotation
    # another process rotating replaces the file: this process notices by the inode and reopens
    replaced = tmp_path / "other.jsonl"
    replaced.write_text(json.dumps(_head(60).as_json()) + "\n")
    os.replace(replaced, tmp_path / JOURNAL)
    publish_head(tmp_path, _head(61))
    assert [json.loads(line)["table_version"] for line in _lines(tmp_path)] == [60, 61]


def test_a_removed_heads_folder_is_recreated(tmp_path):
    folder = tmp_path / "heads"
    publish_head(folder, _head(1))
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    publish_head(folder, _head(2))
    assert read_published_head(folder) == _head(2)


def _publish_many(folder: str, start: int, count: int) -> None:
    for version in range(start, start + count):
        publish_head(Path(folder), _head(version))


@pytest.mark.slow
def test_processes_publishing_at_once_never_mix_their_lines(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_publish_many, args=(str(tmp_path), 1000 * p, 200)) for p in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    versions = [json.loads(line)["table_version"] for line in _lines(tmp_path)]
    assert sorted(versions) == sorted(v for p in range(3) for v in range(1000 * p, 1000 * p + 200))


def test_every_append_publishes_its_head(tmp_path):
    mem = refold.init(tmp_path / "store")
    for i in range(3):
        mem.append([NewEvent(kind="observation", content=f"c{i}", source="test")])
    assert read_published_head(mem.layout.heads) == mem.head()


def test_a_head_that_cannot_be_published_warns_and_the_append_lands(tmp_path):
    mem = refold.init(tmp_path / "store")
    shutil.rmtree(mem.layout.heads)  # init made it: a file takes its place
    Path(mem.layout.heads).write_text("in the way")
    with pytest.warns(RuntimeWarning, match="could not publish the chain head"):
        mem.append([NewEvent(kind="observation", content="c", source="test")])
    assert mem.log().height == 1


def test_a_new_log_carries_its_empty_head_in_the_create_commit(tmp_path):
    """The create commit holds the empty log's head, as every append's commit holds its own (the
    appender checks it against the rows: tests/test_log_chain.py)."""
    from deltalake import DeltaTable

    from refold.fold.chain import GENESIS
    from refold.storage.log.reader import HEAD_KEY

    mem = refold.init(tmp_path / "store")
    entry = DeltaTable(mem.layout.events).history(1)[0]
    assert Head.from_json(json.loads(entry[HEAD_KEY])) == Head(-1, GENESIS, datetime(1970, 1, 1, tzinfo=timezone.utc), 0)
    assert mem.head().seq == -1
    assert mem.append([NewEvent(kind="observation", content="first", source="test")]) == [0]
    assert mem.head().seq == 0 and mem.verify().ok


def test_a_new_store_publishes_its_empty_head_at_creation(tmp_path):
    """The heads folder and journal exist from ``init`` (the first append only opens them); the
    empty head names nothing to compare against, so verify of the empty log passes."""
    from refold.fold.chain import GENESIS

    mem = refold.init(tmp_path / "store")
    assert (Path(mem.layout.heads) / JOURNAL).exists()
    assert read_published_head(mem.layout.heads) == Head(-1, GENESIS, datetime(1970, 1, 1, tzinfo=timezone.utc), 0)
    assert mem.verify().ok
    mem.append([NewEvent(kind="observation", content="first", source="test")])
    assert read_published_head(mem.layout.heads).seq == 0 and mem.verify().ok
