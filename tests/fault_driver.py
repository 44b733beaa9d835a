"""Run a program that kills itself with SIGKILL when it reaches a fault point (crash tests), or
that stops at one for good (``--pause POINT:N``: the N-th time it reaches ``POINT``), so a test can
stop a job at a known place instead of racing it.

``python -m tests.fault_driver POINT -m MODULE [ARG ...]`` runs ``MODULE`` as ``python -m`` would,
``python -m tests.fault_driver POINT -c CODE [ARG ...]`` runs ``CODE`` as ``python -c`` would; in
both, the process kills itself (exit status -9, like ``kill -9``) the moment
:func:`refold.faults.point` is called with ``POINT``. Run it from the repository root (or with it
on ``PYTHONPATH``).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading

from refold import faults


def kill_at(name: str) -> faults.Hook:
    """A hook that SIGKILLs this process when the fault point ``name`` is reached."""
    def hook(reached: str) -> None:
        if reached == name:
            os.kill(os.getpid(), signal.SIGKILL)
    return hook


def pause_at(name: str, times: int) -> faults.Hook:
    """A hook that blocks this thread for good the ``times``-th time ``name`` is reached (what it
    did before stays done; the test then stops the process)."""
    reached_times = 0

    def hook(reached: str) -> None:
        nonlocal reached_times
        if reached == name:
            reached_times += 1
            if reached_times >= times:
                threading.Event().wait()
    return hook


def main(argv: list[str]) -> None:
    pause = argv[:1] == ["--pause"]
    if pause:
        argv = argv[1:]
    if len(argv) < 3 or argv[1] not in ("-m", "-c"):
        raise SystemExit("usage: python -m tests.fault_driver [--pause] POINT[:N] (-m MODULE | -c CODE) [ARG ...]")
    name, how, target, args = argv[0], argv[1], argv[2], argv[3:]
    if pause:
        point, _, times = name.partition(":")
        faults.install(pause_at(point, int(times or 1)))
    else:
        faults.install(kill_at(name))
    if how == "-m":
        sys.argv = [target, *args]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = ["-c", *args]
        exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})  # noqa: S102 (python -c)


if __name__ == "__main__":
    main(sys.argv[1:])
