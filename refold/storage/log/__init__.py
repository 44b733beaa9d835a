"""The event log: the Delta table, its rows and schema, sealing into the hash chain, heads, signing,
verify, the Merkle tree and checkpoints.

Imports storage's files, delta and keys, and fold.
"""
