"""The flags several ``dmlfe`` commands share, declared once.

Each flag is a :class:`~dmlfe.params.Param` with its argparse options
(:func:`dmlfe.params.flag_param`); :data:`COMMON_FLAGS` says which commands take it
and, where its words differ there, its help. :func:`dmlfe.cli.build_parser` adds them
to every command with :func:`add_common_flags`: a new common flag is an entry here and
the code that reads it.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from dmlfe.cluster import CLUSTER_FLAGS
from dmlfe.params import (
    Param,
    add_flags,
    anything,
    boolean,
    flag_param,
    optional,
    split_arg,
    split_names,
)

#: Labels ``dmlfe info`` and ``dmlfe ingest`` list by default (the most frequent ones);
#: ``--labels-all`` and ``--json`` give every label.
LABELS_SHOWN = 20

#: The commands that run on a dask cluster (they take :data:`dmlfe.cluster.CLUSTER_FLAGS`).
RUNS_ON_A_CLUSTER = ("ingest", "demo", "run", "import", "fit", "transform", "embed",
                     "predict", "evaluate")

OVERWRITE = flag_param("overwrite", False, boolean, "bool", "replace an existing output",
                       action="store_true")
SPLIT = flag_param("split", None, optional(split_names), "str or list of str, optional",
                   "the documents of this split only (or of a comma-separated list of "
                   "splits)", type=split_arg)
LABELS_ALL = flag_param("labels_all", False, boolean, "bool",
                        f"list every label (default: the {LABELS_SHOWN} most frequent and a "
                        "count of the rest)", action="store_true")
# unset unless given after the command: ``dmlfe --debug fit ...`` keeps its value
DEBUG = flag_param("debug", argparse.SUPPRESS, anything, "bool",
                   "print the traceback of an error (for reporting a bug)",
                   action="store_true")


@dataclass(frozen=True)
class CommonFlag:
    """A flag and the commands that take it.

    Attributes
    ----------
    param : Param
        The flag (its ``flag`` holds the argparse options).
    commands : mapping or None
        Command (``"cluster check"`` for a nested one) -> its help there, None for the
        flag's own; None: every command.
    """

    param: Param
    commands: Mapping[str, str | None] | None


COMMON_FLAGS: tuple[CommonFlag, ...] = (
    CommonFlag(SPLIT, {
        "fit": "fit on the documents of this split only (or of a comma-separated list of "
               "splits, e.g. train,unlabelled)",
        "transform": "project the documents of this split only (or of a comma-separated "
                     "list of splits)",
        "predict": "INPUT a store: predict the documents of this split only (or of a "
                   "comma-separated list of splits; default: all its documents)",
        "evaluate": "score the documents of this split only, e.g. test (or of a "
                    "comma-separated list of splits; default: all its documents)"}),
    CommonFlag(OVERWRITE, {
        "ingest": "replace an existing store", "import": "replace an existing store",
        "export": "replace an existing file", "fit": "replace an existing model",
        "transform": "replace existing embeddings", "embed": None, "predict": None,
        "evaluate": "replace an existing --json file"}),
    CommonFlag(LABELS_ALL, {"ingest": None, "info": None}),
    *(CommonFlag(p, dict.fromkeys(RUNS_ON_A_CLUSTER)) for p in CLUSTER_FLAGS),
    # after the command name too: dmlfe fit ... --debug
    CommonFlag(DEBUG, None),
)


def add_common_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """Add to ``parser`` (``dmlfe COMMAND``'s) the :data:`COMMON_FLAGS` it takes and does
    not have yet (a command's parser made on its own, as :func:`dmlfe.pipeline.cli.
    add_run_parser` makes ``run``'s, has them before ``dmlfe.cli`` adds the rest)."""
    entries = [(f.param, None if f.commands is None else f.commands[command])
               for f in COMMON_FLAGS if f.commands is None or command in f.commands]
    entries = [(p, h) for p, h in entries if p.option not in parser._option_string_actions]
    add_flags(parser, [p for p, _ in entries], helps={p.name: h for p, h in entries})


def commands(parser: argparse.ArgumentParser, prefix: str = ""
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """(name, parser) of every command under ``parser``, nested ones as ``"cluster check"``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                key = f"{prefix} {name}".strip()
                yield key, sub
                yield from commands(sub, key)
