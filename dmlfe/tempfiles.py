"""Temporary siblings of files being written, and the removal of those a dead process left.

Everything dmlfe writes (stores, statistics-cache entries, models, embeddings, parquet
exports, pipeline records) is first written to a temporary sibling named
``.NAME.tmp-<pid>-<hex>`` and then renamed into place, so a reader never sees a
half-written result. A process killed before the rename leaves that sibling behind;
:func:`remove_stale` removes the ones whose process is gone (on this host), so that
repeated interruptions do not fill the disk. :func:`find_temporaries` finds them under
a folder (``dmlfe clean FOLDER``).

Whether a temporary is stale is decided on the host that looks: its pid names a process
there. Run ``dmlfe clean`` on the host whose dmlfe processes wrote the temporaries (on
a folder shared between hosts, a process of another host is not seen, and its
temporaries would be taken as stale).
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

#: A temporary without a readable pid (written by dmlfe before pids were recorded) is
#: taken as stale once it is this old (seconds).
UNKNOWN_OWNER_AGE = 3600.0

_PID = re.compile(r"^(\d+)-")


def temp_sibling(target: str | os.PathLike[str]) -> Path:
    """A fresh temporary name beside ``target``: ``.NAME.tmp-<pid>-<hex>``, absolute.

    Absolute because dask workers write into it, and their working folder need not be
    the caller's (a notebook or a test that changed folder after the cluster started).
    """
    target = Path(target).absolute()
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


def link_note(path: str | os.PathLike[str]) -> str:
    """`` (a symbolic link...)`` when ``path`` is one, for a message saying it exists
    (a link that leads nowhere, or in a loop, is there although ``Path.exists`` says
    it is not); else ``""``."""
    path = Path(path)
    if not path.is_symlink():
        return ""
    return " (a symbolic link" + ("" if path.exists() else " that leads nowhere") + ")"


#: A name :func:`temp_sibling` makes (``.NAME.tmp-<pid>-<hex>``, 12 hex digits; 8 in
#: earlier versions), or that dmlfe made before pids were recorded (``.NAME.tmp-<uuid>``).
_TEMP_NAME = re.compile(
    r"^\.(?P<target>.+)\.tmp-(?:(?P<pid>\d+)-[0-9a-f]{8}(?:[0-9a-f]{4})?|[0-9a-f]{32})$")


@dataclass(frozen=True)
class Temporary:
    """A temporary of dmlfe's found by :func:`find_temporaries`.

    Attributes
    ----------
    path : Path
        The temporary file or folder.
    pid : int or None
        The process that writes it (None: not recorded in its name).
    stale : bool
        Whether it is left over: its process is gone (on this host), or, without a pid,
        it is older than :data:`UNKNOWN_OWNER_AGE`.
    size : int
        Bytes in it (the sizes of its files, not followed through symbolic links).
    """

    path: Path
    pid: int | None
    stale: bool
    size: int


def find_temporaries(root: str | os.PathLike[str]) -> list[Temporary]:
    """Every temporary of dmlfe's under the folder ``root``, at any depth.

    Folders are walked without following symbolic links; a temporary folder is not
    looked into (it counts as one), nor is a zarr store or group (a folder holding
    ``zarr.json``: dmlfe writes no temporaries inside one, and a store holds many files).

    Returns
    -------
    list of Temporary
        Sorted by path; whether each one is stale follows the rule of
        :func:`stale_temporaries`.
    """
    found = []
    for folder, dirs, files in os.walk(root, onerror=lambda exc: None):
        here = Path(folder)
        if "zarr.json" in files and here != Path(root):
            dirs[:] = []
            continue
        for name in [*dirs, *files]:
            m = _TEMP_NAME.match(name)
            if m is None:
                continue
            p = here / name
            pid = None if m.group("pid") is None else int(m.group("pid"))
            try:
                if pid is not None:
                    stale = not _alive(pid)
                else:
                    stale = time.time() - p.lstat().st_mtime > UNKNOWN_OWNER_AGE
            except FileNotFoundError:
                continue
            found.append(Temporary(p, pid, stale, path_size(p)))
        dirs[:] = [d for d in dirs if _TEMP_NAME.match(d) is None]
    return sorted(found, key=lambda t: t.path)


def path_size(p: str | os.PathLike[str]) -> int:
    """Bytes in the file or folder tree ``p`` (symbolic links are not followed)."""
    p = Path(p)
    try:
        st = p.lstat()
    except OSError:
        return 0
    if not p.is_dir() or p.is_symlink():
        return st.st_size
    total = 0
    for folder, _dirs, files in os.walk(p, onerror=lambda exc: None):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                pass
    return total


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
    _replace_setting_aside(tmp, out, temp_sibling(out))


def _replace_setting_aside(new: Path, out: Path, old: Path) -> None:
    """``out`` renamed to ``old``, ``new`` renamed to ``out`` (``old`` put back if that
    fails), then ``old`` removed."""
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        os.replace(old, out)
        raise
    remove_path(old)


#: Flag of Linux's renameat2: swap two existing paths in one step.
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap the folders ``a`` and ``b`` in one atomic rename (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``); False where the system or the file system cannot."""
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # not Linux, or a C library without it
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _swapped_out(target: Path) -> list[Path]:
    """The old versions of ``target`` that :func:`swap_into_place`'s two-rename fallback
    set aside (``.NAME.old-<pid>-<hex>``)."""
    if not target.parent.is_dir():
        return []
    prefix = f".{target.name}.old-"
    return sorted(p for p in target.parent.iterdir() if p.name.startswith(prefix))


