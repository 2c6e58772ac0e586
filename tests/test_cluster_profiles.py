"""The shipped cluster profiles and ``dmlfe cluster check``: each profile validates, and
what it would start (job script, Kubernetes resource, SSH commands) carries the values
of its YAML file -- read here with yaml, not through dmlfe -- without anything being
started, submitted or contacted."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from dask.utils import parse_bytes

import dmlfe.cluster.profiles as cp
from dmlfe.cli import main
from dmlfe.cluster import get_client, read_profile
from dmlfe.errors import ClusterProfileError, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = sorted(p.stem for p in (ROOT / "cluster_configs").glob("*.yaml"))


def _yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / "cluster_configs" / f"{name}.yaml").read_text())


@pytest.fixture
def nothing_starts(monkeypatch):
    """Fail the test if anything is launched: a subprocess (sbatch, qsub, ssh, kubectl),
    an SSH connection, a scheduler or a jobqueue cluster, or if anything connects
    anywhere (a Kubernetes API server, an SSH host: every TCP client connects through
    socket.socket, asyncio's and aiohttp's included)."""
    def refuse(*args, **kwargs):
        raise AssertionError("cluster check must not launch anything")

    import distributed

    monkeypatch.setattr(distributed.Scheduler, "__init__", refuse)
    monkeypatch.setattr(distributed.LocalCluster, "__init__", refuse)
    try:
        import asyncssh
        monkeypatch.setattr(asyncssh, "connect", refuse)
    except ImportError:
        pass
    try:
        import dask_jobqueue.core
        monkeypatch.setattr(dask_jobqueue.core.JobQueueCluster, "__init__", refuse)
    except ImportError:
        pass
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    # last: importing the libraries above may itself run ldconfig
    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_shipped_profiles_are_the_five_kinds():
    assert SHIPPED == ["kubernetes", "local", "pbs", "slurm", "ssh"]


@pytest.mark.parametrize("name", SHIPPED)
def test_each_shipped_profile_validates(name):
    raw = _yaml(name)
    profile = read_profile(name)
    assert profile.kind == raw["dmlfe"]["cluster"]["kind"] == name
    assert profile.path == ROOT / "cluster_configs" / f"{name}.yaml"
    # every setting outside dmlfe.* becomes a dotted dask key with the file's value
    settings = profile.dask_config()
    assert settings["distributed.worker.memory.target"] == \
        raw["distributed"]["worker"]["memory"]["target"]
    assert not any(k.startswith("dmlfe") for k in settings)


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_job_script_carries_the_profile_values(kind, nothing_starts, capsys):
    pytest.importorskip("dask_jobqueue")
    jq = _yaml(kind)["jobqueue"][kind]
    script = cp.job_script(read_profile(kind))
    memory = parse_bytes(jq["memory"])
    if kind == "slurm":
        assert f"#SBATCH -p {jq['queue']}\n" in script
        assert f"#SBATCH --cpus-per-task={jq['cores']}\n" in script
        assert f"#SBATCH -t {jq['walltime']}\n" in script
        mem = re.search(r"#SBATCH --mem=(\d+)G\n", script)  # SLURM's G is 2**30 bytes
    else:
        assert f"#PBS -q {jq['queue']}\n" in script
        assert f"ncpus={jq['cores']}:" in script
        assert f"#PBS -l walltime={jq['walltime']}\n" in script
        mem = re.search(r":mem=(\d+)GB\n", script)  # PBS's GB is 2**30 bytes
    assert mem and int(mem.group(1)) * 2**30 == memory
    # the worker command: processes per job, the cores and memory shared among them
    worker = next(line for line in script.splitlines() if "distributed.cli.dask_worker" in line)
    assert cp.SCHEDULER_PLACEHOLDER in worker
    assert f"--nworkers {jq['processes']} " in worker
    assert f"--nthreads {jq['cores'] // jq['processes']} " in worker
    per_process = re.search(r"--memory-limit (\S+)", worker).group(1)
    assert parse_bytes(per_process) == pytest.approx(memory / jq["processes"], rel=1e-3)

    assert main(["cluster", "check", kind]) == 0
    out = capsys.readouterr().out
    assert script.rstrip("\n") in out
    assert f"jobs: {_yaml(kind)['dmlfe']['cluster']['jobs']} job(s)" in out
    assert "a valid" in out.splitlines()[-1]


def test_nothing_starts_refuses_connections(nothing_starts):
    # the guard the Kubernetes and SSH tests rely on: a blocking and an asyncio client
    # (kr8s, the kubernetes clients, asyncssh) are refused before any packet is sent
    import asyncio

    with pytest.raises(AssertionError, match="must not launch"):
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    with pytest.raises(AssertionError, match="must not launch"):
        asyncio.run(asyncio.open_connection("127.0.0.1", 9))


def test_kubernetes_spec_arguments_without_the_library():
    k = _yaml("kubernetes")["kubernetes"]
    args = cp.kubernetes_spec_args(read_profile("kubernetes"))
    assert args["image"] == k["image"]
    assert args["n_workers"] == k["count"]["start"]
    assert args["resources"] == k["resources"]
    assert args["name"].startswith("dmlfe-") and "{" not in args["name"]


def test_kubernetes_spec(nothing_starts, capsys):
    pytest.importorskip("dask_kubernetes")
    k = _yaml("kubernetes")["kubernetes"]
    spec = cp.kubernetes_spec(read_profile("kubernetes"))
    assert spec["kind"] == "DaskCluster"
    assert spec["spec"]["worker"]["replicas"] == k["count"]["start"]
    for part in ("worker", "scheduler"):
        (container,) = spec["spec"][part]["spec"]["containers"]
        assert container["image"] == k["image"]
        assert container["resources"] == k["resources"]
    assert main(["cluster", "check", "kubernetes"]) == 0
    printed = capsys.readouterr().out
    assert f"replicas: {k['count']['start']}" in printed and "&id" not in printed


def test_ssh_check_lists_hosts_and_commands(nothing_starts, capsys):
    pytest.importorskip("asyncssh")
    c = _yaml("ssh")["dmlfe"]["cluster"]
    assert main(["cluster", "check", "ssh"]) == 0
    out = capsys.readouterr().out
    assert f"scheduler host: {c['hosts'][0]}\n" in out
    assert f"worker hosts: {', '.join(c['hosts'][1:])}\n" in out
    commands = [line.strip() for line in out.splitlines() if "distributed.cli.dask_spec" in line]
    assert [cmd.split(":")[0] for cmd in commands] == c["hosts"]
    w = c["worker_options"]
    assert all(f'"nthreads": {w["nthreads"]}' in cmd and f'"memory_limit": "{w["memory_limit"]}"'
               in cmd and f'"{w["n_workers"] - 1}": ' in cmd for cmd in commands[1:])
    assert f'"port": {c["scheduler_options"]["port"]}' in commands[0]


def test_local_check_shows_the_cluster_options(capsys):
    c = _yaml("local")["dmlfe"]["cluster"]
    assert main(["cluster", "check", "local"]) == 0
    out = capsys.readouterr().out
    assert f'"n_workers": {c["n_workers"]}' in out
    assert f'"memory_limit": "{c["memory_limit"]}"' in out


SLURM = {"dmlfe": {"cluster": {"kind": "slurm", "jobs": 1}},
         "jobqueue": {"slurm": {"cores": 4, "memory": "8GiB", "walltime": "01:00:00"}}}


def _with(base: dict, path: str, value) -> dict:
    import copy

    out = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    node = out
    for p in parents:
        node = node.setdefault(p, {})
    if value is _DROP:
        del node[leaf]
    else:
        node[leaf] = value
    return out


_DROP = object()


@pytest.mark.parametrize(("cfg", "field", "message"), [
    (_with(SLURM, "dmlfe.cluster.kind", "yarn"), "dmlfe.cluster.kind", "must be one of local"),
    (_with(SLURM, "jobqueue.slurm.walltime", 3600), "jobqueue.slurm.walltime", "write it quoted"),
    (_with(SLURM, "jobqueue.slurm.cores", _DROP), "jobqueue.slurm.cores", "is missing"),
    (_with(SLURM, "jobqueue.slurm.memory", "lots"), "jobqueue.slurm.memory",
     "amount of memory"),
    (_with(SLURM, "dmlfe.cluster.adapt", {"maximum_jobs": 3}), "dmlfe.cluster.adapt",
     "exclude each other"),
    (_with(SLURM, "dmlfe.cluster.jobs", -1), "dmlfe.cluster.jobs", "non-negative integer"),
    (_with(SLURM, "jobqueue", _DROP), "jobqueue.slurm", "is missing"),
    ({"dmlfe": {"cluster": {"kind": "local", "n_worker": 2}}}, "dmlfe.cluster.n_worker",
     "is not a setting of this kind; known: n_workers"),
    ({"dmlfe": {"cluster": {"kind": "scheduler"}}}, "dmlfe.cluster.address", "is missing"),
    ({"dmlfe": {"cluster": {"kind": "scheduler", "address": "tcp://a b"}}},
     "dmlfe.cluster.address", "scheduler address"),
    ({"dmlfe": {"cluster": {"kind": "ssh", "hosts": ["only-one"]}}}, "dmlfe.cluster.hosts",
     "at least two hosts"),
    ({"dmlfe": {"cluster": {"kind": "kubernetes"}}, "kubernetes": {"count": {"start": -2}}},
     "kubernetes.count.start", "non-negative integer"),
    ({"dmlfe": {"cluster": {"kind": "kubernetes"}}, "kubernetes": {"image": ""}},
     "kubernetes.image", "non-empty string"),
])
def test_bad_profiles_name_file_and_field(tmp_path, capsys, cfg, field, message):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(cfg))
    with pytest.raises(ClusterProfileError) as info:
        read_profile(str(path))
    assert str(info.value).startswith(f"cluster profile {path}: {field} ")
    assert message in str(info.value)
    assert main(["cluster", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{path}: {field} " in err and "Traceback" not in err
    # the same refusal where a cluster would be started, before anything starts
    with pytest.raises(ClusterProfileError, match=re.escape(field)):
        with get_client(cluster=str(path)):
            pass


def test_misspelt_library_setting_is_refused(tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(_with(SLURM, "jobqueue.slurm.wall-time", "01:00:00")))
    read_profile(str(path))  # dmlfe's own checks pass: the key is the library's business
    assert main(["cluster", "check", str(path)]) == 2
    err = capsys.readouterr().err
    assert "jobqueue.slurm.wall-time is not a dask-jobqueue slurm setting" in err
    assert "walltime" in err


def test_missing_library_says_which_extra(monkeypatch, tmp_path, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("dask_jobqueue", "asyncssh",
                                                          "dask_kubernetes") else real(name, *a))
    for kind, extra in (("slurm", "hpc"), ("pbs", "hpc"), ("ssh", "ssh"),
                        ("kubernetes", "kubernetes")):
        with pytest.raises(MissingExtraError, match=re.escape(f"pip install 'dmlfe[{extra}]'")):
            cp.check_profile(read_profile(kind))
        with pytest.raises(MissingExtraError, match=f"kind '{kind}' needs"):
            with get_client(cluster=kind):
                pass
        assert main(["cluster", "check", kind]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"dmlfe[{extra}]" in err


def test_profile_settings_keep_the_rest_of_dasks_configuration(tmp_path):
    """A profile that sets one distributed key leaves the others (a nested mapping given
    to dask.config.set would replace the whole section)."""
    import dask

    before = dask.config.get("distributed.comm.timeouts.connect")
    prof = read_profile("local")
    with dask.config.set(prof.dask_config()):
        assert dask.config.get("distributed.worker.memory.target") == 0.6
        assert dask.config.get("distributed.comm.timeouts.connect") == before
