"""The one way dmlfe obtains a dask ``distributed.Client``.

Three ways to say where work runs:

* nothing: a ``LocalCluster`` sized for this machine (the built-in ``local`` profile);
* ``scheduler="tcp://host:8786"``: connect to a running scheduler;
* ``cluster="NAME"`` or ``cluster="path/to/profile.yaml"``: a profile file. A profile is
  valid dask configuration; its ``dmlfe.cluster`` block describes the cluster
  (``kind: local`` with ``n_workers``, ``threads_per_worker``, ``memory_limit``,
  ``processes``; or ``kind: scheduler`` with ``address``), and every other key is
  applied with ``dask.config.set`` while the client is open. Profiles named without
  a path are looked up in ``$DMLFE_CLUSTER_CONFIGS``, then ``./cluster_configs``,
  then the ``cluster_configs`` folder of the dmlfe source tree, then the copy installed
  with the package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import yaml
from distributed import Client, LocalCluster

_SOURCE_CONFIGS = Path(__file__).resolve().parent.parent / "cluster_configs"
#: Where a (non-editable) install puts them: package data (see setup.py).
_INSTALLED_CONFIGS = Path(__file__).resolve().parent / "cluster_configs"


def _profile_dirs() -> list[Path]:
    dirs = []
    env = os.environ.get("DMLFE_CLUSTER_CONFIGS")
    if env:
        dirs.append(Path(env))
    dirs += [Path.cwd() / "cluster_configs", _SOURCE_CONFIGS, _INSTALLED_CONFIGS]
    return dirs


def find_profile(name: str) -> Path:
    """Path of the profile file ``name`` (a path, or a name looked up in the profile folders)."""
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    tried = []
    for d in _profile_dirs():
        for ext in (".yaml", ".yml"):
            cand = d / f"{name}{ext}"
            tried.append(str(cand))
            if cand.is_file():
                return cand
    raise FileNotFoundError(
        f"cluster profile {name!r} not found; looked for: {', '.join(tried)}. "
        "Pass a path to a .yaml profile or set DMLFE_CLUSTER_CONFIGS to a folder of profiles."
    )


def load_profile(name: str) -> dict[str, Any]:
    """Read a profile: returns the full dask config mapping it holds."""
    path = find_profile(name)
    with open(path) as fh:
        try:
            cfg = yaml.safe_load(fh) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"cluster profile {path} is not valid YAML: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ValueError(f"cluster profile {path} must be a mapping (dask config), got {cfg!r}")
    spec = cfg.get("dmlfe", {}).get("cluster", {})
    kind = spec.get("kind", "local")
    if kind not in ("local", "scheduler"):
        raise ValueError(
            f"cluster profile {path}: dmlfe.cluster.kind must be 'local' or 'scheduler', "
            f"got {kind!r}"
        )
    if kind == "scheduler" and not spec.get("address"):
        raise ValueError(f"cluster profile {path}: kind 'scheduler' needs an 'address'")
    return cfg


def _local_defaults() -> dict[str, Any]:
    ncpu = os.cpu_count() or 1
    return {"n_workers": max(1, ncpu), "threads_per_worker": 1, "processes": True}


@contextlib.contextmanager
def get_client(
    scheduler: str | None = None,
    cluster: str | None = None,
    announce: bool = False,
    **local_options: Any,
) -> Iterator[Any]:
    """Open a dask client for the duration of a ``with`` block.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://host:8786``).
    cluster : str, optional
        Profile name or path (see module docstring). Mutually exclusive with ``scheduler``.
    announce : bool
        Print the dask dashboard's address on stderr once the client is up (the
        command line does, unless ``--quiet``).
    **local_options
        Overrides for the LocalCluster (``n_workers``, ``threads_per_worker``,
        ``memory_limit``, ``processes``).

    Yields
    ------
    distributed.Client
        A LocalCluster this function started is closed on exit; a remote
        scheduler is only disconnected from.
    """
    if scheduler and cluster:
        raise ValueError("give either scheduler= (an address) or cluster= (a profile), not both")
    cfg: dict[str, Any] = load_profile(cluster) if cluster else {}
    spec = dict(cfg.get("dmlfe", {}).get("cluster", {}))
    dask_cfg = {k: v for k, v in cfg.items() if k != "dmlfe"}
    if spec.get("kind") == "scheduler":
        scheduler = spec["address"]
    with dask.config.set(dask_cfg):
        if scheduler:
            client = Client(scheduler)
            try:
                _announce(client, announce)
                yield client
            finally:
                client.close()
            return
        opts = _local_defaults()
        opts.update({k: v for k, v in spec.items() if k != "kind"})
        opts.update({k: v for k, v in local_options.items() if v is not None})
        opts.setdefault("dashboard_address", ":0")  # any free port, never a clash
        with LocalCluster(**opts) as lc, Client(lc) as client:
            _announce(client, announce)
            yield client


def _announce(client: Any, announce: bool) -> None:
    if announce:
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The command line's "where to run" flags (``--scheduler``, ``--cluster``, ...)."""
    g = p.add_argument_group("where to run")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--scheduler", metavar="ADDR", help="address of a running dask scheduler")
    x.add_argument("--cluster", metavar="PROFILE",
                   help="cluster profile: a name in cluster_configs/ or a .yaml path")
    g.add_argument("--workers", type=int, default=None,
                   help="LocalCluster workers (default: one per core)")
    g.add_argument("--quiet", action="store_true",
                   help="nothing on stderr but errors and warnings: no progress, no dask "
                   "log lines, no dashboard address (the result summary stays on stdout)")


def client_from_args(args: argparse.Namespace) -> Any:
    """:func:`get_client` for the flags of :func:`add_cluster_arguments`."""
    return get_client(scheduler=args.scheduler, cluster=args.cluster, n_workers=args.workers,
                      announce=not args.quiet)
