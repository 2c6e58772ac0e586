"""Cluster profiles: what each kind accepts, how it is checked, described and started.

A profile is a YAML file of dask configuration with a ``dmlfe.cluster`` block whose
``kind`` says what to start (see :mod:`dmlfe.cluster` for how profiles are found). Each
kind is declared once, as a :class:`ClusterKind` (its settings, extra, ``describe`` and
``start``) given to :func:`register_cluster_kind`; the built-in ones:

=============  ==============================================  =====================
kind           started with                                    extra to install
=============  ==============================================  =====================
``local``      ``distributed.LocalCluster``                    (none)
``scheduler``  nothing: connect to ``address``                 (none)
``ssh``        ``distributed.SSHCluster`` on ``hosts``         ``dmlfe[ssh]``
``slurm``      ``dask_jobqueue.SLURMCluster``                  ``dmlfe[hpc]``
``pbs``        ``dask_jobqueue.PBSCluster``                    ``dmlfe[hpc]``
``kubernetes`` ``dask_kubernetes.operator.KubeCluster``        ``dmlfe[kubernetes]``
=============  ==============================================  =====================

Where a library has its own configuration namespace, the profile uses it, so dask's
configuration machinery (and the library's documentation) applies unchanged: the
batch jobs' resources are ``jobqueue.slurm.*`` / ``jobqueue.pbs.*``, the Kubernetes
cluster is ``kubernetes.*``. The ``dmlfe.cluster`` block holds only what those
namespaces lack (how many jobs to start, adaptive bounds, the SSH hosts).

:func:`check_profile` validates a profile and describes what it would start -- the
job script a batch system would be given, the Kubernetes ``DaskCluster`` resource,
the SSH hosts and commands -- without starting, submitting or contacting anything.
"""

from __future__ import annotations

import getpass
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask
import yaml
from dask.utils import parse_bytes

from dmlfe.errors import ClusterProfileError, MissingExtraError
from dmlfe.params import (
    Check,
    Constraint,
    Param,
    Predicate,
    Worded,
    boolean,
    interval,
    optional,
)
from dmlfe.yamlfiles import read_yaml

#: Stands for the scheduler's address in a job script shown before any scheduler runs
#: (the same placeholder dask-jobqueue's own ``job_script()`` uses then).
SCHEDULER_PLACEHOLDER = "tcp://<insert-scheduler-address-here>:8786"

#: The kinds dask-jobqueue starts (batch jobs; TLS credentials through a shared folder).
JOBQUEUE_KINDS = ("slurm", "pbs")



@dataclass(frozen=True)
class Profile:
    """A validated profile.

    Attributes
    ----------
    path : Path or None
        The file it was read from (None for the built-in defaults).
    kind : str
        A registered kind (:func:`all_cluster_kinds`).
    spec : dict
        The ``dmlfe.cluster`` block without ``kind``.
    config : dict
        The whole file (dask configuration).
    """

    path: Path | None
    kind: str
    spec: dict[str, Any]
    config: dict[str, Any]

    def dask_config(self) -> dict[str, Any]:
        """Every setting but ``dmlfe.*`` as dotted keys, for ``dask.config.set``.

        Dotted leaves, not nested mappings: ``dask.config.set({"distributed": {...}})``
        would replace the whole ``distributed`` section (its comm timeouts and all)
        instead of the few keys the profile sets.
        """
        return dict(_flatten({k: v for k, v in self.config.items() if k != "dmlfe"}))

    def where(self) -> str:
        return f"cluster profile {self.path}" if self.path else "cluster profile"


def _flatten(cfg: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in cfg.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out += _flatten(value, name + ".")
        else:
            out.append((name, value))
    return out


# --------------------------------------------------------------------------- field checks
# Constraint objects of dmlfe.params: each raises ValueError saying what is wrong (the
# field's name and the file are added by _fail).
def _is_memory(v: Any) -> bool:
    if v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v > 0):
        return True
    if isinstance(v, str):
        try:
            return parse_bytes(v) > 0
        except (ValueError, TypeError):
            return False
    return False


_pos_int = Worded(interval(1, None, integer=True), "must be a positive integer, got {value!r}")
_nonneg_int = Worded(interval(0, None, integer=True),
                     "must be a non-negative integer, got {value!r}")
_optional_pos_int = optional(_pos_int)
_boolean = Worded(boolean, "must be true or false, got {value!r}")
_text = Predicate(lambda v: isinstance(v, str) and bool(v.strip()),
                  "must be a non-empty string, got {value!r}")
_optional_text = optional(_text)
_mapping = Predicate(lambda v: isinstance(v, Mapping), "must be a mapping, got {value!r}")
_memory = Predicate(_is_memory, "must be an amount of memory such as 4GiB, got {value!r}")
_optional_seconds = optional(Worded(
    interval(0, None), "must be a number of seconds (0 or more) or null, got {value!r}"))
