"""The one fold engine: full and incremental folds of the log into the state tables, the shred-mode
purge, the extraction stage and the Ray merge hook.

Imports reads, store, storage and fold; never the facade.
"""
