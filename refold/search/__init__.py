"""Search over folded memory: the retriever kept in step with the log, the index's fact rows from the
state tables, and the embedders.

Imports engine, reads, store, storage and fold.
"""