_host = Predicate(lambda v: isinstance(v, str) and bool(re.fullmatch(r"[A-Za-z0-9._-]+", v)),
                  "must be an IPv4 address or a host name such as 127.0.0.1 or 0.0.0.0, got "
                  "{value!r}")
_address = Predicate(
    lambda v: isinstance(v, str) and bool(re.fullmatch(r"([a-z]+://)?[^\s:/]+(:\d+)?/?", v)),
    "must be a scheduler address such as tcp://host:8786, got {value!r}")
_list_of_text = Predicate(lambda v: isinstance(v, list) and all(isinstance(s, str) for s in v),
                          "must be a list of strings, got {value!r}")
_hosts = Predicate(
    lambda v: isinstance(v, list) and len(v) >= 2 and all(isinstance(h, str) and h for h in v),
    "must list at least two hosts (the first runs the scheduler, every other one workers; "
    "repeat a host to run both there), got {value!r}")


@dataclass(frozen=True)
class _Walltime(Constraint):
    """A batch time limit such as ``"02:00:00"``."""

    def __call__(self, name: str, v: Any) -> Any:
        if isinstance(v, str) and re.fullmatch(r"(\d+-)?\d+(:\d{1,2}){0,2}", v):
            return v
        hint = " (write it quoted: YAML reads an unquoted 1:30:00 as a number of seconds)" \
            if isinstance(v, int) else ""
        raise ValueError(f"must be a time limit such as \"02:00:00\", got {v!r}{hint}")


@dataclass(frozen=True)
class _Adapt(Constraint):
    """Adaptive bounds: a mapping of ``keys`` (minimum first) to non-negative integers."""

    keys: tuple[str, ...]

    def __call__(self, name: str, v: Any) -> Any:
        keys = self.keys
        if not isinstance(v, Mapping) or not v or set(v) - set(keys):
            raise ValueError(f"must be a mapping of {', '.join(keys)}, got {v!r}")
        for k, x in v.items():
            if not _nonneg_int.accepts(x):
                raise ValueError(f"{k} must be a non-negative integer, got {x!r}")
        if len(v) == 2 and v[keys[0]] > v[keys[1]]:
            raise ValueError(f"{keys[0]} ({v[keys[0]]}) is above {keys[1]} ({v[keys[1]]})")
        return v


@dataclass(frozen=True)
class _OneOrPerHost(Constraint):
    """A value ``inner`` accepts, or a list of them (one per host)."""

    inner: Check

    def __call__(self, name: str, v: Any) -> Any:
        for x in v if isinstance(v, list) else ():
            try:
                self.inner(name, x)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"(one per host): {exc}") from None
        return v if isinstance(v, list) else self.inner(name, v)


_walltime = _Walltime()


def _field(name: str, check: Check, doc: str) -> Param:
    """A ``dmlfe.cluster`` setting (its default is the library's or dmlfe's own)."""
    return Param(name, None, check, doc)


#: Every kind's ``dmlfe.cluster.worker_timeout``: how long to wait for the first worker.
WORKER_TIMEOUT = _field("worker_timeout", _optional_seconds,
                        "float, optional\n    Seconds to wait for the first worker.")

#: Where a LocalCluster that dmlfe starts listens unless its profile says otherwise: the
#: scheduler, the workers and the dashboard are reachable from this machine only.
LOOPBACK = "127.0.0.1"

#: jobqueue.<kind>.* keys dmlfe checks itself (the library checks the rest).
JOBQUEUE_FIELDS: dict[str, Check] = {
    "cores": _pos_int, "memory": _memory, "processes": _optional_pos_int,
    "walltime": _walltime, "queue": _optional_text, "account": _optional_text,
    "job-script-prologue": _list_of_text, "job-extra-directives": _list_of_text,
}
KUBERNETES_FIELDS: dict[str, Check] = {
    "image": _text, "name": _text, "namespace": _optional_text, "env": _mapping,
    "resources": _mapping, "worker-command": _text,
}


def _fail(where: str, field: str, problem: str) -> ClusterProfileError:
    return ClusterProfileError(f"{where}: {field} {problem}")


def _check_field(where: str, field: str, check: Check, value: Any) -> None:
    try:
        check(field, value)
    except (TypeError, ValueError) as exc:
        raise _fail(where, field, str(exc)) from None


def _check_fields(where: str, prefix: str, values: Mapping[str, Any],
                  checks: Mapping[str, Check], strict: bool) -> None:
    for key, value in values.items():
        if key not in checks:
            if strict:
                raise _fail(where, f"{prefix}{key}", "is not a setting of this kind; known: "
                            + ", ".join(checks))
            continue
        _check_field(where, f"{prefix}{key}", checks[key], value)


