"""Shared set-up for erasure tests: a store with two subjects, canaries unique to X, a real fold.

Also runnable as ``python -m tests.erasure_helpers ROOT`` to erase X in a child process (the
crash tests run it under ``tests.fault_driver``, which kills it with SIGKILL at a chosen step).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import refold
from tests.fold_helpers import fact_event

X, Y = "s-x", "s-y"
X_NAME, X_ALIAS, X_EMAIL = "Quillon Varga", "Quill", "quillon@example.org"
Y_NAME = "Yolanda Brisk"
#: strings that occur only in events about X (some shared with Y)
CANARIES = tuple(f"zephyrmarmalade{i:02d}" for i in range(12))
NEEDLES = (X_NAME, X_ALIAS, X_EMAIL, *CANARIES)
REPO = Path(__file__).resolve().parents[1]


def events() -> list[dict]:
    """24 events: 12 about X (4 of them shared with Y), 11 about Y only, 1 untagged mention of X."""
    out = []
    for i, canary in enumerate(CANARIES):
        shared = i % 3 == 0
        ev = fact_event(X_NAME, "likes", canary, day=i, event_id=f"ev-x-{i:02d}",
                        subjects=[X, Y] if shared else [X])
        if shared:
            ev["content"] = f"{X_NAME} and {Y_NAME} both like {canary}."
        out.append(ev)
    for i in range(11):
        out.append(fact_event(Y_NAME, "visited", f"city number {i}", day=20 + i, event_id=f"ev-y-{i:02d}",
                              subjects=[Y]))
    out.append({"kind": "chat_turn", "content": f"Yolanda: I wrote to {X_ALIAS} at {X_EMAIL} yesterday.",
                "source": "chat#9", "event_id": "ev-mention", "subjects": [Y]})
    return out


X_EVENT_IDS = frozenset([f"ev-x-{i:02d}" for i in range(12)] + ["ev-mention"])


def build(root: Path, *, mode: str = "delete", include: set[str] | None = None) -> refold.Memory:
    """A store at ``root`` with the events above (optionally only ``include`` ids), registered
    and folded (extraction cache, state tables)."""
    mem = refold.init(root, mode=mode)
    chosen = [e for e in events() if include is None or e["event_id"] in include]
    mem.append(chosen[:12])
    mem.append(chosen[12:])
    mem.register_subject(X, X_NAME, aliases=[X_ALIAS], identifiers=[X_EMAIL])
    mem.register_subject(Y, Y_NAME)
    mem.fold()  # state tables that hold X's facts (erasure must purge them)
    return mem


def erased_id(mem: refold.Memory, event_id: str) -> str:
    """What names ``event_id`` after its erasure (tombstone, receipt): the id's pseudonym."""
    from refold.storage.erased_ids import pseudonyms

    key = pseudonyms(mem.root)
    assert key is not None, "no erasure has run on this store"
    return key(event_id)


def facts(mem: refold.Memory) -> set[tuple]:
    """Facts as comparable tuples (subject, relation, object, valid_from, valid_to, sources,
    derivation), from the state tables (the whole store's graph view)."""
    out = set()
    for _, _, d in mem.graph().edges(data=True):
        out.add((d["subject"], d["relation"], d["object"], d["valid_from"], d["valid_to"],
                 tuple(sorted(d["sources"])), d["derivation"]))
    return out


def reference_facts(tmp: Path) -> set[tuple]:
    """Facts of a fresh store whose log never held X's events (what erasure must converge to)."""
    keep = {e["event_id"] for e in events()} - X_EVENT_IDS
    return facts(build(tmp, include=keep))


def erase_in_child(root: Path, crash_at: str | None = None, timeout: float = 240) -> int:
    """Erase X in a child process; with ``crash_at`` (an erasure step, e.g. ``"purge"``) the child
    kills itself with SIGKILL at the fault point ``erasure.<crash_at>``. Returns its exit status."""
    driver = ["-m", "tests.fault_driver", f"erasure.{crash_at}"] if crash_at else []
    proc = subprocess.run([sys.executable, *driver, "-m", "tests.erasure_helpers", str(root)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in (0, -9):
        raise AssertionError(f"child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.returncode


def erase_x(root: Path):
    mem = refold.open(root, create=False)
    return mem.erase(X, canaries=CANARIES, include_mentions=True)


if __name__ == "__main__":
    erase_x(Path(sys.argv[1]))
