"""Delta table IO: reading tables into Arrow safely and the per-process table handles.

Imports storage's files and fold.
"""
