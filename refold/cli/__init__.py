"""The ``refold`` console script. Each module registers its commands on :data:`main`."""

from . import fold_cmds, log_cmds, search_cmds, snapshot_cmds  # noqa: F401  (registers commands)
from .app import main

__all__ = ["main"]
