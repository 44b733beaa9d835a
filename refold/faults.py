"""Fault points: named moments in the product code where a test may make something happen.

Product code calls :func:`point` at a moment worth interrupting — after an erasure step's work and
before its journal records it (``"erasure.<step>"``), after each bucket group a fold merges
(``"fold.merged:<i>"``) … By default nothing happens. A test installs a hook, typically one that
kills its process at a chosen point, with :func:`installed` (or :func:`install` in a child process
it drives, see ``tests/fault_driver.py``). Nothing reads the environment: only code running in the
process can install a hook.

This module imports nothing from refold, so every layer may call it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

__all__ = ["Hook", "install", "installed", "point"]

#: called with the name of each fault point reached
Hook = Callable[[str], None]

_hook: Hook | None = None


def point(name: str) -> None:
    """Reach the fault point ``name``: call the installed hook with it (nothing when none is)."""
    hook = _hook
    if hook is not None:
        hook(name)


def install(hook: Hook | None) -> Hook | None:
    """Install ``hook`` for the whole process (``None`` removes it); returns the hook it replaces."""
    global _hook
    previous, _hook = _hook, hook
    return previous


@contextlib.contextmanager
def installed(hook: Hook) -> Iterator[Hook]:
    """Install ``hook`` for the duration of the ``with`` block, then restore the previous one."""
    previous = install(hook)
    try:
        yield hook
    finally:
        install(previous)
