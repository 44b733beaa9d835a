"""An erasure on a store folded by the partitioned engine takes that engine's refold: the receipt
digests the state tables ("state1:") and no whole graph fold runs beside them (at 100k events it
was ~80% of the erasure's time and its peak memory). The digest is of the state a read sees, so
a full refold of the same log, with other files and row versions, digests equal; the receipt
verifies from a fresh process-local Memory and a wrong digest does not."""

from __future__ import annotations

import dataclasses

import refold
from refold import erasing
from refold.state_fold import group_size
from tests.fold_helpers import fact_event
from tests.test_fold_state import _log

X, NAME = "s-x", "Quillon Varga"


def _store(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.fold_engine = "partitioned"
    mine = [fact_event(NAME, "works_at", "Acme", day=2, subjects=[X]),
            fact_event(NAME, "likes", "zephyrmarmalade", day=3, subjects=[X])]
    mem.append(_log(120) + mine + _log(40, start=120))
    mem.fold(full=True, buckets=8)
    mem.append(_log(20, start=160))
    mem.fold()  # an incremental fold: the state holds appended row versions
    erasing.register_subject(mem, X, NAME)
    return mem


def _digest(mem) -> str:
    store = mem.state_store(mem.current_spec())
    buckets = store.tag().buckets
    return erasing.STATE_SCHEME + store.digest(buckets=buckets, group=group_size(store, buckets))


def test_the_erasure_refolds_with_the_partitioned_engine_only(tmp_path, monkeypatch):
    mem = _store(tmp_path)

    def no_graph_fold(*args, **kwargs):
        raise AssertionError("the erasure folded the whole graph beside the state tables")

    monkeypatch.setattr(refold.Memory, "advanced_fold", no_graph_fold)
    receipt = mem.erase(X)
    assert receipt.state_digest.startswith(erasing.STATE_SCHEME)
    assert receipt.state_digest == _digest(refold.open(mem.root))


def test_a_process_on_the_graph_engine_erases_a_partitioned_store_by_its_state_tables(tmp_path, monkeypatch):
    """What the erasure refolds is decided by the store (its state tables), not by the engine
    the erasing process would fold with: `refold erase` from the CLI runs on the default."""
    _store(tmp_path)
    monkeypatch.setattr(refold.Memory, "fold_engine", "graph")  # (a process that folds the graph)
    fresh = refold.open(tmp_path / "store")
    assert fresh.fold_engine == "graph"

    def no_graph_fold(*args, **kwargs):
        raise AssertionError("the erasure folded the whole graph beside the state tables")

    monkeypatch.setattr(refold.Memory, "advanced_fold", no_graph_fold)
    receipt = fresh.erase(X)
    assert receipt.state_digest.startswith(erasing.STATE_SCHEME)
    assert receipt.state_digest == _digest(refold.open(tmp_path / "store"))


def test_the_state_digest_follows_the_state_not_its_files(tmp_path):
    mem = _store(tmp_path)
    receipt = mem.erase(X)
    again = refold.open(mem.root)
    again.fold(engine="partitioned", full=True, buckets=8)  # other files, one version per row
    assert _digest(again) == receipt.state_digest
    fresh = refold.open(mem.root)  # (the receipt names the scheme)
    checks = {c.name: c for c in erasing.verify_receipt(fresh, receipt).checks}
    assert checks["state digest"].ok
    wrong = dataclasses.replace(receipt, state_digest=erasing.STATE_SCHEME + "0" * 64)
    checks = {c.name: c for c in erasing.verify_receipt(refold.open(mem.root), wrong).checks}
    assert not checks["state digest"].ok


def test_a_store_of_the_graph_engine_keeps_the_columnar_graph_digest(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append(_log(60) + [fact_event(NAME, "likes", "zephyrmarmalade", day=3, subjects=[X])])
    mem.fold(engine="graph")
    erasing.register_subject(mem, X, NAME)
    assert mem.erase(X).state_digest.startswith(erasing.DIGEST_SCHEME)
