"""Temporary siblings of files being written, and the removal of those a dead process left.

Everything dmlfe writes (stores, statistics-cache entries, models, embeddings, parquet
exports, pipeline records) is first written to a temporary sibling named
``.NAME.tmp-<pid>-<hex>`` and then renamed into place, so a reader never sees a
half-written result. A process killed before the rename leaves that sibling behind;
:func:`remove_stale` removes the ones whose process is gone (on this host), so that
repeated interruptions do not fill the disk.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

#: A temporary without a readable pid (written by dmlfe before pids were recorded) is
#: taken as stale once it is this old (seconds).
UNKNOWN_OWNER_AGE = 3600.0

_PID = re.compile(r"^(\d+)-")


def temp_sibling(target: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside ``target``: ``.NAME.tmp-<pid>-<hex>``."""
    target = Path(target)
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:12]}")


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """The temporary siblings of ``target`` whose writing process is no longer alive."""
    target = Path(target)
    if not target.parent.is_dir():
        return []
    prefix = f".{target.name}.tmp-"
    found = []
    for p in target.parent.iterdir():
        if not p.name.startswith(prefix):
            continue
        m = _PID.match(p.name[len(prefix):])
        if m is not None:
            stale = not _alive(int(m.group(1)))
        else:
            try:
                stale = time.time() - p.lstat().st_mtime > UNKNOWN_OWNER_AGE
            except FileNotFoundError:
                continue
        if stale:
            found.append(p)
    return sorted(found)


def remove_path(p: Path) -> None:
    """Remove a file or a folder tree (nothing if it is gone already)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        p.unlink(missing_ok=True)


def write_atomically(target: str | os.PathLike[str], write: Callable[[BinaryIO], None]) -> None:
    """``write(file)`` into a temporary sibling of the file ``target``, then rename it
    into place (replacing an older ``target``); nothing is left behind on failure. The
    stale temporaries of ``target`` are removed first (:func:`remove_stale`)."""
    target = Path(target)
    remove_stale(target)
    tmp = temp_sibling(target)
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def move_into_place(tmp: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Rename the finished ``tmp`` (a file or folder) to ``out``, replacing an old ``out``.

    The old ``out`` is first renamed to a temporary sibling and removed only after the
    new one is in place (and put back if that rename fails), so a kill at any point
    leaves either ``out`` or stale temporaries that :func:`remove_stale` clears. The
    caller decides beforehand whether ``out`` may be replaced.
    """
    tmp, out = Path(tmp), Path(out)
    if not os.path.lexists(out):
        os.replace(tmp, out)
        return
    old = temp_sibling(out)
    os.replace(out, old)
    try:
        os.replace(tmp, out)
    except BaseException:
        os.replace(old, out)
        raise
    remove_path(old)


def remove_stale(target: str | os.PathLike[str], *, quiet: bool = False) -> list[Path]:
    """Remove the stale temporaries of ``target`` (see :func:`stale_temporaries`).

    Returns what was removed; unless ``quiet``, a RuntimeWarning names each one.
    """
    removed = []
    for p in stale_temporaries(target):
        remove_path(p)
        removed.append(p)
        if not quiet:
            warnings.warn(f"removed {p}, left by an interrupted dmlfe process",
                          RuntimeWarning, stacklevel=2)
    return removed
