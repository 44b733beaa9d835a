"""Who may read a local store: modes for everything refold creates under its root.

A store holds personal data (event files are plain text in delete mode, ``keys/`` decrypts shred
mode), so by default it is private to its owner: folders 0700, files 0600. A store is
*group-shared* when its root folder is setgid and group-writable (``refold init --group``, or
``chmod 2770 ROOT`` on an existing store followed by ``refold`` re-applying the modes on its next
write): folders are then 2770 (setgid, so new files keep the folder's group) and files 0660.

Which of the two applies is read from the folder something is created in (a folder refold made
carries its store's modes), so no setting has to travel to every writer. Files refold writes
itself are created with their mode. Files delta-rs writes (data files of its own writes,
checkpoints, the tables it creates) come out with the process umask, so after such a write the
table folder is walked and its modes set (:func:`apply_tree`). Refold does not change the umask:
it is process-wide, so it would also change the files that other threads of the application
create meanwhile, and restoring it races between threads.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from urllib.parse import unquote

PRIVATE = (0o600, 0o700)  # (file, folder)
GROUP = (0o660, 0o2770)


def modes_in(folder: str | os.PathLike) -> tuple[int, int]:
    """(file mode, folder mode) for things created in ``folder``: :data:`GROUP` when it is
    setgid and group-writable, else :data:`PRIVATE` (also when it cannot be read)."""
    try:
        mode = os.stat(folder).st_mode
    except OSError:
        return PRIVATE
    return GROUP if mode & stat.S_ISGID and mode & stat.S_IWGRP else PRIVATE


def file_mode(folder: str | os.PathLike) -> int:
    """The mode for a new file in ``folder`` (pass it to ``os.open``)."""
    return modes_in(folder)[0]


def make_dirs(path: str | os.PathLike) -> Path:
    """``mkdir -p path``: each missing folder gets the mode its parent calls for (set explicitly,
    so neither the umask nor a missing setgid bit changes it). Returns the path."""
    path = Path(path)
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    for folder in reversed(missing):
        mode = modes_in(folder.parent)[1]
        try:
            folder.mkdir(mode=mode & 0o777)
        except FileExistsError:
            continue  # another writer made it: it applied the same rule
        os.chmod(folder, mode)
    return path


def apply_tree(folder: str | os.PathLike) -> None:
    """Give ``folder`` and everything in it the modes its parent calls for (after delta-rs,
    faiss or polars wrote there): one ``scandir`` walk, a ``chmod`` only where a mode differs.
    Files that vanish meanwhile (a concurrent vacuum) are skipped."""
    folder = Path(folder)
    file, directory = modes_in(folder.parent)
    try:
        if stat.S_IMODE(os.stat(folder).st_mode) != directory:  # (S_IMODE keeps setgid)
            os.chmod(folder, directory)
    except OSError:
        return
    stack = [str(folder)]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                want = directory if is_dir else file
                if stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) != want:
                    os.chmod(entry.path, want)
            except OSError:
                continue
            if is_dir:
                stack.append(entry.path)


def apply_commit(table: str | os.PathLike, version: int) -> None:
    """Give what Delta table version ``version`` wrote the modes the table's folder calls for:
    its commit file, the data files it adds (and the partition folders holding them), a
    checkpoint of that version and ``_last_checkpoint``. The cost of :func:`apply_tree` grows with the table's history (one
    ``stat`` per file ever written and not vacuumed: ~6 ms per append after 1,000 appends);
    this follows one commit. Files that vanish meanwhile are skipped."""
    folder = Path(table)
    file, directory = modes_in(folder.parent)
    log = folder / "_delta_log"
    commit = log / f"{version:020d}.json"
    paths = [commit, log / "_last_checkpoint", *log.glob(f"{version:020d}.checkpoint*.parquet")]
    folders = {folder, log}
    try:
        with open(commit, encoding="utf-8") as fh:
            for line in fh:
                add = json.loads(line).get("add")
                if add and "://" not in add["path"]:
                    path = folder / unquote(add["path"])
                    paths.append(path)
                    # (a partitioned table's files lie in partition folders: ``bucket=3/``)
                    folders.update(p for p in path.parents if p != folder and folder in p.parents)
    except (OSError, ValueError):
        pass  # no such commit (cleaned up already): nothing of it to fix
    for path, mode in [*((f, directory) for f in folders), *((p, file) for p in paths)]:
        try:
            if stat.S_IMODE(os.stat(path).st_mode) != mode:
                os.chmod(path, mode)
        except OSError:
            continue


def create_root(root: str | os.PathLike, *, group: bool = False) -> None:
    """Create a store's root folder private (0700), or group-shared (2770) with ``group``.

    An existing folder keeps its mode unless ``group`` asks for sharing; what refold creates
    inside it is private either way (see :func:`modes_in`).
    """
    root = Path(root)
    mode = GROUP[1] if group else PRIVATE[1]
    if not root.exists():
        root.parent.mkdir(parents=True, exist_ok=True)  # outside the store: the usual modes
        try:
            root.mkdir(mode=mode & 0o777)
        except FileExistsError:
            pass
        else:
            os.chmod(root, mode)
            return
    if group:
        os.chmod(root, mode)
