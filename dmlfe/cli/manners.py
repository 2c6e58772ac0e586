"""How a command behaves around its work: what it says (``--quiet``, ``--verbose``, dask's
log lines) and how Python warnings reach the user (in the command's own terms)."""

from __future__ import annotations

import argparse
import collections
import contextlib
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def _held_dask_logs(keep: int = 1000) -> Iterator[None]:
    """dask's log lines of a command held until it ends: shown when it succeeds, left out
    when it fails (the error, printed after, is then the last line and says what
    happened; ``--verbose`` shows them as they come). Of more than ``keep`` lines, the
    last ``keep`` are shown."""
    held: collections.deque[tuple[logging.Handler, logging.LogRecord]] = \
        collections.deque(maxlen=keep)
    handlers = {h for name, lg in logging.root.manager.loggerDict.items()
                if isinstance(lg, logging.Logger)
                and (name == "distributed" or name.startswith("distributed."))
                for h in lg.handlers}

    def holder(h: logging.Handler) -> Callable[[logging.LogRecord], bool]:
        # a handler's filter sees what passes its level (dask's silencing included)
        def hold(record: logging.LogRecord) -> bool:
            held.append((h, record))
            return False
        return hold

    filters = {h: holder(h) for h in handlers}
    for h, f in filters.items():
        h.addFilter(f)
    failed = True
    try:
        yield
        failed = False
    finally:
        for h, f in filters.items():
            h.removeFilter(f)
        if not failed:
            for h, record in held:
                h.handle(record)


@contextlib.contextmanager
def _output(quiet: bool, verbose: bool) -> Iterator[None]:
    """How much a command says.

    ``--quiet``: standard output is discarded (the result summary included) and dask's
    log lines are dropped; progress and the dashboard address are left
    out by the commands themselves. Errors (printed by :func:`main` after this context
    closes) and Python warnings still reach stderr.
    ``--verbose``: the ``dmlfe`` and ``distributed`` loggers log at INFO on stderr.
    Neither: dask's log lines are held until the command ends, and shown only when it
    succeeds (:func:`_held_dask_logs`).
    """
    if not quiet and not verbose:
        with _held_dask_logs():
            yield
        return
    loggers = [logging.getLogger(name) for name in ("dmlfe", "distributed")]
    levels = [lg.level for lg in loggers]
    handler = None
    try:
        if quiet:
            loggers[1].setLevel(logging.ERROR)
            # No log lines up to errors, from any logger: distributed's children set
            # levels of their own ("distributed.client" logs the lost scheduler's
            # traceback as an error), and it would precede main's one-line error.
            logging.disable(logging.ERROR)
            try:
                with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                    yield
            finally:
                logging.disable(logging.NOTSET)
            return
        for lg in loggers:
            lg.setLevel(logging.INFO)
        if not loggers[0].handlers:  # distributed installs its own stderr handler
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(
                "%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
            loggers[0].addHandler(handler)
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if handler is not None:
            loggers[0].removeHandler(handler)


def _subcommand(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def cli_terms(message: str, parser: argparse.ArgumentParser, command: str) -> str:
    """``message`` (a library warning) on one line, with the Python parameter names of
    ``dmlfe COMMAND``'s flags written as the flags (``max_components`` ->
    ``--max-components``, ``n_components=5`` -> ``--dim 5``)."""
    text = " ".join(str(message).split())
    flags = {a.dest: a.option_strings[0] for a in _subcommand(parser, command)._actions
             if a.option_strings and a.option_strings[0].startswith("--")}
    if "dim" in flags:
        def n_components(m: re.Match) -> str:
            value = m.group(1)
            return f"--{'dim' if value.isdigit() else 'threshold'} {value}"
        text = re.sub(r"\bn_components=([0-9.eE+-]*[0-9])", n_components, text)
        text = re.sub(r"\ban int n_components\b", "--dim", text)
        text = re.sub(r"\ba float n_components\b", "--threshold", text)
        text = re.sub(r"\bn_components\b", "--dim/--threshold", text)
    for dest, flag in flags.items():
        text = re.sub(rf"\b{re.escape(dest)}=", f"{flag} ", text)
        if "_" in dest:  # plain words (split, tol) stay words
            text = re.sub(rf"\b{re.escape(dest)}\b", flag, text)
    return text


@contextlib.contextmanager
def _cli_warnings(parser: argparse.ArgumentParser, command: str) -> Iterator[None]:
    """Python warnings during a command: one line each on stderr, ``dmlfe COMMAND:
    warning: ...`` in the command's terms (:func:`cli_terms`), without the source line."""
    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:
        print(f"dmlfe {command}: warning: {cli_terms(str(message), parser, command)}",
              file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield
