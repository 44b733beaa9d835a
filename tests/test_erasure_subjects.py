"""The subject registry (subjects.json) and finding tagged and untagged mentions."""

from __future__ import annotations

import json
import multiprocessing as mp

import pytest

from refold.fold.errors import NotFoundError, ValidationError
from refold.storage.subjects import Subject, SubjectRegistry, find_mentions


def test_register_list_get_remove(tmp_path):
    reg = SubjectRegistry(tmp_path / "subjects.json")
    reg.register("s-2", "Bo Chen")
    s = reg.register("s-1", "Ada Lovelace", aliases=["Ada", "Ada"], identifiers=["ada@example.org"])
    assert s == Subject("s-1", "Ada Lovelace", ("Ada",), ("ada@example.org",))
    assert [x.subject_id for x in reg.list()] == ["s-1", "s-2"]
    assert reg.get("s-1") == s and "s-1" in reg
    assert s.needles == ("Ada Lovelace", "Ada", "ada@example.org")
    assert reg.remove("s-1") is True and reg.remove("s-1") is False
    assert reg.get("s-1") is None
    text = (tmp_path / "subjects.json").read_text()
    assert "Ada" not in text and json.loads(text)["subjects"]["s-2"]["name"] == "Bo Chen"
    with pytest.raises(NotFoundError):
        reg.require("s-1")


def test_bad_input_is_rejected(tmp_path):
    reg = SubjectRegistry(tmp_path / "subjects.json")
    with pytest.raises(ValidationError):
        reg.register("", "x")
    with pytest.raises(ValidationError):
        reg.register("s-1", "  ")
    with pytest.raises(ValidationError):
        reg.register("s-1", "x", aliases=[""])
    assert reg.list() == []


def _register(args):
    path, i = args
    SubjectRegistry(path).register(f"s-{i}", f"Person {i}")


@pytest.mark.slow
def test_concurrent_registrations_are_not_lost(tmp_path):
    path = str(tmp_path / "subjects.json")
    with mp.get_context("spawn").Pool(4) as pool:
        pool.map(_register, [(path, i) for i in range(16)])
    assert len(SubjectRegistry(path).list()) == 16


def test_find_mentions_tagged_and_untagged(mem):
    mem.append([
        {"kind": "chat_turn", "content": "Ada: hi", "source": "c#1", "subjects": ["s-ada"]},
        {"kind": "chat_turn", "content": "I met ADA LOVELACE today", "source": "c#2"},
        {"kind": "chat_turn", "content": "mail ada@example.org please", "source": "c#3", "subjects": ["s-bo"]},
        {"kind": "chat_turn", "content": "Adams and Canada are not Ada", "source": "c#4"},
        {"kind": "document", "content": "Annual report", "source": "d#1"},
    ])
    subject = Subject("s-ada", "Ada Lovelace", ("Ada",), ("ada@example.org",))
    found = find_mentions(mem.events(), subject)
    assert [e.source for e in found.tagged] == ["c#1"]
    # whole words only: "Adams" and "Canada" do not count, "not Ada" does
    assert [e.source for e in found.untagged] == ["c#2", "c#3", "c#4"]
    tagged, untagged = found
    assert tagged == found.tagged and untagged == found.untagged
