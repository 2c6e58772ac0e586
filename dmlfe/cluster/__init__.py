"""The one way dmlfe obtains a dask ``distributed.Client``.

Three ways to say where work runs:

* nothing: a ``LocalCluster`` sized for this machine (the built-in ``local`` profile);
* ``scheduler="tcp://host:8786"``: connect to a running scheduler;
* ``cluster="NAME"`` or ``cluster="path/to/profile.yaml"``: a profile file. A profile is
  valid dask configuration; its ``dmlfe.cluster`` block says what to start (``kind``:
  ``local``, ``scheduler``, ``ssh``, ``slurm``, ``pbs`` or ``kubernetes``; see
  :mod:`dmlfe.cluster.profiles` for each kind's settings), and every other key is
  applied with ``dask.config.set`` while the client is open. Profiles named without
  a path are looked up in ``$DMLFE_CLUSTER_CONFIGS``, then ``./cluster_configs``,
  then the ``cluster_configs`` folder of the dmlfe source tree, then the copy installed
  with the package. ``dmlfe cluster check PROFILE`` validates one without starting it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
from distributed import Client

from dmlfe.cluster.profiles import (
    Profile,
    get_cluster_kind,
    read_profile_file,
    require_extra,
    tls_check,
)
from dmlfe.errors import ClusterUnreachableError, NoWorkersError
from dmlfe.params import (
    Param,
    add_flags,
    anything,
    boolean,
    flag_param,
    interval,
    optional,
    positive_int,
    seconds,
)

log = logging.getLogger(__name__)

#: Seconds to wait for a running scheduler to answer (``--connect-timeout``).
DEFAULT_CONNECT_TIMEOUT = 10.0

#: Seconds to wait for the first worker (``--worker-timeout``, or a profile's
#: ``dmlfe.cluster.worker_timeout``) of a running scheduler and of a local or ssh
#: cluster. A slurm, pbs or kubernetes cluster is not waited for unless its profile or
#: the flag sets a wait: its workers start when the batch system runs their jobs.
DEFAULT_WORKER_TIMEOUT = 30.0

_PACKAGE = Path(__file__).resolve().parent.parent  # dmlfe/, this module being dmlfe/cluster/
_SOURCE_CONFIGS = _PACKAGE.parent / "cluster_configs"
#: Where a (non-editable) install puts them: package data (see setup.py).
_INSTALLED_CONFIGS = _PACKAGE / "cluster_configs"


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
    """Find, read and validate a profile (see :mod:`dmlfe.cluster.profiles`)."""
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
    worker_timeout: float | None = None,
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
        ``scheduler``) to answer as a dask scheduler before
        :class:`~dmlfe.errors.ClusterUnreachableError`: the connection and dask's
        handshake together (a port where something else listens fails in this time too).
    worker_timeout : float, optional
        Seconds to wait, once connected, for the first worker before
        :class:`~dmlfe.errors.NoWorkersError` (a scheduler without workers would
        otherwise hold the work forever). None: the profile's
        ``dmlfe.cluster.worker_timeout``, else :data:`DEFAULT_WORKER_TIMEOUT` for a
        running scheduler and a local or ssh cluster, and no check for a slurm, pbs or
        kubernetes cluster.
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
        If nothing answers at the address as a dask scheduler within ``connect_timeout``.
    NoWorkersError
        If no worker joins the scheduler within the worker timeout.
    """
    if scheduler and cluster:
        raise ValueError("give either scheduler= (an address) or cluster= (a profile), not both")
    profile = read_profile(cluster) if cluster else Profile(None, "local", {}, {})
    require_extra(profile)
    if cluster:
        tls_check(profile)  # certificates that cannot be loaded fail here, in one line
    kind = get_cluster_kind(profile.kind)
    where = "--scheduler"
    if kind.start is None:  # a kind that connects to a running scheduler
        scheduler, where = profile.spec["address"], f"{profile.path}: dmlfe.cluster.address"
    if worker_timeout is None:
        worker_timeout = profile.spec.get(
            "worker_timeout", None if kind.batch else DEFAULT_WORKER_TIMEOUT)
    with dask.config.set(profile.dask_config()):
        if scheduler:
            client = _connect(scheduler, connect_timeout, where)
            try:
                _announce(client, None, announce)
                _wait_for_a_worker(client, worker_timeout, where, announce)
                yield client
            finally:
                client.close()
            return
        assert kind.start is not None
        with _workers_ignore_interrupts() if kind.local_workers else contextlib.nullcontext():
            cm: Any = kind.start(profile, local_options)
        with cm as started, Client(started) as client:
            _announce(client, started, announce)
            what = profile.where() if profile.path else "the local cluster"
            _wait_for_a_worker(client, worker_timeout, what, announce)
            try:
                yield client
            except KeyboardInterrupt:
                if kind.local_workers:
                    _silence_workers(client)
                raise


