"""Reading Delta tables into Arrow the one way that is safe here.

deltalake 1.6.6's ``to_pyarrow_dataset()`` hands pyarrow a Rust-backed filesystem; when such a
dataset is still referenced at interpreter shutdown the process can abort ("terminate called
without an active exception", exit 134), which would corrupt CLI exit codes and the test runner's
status. So refold reads the table's current data files with pyarrow's own dataset reader (local
paths or URIs pyarrow understands); the file list still comes from the Delta log, so what is read
is exactly the table version loaded.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable


def read_arrow(dt: DeltaTable, schema: pa.Schema, *, columns: Sequence[str] | None = None,
               filter: pc.Expression | None = None) -> pa.Table:
    """Rows of ``dt`` at its loaded version, projected and filtered (``schema`` is the table's)."""
    uris = dt.file_uris()
    if not uris:
        table = schema.empty_table()
        if filter is not None:
            table = table.filter(filter)
        return table.select(list(columns)) if columns else table
    dataset = ds.dataset(uris, schema=schema, format="parquet")
    wanted = list(columns) if columns else None
    try:
        return dataset.to_table(columns=wanted, filter=filter)
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        # Files written by delta-rs MERGE/DELETE (DataFusion) store strings as string_view; pushed
        # down filters then meet mixed string/string_view kernels. Filter after reading instead.
        table = dataset.to_table()
        if filter is not None:
            table = table.filter(filter)
        return table.select(wanted) if wanted else table
