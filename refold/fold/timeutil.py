"""Record-time bounds (``as_of``) shared by the log reader and the fold."""

from __future__ import annotations

from datetime import datetime

import pyarrow.compute as pc

from refold.fold.errors import ValidationError


def parse_as_of(value: int | str | datetime) -> int | datetime:
    """A table version (int, or a string of digits) or a timezone-aware datetime (ISO string)."""
    if isinstance(value, bool):
        raise ValidationError("as_of must be a table version or an ISO-8601 time, not a bool")
    if isinstance(value, int):
        if value < 0:
            raise ValidationError(f"as_of version {value} is negative; versions start at 0")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            value = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise ValidationError(
                f"as_of {text!r} is neither a table version nor an ISO-8601 time "
                "(e.g. 12 or 2026-01-01T12:00:00+00:00)"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValidationError(f"as_of {value.isoformat()} has no timezone; add one, e.g. +00:00")
        return value
    raise ValidationError(f"as_of must be a table version or an ISO-8601 time, got {type(value).__name__}")


def as_of_filter(value: int | str | datetime) -> pc.Expression:
    """Rows recorded at or before ``value`` (a table version or a time)."""
    parsed = parse_as_of(value)
    if isinstance(parsed, int):
        return pc.field("table_version") <= parsed
    return pc.field("recorded_at") <= pc.scalar(parsed)


def parse_time_or_none(value: str | datetime | None, *, name: str = "valid_at") -> datetime | None:
    """A timezone-aware datetime from ``value`` (an ISO-8601 string or a datetime), or None."""
    if value is None or isinstance(value, datetime):
        return value
    from refold.fold.events import parse_time

    try:
        return parse_time(value, line=None, name=name)
    except ValidationError as exc:
        raise ValidationError(f"{name} {value!r} is not a timezone-aware ISO-8601 time "
                              "(e.g. 2024-01-01T00:00:00+00:00)") from exc
