"""Only the native part of the build; every other setting lives in pyproject.toml.

``refold.storage._sealhash`` (storage/_sealhash.c) hashes a whole batch of events in one call
with OpenSSL. It is optional: where it cannot be compiled (no C compiler, no OpenSSL headers)
the install still succeeds and sealing uses hashlib, with the same bytes, a few times slower
(README, "Performance"). ``refold.storage._columns`` (storage/_columns.c) reads events'
string fields straight into Arrow buffers; without it pyarrow converts them from Python lists.
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("refold.storage._sealhash", ["refold/storage/_sealhash.c"], libraries=["crypto", "pthread"], optional=True),
    Extension("refold.storage._columns", ["refold/storage/_columns.c"], optional=True),
])
