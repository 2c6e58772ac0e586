"""The ``dmlfe`` command line: a thin shell over the library.

One module per command or small group of commands, each with its ``add_*_parser`` and
its handler: :mod:`dmlfe.cli.ingest`, :mod:`dmlfe.cli.store`, :mod:`dmlfe.cli.demo`,
:mod:`dmlfe.cli.cluster`, :mod:`dmlfe.cli.fit`, :mod:`dmlfe.cli.transform` (``run`` is
:mod:`dmlfe.pipeline.cli`'s, which :mod:`dmlfe.pipeline` exports). The flags several
commands share are declared once in :mod:`dmlfe.cli_flags`. Here the parser is assembled
and :func:`main` runs a command, with the exit status and the one-line errors every
command shares.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import traceback

from dmlfe._version import __version__
from dmlfe.cli.cluster import add_cluster_parser, cmd_cluster_check
from dmlfe.cli.demo import add_demo_parser, cmd_demo
from dmlfe.cli.fit import add_fit_parser, cmd_fit, method_flags
from dmlfe.cli.ingest import add_import_parser, add_ingest_parser, cmd_import, cmd_ingest
from dmlfe.cli.manners import _cli_warnings, _output, cli_terms
from dmlfe.cli.outputs import STDOUT
from dmlfe.cli.store import (
    add_clean_parser,
    add_export_parser,
    add_info_parser,
    add_verify_parser,
    cmd_clean,
    cmd_export,
    cmd_info,
    cmd_verify,
    format_info,
    history_line,
)
from dmlfe.cli.transform import (
    add_embed_parser,
    add_evaluate_parser,
    add_predict_parser,
    add_transform_parser,
    cmd_embed,
    cmd_evaluate,
    cmd_predict,
    cmd_transform,
    format_metrics,
)
from dmlfe.cli_flags import DEBUG, LABELS_SHOWN, add_common_flags, commands
from dmlfe.cluster import cluster_words, describe_cluster_fault
from dmlfe.errors import DmlfeError
from dmlfe.pipeline.cli import add_run_parser, cmd_run
from dmlfe.progress import show_progress
from dmlfe.tempfiles import describe_write_fault

# the names dmlfe.cli held when it was one module stay importable from it
__all__ = [
    "LABELS_SHOWN", "STDOUT", "USER_ERRORS", "build_parser", "cli_terms", "cmd_clean",
    "cmd_cluster_check", "cmd_demo", "cmd_embed", "cmd_evaluate", "cmd_export", "cmd_fit",
    "cmd_import", "cmd_info", "cmd_ingest", "cmd_predict", "cmd_run", "cmd_transform",
    "cmd_verify", "format_info", "format_metrics", "history_line", "main", "method_flags",
]

#: The commands in the order ``dmlfe --help`` lists them, each added by its module.
COMMANDS = (add_ingest_parser, add_info_parser, add_verify_parser, add_demo_parser,
            add_run_parser, add_export_parser, add_clean_parser, add_import_parser,
            add_cluster_parser, add_fit_parser, add_transform_parser, add_embed_parser,
            add_predict_parser, add_evaluate_parser)


def build_parser() -> argparse.ArgumentParser:
    """The ``dmlfe`` parser: every command of :data:`COMMANDS`, then the flags they share."""
    p = argparse.ArgumentParser(prog="dmlfe", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"dmlfe {__version__}")
    p.add_argument("--debug", action="store_true", help=DEBUG.flag["help"])
    sub = p.add_subparsers(dest="command", required=True)
    for add_parser in COMMANDS:
        add_parser(sub)
    for name, command in commands(p):
        add_common_flags(command, name)
    return p


#: Errors about what the user gave: one line on stderr, exit status 2.
USER_ERRORS = (DmlfeError, ValueError, FileNotFoundError, FileExistsError, PermissionError)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 on success; 2 with one line on stderr for an error about the inputs (a dmlfe
    error, a bad value, a missing or existing path); 1 with one line and a request to
    report it for anything else (a bug: ``--debug`` shows the traceback); 130 when
    interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.stdout = sys.stdout  # --out -: the data go here, even under --quiet
    # A file-size limit (ulimit -f) otherwise kills the process with SIGXFSZ, leaving
    # temporaries and no message; ignored, the write fails with EFBIG, which is one line
    # (the workers a local cluster starts inherit the disposition).
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        quiet = getattr(args, "quiet", None)
        # commands with --quiet show the progress of their passes unless it is given
        with _output(bool(quiet), getattr(args, "verbose", False)), \
                show_progress(quiet is False), _cli_warnings(parser, args.command):
            return args.func(args)
    except OSError as exc:
        # A full disk, a file-size limit, a read-only folder: the machine's, not a bug.
        fault = describe_write_fault(exc, getattr(args, "out", None))
        if fault is None and not isinstance(exc, USER_ERRORS):
            return _bug(args, exc)
        if args.debug:
            traceback.print_exc()
        print(f"dmlfe {args.command}: error: {fault or exc}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        print(f"dmlfe {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dmlfe {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return _bug(args, exc)


def _bug(args: argparse.Namespace, exc: BaseException) -> int:
    """A bug: one line, the traceback on request; exit status 1. Unless it is the loss
    of the dask scheduler or of workers mid-run: one line saying so, exit status 2."""
    if args.debug:
        traceback.print_exc()
    lost = describe_cluster_fault(exc, cluster_words(args))
    if lost is not None:
        print(f"dmlfe {args.command}: error: {lost}", file=sys.stderr)
        return 2
    print(f"dmlfe {args.command}: internal error: {type(exc).__name__}: {exc}. This is a "
          "bug in dmlfe; please report it with the command you ran (--debug shows the "
          "traceback)", file=sys.stderr)
    return 1