def parse_profile(cfg: Any, path: Path | None) -> Profile:
    """Validate a profile's contents; raises :class:`ClusterProfileError` naming the field.

    Parameters
    ----------
    cfg : object
        The file's YAML contents.
    path : Path or None
        The file, for the messages.
    """
    where = f"cluster profile {path}" if path else "cluster profile"
    if not isinstance(cfg, Mapping):
        raise ClusterProfileError(f"{where} must be a mapping (dask config), got {cfg!r}")
    block = cfg.get("dmlfe", {}) or {}
    spec = block.get("cluster", {}) if isinstance(block, Mapping) else None
    if not isinstance(spec, Mapping):
        raise _fail(where, "dmlfe.cluster", f"must be a mapping, got {spec!r}")
    spec = dict(spec)
    kind = spec.pop("kind", "local")
    kinds = all_cluster_kinds()
    if not isinstance(kind, str) or kind not in kinds:
        raise _fail(where, "dmlfe.cluster.kind", f"must be one of {', '.join(kinds)}; got "
                    f"{kind!r}")
    spec_kind = kinds[kind]
    _check_fields(where, "dmlfe.cluster.", spec,
                  {p.name: p.check for p in spec_kind.all_fields()}, strict=True)
    for field in spec_kind.required:
        if field not in spec:
            raise _fail(where, f"dmlfe.cluster.{field}", f"is missing (kind {kind!r} needs it)")
    profile = Profile(path=path, kind=kind, spec=spec, config=dict(cfg))
    if spec_kind.validate is not None:
        spec_kind.validate(profile)
    return profile


def _validate_jobqueue(profile: Profile) -> None:
    """A slurm/pbs profile's ``jobqueue.<kind>`` section: the jobs' resources."""
    where, kind, spec, cfg = profile.where(), profile.kind, profile.spec, profile.config
    if "jobs" in spec and "adapt" in spec:
        raise _fail(where, "dmlfe.cluster.adapt", "and dmlfe.cluster.jobs exclude each "
                    "other: give a fixed number of jobs or adaptive bounds")
    jobqueue = cfg.get("jobqueue") or {}
    section = jobqueue.get(kind) if isinstance(jobqueue, Mapping) else None
    if not isinstance(section, Mapping):
        raise _fail(where, f"jobqueue.{kind}", "is missing: the batch jobs' resources "
                    "(cores, memory, walltime, queue...) are dask-jobqueue's settings")
    for need in ("cores", "memory"):
        if section.get(need) is None:
            raise _fail(where, f"jobqueue.{kind}.{need}", "is missing (dask-jobqueue "
                        "needs the cores and memory of one job)")
    _check_fields(where, f"jobqueue.{kind}.", section, JOBQUEUE_FIELDS, strict=False)


def _validate_kubernetes(profile: Profile) -> None:
    """A kubernetes profile's ``kubernetes`` section: the cluster dask-kubernetes starts."""
    where = profile.where()
    section = profile.config.get("kubernetes")
    if not isinstance(section, Mapping):
        raise _fail(where, "kubernetes", "is missing: the cluster (image, count.start, "
                    "resources...) is dask-kubernetes' settings")
    _check_fields(where, "kubernetes.", section, KUBERNETES_FIELDS, strict=False)
    count = section.get("count") or {}
    _check_field(where, "kubernetes.count", _mapping, count)
    if count.get("start") is not None:
        _check_field(where, "kubernetes.count.start", _nonneg_int, count["start"])


def read_profile_file(path: Path) -> Profile:
    """Read and validate the profile file ``path`` (within the limits of
    :func:`dmlfe.yamlfiles.read_yaml`)."""
    cfg = read_yaml(path, ClusterProfileError, "cluster profile")
    return parse_profile({} if cfg is None else cfg, path)


def require_extra(profile: Profile) -> None:
    """Raise :class:`MissingExtraError` (one line) when the kind's library is missing."""
    needs = get_cluster_kind(profile.kind).extra
    if needs is None:
        return
    module, extra = needs
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"{profile.where()}: kind {profile.kind!r} needs the {module} package; install "
            f"it with: pip install 'dmlfe[{extra}]'")


# --------------------------------------------------------------------------- per kind
def local_cluster_options(profile: Profile, overrides: Mapping[str, Any] | None = None
                  ) -> dict[str, Any]:
    """The ``LocalCluster`` keywords of a local profile (defaults: one worker per core).

    Everything listens on ``host`` (default :data:`LOOPBACK`): the scheduler and the
    workers (``processes: true``) and the dashboard (``dashboard_address``, default
    ``HOST:0``, a free port). With ``processes: false`` the workers talk to the
    scheduler in-process (``inproc://``, no port), and the HTTP server each worker
    keeps (``/health``, ``/metrics``) listens on ``HOST:0`` too; dask would otherwise
    bind both HTTP servers to every interface.
    """
    import os

    opts: dict[str, Any] = {"n_workers": max(1, os.cpu_count() or 1), "threads_per_worker": 1,
                            "processes": True, "host": LOOPBACK}
    opts.update(profile.spec)
    opts.update({k: v for k, v in (overrides or {}).items() if v is not None})
    opts.pop("worker_timeout", None)  # dmlfe's own setting, not LocalCluster's
    host = opts["host"]
    opts.setdefault("dashboard_address", f"{host}:0")  # a free port, never a clash
    if tls_check(profile) == TEMPORARY_TLS:
        opts["security"] = True  # LocalCluster makes the temporary credentials
    if not opts["processes"]:
        del opts["host"]  # an inproc:// scheduler takes no TCP host
        opts.setdefault("worker_dashboard_address", f"{host}:0")
    return opts


