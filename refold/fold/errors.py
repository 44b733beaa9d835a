"""The one error root of refold and its small, flat tree.

Every error refold raises on purpose derives from :class:`RefoldError`, so callers can catch one
type. Messages say what was wrong and what to do next. When what to do next differs between the
Python API and the ``refold`` command line (``refold.init(path)`` versus ``refold init PATH``), the
error also carries ``cli``, the message as a CLI user should read it; the CLI prints that one.

    RefoldError
    ├── ValidationError        bad user input (events, facts, specs, tool calls)
    │   └── EventValidationError   names the input line and field
    ├── StoreError             the store is missing, of the wrong kind, or unreadable
    ├── ConflictError          an event id was reused with different content
    ├── IntegrityError         verify/audit found tampering or a closure leak
    ├── ExtractionError        an extractor could not run (missing model, endpoint down)
    ├── ErasureError           erasure could not proceed (unknown subject, ...)
    │   └── LegalHoldError         the subject (or its tenant) is under a legal hold
    └── NotFoundError          an unknown fact id, subject, snapshot or receipt
"""

from __future__ import annotations


class RefoldError(Exception):
    """Root of every error refold raises on purpose.

    ``cli`` (keyword-only, optional): the message worded for a command-line user, naming
    ``refold`` commands where ``str(error)`` names Python calls; :meth:`for_cli` falls back to
    the plain message.
    """

    def __init__(self, *args: object, cli: str | None = None):
        super().__init__(*args)
        self.cli = cli

    def for_cli(self) -> str:
        """The message as the ``refold`` command line prints it."""
        return getattr(self, "cli", None) or str(self)


class ValidationError(RefoldError, ValueError):
    """Input that refold refuses; nothing was written."""


class EventValidationError(ValidationError):
    """One event of a batch is invalid; the whole batch was rejected and nothing was written."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        self.line = line
        self.field = field
        self.reason = message  # what was wrong, without the line/field prefix
        where = []
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field '{field}'")
        prefix = (", ".join(where) + ": ") if where else ""
        super().__init__(f"{prefix}{message} (the whole batch was rejected; nothing was written)")


class StoreError(RefoldError):
    """The store is missing, not a refold store, or cannot be read or written."""


class ConflictError(RefoldError):
    """An event id already in the log was appended again with different content."""


class IntegrityError(RefoldError):
    """Tampering or a broken invariant was detected; ``first_bad_seq`` names where, when known."""

    def __init__(self, message: str, *, first_bad_seq: int | None = None):
        self.first_bad_seq = first_bad_seq
        super().__init__(message)


class ExtractionError(RefoldError):
    """An extractor could not run: a missing optional dependency, model file or endpoint."""


class ErasureError(RefoldError):
    """An erasure could not proceed."""


class NotFoundError(RefoldError, KeyError):
    """An unknown fact id, subject, snapshot or receipt."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain.
        return str(self.args[0]) if self.args else ""


class ErasedSubjectError(ErasureError):
    """A write needs the key of a data subject (or tenant) that an erasure destroyed; record
    new data about that person under a new subject id."""


class LegalHoldError(ErasureError):
    """An erasure was refused because a legal hold covers the subject or one of the events'
    tenants; release the hold (``refold hold STORE --release ...``) first if the law allows it."""
