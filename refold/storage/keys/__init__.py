"""Shred-mode keys: the KeyStore port, its file, object and KMS adapters, and the encryption of event
content.

Imports storage's files and fold.
"""
