"""refold.storage: the IO edge. The log (``log/``), keys (``keys/``), side files (``files/``), Delta IO
(``delta/``), the extraction cache (``cache/``), the state tables, the vector index, the store layout,
the erasure epoch and the subject registry. Imports the fold core only, never anything above it.

Read Delta tables through :func:`refold.storage.delta.io.read_arrow` (see why there).
"""
