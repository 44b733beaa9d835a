"""The ``refold`` console script. Each module registers its commands on :data:`main`."""

from refold.cli import erasure_cmds, fold_cmds, log_cmds, search_cmds  # noqa: F401  (registers commands)
from refold.cli import audit_cmds, retention_cmds  # noqa: F401  (registers trace, retention, hold)
from refold.cli.app import main
from refold.cli import mcp_cmds  # noqa: E402,F401,I001  (registers `refold mcp`)
from refold.cli import proof_cmds  # noqa: E402,F401,I001  (registers `refold checkpoint`, `refold proof`)
from refold.cli import job_cmds  # noqa: E402,F401,I001  (registers `refold job`)

__all__ = ["main"]
