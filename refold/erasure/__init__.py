"""Erasure, one package: plan, log rewrite, purge of every derived store, scrub, residue scan, receipts
and batches.

Imports engine, search, reads, store, storage and fold.
"""
