"""The one way dmlfe obtains a dask ``distributed.Client``.

Three ways to say where work runs:

* nothing: a ``LocalCluster`` sized for this machine (the built-in ``local`` profile);
* ``scheduler="tcp://host:8786"``: connect to a running scheduler;
* ``cluster="NAME"`` or ``cluster="path/to/profile.yaml"``: a profile file. A profile is
  valid dask configuration; its ``dmlfe.cluster`` block says what to start (``kind``:
  ``local``, ``scheduler``, ``ssh``, ``slurm``, ``pbs`` or ``kubernetes``; see
  :mod:`dmlfe.cluster_profiles` for each kind's settings), and every other key is
  applied with ``dask.config.set`` while the client is open. Profiles named without
  a path are looked up in ``$DMLFE_CLUSTER_CONFIGS``, then ``./cluster_configs``,
  then the ``cluster_configs`` folder of the dmlfe source tree, then the copy installed
  with the package. ``dmlfe cluster check PROFILE`` validates one without starting it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
from distributed import Client, LocalCluster

from dmlfe.cluster_profiles import (
    Profile,
    local_cluster_options,
    read_profile_file,
    require_extra,
    start_cluster,
)
from dmlfe.errors import ClusterUnreachableError

log = logging.getLogger(__name__)

#: Seconds to wait for a running scheduler to answer (``--connect-timeout``).
DEFAULT_CONNECT_TIMEOUT = 10.0

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


def read_profile(name: str) -> Profile:
    """Find, read and validate a profile (see :mod:`dmlfe.cluster_profiles`)."""
    return read_profile_file(find_profile(name))


def load_profile(name: str) -> dict[str, Any]:
    """Read and validate a profile: returns the full dask config mapping it holds."""
    return read_profile(name).config


@contextlib.contextmanager
def get_client(
    scheduler: str | None = None,
    cluster: str | None = None,
    announce: bool = False,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
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
    connect_timeout : float
        Seconds to wait for a running scheduler (``scheduler=`` or a profile of kind
        ``scheduler``) to answer before :class:`~dmlfe.errors.ClusterUnreachableError`.
    **local_options
        Overrides for the LocalCluster (``n_workers``, ``threads_per_worker``,
        ``memory_limit``, ``processes``); with an ssh, slurm, pbs or kubernetes
        profile, ``n_workers`` scales that cluster to so many workers.

    Yields
    ------
    distributed.Client
        A cluster this function started is closed on exit; a remote scheduler is only
        disconnected from.

    Raises
    ------
    ClusterProfileError
        If the profile is malformed (the message names the file and field).
    MissingExtraError
        If the profile's kind needs a library that is not installed.
    ClusterUnreachableError
        If no scheduler answers at the address within ``connect_timeout``.
    """
    if scheduler and cluster:
        raise ValueError("give either scheduler= (an address) or cluster= (a profile), not both")
    profile = read_profile(cluster) if cluster else Profile(None, "local", {}, {})
    require_extra(profile)
    where = "--scheduler"
    if profile.kind == "scheduler":
        scheduler, where = profile.spec["address"], f"{profile.path}: dmlfe.cluster.address"
    with dask.config.set(profile.dask_config()):
        if scheduler:
            client = _connect(scheduler, connect_timeout, where)
            try:
                _announce(client, announce)
                yield client
            finally:
                client.close()
            return
        if profile.kind == "local":
            cm: Any = LocalCluster(**local_cluster_options(profile, local_options))
        else:
            cm = start_cluster(profile, local_options.get("n_workers"))
        with cm as started, Client(started) as client:
            _announce(client, announce)
            yield client


def _connect(address: str, timeout: float, where: str) -> Any:
    try:
        return Client(address, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        # distributed retries until the timeout and then raises OSError("Timed out
        # trying to connect ..."): one line saying what to check instead
        raise ClusterUnreachableError(
            f"no dask scheduler answered at {address} ({where}) within {timeout:g} s: is "
            "it running, and are the address and port right? (--connect-timeout sets the "
            f"wait; {' '.join(str(exc).split())[:200]})") from None


def _announce(client: Any, announce: bool) -> None:
    log.info("client of the scheduler at %s: %d workers; dashboard %s",
             client.scheduler.address, len(client.scheduler_info().get("workers", {})),
             client.dashboard_link)
    if announce:
        print(f"dask dashboard: {client.dashboard_link}", file=sys.stderr)


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """The command line's "where to run" flags (``--scheduler``, ``--cluster``, ...) and
    how much it says (``--quiet``, ``--verbose``)."""
    g = p.add_argument_group("where to run")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--scheduler", metavar="ADDR", help="address of a running dask scheduler")
    x.add_argument("--cluster", metavar="PROFILE",
                   help="cluster profile: a name in cluster_configs/ (local, ssh, slurm, pbs, "
                   "kubernetes) or a .yaml path; see dmlfe cluster check")
    g.add_argument("--workers", type=int, default=None,
                   help="LocalCluster workers (default: one per core); with a slurm, pbs or "
                   "kubernetes profile: scale to this many workers")
    g.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT,
                   metavar="SECONDS", help="how long to wait for a running scheduler "
                   f"(--scheduler, or a profile of kind scheduler) to answer (default "
                   f"{DEFAULT_CONNECT_TIMEOUT:g})")
    o = p.add_argument_group("output")
    v = o.add_mutually_exclusive_group()
    v.add_argument("--quiet", action="store_true",
                   help="print nothing but errors and warnings: no result summary, no "
                   "progress, no dask log lines, no dashboard address")
    v.add_argument("--verbose", action="store_true",
                   help="log what dmlfe and dask do (the dmlfe and distributed loggers at "
                   "INFO, on stderr)")


def client_from_args(args: argparse.Namespace) -> Any:
    """:func:`get_client` for the flags of :func:`add_cluster_arguments`."""
    extra = {"silence_logs": logging.INFO} if getattr(args, "verbose", False) else {}
    return get_client(scheduler=args.scheduler, cluster=args.cluster, n_workers=args.workers,
                      announce=not args.quiet, connect_timeout=args.connect_timeout, **extra)
