"""An erasure killed right after any one of its Delta commits is finished by one rerun (issue 33).

A child process runs the erasure with deltalake's commit entry points wrapped (write_deltalake,
DeltaTable.create/delete/vacuum/create_write_transaction, the alterer's set_table_properties, the
optimizer's compact) and calls ``os._exit(137)`` right after the Nth of them returns; nothing in
refold knows. For every N from 1 to the number of such calls an uninterrupted erasure makes, in
delete and shred mode, one rerun in this process must leave: no fact of the subject (reads and
the state tables), no canary anywhere under the store, a receipt that verifies and a log that
verifies.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import refold
from refold.storage.state import StateStore, state_specs
from tests.fold_helpers import fact_event

X, Y, Z = "s-x", "s-y", "s-z"
X_NAME, X_ALIAS, X_EMAIL = "Quillon Varga", "Quill", "quillon@example.org"
Y_NAME, Z_NAME = "Yolanda Brisk", "Zed Orbit"
#: strings only X's events hold
CANARIES = tuple(f"zephyrmarmalade{i:02d}" for i in range(9))
REPO = Path(__file__).resolve().parents[1]
#: what a killed child exits with (what a kill -9 would look like to an operator: 128 + 9)
KILLED = 137

RUNNER = textwrap.dedent('''
    """Erase X from the store at argv[1]; exit 137 right after the argv[2]-th Delta commit (0: never).
    Writes the commits it counted, one name a line, to argv[3] when it was not killed."""
    import functools, os, sys

    import deltalake
    from deltalake import DeltaTable
    from deltalake.table import TableAlterer, TableOptimizer

    root, kill_at, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    made = []
    depth = [0]

    def counted(name, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            depth[0] += 1
            try:
                result = fn(*args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:  # (a commit call made inside another counts once)
                made.append(name)
                if len(made) == kill_at:
                    os._exit(137)
            return result
        return wrapper

    # before refold is imported: its modules bind ``from deltalake import write_deltalake``
    deltalake.write_deltalake = counted("write_deltalake", deltalake.write_deltalake)
    for owner, name in [(DeltaTable, "delete"), (DeltaTable, "vacuum"), (DeltaTable, "create_write_transaction"),
                        (TableAlterer, "set_table_properties"), (TableOptimizer, "compact")]:
        setattr(owner, name, counted(f"{owner.__name__}.{name}", getattr(owner, name)))
    DeltaTable.create = classmethod(counted("DeltaTable.create", DeltaTable.create.__func__))

    import refold
    from refold.erasure import verbs as erasing
    mem = refold.open(root, create=False)
    mem.erase(SUBJECT, canaries=CANARIES)
    with open(out, "w") as f:
        f.write("\\n".join(made))
''').replace("SUBJECT", repr(X)).replace("CANARIES", repr(list(CANARIES)))


def _events() -> list[dict]:
    """40 events: 12 about X (its likes, a superseded address, an employer whose inverse roll-up
    lands in another bucket, an e-mail, two shared with Y), 20 about Y, 8 about Z."""
    out = [fact_event(X_NAME, "likes", f"{CANARIES[i]} jam", day=i, event_id=f"ev-x-{i:02d}", subjects=[X])
           for i in range(5)]
    out += [fact_event(X_NAME, "lives_in", f"{CANARIES[5]} street", day=5, event_id="ev-x-05", subjects=[X]),
            fact_event(X_NAME, "lives_in", f"{CANARIES[6]} street", day=6, event_id="ev-x-06", subjects=[X]),
            fact_event(X_NAME, "works_at", "Acme Labs", day=7, event_id="ev-x-07", subjects=[X]),
            fact_event(X_NAME, "email", X_EMAIL, day=8, event_id="ev-x-08", subjects=[X]),
            fact_event(X_NAME, "alias", X_ALIAS, day=9, event_id="ev-x-09", subjects=[X]),
            fact_event(Y_NAME, "knows", X_NAME, day=10, event_id="ev-x-10", subjects=[X, Y]),
            fact_event(Y_NAME, "likes", f"{CANARIES[7]} and {CANARIES[8]}", day=11, event_id="ev-x-11",
                       subjects=[X, Y])]
    out += [fact_event(Y_NAME, "visited", f"city number {i}", day=20 + i, event_id=f"ev-y-{i:02d}", subjects=[Y])
            for i in range(19)]
    out.append(fact_event(Y_NAME, "works_at", "Acme Labs", day=40, event_id="ev-y-19", subjects=[Y]))
    out += [fact_event(Z_NAME, "likes", f"tea number {i}", day=50 + i, event_id=f"ev-z-{i:02d}", subjects=[Z])
            for i in range(8)]
    return out


def _build(root: Path, mode: str) -> None:
    mem = refold.init(root, mode=mode)
    events = _events()
    mem.append(events[:20])
    mem.append(events[20:])
    mem.register_subject(X, X_NAME, aliases=[X_ALIAS], identifiers=[X_EMAIL])
    mem.register_subject(Y, Y_NAME)
    mem.fold()


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, tuple[Path, list[str]]]:
    """Per mode: a folded store, and the Delta commits an uninterrupted erasure of X makes in it."""
    base = tmp_path_factory.mktemp("kill-points")
    runner = base / "runner.py"
    runner.write_text(RUNNER)
    out = {}
    for mode in ("delete", "shred"):
        template = base / f"template-{mode}"
        _build(template, mode)
        probe = base / f"probe-{mode}"
        shutil.copytree(template, probe)
        made = base / f"commits-{mode}.txt"
        _child(runner, probe, 0, made, expect=0)
        out[mode] = (template, made.read_text().split("\n"))
    return out


def _child(runner: Path, root: Path, kill_at: int, out: Path, *, expect: int) -> None:
    proc = subprocess.run([sys.executable, str(runner), str(root), str(kill_at), str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == expect, f"child exited {proc.returncode}, expected {expect}: {proc.stderr[-3000:]}"


def _x_rows(root: Path) -> list[str]:
    """Rows of the state tables (every spec, every table) that name X or hold a canary."""
    mem = refold.open(root, create=False)
    found = []
    for spec_hash in state_specs(mem.layout):
        store = StateStore(mem.layout, spec_hash)
        for table in ("items", "facts", "entities"):
            for row in store.read(table).to_pylist():
                text = json.dumps(row, default=str).lower()
                if "quillon" in text or "zephyrmarmalade" in text:
                    found.append(f"{spec_hash}/{table}: {text[:200]}")
    return found


def _check_finished(root: Path, mode: str, point: str) -> None:
    mem = refold.open(root, create=False)
    receipt = mem.erase(X, canaries=CANARIES)  # the one rerun
    assert receipt.status == "erased", f"{point}: the rerun answered {receipt.status}"
    after = refold.open(root, create=False)
    assert after.facts(subject=X_NAME).height == 0, point
    assert after.facts(subject=Y_NAME).height > 0, point  # (the other subjects' facts stay)
    assert not _x_rows(root), point
    scan = after.scan(canaries=CANARIES)
    assert not scan.hits, f"{point}: {scan.hits[:3]}"
    report = after.verify_receipt(receipt, canaries=CANARIES)
    assert report.ok, f"{point}: {report.as_json()}"
    verified = after.verify()
    assert verified.ok, f"{point}: {verified.problems}"
    assert not list((root / "receipts").glob("*.pending.json")), point


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["delete", "shred"])
def test_a_rerun_finishes_an_erasure_killed_after_any_commit(tmp_path, templates, mode):
    template, made = templates[mode]
    runner = template.parent / "runner.py"
    assert len(made) >= 10, made  # (the count is what an uninterrupted erasure made)

    def killed(n: int) -> Path:
        root = tmp_path / f"{mode}-{n}"
        shutil.copytree(template, root)
        _child(runner, root, n, tmp_path / f"unused-{n}.txt", expect=KILLED)
        return root

    # the killed runs go ahead in child processes while this one reruns and checks their stores
    # (each store its own copy): the children's start-up, mostly imports, overlaps the checks
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        runs = [pool.submit(killed, n) for n in range(1, len(made) + 1)]
        for n, run in enumerate(runs, start=1):
            root = run.result()
            _check_finished(root, mode, f"{mode} mode, killed after commit {n} of {len(made)} ({made[n - 1]})")
            shutil.rmtree(root)
    finally:
        pool.shutdown(cancel_futures=True)