@contextlib.contextmanager
def _workers_ignore_interrupts() -> Iterator[None]:
    """Start local worker processes with SIGINT ignored.

    Ctrl-C in a terminal reaches every process of the foreground group: each worker
    would print a traceback of its own KeyboardInterrupt. The driver alone handles it
    (the command line prints one line) and closes the cluster, which ends the workers.
    An ignored signal stays ignored in a spawned child, and Python then installs no
    KeyboardInterrupt handler there. A Ctrl-C while the workers start is ignored too.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _silence_logs() -> None:
    logging.disable(logging.CRITICAL)


def _silence_workers(client: Any) -> None:
    """Interrupted: the local workers' log lines about the tasks the closing cluster
    cancels would follow the command's one line on the same terminal; they stop logging
    (the workers end with the cluster)."""
    with contextlib.suppress(Exception):
        client.run(_silence_logs)


def _connect(address: str, timeout: float, where: str) -> Any:
    """A client of the scheduler at ``address``, or one line saying why there is none.

    ``Client(address, timeout=...)`` bounds the TCP connection but not dask's handshake
    that follows: a port where another program listens (and never answers) would hold
    it forever. The scheduler is therefore first asked who it is (:func:`_identify`)
    within ``timeout``, then connected to.
    """
    start = time.monotonic()
    _identify(address, timeout, where)
    left = max(timeout - (time.monotonic() - start), 1.0)
    try:
        return Client(address, timeout=left)
    except (OSError, TimeoutError) as exc:
        # distributed retries until the timeout and then raises OSError("Timed out
        # trying to connect ..."): one line saying what to check instead
        raise ClusterUnreachableError(_unreachable(address, where, timeout, exc)) from None


def _unreachable(address: str, where: str, timeout: float, exc: BaseException) -> str:
    return (f"no dask scheduler answered at {address} ({where}) within {timeout:g} s: is "
            "it running, and are the address and port right? (--connect-timeout sets the "
            f"wait; {' '.join(str(exc).split())[:200]})")


def _identify(address: str, timeout: float, where: str) -> dict[str, Any]:
    """Ask the server at ``address`` for its identity, all within ``timeout`` seconds.

    Runs on an event loop of its own, in a thread (the caller may be running one).

    Raises
    ------
    ClusterUnreachableError
        Nothing listens there; something listens but does not complete dask's
        handshake; it is a dask server but not a scheduler; a ``tls://`` address
        without the TLS settings to connect with.
    """
    from distributed.comm import connect
    from distributed.security import Security

    try:
        args = Security().get_connection_args("client")
    except (OSError, ValueError, TypeError) as exc:
        raise ClusterUnreachableError(f"cannot connect to {address} ({where}): dask's TLS "
                                      f"settings are unusable: {' '.join(str(exc).split())}"
                                      ) from None

    async def ask() -> dict[str, Any]:
        comm = await connect(address, timeout=timeout, **args)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    async def bounded() -> dict[str, Any]:
        return await asyncio.wait_for(ask(), timeout)

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["identity"] = asyncio.run(bounded())
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="dmlfe-identify", daemon=True)
    thread.start()
    # asyncio.run may wait on a name lookup it cannot cancel: the thread is left to it
    thread.join(timeout + 5.0)
    exc = outcome.get("error", None if "identity" in outcome else TimeoutError())
    if isinstance(exc, TimeoutError) and _accepts_tcp(address):
        raise ClusterUnreachableError(
            f"{address} ({where}) accepted a connection but did not answer as a dask "
            f"scheduler within {timeout:g} s: is it the scheduler's address and port (not "
            "its dashboard's, nor another program's)? (--connect-timeout sets the wait)"
        ) from None
    if isinstance(exc, TypeError | ValueError) and address.startswith("tls://"):
        raise ClusterUnreachableError(
            f"cannot connect to {address} ({where}): a tls:// address needs dask's TLS "
            "settings (distributed.comm.tls.ca-file, and distributed.comm.tls.client.cert "
            "and .key) in the profile or dask's configuration") from None
    if isinstance(exc, RuntimeError) and "encryption" in str(exc):
        raise ClusterUnreachableError(
            f"cannot connect to {address} ({where}): dask's configuration requires "
            "encryption (distributed.comm.require-encryption): give a tls:// address and "
            "set dask's TLS settings (distributed.comm.tls.*)") from None
    if isinstance(exc, ValueError):
        raise ClusterUnreachableError(f"{address} ({where}) is not a dask scheduler address: "
                                      f"{' '.join(str(exc).split())[:200]}") from None
    if isinstance(exc, OSError | TimeoutError):
        raise ClusterUnreachableError(_unreachable(address, where, timeout, exc)) from None
    if exc is not None:
        raise exc
    identity = outcome["identity"]
    kind = identity.get("type") if isinstance(identity, dict) else None
    if kind != "Scheduler":
        raise ClusterUnreachableError(
            f"{address} ({where}) is a dask {kind or 'server'}, not a scheduler: give the "
            "scheduler's address")
    return identity


def _accepts_tcp(address: str) -> bool:
    """Whether a plain TCP connection to ``address`` (tcp:// or tls://) is accepted."""
    from distributed.comm import get_address_host_port

    try:
        host, port = get_address_host_port(address)
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except (OSError, ValueError):
        return False


def _wait_for_a_worker(client: Any, timeout: float | None, where: str,
                       announce: bool) -> None:
    """Return once the scheduler has a worker; :class:`NoWorkersError` after ``timeout``
    seconds without one (None: do not wait)."""
    if timeout is None or client.scheduler_info().get("workers"):
        return
    address = client.scheduler.address
    if announce and timeout > 0:
        print(f"waiting up to {timeout:g} s for a dask worker to join the scheduler at "
              f"{address}", file=sys.stderr)
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise NoWorkersError(
            f"no dask worker joined the scheduler at {address} ({where}) within {timeout:g} "
            f"s: start workers (dask worker {address}) or check why they do not connect "
            "(--worker-timeout sets the wait)") from None


def _announce(client: Any, cluster: Any, announce: bool) -> None:
    link = dashboard_link(client, cluster)
    log.info("client of the scheduler at %s: %d workers; dashboard %s",
             client.scheduler.address, len(client.scheduler_info().get("workers", {})), link)
    if announce and link:
        print(f"dask dashboard: {link}", file=sys.stderr)


def dashboard_link(client: Any, cluster: Any = None) -> str:
    """The dashboard's address as it really listens.

    For a cluster whose scheduler runs in this process (local, slurm, pbs), the address
    its HTTP server is bound to: dask's own ``dashboard_link`` names the scheduler's host,
    which is not where the dashboard listens when it is bound elsewhere (every interface,
    or loopback beside an ``inproc://`` scheduler). A dashboard on every interface is
    shown as ``0.0.0.0`` and said so. Otherwise (a remote scheduler) dask's link.
    """
    from distributed.comm.utils import get_tcp_server_addresses
    from distributed.utils import format_dashboard_link

    server = getattr(getattr(cluster, "scheduler", None), "http_server", None)
    try:
        bound = get_tcp_server_addresses(server) if server is not None else []
    except (RuntimeError, AttributeError):
        bound = []
    if not bound:
        return client.dashboard_link
    host, port = bound[0][:2]
    if host in ("0.0.0.0", "::", ""):
        return f"{format_dashboard_link('0.0.0.0', port)} (listening on every interface)"
    return format_dashboard_link(f"[{host}]" if ":" in host else host, port)


_WHERE, _OUTPUT = "where to run", "output"

#: The command line's "where to run" flags (``--scheduler``, ``--cluster``, ...) and how
#: much it says (``--quiet``, ``--verbose``): what :func:`client_from_args` reads.
CLUSTER_FLAGS: tuple[Param, ...] = (
    flag_param("scheduler", None, anything, "str, optional",
               "address of a running dask scheduler", metavar="ADDR", group=_WHERE,
               exclusive="where"),
    flag_param("cluster", None, anything, "str, optional",
               "cluster profile: a name in cluster_configs/ (local, ssh, slurm, pbs, "
               "kubernetes) or a .yaml path; see dmlfe cluster check", metavar="PROFILE",
               group=_WHERE, exclusive="where"),
    flag_param("workers", None, optional(interval(1, None, integer=True)), "int, optional",
               "LocalCluster workers (default: one per core); with a slurm, pbs or "
               "kubernetes profile: scale to this many workers", type=positive_int,
               group=_WHERE),
    flag_param("connect_timeout", DEFAULT_CONNECT_TIMEOUT, interval(0, None), "float",
               "how long to wait for a running scheduler (--scheduler, or a profile of kind "
               f"scheduler) to answer (default {DEFAULT_CONNECT_TIMEOUT:g})", type=seconds,
               metavar="SECONDS", group=_WHERE),
    flag_param("worker_timeout", None, optional(interval(0, None)), "float, optional",
               "how long to wait for the first dask worker before giving up (default: the "
               "profile's dmlfe.cluster.worker_timeout, else "
               f"{DEFAULT_WORKER_TIMEOUT:g}; slurm, pbs and kubernetes clusters are not "
               "waited for unless this or the profile sets it)", type=seconds,
               metavar="SECONDS", group=_WHERE),
    flag_param("quiet", False, boolean, "bool",
               "print nothing but errors and warnings: no result summary, no progress, no "
               "dask log lines, no dashboard address", action="store_true", group=_OUTPUT,
               exclusive="say"),
    flag_param("verbose", False, boolean, "bool",
               "log what dmlfe and dask do (the dmlfe and distributed loggers at INFO, on "
               "stderr, as they come, those of a local cluster's workers included); without "
               "it, dask's log lines are shown when a command succeeds and left out when it "
               "fails", action="store_true", group=_OUTPUT, exclusive="say"),
)


def add_cluster_arguments(p: argparse.ArgumentParser) -> None:
    """Add :data:`CLUSTER_FLAGS` to ``p`` (``dmlfe``'s commands take them from
    :data:`dmlfe.cli_flags.COMMON_FLAGS`)."""
    add_flags(p, CLUSTER_FLAGS)


def client_from_args(args: argparse.Namespace) -> Any:
    """:func:`get_client` for the flags of :func:`add_cluster_arguments`."""
    # Unless --verbose, the workers of a local cluster do not log: their lines (a
    # worker's "Compute Failed" with its traceback) would precede the one-line error, and
    # those of other processes cannot be held back as this process's are
    # (dmlfe.cli.manners._held_dask_logs).
    extra = {"silence_logs": logging.INFO if getattr(args, "verbose", False)
             else logging.CRITICAL}
    return get_client(scheduler=args.scheduler, cluster=args.cluster, n_workers=args.workers,
                      announce=not args.quiet, connect_timeout=args.connect_timeout,
                      worker_timeout=args.worker_timeout, **extra)


def describe_cluster_fault(exc: BaseException, where: str) -> str | None:
    """One line for the loss of the scheduler or of workers mid-run, or of a worker
    while it starts; None otherwise.

    Parameters
    ----------
    exc : BaseException
        What a computation raised on the client.
    where : str
        The cluster, in the user's words (``tcp://h:8786 (--scheduler)``, a profile, "the
        local cluster").

    Returns
    -------
    str or None
        Nothing of the command's output is kept in either case (outputs are written to
        temporaries that are removed): the message says what was lost and what to do.
    """
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        worker = getattr(exc.last_worker, "address", exc.last_worker)
        n = exc.allowed_failures + 1
        times = "once" if n == 1 else f"{n} times"
        return (f"dask workers of {where} died {times} while computing {exc.task!r} (last "
                f"{worker}): over their memory limit? (their logs say why) Give each worker "
                "more memory (memory_limit, or fewer threads_per_worker, in the cluster "
                "profile) or use more workers; nothing was written")
    lost = (isinstance(exc, FutureCancelledError)
            and exc.reason in ("scheduler-connection-lost", "lost dependencies"))
    if isinstance(exc, RuntimeError) and str(exc) in ("Nanny failed to start.",
                                                      "Worker failed to start."):
        # distributed's words for a worker process that ended before it was up
        return (f"a dask worker of {where} died while starting (killed, out of memory, or "
                "a failing preload or setup? --verbose shows the workers' log lines); "
                "nothing was written")
    if lost or isinstance(exc, CommClosedError):
        return (f"lost the connection to the dask scheduler of {where} mid-run (it stopped, "
                "was killed or the network failed); start it again and re-run the "
                "command; nothing was written")
    return None


def cluster_words(args: argparse.Namespace) -> str:
    """The cluster a command ran on, in the user's words (for :func:`describe_cluster_fault`)."""
    if getattr(args, "scheduler", None):
        return f"{args.scheduler} (--scheduler)"
    if getattr(args, "cluster", None):
        return f"the cluster profile {args.cluster}"
    return "the local cluster"
