"""The ``refold`` console script. Each module registers its commands on :data:`main`."""

from . import erasure_cmds, fold_cmds, log_cmds, search_cmds  # noqa: F401  (registers commands)
from . import audit_cmds, retention_cmds  # noqa: F401  (registers trace, retention, hold)
from .app import main
from . import mcp_cmds  # noqa: E402,F401,I001  (registers `refold mcp`)
from . import proof_cmds  # noqa: E402,F401,I001  (registers `refold checkpoint`, `refold proof`)

__all__ = ["main"]
