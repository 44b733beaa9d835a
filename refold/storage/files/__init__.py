"""The store's side files on a folder or a bucket (one object-store port), object versions, file modes
and object-store options.

Imports fold only.
"""
