"""refold.storage: the IO edge — Delta tables (log, extraction cache, snapshots), index, keys, receipts.

Read Delta tables through :func:`refold.storage.delta_io.read_arrow` (see why there).
"""
