"""Reads of the state tables: fact listings with partition pruning, the read overlay past the tag,
read-time compose roll-ups and networkx views.

Imports store, storage and fold.
"""
