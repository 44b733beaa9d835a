"""An erasure invalidates every in-process cache holding the erased events (issue #16, item 6):
in the Memory that erased, in another Memory opened before, and in another process, in both
modes, for facts, graph, why, state and search as of a version from before the erasure.
Search uses the deterministic hashing embedder."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import refold
from refold.storage.epoch import read_epoch
from tests.epoch_reader import SECRET, reads, store_events

REPO = Path(__file__).resolve().parents[1]
NOTHING = {"facts": False, "graph": False, "state": False, "why": False, "search": False, "facts_now": False}
EVERYTHING = {k: True for k in NOTHING}


def _store(root: Path, mode: str) -> tuple[refold.Memory, int, str]:
    mem = refold.init(root, mode=mode)
    mem.append(store_events())
    mem.fold()
    version = mem.head().table_version
    facts = mem.facts(as_of=version)
    fact_id = facts.filter(facts["object"] == SECRET)["fact_id"][0]
    return mem, version, fact_id


@pytest.mark.parametrize("mode", ["delete", "shred"])
@pytest.mark.search
@pytest.mark.slow
def test_the_erasing_memory_forgets_what_it_cached(tmp_path, mode):
    mem, version, fact_id = _store(tmp_path / "s", mode)
    assert reads(mem, version, fact_id) == EVERYTHING  # caches filled before the erasure
    mem.erase("s-x")
    assert reads(mem, version, fact_id) == NOTHING
    # what survives is still there, as of then
    assert set(mem.facts(as_of=version)["object"].to_list()) == {"Oslo", "Tea"}


@pytest.mark.parametrize("mode", ["delete", "shred"])
@pytest.mark.search
@pytest.mark.slow
def test_a_memory_opened_before_the_erasure_forgets_too(tmp_path, mode):
    mem, version, fact_id = _store(tmp_path / "s", mode)
    other = refold.open(tmp_path / "s", create=False)
    assert reads(other, version, fact_id) == EVERYTHING
    before = read_epoch(other.layout)
    mem.erase("s-x")
    assert read_epoch(other.layout) != before
    assert reads(other, version, fact_id) == NOTHING


@pytest.mark.parametrize("mode", ["delete", "shred"])
@pytest.mark.search
@pytest.mark.slow
def test_another_process_forgets_at_its_next_read(tmp_path, mode):
    mem, version, fact_id = _store(tmp_path / "s", mode)
    child = subprocess.Popen([sys.executable, "-m", "tests.epoch_reader", str(tmp_path / "s"), str(version), fact_id],
                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert json.loads(child.stdout.readline()) == EVERYTHING
        mem.erase("s-x")
        out, _ = child.communicate("go\n", timeout=240)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0
    assert json.loads(out) == NOTHING


@pytest.mark.slow
def test_each_erasure_gives_a_new_epoch(tmp_path):
    mem, _, _ = _store(tmp_path / "s", "delete")
    mem.append({"kind": "chat_turn", "content": "about y", "source": "chat#2", "subjects": ["s-y"]})
    assert read_epoch(mem.layout) == ""
    first = mem.erase("s-x")
    one = read_epoch(mem.layout)
    mem.erase("s-y")
    two = read_epoch(mem.layout)
    assert one.startswith(first.erasure_id) and two != one and len({one, two, ""}) == 3
