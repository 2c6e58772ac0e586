"""``dmlfe demo``: ``dmlfe run`` on the demo pipeline."""

from __future__ import annotations

import argparse

from dmlfe.demo import demo_pipeline_path
from dmlfe.pipeline.cli import cmd_run


def cmd_demo(args: argparse.Namespace) -> int:
    """``dmlfe run`` on the demo pipeline (pipelines/demo.yaml)."""
    args.pipeline = str(demo_pipeline_path())
    return cmd_run(args)


def add_demo_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe demo`` to the ``dmlfe`` parser's subcommands."""
    pd = sub.add_parser("demo", help="the main job: the demo pipeline on a synthetic corpus "
                        "(= dmlfe run pipelines/demo.yaml)",
                        epilog="example: dmlfe demo --work-dir /tmp/demo")
    pd.add_argument("--work-dir", default=None, help="cache and report folder "
                    "(default dmlfe-work/demo)")
    pd.add_argument("--fresh", action="store_true", help="run every stage again")
    pd.set_defaults(func=cmd_demo)
    return pd