TEMPORARY_TLS = ("TLS: temporary self-signed credentials made when the cluster starts "
                 "(distributed.comm.require-encryption is true and no certificates are set)")


def tls_check(profile: Profile) -> str | None:
    """Whether the cluster can start under ``distributed.comm.require-encryption``.

    With encryption required (by the profile or dask's own configuration), dask uses
    ``tls://`` everywhere and needs certificates (``distributed.comm.tls.ca-file`` and
    ``distributed.comm.tls.{scheduler,worker,client}.cert`` / ``.key``). A local
    cluster without them is started with temporary self-signed credentials (made in
    memory; needs the ``cryptography`` package). Otherwise the certificates are loaded
    here as dask would load them, and a ``scheduler`` profile's address must be
    ``tls://``.

    Returns
    -------
    str or None
        A line for ``dmlfe cluster check`` (None when encryption is not required).

    Raises
    ------
    ClusterProfileError
        Naming the setting that keeps the cluster from starting.
    """
    from distributed.security import Security

    where = profile.where()
    with dask.config.set(profile.dask_config()):
        if not dask.config.get("distributed.comm.require-encryption", False):
            return None
        try:
            security = Security()
        except (ValueError, TypeError) as exc:
            raise _fail(where, "distributed.comm.tls", " ".join(str(exc).split())) from None
        # connecting to a running scheduler takes the client's part only
        roles = ("client",) if profile.kind == "scheduler" else ("scheduler", "worker",
                                                                 "client")
        if not any(security.get_tls_config_for_role(r)["cert"] for r in roles):
            if profile.kind in JOBQUEUE_KINDS:
                return _jobqueue_temporary_tls(profile)
            if profile.kind != "local":
                raise _fail(where, "distributed.comm.require-encryption", "is true but no TLS "
                            "certificates are set (distributed.comm.tls.ca-file and "
                            "distributed.comm.tls.scheduler/worker/client.cert and .key)")
            if importlib.util.find_spec("cryptography") is None:
                raise _fail(where, "distributed.comm.require-encryption", "is true and no "
                            "TLS certificates are set: a local cluster then makes temporary "
                            "ones, which needs the cryptography package (pip install "
                            "cryptography), or set distributed.comm.tls.*")
            return TEMPORARY_TLS
        for role in roles:
            try:
                security.get_connection_args(role)
                if role != "client":
                    security.get_listen_args(role)
            except (OSError, ValueError, TypeError) as exc:  # ssl.SSLError is an OSError
                raise _fail(where, f"distributed.comm.tls ({role})", "cannot be loaded: "
                            + " ".join(str(exc).split())) from None
            if not security.get_tls_config_for_role(role)["cert"]:
                raise _fail(where, f"distributed.comm.tls.{role}.cert", "is missing "
                            "(encryption is required: the scheduler, the workers and the "
                            "client each need a certificate)")
        address = profile.spec.get("address")
        if address is not None and not address.startswith("tls://"):
            raise _fail(where, "dmlfe.cluster.address", f"must be a tls:// address when "
                        f"distributed.comm.require-encryption is true, got {address!r}")
        line = "TLS: certificates of distributed.comm.tls.* (loaded)"
        remote = get_cluster_kind(profile.kind).remote
        if remote is not None:
            # the workers run elsewhere and read the same paths there
            files = sorted({v for r in ("worker", "scheduler")
                            for v in security.get_tls_config_for_role(r).values() if v})
            line += (f"; the {remote} must read the same files at the same paths: "
                     f"{', '.join(files)}")
        return line


def shared_temp_directory(profile: Profile) -> str | None:
    """``jobqueue.<kind>.shared-temp-directory`` of a slurm/pbs profile (either spelling),
    with ``~`` and variables expanded; None when unset."""
    section = (profile.config.get("jobqueue") or {}).get(profile.kind) or {}
    value = section.get("shared-temp-directory", section.get("shared_temp_directory"))
    return None if value is None else os.path.expanduser(os.path.expandvars(str(value)))


