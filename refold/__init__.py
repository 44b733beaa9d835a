"""refold: agent memory as an input-closed fold over an append-only Delta Lake event log.

    import refold
    mem = refold.init("./memory")     # a new store; refold.open("./memory") opens it later
    mem.append({"kind": "chat_turn", "content": "I live in Paris", "source": "chat#1"})

Logging: one logger per module under ``refold`` (``refold.engine.fold``, ``refold.erasure.procedure``
…), INFO for what a fold, an erasure, a job or an index sync did and how long it took, DEBUG for
details; never an event's content, a name or a subject id. The library adds no handler beyond a
NullHandler; the job frame and the CLI send the records to stderr (``--log-level``,
``REFOLD_LOG_LEVEL``).
"""

import logging

from refold.fold.errors import (
    ConflictError, ErasureError, EventValidationError, ExtractionError, IntegrityError,
    LegalHoldError, NotFoundError, RefoldError, StoreError, ValidationError,
)
from refold.fold.events import Fact, NewEvent
from refold.fold.spec import FoldSpec
from refold.memory import Memory, init, open

__all__ = [
    "ConflictError", "ErasureError", "EventValidationError", "ExtractionError", "Fact",
    "FoldSpec", "IntegrityError", "LegalHoldError", "Memory", "NewEvent", "NotFoundError", "RefoldError",
    "StoreError", "ValidationError", "init", "open",
]
__version__ = "0.3.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())  # the application configures logging
