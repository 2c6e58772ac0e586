"""A real multi-process dask cluster, started as a user starts one: ``dask scheduler``
and two ``dask worker`` processes on 127.0.0.1. Ingest, fit and transform run through
the command line with ``--scheduler`` and must give what the same commands give on a
LocalCluster. And an address where no scheduler runs gives one line, in time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dmlfe.cli import main
from dmlfe.projection import read_embeddings
from dmlfe.store import open_store

DASK = Path(sys.executable).parent / "dask"


@pytest.fixture(scope="module")
def process_scheduler(tmp_path_factory):
    """The address of a scheduler process with two worker processes (one thread each)."""
    root = tmp_path_factory.mktemp("procs")
    sched_file = root / "scheduler.json"
    log = open(root / "cluster.log", "w")  # noqa: SIM115 - closed in the finally
    procs: list[subprocess.Popen] = []
    try:
        # port 0: the scheduler picks a free port and writes its address to the file
        procs.append(subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
             "--scheduler-file", str(sched_file)], stdout=log, stderr=log, cwd=root))
        deadline = time.monotonic() + 60
        while not sched_file.exists() or not sched_file.read_text().strip():
            assert procs[0].poll() is None, (root / "cluster.log").read_text()
            assert time.monotonic() < deadline, "the scheduler did not start"
            time.sleep(0.2)
        address = json.loads(sched_file.read_text())["address"]
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(DASK), "worker", address, "--name", f"w{i}", "--nthreads", "1",
                 "--memory-limit", "2GiB", "--no-dashboard", "--host", "127.0.0.1",
                 # no nanny: two worker processes, not four (the machine running the
                 # tests may have two cores); terminate() then stops each at once
                 "--no-nanny",
                 "--local-directory", str(root / f"w{i}")], stdout=log, stderr=log, cwd=root))
        from distributed import Client

        with Client(address, timeout=30) as client:
            client.wait_for_workers(2, timeout=60)
            assert len(client.scheduler_info()["workers"]) == 2
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()


def _pipeline(root: Path, address: str) -> dict[str, Path]:
    """ingest -> fit -> transform through the CLI on the scheduler at ``address``."""
    store, model, emb = root / "s.zarr", root / "model", root / "emb.zarr"
    where = ["--scheduler", address, "--quiet"]
    assert main(["ingest", "--format", "synthetic", "--out", str(store), "--n-docs", "300",
                 "--vocab-size", "200", "--n-labels", "4", "--seed", "7", "--chunk-rows",
                 "64", *where]) == 0
    assert main(["fit", str(store), "--method", "mvmd", "--dim", "4", "--split", "train",
                 "--out", str(model), *where]) == 0
    assert main(["transform", str(model), str(store), "--out", str(emb), *where]) == 0
    return {"store": store, "model": model, "emb": emb}


def test_cli_on_a_scheduler_and_two_worker_processes(process_scheduler, cluster_client,
                                                      tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "l").mkdir()
    on_procs = _pipeline(tmp_path / "p", process_scheduler)
    on_local = _pipeline(tmp_path / "l", cluster_client.scheduler.address)  # a LocalCluster

    a, b = open_store(on_procs["store"]), open_store(on_local["store"])
    assert a.X.shape == b.X.shape and a.X.numblocks[0] == 5  # several chunks
    assert abs(a.X.compute() - b.X.compute()).max() == 0
    np.testing.assert_array_equal(a.Y.compute().toarray(), b.Y.compute().toarray())
    assert a.feature_names == b.feature_names

    from dmlfe.model_io import load_model

    ma, mb = load_model(on_procs["model"]), load_model(on_local["model"])
    np.testing.assert_allclose(ma.eigenvalues_, mb.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(ma.components_, mb.components_, rtol=0, atol=1e-10)
    za = read_embeddings(on_procs["emb"])
    zb = read_embeddings(on_local["emb"])
    assert za.shape == (300, 4)
    np.testing.assert_allclose(za, zb, rtol=0, atol=1e-10)
    # and both are the projection of the store's rows, computed here in numpy
    Xd = a.X.compute().toarray()
    np.testing.assert_allclose(za, (Xd - ma.mean_) @ ma.components_.T, rtol=0, atol=1e-10)


def test_unreachable_scheduler_is_one_line_within_the_timeout(tmp_path, capsys):
    # the connect timeout asked for is the wait (the connection and dask's handshake)
    out = tmp_path / "never.zarr"
    start = time.monotonic()
    rc = main(["ingest", "--format", "synthetic", "--out", str(out), "--n-docs", "20",
               "--scheduler", "tcp://127.0.0.1:1", "--connect-timeout", "2"])
    assert 1.5 < time.monotonic() - start < 6
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("dmlfe ingest: error: no dask scheduler answered at "
                          "tcp://127.0.0.1:1 (--scheduler) within 2 s")
    assert "--connect-timeout" in err
    assert not out.exists()

    profile = tmp_path / "dead.yaml"
    profile.write_text("dmlfe:\n  cluster:\n    kind: scheduler\n    address: "
                       "tcp://127.0.0.1:1\n")
    start = time.monotonic()
    rc = main(["ingest", "--format", "synthetic", "--out", str(out), "--n-docs", "20",
               "--cluster", str(profile), "--connect-timeout", "2"])
    assert 1.5 < time.monotonic() - start < 6
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert f"({profile}: dmlfe.cluster.address) within 2 s" in err


SBATCH = """#!/bin/bash
# A stand-in for SLURM's sbatch: runs the job script in its own process group now.
jobs={jobs}
n=$(ls "$jobs" | wc -l)
cp "$1" "$jobs/job-$n.sh"
setsid bash "$jobs/job-$n.sh" > "$jobs/job-$n.log" 2>&1 < /dev/null &
echo "$!" > "$jobs/job-$n.pid"
echo "Submitted batch job $!"
"""
SCANCEL = """#!/bin/bash
kill -TERM -- "-$1" 2> /dev/null || true
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in state  # a zombie has exited