def _jobqueue_temporary_tls(profile: Profile) -> str:
    """Temporary credentials for a slurm/pbs cluster: dask-jobqueue writes the workers'
    key and certificate to ``shared-temp-directory``, which the jobs read. It must be set
    (dask-jobqueue would otherwise write the key to the working directory), be a folder
    of this user that no one else can read, and not be the working directory."""
    where = profile.where()
    field = f"jobqueue.{profile.kind}.shared-temp-directory"
    folder = shared_temp_directory(profile)
    if importlib.util.find_spec("cryptography") is None:
        raise _fail(where, "distributed.comm.require-encryption", "is true and no TLS "
                    "certificates are set: temporary ones need the cryptography package "
                    "(pip install cryptography), or set distributed.comm.tls.*")
    if folder is None:
        raise _fail(where, field, "is missing: with distributed.comm.require-encryption and "
                    "no certificates the workers' temporary TLS key is written there for the "
                    "jobs to read (dask-jobqueue would use the working directory); give a "
                    "private folder on a file system the compute nodes share (mode 700)")
    path = Path(folder)
    if not path.is_dir():
        raise _fail(where, field, f"{folder!r} is not a folder (create it with mode 700 on a "
                    "file system the compute nodes share)")
    if path.resolve() == Path.cwd().resolve():
        raise _fail(where, field, f"{folder!r} is the working directory: give a private "
                    "folder of its own (mode 700), not where other files are shared")
    st = path.stat()
    if st.st_mode & 0o077 or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        raise _fail(where, field, f"{folder!r} can be read by others (mode "
                    f"{st.st_mode & 0o777:o}) or is not yours: the workers' TLS key is "
                    "written there; chmod 700 it")
    return (f"TLS: temporary self-signed credentials made when the cluster starts; the "
            f"workers' key and certificate are written to {folder} (private, mode "
            f"{st.st_mode & 0o777:o}) for the jobs to read")


def jobqueue_security(profile: Profile, placeholders: bool = False) -> Any:
    """The ``security`` a slurm/pbs cluster is started with (None without encryption).

    Certificates of ``distributed.comm.tls.*`` when set, else temporary credentials
    (:meth:`distributed.security.Security.temporary`). ``placeholders``: for showing
    the job script without making credentials, the workers' files are named by where
    dask-jobqueue would write them.
    """
    from distributed.security import Security

    line = tls_check(profile)
    if line is None:
        return None
    with dask.config.set(profile.dask_config()):
        if not line.startswith("TLS: temporary"):
            return Security()
        if not placeholders:
            return Security.temporary()
        folder = shared_temp_directory(profile)
        names = {k: f"{folder}/.dask-jobqueue.worker.{k}.<random>"
                 for k in ("tls_ca_file", "tls_worker_cert", "tls_worker_key")}
        return Security(require_encryption=True, **names)


def job_class(kind: str) -> type:
    """dask-jobqueue's job class of ``kind`` (what writes the batch script)."""
    require_extra(Profile(None, kind, {}, {}))
    from dask_jobqueue.pbs import PBSJob
    from dask_jobqueue.slurm import SLURMJob

    return {"slurm": SLURMJob, "pbs": PBSJob}[kind]


def job_script(profile: Profile) -> str:
    """The batch script each job of a slurm/pbs profile would be submitted with.

    Made by dask-jobqueue's job class itself -- what ``JobQueueCluster.job_script()``
    calls -- so that no scheduler is started and nothing is submitted; the scheduler's
    address is :data:`SCHEDULER_PLACEHOLDER`.
    """
    cls = job_class(profile.kind)
    security = jobqueue_security(profile, placeholders=True)
    with dask.config.set(profile.dask_config()):
        try:
            job = cls(SCHEDULER_PLACEHOLDER.replace("tcp://", "tls://") if security
                      else SCHEDULER_PLACEHOLDER, name="dummy-name", security=security)
        except (ValueError, TypeError) as exc:
            raise ClusterProfileError(f"{profile.where()}: jobqueue.{profile.kind}: "
                                      f"{' '.join(str(exc).split())}") from None
        return job.job_script()


def check_library_keys(profile: Profile) -> None:
    """Every ``jobqueue.<kind>.*`` / ``kubernetes.*`` key of the profile must be one the
    library knows: a misspelt key would be ignored and its default used. Needs the
    library (its defaults are loaded into dask's configuration when it is imported)."""
    require_extra(profile)
    if profile.kind in JOBQUEUE_KINDS:
        import dask_jobqueue  # noqa: F401 - loads its defaults into dask.config

        prefix, what = f"jobqueue.{profile.kind}", f"dask-jobqueue {profile.kind}"
        given = profile.config["jobqueue"][profile.kind]
    else:
        import dask_kubernetes  # noqa: F401

        prefix, what, given = "kubernetes", "dask-kubernetes", profile.config["kubernetes"]
    known = dask.config.get(prefix)
    for key in given:
        if key not in known:
            raise _fail(profile.where(), f"{prefix}.{key}", f"is not a {what} setting; "
                        "known: " + ", ".join(sorted(known)))


