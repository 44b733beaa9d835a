"""File modes of a local store, and the append lock that only the owner's writers can hold.

A store is private to its owner by default (folders 0700, files 0600, including what delta-rs,
faiss and polars write), or group-shared when created with ``--group`` (folders 2770, files
readable and writable by the group, nothing for others). Real stores in tmp_path, real
subprocesses holding locks; nothing is mocked.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import refold
from refold.fold.errors import StoreError
from refold.storage.log.hostlock import LOCK_FILE, host_turn

REFOLD = str(Path(sys.executable).with_name("refold"))


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}  # (S_IMODE keeps the setgid bit)
    for path in root.rglob("*"):
        st = path.lstat()
        out[str(path.relative_to(root))] = stat.S_IMODE(st.st_mode)
    return out


def _exercise(mem: refold.Memory) -> None:
    """Every kind of write refold does: small and batch-sealed appends, a fold with its cache
    and the state tables (partition folders, tags, the erasure's refold and vacuum), the
    vector index, the subject registry, an erasure (keys in shred mode)."""
    mem.register_subject("s1", "Alice")
    mem.append([{"kind": "chat_turn", "content": "Alice lives in Paris", "source": "chat#1",
                 "subjects": ["s1"]}])
    mem.append([{"kind": "memory_written", "content": f"P{i} lives in C{i}", "source": "chat#2",
                 "fact": {"subject": f"P{i}", "relation": "lives_in", "object": f"C{i}"},
                 "justification": "stated"} for i in range(20)])
    mem.fold()
    mem.index(embedder="hashing")
    mem.erase("s1")
    mem.append([{"kind": "chat_turn", "content": "Bob lives in Rome", "source": "chat#3"}])
    mem.fold()  # (an incremental fold's commits)


@pytest.mark.parametrize("mode", ["delete", "shred"])
@pytest.mark.search
def test_everything_refold_creates_is_private_to_the_owner(tmp_path, mode):
    old = os.umask(0o022)  # the usual umask, which made files 0644 and folders 0755
    try:
        mem = refold.init(tmp_path / "store", mode=mode)
        _exercise(mem)
    finally:
        os.umask(old)
    modes = _modes(tmp_path / "store")
    assert any(name.startswith("events/_delta_log") for name in modes)
    assert mode == "delete" or any(name.startswith("keys/") for name in modes)
    assert any("state/" in n and "bucket=" in n for n in modes)
    root = tmp_path / "store"
    wrong = {name: oct(m) for name, m in modes.items()
             if m != (0o700 if (root / name).is_dir() else 0o600)}
    assert not wrong, wrong


@pytest.mark.search
@pytest.mark.slow
def test_a_group_shared_store_gives_the_group_access_and_others_none(tmp_path):
    out = subprocess.run([REFOLD, "init", str(tmp_path / "store"), "--group"], capture_output=True,
                         env=_env(), timeout=120)
    assert out.returncode == 0, out.stderr.decode()
    root = tmp_path / "store"
    assert stat.S_IMODE(root.stat().st_mode) == 0o2770
    _exercise(refold.open(root))
    for name, m in _modes(root).items():
        path = root / name if name != "." else root
        assert m & 0o007 == 0, (name, oct(m))  # nothing for others
        if path.is_dir():
            assert m == 0o2770, (name, oct(m))
        else:
            assert m & 0o040, (name, oct(m))  # the group reads every file


_HOLD = textwrap.dedent("""
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1], os.O_RDONLY)  # read-only: any user who may open the file can do this
    fcntl.flock(fd, fcntl.LOCK_EX)
    print("held", flush=True)
    time.sleep(120)
""")

_WRITER = textwrap.dedent("""
    import sys, time
    from refold.storage.log.hostlock import host_turn
    with host_turn(sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
""")


def _holding(script: str, arg: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", script, arg], stdout=subprocess.PIPE, env=_env())
    assert proc.stdout.readline().strip() == b"held"
    return proc


def test_a_reader_holding_an_old_world_readable_lock_file_cannot_stall_appends(tmp_path):
    """A 0644 lock file (as older refold made it) opened read-only and locked by someone else: the
    next writer replaces the file and takes a lock on the new one at once."""
    mem = refold.init(tmp_path / "store")
    lock = tmp_path / "store" / LOCK_FILE
    lock.touch()
    os.chmod(lock, 0o644)
    holder = _holding(_HOLD, str(lock))
    try:
        with host_turn(mem.root, wait_s=5) as held:  # before: waited, then went on unlocked
            assert held
        assert mem.append([{"kind": "chat_turn", "content": "hi", "source": "chat#1"}]) == [0]
    finally:
        holder.kill()
        holder.wait()
    assert stat.S_IMODE(lock.stat().st_mode) == 0o600


def test_a_stalled_lock_fails_with_an_error_naming_the_holder(tmp_path):
    mem = refold.init(tmp_path / "store")
    holder = _holding(_WRITER, mem.root)
    try:
        with pytest.raises(StoreError) as info:
            with host_turn(mem.root, wait_s=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert f"pid {holder.pid}" in str(info.value) and LOCK_FILE in str(info.value)
    with host_turn(mem.root, wait_s=5) as held:  # released when the holder died
        assert held


@pytest.mark.slow
def test_readers_never_open_the_lock(tmp_path):
    mem = refold.init(tmp_path / "store")
    mem.append([{"kind": "chat_turn", "content": "hi", "source": "chat#1"}])
    lock = tmp_path / "store" / LOCK_FILE
    lock.unlink()
    for args in (["log"], ["verify"], ["head"]):
        out = subprocess.run([REFOLD, *args, mem.root], capture_output=True, env=_env(), timeout=120)
        assert out.returncode == 0, out.stderr.decode()
    assert not lock.exists()
