"""The extraction cache: a Delta table keyed by (event_id, spec_hash), and its rows.

Imports storage's delta and files, and fold.
"""