def test_slurm_profile_runs_its_job_script(tmp_path, monkeypatch):
    """kind slurm end to end, with stand-ins for sbatch and scancel on PATH: the
    profile's settings reach dask-jobqueue, the submitted script is the one
    ``dmlfe cluster check`` prints, its worker joins, and closing cancels the job."""
    pytest.importorskip("dask_jobqueue")
    import os

    import yaml

    from dmlfe.cluster import get_client, read_profile
    from dmlfe.cluster.profiles import SCHEDULER_PLACEHOLDER, job_script

    jobs, fake = tmp_path / "jobs", tmp_path / "bin"
    jobs.mkdir()
    fake.mkdir()
    for name, text in (("sbatch", SBATCH.format(jobs=jobs)), ("scancel", SCANCEL)):
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    profile = tmp_path / "here.yaml"
    profile.write_text(yaml.safe_dump({
        "dmlfe": {"cluster": {"kind": "slurm", "jobs": 1}},
        "jobqueue": {"slurm": {
            "queue": "debug", "cores": 1, "processes": 1, "memory": "1GiB",
            "walltime": "00:10:00", "local-directory": str(tmp_path / "scratch"),
            "scheduler-options": {"host": "127.0.0.1", "dashboard_address": ":0"}}}}))
    pids: list[int] = []
    try:
        with get_client(cluster=str(profile)) as client:
            client.wait_for_workers(1, timeout=120)
            assert client.submit(sum, [1, 2, 3]).result() == 6
            (submitted,) = jobs.glob("job-*.sh")
            pids = [int(p.read_text()) for p in jobs.glob("job-*.pid")]
            expected = job_script(read_profile(str(profile)))
            address = client.scheduler.address
            # the same script but for the scheduler's address and the worker's name
            text = submitted.read_text()
            assert "#SBATCH -p debug\n" in text and "#SBATCH -t 00:10:00\n" in text
            assert re.sub(r"--name \S+", "", text.replace(address, SCHEDULER_PLACEHOLDER)) \
                == re.sub(r"--name \S+", "", expected)
        deadline = time.monotonic() + 60
        while not all(_gone(p) for p in pids):
            assert time.monotonic() < deadline, "the job outlived its cluster"
            time.sleep(0.5)
    finally:
        for p in pids:
            if not _gone(p):
                os.killpg(p, 15)
