"""``dmlfe cluster check``: a cluster profile validated without starting anything."""

from __future__ import annotations

import argparse

from dmlfe.cluster import read_profile
from dmlfe.cluster.profiles import check_profile


def cmd_cluster_check(args: argparse.Namespace) -> int:
    """Validate a cluster profile and show what it would start; starts nothing."""
    profile = read_profile(args.profile)
    print(check_profile(profile))
    print(f"{profile.path}: a valid {profile.kind} profile (nothing was started or "
          "submitted)")
    return 0


def add_cluster_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe cluster`` (and its ``check``) to the ``dmlfe`` parser's subcommands."""
    pk = sub.add_parser("cluster", help="cluster profiles: check one without starting it",
                        epilog="example: dmlfe cluster check slurm")
    kinds = pk.add_subparsers(dest="cluster_command", required=True,
                              help="check: validate a profile and show what it would start")
    pkc = kinds.add_parser(
        "check", help="validate a cluster profile without starting anything",
        description="Validate a cluster profile and print what it would start, without "
        "starting, submitting or contacting anything: the LocalCluster options (local), "
        "the address (scheduler), the hosts and the commands run over SSH (ssh), the job "
        "script each batch job would be submitted with (slurm, pbs), the DaskCluster "
        "resource (kubernetes). Exit 0 when valid; otherwise one line naming the profile "
        "file and the field.",
        epilog="example: dmlfe cluster check slurm   (or a path: dmlfe cluster check "
        "my-site.yaml)")
    pkc.add_argument("profile", help="a profile name in cluster_configs/ or a .yaml path")
    pkc.set_defaults(func=cmd_cluster_check)
    return pk
