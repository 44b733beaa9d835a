"""Delta statistics against the rows they describe (part of ``verify``).

Reads prune data files by the min/max statistics of their add actions (``seq`` for a fold's tail,
``kind`` for retractions and specs): a file whose statistics do not cover its rows is skipped by
those reads, and its events silently drop out of every fold. The chain cannot see this (the rows
are intact), so ``verify`` compares each add action's statistics with the file it read anyway.
A statistic may be wider than the rows (pruning stays correct), never narrower; a string maximum
may be a prefix of the real one (writers cut long values).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from refold.storage.log.schema import STATS_COLUMNS

#: timestamp statistics may be cut to milliseconds by writers other than refold's own
_TIME_SLACK = timedelta(milliseconds=1)


@dataclass(frozen=True)
class StatsFinding:
    """What is wrong with one data file's statistics, and the seqs of the rows they hide."""

    message: str
    hidden: frozenset[int]


def statistics_problems(action: dict[str, Any], table: pa.Table) -> StatsFinding | None:
    """Whether one add action's statistics cover its file's rows (None when they do)."""
    path = action.get("path")
    wrong: list[str] = []
    hidden = pa.array(np.zeros(table.num_rows, dtype=bool))
    claimed_rows = action.get("num_records")
    if claimed_rows is not None and claimed_rows != table.num_rows:
        wrong.append(f"a row count of {claimed_rows} (the file holds {table.num_rows})")
    for name in STATS_COLUMNS:
        low, high = action.get(f"min.{name}"), action.get(f"max.{name}")
        if name not in table.column_names or (low is None and high is None) or table.num_rows == 0:
            continue
        try:
            outside = _outside(table[name], low, high)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            wrong.append(f"{name} statistics that cannot be compared with its rows ({exc})")
            continue
        if outside is not None:
            hidden = pc.or_(hidden, outside)
            wrong.append(f"{name} in [{_show(low)}, {_show(high)}], which leaves out "
                         f"{pc.sum(outside).as_py()} of its rows")
    if not wrong:
        return None
    seqs = frozenset(s for s in pc.filter(table["seq"], hidden).to_pylist() if s is not None)
    where = f", from seq {min(seqs)}" if seqs else ""
    return StatsFinding(
        f"data file {path}: the Delta log gives it {'; '.join(wrong)}{where}: reads that prune by these "
        "statistics skip those events (the Delta log was edited, or rows were moved between files)",
        seqs)


def _outside(column: pa.ChunkedArray, low: Any, high: Any) -> pa.Array | None:
    """A mask of the values outside [low, high] (None when there are none)."""
    values = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    mask = None
    if isinstance(low, datetime) or isinstance(high, datetime):
        low = low - _TIME_SLACK if isinstance(low, datetime) else low
        high = high + _TIME_SLACK if isinstance(high, datetime) else high
    if low is not None:
        mask = pc.fill_null(pc.less(values, pa.scalar(low, values.type)), False)
    if high is not None:
        above = pc.greater(values, pa.scalar(high, values.type))
        if isinstance(high, str):  # a cut maximum is a prefix of the real one
            above = pc.and_(above, pc.invert(pc.starts_with(values, high)))
        above = pc.fill_null(above, False)
        mask = above if mask is None else pc.or_(mask, above)
    if mask is None or not pc.any(mask).as_py():
        return None
    return mask


def _show(value: Any) -> str:
    return "-" if value is None else str(value)
