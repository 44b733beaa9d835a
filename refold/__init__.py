"""refold: agent memory as an input-closed fold over an append-only Delta Lake event log.

    import refold
    mem = refold.init("./memory")     # a new store; refold.open("./memory") opens it later
    mem.append({"kind": "chat_turn", "content": "I live in Paris", "source": "chat#1"})
"""

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
__version__ = "0.2.0"
