"""``dmlfe run PIPELINE.yaml``: the command-line shell of :func:`run_pipeline`.

``dmlfe.cli`` wires it in with :func:`add_run_parser`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dmlfe.cli_flags import add_common_flags
from dmlfe.cluster import client_from_args
from dmlfe.pipeline.config import load_config
from dmlfe.pipeline.runner import run_pipeline


def add_run_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``run`` sub-command to the ``dmlfe`` parser's subparsers."""
    p = subparsers.add_parser(
        "run", help="run a pipeline file: ingest, fit, transform, classify, report",
        description="Run the stages of a pipeline file on one cluster; stages already done "
        "(same parameters and inputs) are reused from the work dir, so an interrupted run "
        "resumes where it stopped.",
        epilog="example: dmlfe run pipelines/mulan.yaml --work-dir runs/mulan")
    p.add_argument("pipeline", help="the pipeline YAML file (see pipelines/)")
    p.add_argument("--work-dir", default=None,
                   help="cache and report folder (default: the file's work_dir, else "
                   "dmlfe-work/NAME)")
    p.add_argument("--fresh", action="store_true",
                   help="run every stage again, replacing the cached results")
    add_common_flags(p, "run")
    p.set_defaults(func=cmd_run)
    return p


def cmd_run(args: argparse.Namespace) -> int:
    """Run the pipeline; prints where the report is."""
    cfg = load_config(args.pipeline)  # a bad file fails before a cluster starts
    with client_from_args(args) as client:
        res = run_pipeline(cfg, work_dir=args.work_dir, client=client, fresh=args.fresh,
                           progress=not args.quiet)
    print(f"pipeline {cfg.name}: {len(res.stages)} stages, {len(res.ran)} ran, "
          f"{len(res.reused)} reused from the cache")
    print(f"report: {Path(res.report_dir, 'report.md').resolve()}")
    print(f"        {Path(res.report_dir, 'report.json').resolve()}")
    return 0