def kubernetes_spec_args(profile: Profile) -> dict[str, Any]:
    """``make_cluster_spec`` keywords from a kubernetes profile's ``kubernetes.*`` settings.

    ``KubeCluster`` reads the same settings (``kubernetes.name``, ``image``,
    ``count.start``, ``resources``, ``env``, ``worker-command``,
    ``scheduler-service-type``); keys the profile leaves out take dask-kubernetes'
    defaults when it is installed.
    """
    k = dict(profile.config.get("kubernetes") or {})
    name = str(k.get("name", "dask-{user}-{uuid}"))
    args: dict[str, Any] = {
        # KubeCluster fills {user} and a random {uuid} when it starts
        "name": name.replace("{user}", getpass.getuser()).replace("{uuid}", "<uuid>"),
        "n_workers": int((k.get("count") or {}).get("start") or 0),
    }
    for key, arg in (("image", "image"), ("resources", "resources"), ("env", "env"),
                     ("worker-command", "worker_command"),
                     ("scheduler-service-type", "scheduler_service_type")):
        if k.get(key) is not None:
            args[arg] = k[key]
    return args


def kubernetes_spec(profile: Profile) -> dict[str, Any]:
    """The ``DaskCluster`` resource a kubernetes profile would create (no API server)."""
    require_extra(profile)
    from dask_kubernetes.operator import make_cluster_spec

    with dask.config.set(profile.dask_config()):
        return make_cluster_spec(**kubernetes_spec_args(profile))


def ssh_commands(profile: Profile) -> list[tuple[str, str]]:
    """(host, command) for the scheduler and each worker host of an ssh profile, as
    ``SSHCluster`` runs them over SSH (the dask configuration travels in the
    ``DASK_INTERNAL_INHERIT_CONFIG`` variable)."""
    s = profile.spec
    hosts = s["hosts"]
    python = s.get("remote_python") or sys.executable
    pythons = python if isinstance(python, list) else [python] * len(hosts)
    sched = json.dumps({"cls": "distributed.Scheduler", "opts": s.get("scheduler_options", {})})
    out = [(hosts[0], f"{pythons[0]} -m distributed.cli.dask_spec --spec '{sched}'")]
    wopts = dict(s.get("worker_options", {}))
    n = wopts.pop("n_workers", 1)
    wcls = s.get("worker_class", "distributed.Nanny")
    worker = json.dumps({i: {"cls": wcls, "opts": wopts} for i in range(n)})
    for host, py in zip(hosts[1:], pythons[1:], strict=True):
        out.append((host, f"{py} -m distributed.cli.dask_spec <scheduler-address> --spec "
                          f"'{worker}'"))
    return out


def check_profile(profile: Profile) -> str:
    """Validate ``profile`` further and describe what it would start; starts nothing.

    Returns
    -------
    str
        Lines for ``dmlfe cluster check``: the kind, then what its kind's ``describe``
        says (the LocalCluster options, the scheduler address, the SSH hosts and
        commands, the batch job script, or the Kubernetes ``DaskCluster`` resource);
        then the dask settings the profile applies.
    """
    lines = [f"profile: {profile.path}", f"kind: {profile.kind}",
             get_cluster_kind(profile.kind).describe(profile)]
    tls = tls_check(profile)
    if tls:
        lines.append(tls)
    settings = profile.dask_config()
    if settings:
        lines.append("dask settings applied while the cluster is used:")
        lines += [f"  {k}: {json.dumps(v, default=str)}" for k, v in settings.items()]
    return "\n".join(lines)


def _describe_local(profile: Profile) -> str:
    return "LocalCluster options: " + json.dumps(local_cluster_options(profile))


def _describe_scheduler(profile: Profile) -> str:
    return (f"connects to the running scheduler at {profile.spec['address']} (not contacted "
            "by this check)")


def _describe_ssh(profile: Profile) -> str:
    require_extra(profile)
    cmds = ssh_commands(profile)
    lines = [f"scheduler host: {cmds[0][0]}",
             f"worker hosts: {', '.join(h for h, _ in cmds[1:])}",
             "SSH connect options: " + json.dumps(profile.spec.get("connect_options", {}),
                                                  default=str),
             "commands run over SSH:"]
    lines += [f"  {host}: {cmd}" for host, cmd in cmds]
    return "\n".join(lines)


def _describe_jobqueue(profile: Profile) -> str:
    check_library_keys(profile)
    s = profile.spec
    scale = (f"adaptive: {json.dumps(s['adapt'])}" if "adapt" in s
             else f"{s.get('jobs', 0)} job(s)")
    return "\n".join([f"jobs: {scale}", f"job script (each job; submitted with "
                      f"{_submit_command(profile.kind)}):", job_script(profile).rstrip("\n")])


