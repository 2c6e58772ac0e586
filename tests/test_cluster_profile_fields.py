"""Every field check of a cluster profile (constraint objects of dmlfe.params since
issue 37) says what is wrong in one line naming the field, in the words it always used."""

from __future__ import annotations

import pytest

from dmlfe.cluster.profiles import parse_profile
from dmlfe.errors import ClusterProfileError

JOBQ = {"cores": 2, "memory": "4GiB"}


def _local(**spec):
    return {"dmlfe": {"cluster": {"kind": "local", **spec}}}


def _kind(kind, extra=None, **spec):
    return {"dmlfe": {"cluster": {"kind": kind, **spec}}, **(extra or {})}


CASES = [
    (_local(n_workers=0), "dmlfe.cluster.n_workers must be a positive integer, got 0"),
    (_local(threads_per_worker=True),
     "dmlfe.cluster.threads_per_worker must be a positive integer, got True"),
    (_local(memory_limit="lots"),
     "dmlfe.cluster.memory_limit must be an amount of memory such as 4GiB, got 'lots'"),
    (_local(memory_limit=0),
     "dmlfe.cluster.memory_limit must be an amount of memory such as 4GiB, got 0"),
    (_local(processes="yes"), "dmlfe.cluster.processes must be true or false, got 'yes'"),
    (_local(host="a b"), "dmlfe.cluster.host must be an IPv4 address or a host name such as "
     "127.0.0.1 or 0.0.0.0, got 'a b'"),
    (_local(dashboard_address=" "),
     "dmlfe.cluster.dashboard_address must be a non-empty string, got ' '"),
    (_local(worker_timeout=-1),
     "dmlfe.cluster.worker_timeout must be a number of seconds (0 or more) or null, got -1"),
    (_local(worker_timeout=float("inf")), "dmlfe.cluster.worker_timeout must be a number of "
     "seconds (0 or more) or null, got inf"),
    (_local(colour=1), "dmlfe.cluster.colour is not a setting of this kind; known: n_workers, "
     "threads_per_worker, memory_limit, processes, host, dashboard_address, worker_timeout"),
    (_kind("cloud"), "dmlfe.cluster.kind must be one of local, scheduler, ssh, slurm, pbs, "
     "kubernetes; got 'cloud'"),
    (_kind("scheduler"), "dmlfe.cluster.address is missing (kind 'scheduler' needs it)"),
    (_kind("scheduler", address="tcp://h:p"), "dmlfe.cluster.address must be a scheduler "
     "address such as tcp://host:8786, got 'tcp://h:p'"),
    (_kind("ssh", hosts=["a"]), "dmlfe.cluster.hosts must list at least two hosts (the first "
     "runs the scheduler, every other one workers; repeat a host to run both there), got "
     "['a']"),
    (_kind("ssh", hosts=["a", "b"], connect_options=[{}, 3]),
     "dmlfe.cluster.connect_options (one per host): must be a mapping, got 3"),
    (_kind("ssh", hosts=["a", "b"], remote_python=""),
     "dmlfe.cluster.remote_python must be a non-empty string, got ''"),
    (_kind("ssh", hosts=["a", "b"], worker_options=[]),
     "dmlfe.cluster.worker_options must be a mapping, got []"),
    (_kind("slurm", {"jobqueue": {"slurm": JOBQ}}, jobs=-1),
     "dmlfe.cluster.jobs must be a non-negative integer, got -1"),
    (_kind("slurm", {"jobqueue": {"slurm": JOBQ}}, adapt={"minimum_jobs": 1, "x": 2}),
     "dmlfe.cluster.adapt must be a mapping of minimum_jobs, maximum_jobs, got "
     "{'minimum_jobs': 1, 'x': 2}"),
    (_kind("slurm", {"jobqueue": {"slurm": JOBQ}}, adapt={"maximum_jobs": -2}),
     "dmlfe.cluster.adapt maximum_jobs must be a non-negative integer, got -2"),
    (_kind("pbs", {"jobqueue": {"pbs": JOBQ}}, adapt={"minimum_jobs": 3, "maximum_jobs": 2}),
     "dmlfe.cluster.adapt minimum_jobs (3) is above maximum_jobs (2)"),
    (_kind("slurm", {"jobqueue": {"slurm": {**JOBQ, "walltime": 5400}}}),
     "jobqueue.slurm.walltime must be a time limit such as \"02:00:00\", got 5400 (write it "
     "quoted: YAML reads an unquoted 1:30:00 as a number of seconds)"),
    (_kind("slurm", {"jobqueue": {"slurm": {**JOBQ, "walltime": "2h"}}}),
     "jobqueue.slurm.walltime must be a time limit such as \"02:00:00\", got '2h'"),
    (_kind("slurm", {"jobqueue": {"slurm": {**JOBQ, "job-extra-directives": "x"}}}),
     "jobqueue.slurm.job-extra-directives must be a list of strings, got 'x'"),
    (_kind("slurm", {"jobqueue": {"slurm": {**JOBQ, "processes": 0}}}),
     "jobqueue.slurm.processes must be a positive integer, got 0"),
    (_kind("kubernetes", {"kubernetes": {"image": "", "count": {}}}),
     "kubernetes.image must be a non-empty string, got ''"),
    (_kind("kubernetes", {"kubernetes": {"count": 3}}),
     "kubernetes.count must be a mapping, got 3"),
    (_kind("kubernetes", {"kubernetes": {"count": {"start": -1}}}),
     "kubernetes.count.start must be a non-negative integer, got -1"),
]


@pytest.mark.parametrize(("cfg", "message"), CASES)
def test_a_bad_field_is_named_with_what_is_wrong(cfg, message):
    with pytest.raises(ClusterProfileError) as info:
        parse_profile(cfg, None)
    assert str(info.value) == f"cluster profile: {message}"


@pytest.mark.parametrize("cfg", [
    _local(n_workers=2, threads_per_worker=1, memory_limit="2GiB", processes=False,
           host="0.0.0.0", dashboard_address=":0", worker_timeout=None),
    _local(memory_limit="auto", worker_timeout=0),
    _kind("ssh", hosts=["a", "a"], connect_options=[{}, {"port": 22}],
          remote_python=["/a/python", None]),
    _kind("slurm", {"jobqueue": {"slurm": {**JOBQ, "walltime": "1-02:00:00"}}},
          adapt={"minimum_jobs": 0, "maximum_jobs": 4}),
    _kind("kubernetes", {"kubernetes": {"count": {"start": 0}}}, adapt={"maximum": 3}),
])
def test_good_fields_pass(cfg):
    assert parse_profile(cfg, None).kind == cfg["dmlfe"]["cluster"]["kind"]
