"""Shred mode: a fold that honours a key destroyed outside an erasure purges that owner's events
from the state tables (untag, rewrite, retag, vacuum). Killed half-way, it leaves untagged tables
whose old versions still hold the owner's facts; the next fold rebuilds them and must leave no
version behind that holds them (real stores in tmp_path; the kill is an exception raised from
the state tables' write of ``facts`` during the purge, as a process killed there would stop)."""

from __future__ import annotations

import pytest

import refold
from refold.storage.keys.port import FileKeyStore
from refold.erasure.scan import scan
from refold.storage.state import StateStore
from tests.fold_helpers import fact_event

CANARY = "quokkafjord"


class Killed(BaseException):
    """Stands for the process dying: nothing catches it."""


def test_a_fold_after_a_killed_purge_leaves_no_version_holding_the_destroyed_owner(tmp_path, monkeypatch):
    mem = refold.init(tmp_path / "store", mode="shred")
    mem.append([fact_event("Ann", "likes", f"{CANARY}{i}", day=i, subjects=["s-ann"]) for i in range(3)]
               + [fact_event("Ben", "works_at", "Acme", day=5, subjects=["s-ben"])])
    mem.fold()
    FileKeyStore(mem.layout.keys).destroy("s-ann")  # outside an erasure: the next fold purges

    real_write = StateStore.write

    def dies_at_facts(self, name, rows, **kw):
        if name == "facts":
            raise Killed
        return real_write(self, name, rows, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(StateStore, "write", dies_at_facts)
        with pytest.raises(Killed):
            refold.open(tmp_path / "store").fold()
    assert mem.state_store(mem.current_spec()).tag() is None  # the killed purge left the state untagged
    assert [h for h in scan(mem.root, canaries=[CANARY]) if h.file.startswith("state/")]  # old versions hold Ann

    again = refold.open(tmp_path / "store")
    again.fold()
    assert again.state_store(again.current_spec()).tag() is not None
    assert [h for h in scan(again.root, canaries=[CANARY]) if h.file.startswith("state/")] == []
    assert set(again.facts(subject="Ann")["object"].to_list()) == set()
    assert set(again.facts(subject="Ben", current_only=True)["object"].to_list()) == {"Acme"}
