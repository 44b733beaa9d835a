"""refold.storage: the IO edge — Delta tables (log, extraction cache, snapshots), index, keys, receipts.

deltalake 1.6.6 with pyarrow 26: a ``to_pyarrow_dataset()``/``to_pyarrow_table()`` result whose
filesystem handler is still alive in a reference cycle at interpreter shutdown aborts the process
("terminate called without an active exception", exit 134) — which would turn every CLI exit code
and the test runner's status into 134. Collecting cycles at exit, while the Rust runtime is still
up, avoids it.
"""

import atexit as _atexit
import gc as _gc

_atexit.register(_gc.collect)
