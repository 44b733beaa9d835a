"""Only the native part of the build; every other setting lives in pyproject.toml.

``refold.storage._sealhash`` (storage/_sealhash.c) hashes a whole batch of events in one call
with OpenSSL. It is optional: where it cannot be compiled (no C compiler, no OpenSSL headers)
the install still succeeds and sealing uses hashlib, with the same bytes, a few times slower
(README, "Performance").
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("refold.storage._sealhash", ["storage/_sealhash.c"], libraries=["crypto"], optional=True),
])