def swap_into_place(new: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Replace the existing folder ``out`` by the finished folder ``new``.

    Where the system can (Linux, local file systems) the two are exchanged in one
    atomic rename, and the old version, now at ``new`` (a temporary name that
    :func:`remove_stale` clears), is removed after: a kill at any point leaves ``out``
    whole, old or new. Elsewhere the old ``out`` is first renamed to
    ``.NAME.old-<pid>-<hex>`` and the new one renamed into place; a kill between the
    two renames leaves no ``out``, and :func:`recover_swap` (called by
    :func:`dmlfe.open_store`, :func:`remove_stale` and ``dmlfe clean``) renames the old
    version back.
    """
    new, out = Path(new), Path(out)
    if _exchange(new, out):
        remove_path(new)
        return
    _replace_setting_aside(
        new, out, out.with_name(f".{out.name}.old-{os.getpid()}-{uuid.uuid4().hex[:12]}"))


def recover_swap(target: str | os.PathLike[str]) -> list[Path]:
    """Undo or finish a :func:`swap_into_place` whose process was killed.

    When ``target`` is gone and an old version of it was set aside, that version is
    renamed back (the new version is then a stale temporary); when ``target`` is there,
    set-aside versions whose process is gone are removed (the swap was complete).
    Returns the paths acted on.
    """
    target = Path(target)
    acted = []
    for p in _swapped_out(target):
        m = _PID.match(p.name[len(f".{target.name}.old-"):])
        if m is not None and int(m.group(1)) != os.getpid() and _alive(int(m.group(1))):
            continue  # a swap in progress
        if not os.path.lexists(target):
            os.replace(p, target)
            warnings.warn(f"{target} was being replaced when its process was killed; its "
                          f"previous version ({p.name}) was put back", RuntimeWarning,
                          stacklevel=2)
        else:
            remove_path(p)
        acted.append(p)
    return acted


#: The name :func:`swap_into_place` sets an old version aside under.
_OLD_NAME = re.compile(r"^\.(?P<target>.+)\.old-\d+-[0-9a-f]{12}$")


def recover_swaps_under(root: str | os.PathLike[str]) -> list[Path]:
    """:func:`recover_swap` for every set-aside old version under the folder ``root``, at
    any depth (``dmlfe clean FOLDER``); returns the paths acted on."""
    acted = []
    for folder, dirs, _files in os.walk(root, onerror=lambda exc: None):
        for name in dirs:
            m = _OLD_NAME.match(name)
            if m is not None:
                acted += recover_swap(Path(folder) / m.group("target"))
        dirs[:] = [d for d in dirs if _OLD_NAME.match(d) is None
                   and _TEMP_NAME.match(d) is None]
    return acted


def remove_stale(target: str | os.PathLike[str], *, quiet: bool = False) -> list[Path]:
    """Remove the stale temporaries of ``target`` (see :func:`stale_temporaries`).

    Returns what was removed; unless ``quiet``, a RuntimeWarning names each one. A
    replacement of ``target`` that was killed half-way is first undone
    (:func:`recover_swap`), so that the old version is never taken for a temporary.
    """
    recover_swap(target)
    removed = []
    for p in stale_temporaries(target):
        remove_path(p)
        removed.append(p)
        if not quiet:
            warnings.warn(f"removed {p}, left by an interrupted dmlfe process",
                          RuntimeWarning, stacklevel=2)
    return removed


#: errno -> (what happened, what to do): the faults of the machine that a write meets.
#: Never a bug in dmlfe, and never about one file only: the command line shows them as
#: one line naming the output and exits 2 (see :func:`describe_write_fault`).
WRITE_FAULTS = {
    errno.ENOSPC: ("no space left on the device",
                   "free some space or write the output elsewhere"),
    errno.EDQUOT: ("the disk quota is exceeded",
                   "free some space or write the output elsewhere"),
    errno.EFBIG: ("a file grew past the file-size limit (ulimit -f) or the file system's "
                  "largest file", "raise the limit or write the output elsewhere"),
    errno.EROFS: ("the file system is read-only", "write the output elsewhere"),
    errno.EACCES: ("permission denied", "check the permissions of it and of the folders "
                   "above it"),
    errno.EPERM: ("operation not permitted", "check the permissions of it and of the "
                  "folders above it"),
}


def describe_write_fault(exc: BaseException,
                         output: str | os.PathLike[str] | None = None) -> str | None:
    """One line for an OSError of :data:`WRITE_FAULTS`, naming the output; None otherwise.

    Parameters
    ----------
    exc : BaseException
        The error (raised here or in a dask worker: distributed re-raises it as it was).
    output : str or PathLike, optional
        The command's output, named when the error carries no file name (a write to an
        open file, such as the close of a zip archive, does not).

    Returns
    -------
    str or None
        A write inside a temporary (``.NAME.tmp-<pid>-<hex>``) is named by the output it
        was to become (``NAME``), the file written given after it: the user knows the
        output, and the temporary is gone by the time the message is read (the atomic
        writers remove it).
    """
    if not isinstance(exc, OSError) or exc.errno not in WRITE_FAULTS:
        return None
    what, todo = WRITE_FAULTS[exc.errno]
    filename = exc.filename
    if filename is None:
        if output is not None:
            return f"cannot write {output}: {what}; {todo}; nothing of it was kept"
        return f"{what} ({exc.strerror or exc}); {todo}"
    path = Path(os.fsdecode(filename))
    for i, part in enumerate(path.parts):
        m = _TEMP_NAME.match(part)
        if m is not None:
            target = Path(*path.parts[:i], m.group("target"))
            inside = Path(*path.parts[i + 1:])
            where = f"{target} (writing {inside})" if inside.parts else str(target)
            return f"cannot write {where}: {what}; {todo}; nothing of it was kept"
    return f"{path}: {what}; {todo}"
