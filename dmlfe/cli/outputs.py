"""Where a command's outputs go: the checks of ``--out`` and the writing of text outputs."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path
from typing import Any

from dmlfe.errors import InputError
from dmlfe.tempfiles import link_note, write_atomically


def _check_out(out: str, overwrite: bool, binary: str | None = None) -> None:
    """Refuse an existing ``out`` (a symbolic link too, even a dangling or looping one)
    without ``--overwrite``, and ``-`` (standard output) for the ``binary`` output named
    (a model, a store, embeddings); a text output (None) takes ``-``."""
    if out == STDOUT:
        if binary is None:
            return
        raise InputError(f"--out -: {binary} cannot be written to standard output; give a "
                         "path")
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"{out} exists{link_note(out)}; pass --overwrite to replace it")


#: ``--out -``: standard output, for outputs that are text (JSON Lines, JSON).
STDOUT = "-"


def _write_text(args: argparse.Namespace, text: str) -> str:
    """Write ``text`` to ``args.out`` (atomically), or to standard output for ``-``;
    returns where it went, for the summary line. Standard output is the one the command
    started with, so that ``--quiet`` silences the summary, not the data."""
    if args.out == STDOUT:
        stream = getattr(args, "stdout", None) or sys.stdout
        stream.write(text)
        stream.flush()
        return "standard output"
    write_atomically(args.out, lambda f: f.write(text.encode("utf-8")))
    return str(Path(args.out).resolve())


def _summary(args: argparse.Namespace) -> Any:
    """Where a command's summary line goes: stderr when its data go to stdout."""
    return sys.stderr if getattr(args, "out", None) == STDOUT else sys.stdout


def _split_text(split: str | list[str]) -> str:
    return split if isinstance(split, str) else ",".join(split)


def _unrecorded_warning(store: Any) -> None:
    """A warning where ``store`` has no integrity record, whose damage may pass unseen:
    given once the command has succeeded, so that a failure stays one line."""
    if not store.check_chunk_files():
        warnings.warn(
            f"store {store.path} has no integrity record (it was written before dmlfe "
            "recorded checksums): damage such as a deleted label chunk cannot be detected "
            "(it reads as documents without labels); run dmlfe verify "
            f"{store.path} --record on an intact copy to add one", stacklevel=2)