def _describe_kubernetes(profile: Profile) -> str:
    check_library_keys(profile)
    spec = kubernetes_spec(profile)
    lines = [f"adaptive: {json.dumps(profile.spec['adapt'])}"] if "adapt" in profile.spec else []
    lines.append("DaskCluster resource (created through the Kubernetes API):")
    lines.append(yaml.dump(spec, Dumper=_NoAliases, sort_keys=False).rstrip("\n"))
    return "\n".join(lines)


class _NoAliases(yaml.SafeDumper):
    """Writes a mapping shared by the scheduler and worker specs out twice (a
    Kubernetes resource is read by people and kubectl, not by YAML anchors)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _submit_command(kind: str) -> str:
    return job_class(kind).submit_command


def start_cluster(profile: Profile, n_workers: int | None = None) -> Any:
    """Start the cluster a profile describes (its kind's ``start``).

    Call inside ``dask.config.set(profile.dask_config())``: the libraries read their
    settings from dask's configuration. ``n_workers`` (``--workers``) scales to that
    many workers instead of the profile's ``jobs`` / ``kubernetes.count.start``.
    """
    require_extra(profile)
    kind = get_cluster_kind(profile.kind)
    if kind.start is None:
        raise ValueError(f"kind {kind.name!r} starts no cluster: it connects to "
                         "dmlfe.cluster.address")
    return kind.start(profile, {"n_workers": n_workers})


def _start_local(profile: Profile, options: Mapping[str, Any]) -> Any:
    from distributed import LocalCluster

    return LocalCluster(**local_cluster_options(profile, options))


def _start_ssh(profile: Profile, options: Mapping[str, Any]) -> Any:
    if options.get("n_workers") is not None:
        raise ValueError("--workers does not apply to an ssh profile: its hosts and "
                         "worker_options.n_workers say how many workers run")
    from distributed import SSHCluster

    s = profile.spec
    return SSHCluster(s["hosts"], connect_options=s.get("connect_options"),
                      worker_options=s.get("worker_options"),
                      scheduler_options=s.get("scheduler_options"),
                      worker_class=s.get("worker_class", "distributed.Nanny"),
                      remote_python=s.get("remote_python"))


def _start_jobqueue(profile: Profile, options: Mapping[str, Any]) -> Any:
    import dask_jobqueue

    s, n_workers = profile.spec, options.get("n_workers")
    cls = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster}
    security = jobqueue_security(profile)
    cluster = (cls[profile.kind]() if security is None else cls[profile.kind](
        security=security, protocol="tls://",
        shared_temp_directory=shared_temp_directory(profile)))
    if n_workers is not None:
        cluster.scale(n=n_workers)
    elif "adapt" in s:
        cluster.adapt(**s["adapt"])
    elif s.get("jobs"):
        cluster.scale(jobs=s["jobs"])
    return cluster


def _start_kubernetes(profile: Profile, options: Mapping[str, Any]) -> Any:
    from dask_kubernetes.operator import KubeCluster

    n_workers = options.get("n_workers")
    cluster = KubeCluster(n_workers=n_workers) if n_workers is not None else KubeCluster()
    if "adapt" in profile.spec and n_workers is None:
        cluster.adapt(**profile.spec["adapt"])
    return cluster


# --------------------------------------------------------------------------- kinds
@dataclass(frozen=True)
class ClusterKind:
    """What a profile's ``dmlfe.cluster.kind`` names: its settings and how it starts.

    Adding a kind is one :func:`register_cluster_kind` call; profiles, ``dmlfe cluster
    check`` and every command's ``--cluster`` then accept it.

    Attributes
    ----------
    name : str
        The ``kind`` value.
    describe : callable
        ``describe(profile) -> str``: what the profile would start, for ``dmlfe cluster
        check`` (one or more lines); starts, submits and contacts nothing.
    start : callable or None
        ``start(profile, options) -> cluster``: a started cluster (a context manager, as
        ``distributed.LocalCluster``); ``options`` holds ``n_workers`` (``--workers``,
        None when not given) and the command's other ``LocalCluster`` keywords. Called
        inside ``dask.config.set(profile.dask_config())``. None: the kind starts
        nothing and connects to ``dmlfe.cluster.address``.
    fields : tuple of Param
        The ``dmlfe.cluster`` settings it accepts besides ``kind`` (and
        :data:`WORKER_TIMEOUT`, which every kind takes); any other is an error.
    required : tuple of str
        Those of ``fields`` a profile must set.
    extra : (str, str) or None
        The module it needs and the dmlfe extra that installs it.
    validate : callable or None
        ``validate(profile)``: further checks (a library's own section), raising
        :class:`ClusterProfileError`.
    batch : bool
        Its workers start when a batch system runs their jobs: not waited for unless
        the profile or ``--worker-timeout`` sets a wait.
    remote : str or None
        Where its scheduler or workers run on other machines: what must hold the TLS
        certificate files there.
    local_workers : bool
        Its workers are processes this one starts on this machine: started with SIGINT
        ignored (Ctrl-C is the driver's) and silenced when interrupted.
    """

    name: str
    describe: Callable[[Profile], str]
    start: Callable[[Profile, Mapping[str, Any]], Any] | None
    fields: tuple[Param, ...] = ()
    required: tuple[str, ...] = ()
    extra: tuple[str, str] | None = None
    validate: Callable[[Profile], None] | None = None
    batch: bool = False
    remote: str | None = None
    local_workers: bool = False

    def all_fields(self) -> tuple[Param, ...]:
        """Its fields, then the ones every kind takes."""
        return (*self.fields, WORKER_TIMEOUT)


_KINDS: dict[str, ClusterKind] = {}


def register_cluster_kind(kind: ClusterKind, replace: bool = False) -> ClusterKind:
    """Add a cluster kind (``replace``: over one of the same name)."""
    if kind.name in _KINDS and not replace:
        raise ValueError(f"cluster kind {kind.name!r} is already registered")
    unknown = set(kind.required) - {p.name for p in kind.fields}
    if unknown:
        raise ValueError(f"cluster kind {kind.name!r}: required {sorted(unknown)} are not "
                         "among its fields")
    _KINDS[kind.name] = kind
    return kind


def unregister_cluster_kind(name: str) -> None:
    """Remove a cluster kind (for tests and plug-ins that replace one)."""
    get_cluster_kind(name)
    del _KINDS[name]


def get_cluster_kind(name: str) -> ClusterKind:
    """The registered kind ``name``; ValueError names the known ones."""
    try:
        return _KINDS[name]
    except KeyError:
        raise ValueError(f"unknown cluster kind {name!r}; known: {', '.join(_KINDS)}") from None


def all_cluster_kinds() -> dict[str, ClusterKind]:
    """Every registered cluster kind, by name, in registration order."""
    return dict(_KINDS)


_ADAPT_JOBS = _field("adapt", _Adapt(("minimum_jobs", "maximum_jobs")),
                     "mapping\n    Adaptive bounds: minimum_jobs, maximum_jobs.")
_JOBS = _field("jobs", _nonneg_int, "int\n    Jobs to submit.")
for _kind in (
    ClusterKind("local", _describe_local, _start_local, local_workers=True, fields=(
        _field("n_workers", _pos_int, "int\n    Workers (default: one per core)."),
        _field("threads_per_worker", _pos_int, "int\n    Threads of each worker."),
        _field("memory_limit", _memory, "str or int\n    Memory of each worker."),
        _field("processes", _boolean, "bool\n    Workers in processes (else threads)."),
        _field("host", _host, "str\n    Where everything listens (default loopback)."),
        _field("dashboard_address", _text, "str\n    Where the dashboard listens."))),
    ClusterKind("scheduler", _describe_scheduler, None, required=("address",), fields=(
        _field("address", _address, "str\n    The running scheduler's address."),)),
    ClusterKind("ssh", _describe_ssh, _start_ssh, required=("hosts",),
                extra=("asyncssh", "ssh"), remote="hosts", fields=(
        _field("hosts", _hosts, "list of str\n    Scheduler host, then worker hosts."),
        _field("connect_options", _OneOrPerHost(_mapping), "mapping or list\n    asyncssh "
               "options (one, or one per host)."),
        _field("worker_options", _mapping, "mapping\n    Keywords of each worker."),
        _field("scheduler_options", _mapping, "mapping\n    Keywords of the scheduler."),
        _field("remote_python", _OneOrPerHost(_optional_text), "str or list\n    The "
               "Python to run (one, or one per host)."),
        _field("worker_class", _text, "str\n    The worker class."))),
    *(ClusterKind(name, _describe_jobqueue, _start_jobqueue, fields=(_JOBS, _ADAPT_JOBS),
                  extra=("dask_jobqueue", "hpc"), validate=_validate_jobqueue, batch=True,
                  remote="batch jobs (a shared file system)") for name in JOBQUEUE_KINDS),
    ClusterKind("kubernetes", _describe_kubernetes, _start_kubernetes,
                extra=("dask_kubernetes", "kubernetes"), validate=_validate_kubernetes,
                batch=True, remote="pods (mount them, e.g. from a Secret)", fields=(
        _field("adapt", _Adapt(("minimum", "maximum")),
               "mapping\n    Adaptive bounds: minimum, maximum."),)),
):
    register_cluster_kind(_kind)

#: The built-in kinds (:func:`all_cluster_kinds` has those registered since too).
KINDS = tuple(_KINDS)
#: kind -> (module it needs, the dmlfe extra that installs it), of the built-in kinds.
EXTRAS = {k.name: k.extra for k in _KINDS.values() if k.extra}
