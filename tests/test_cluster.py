"""dmlfe.cluster: profiles, LocalCluster defaults, connecting to a running scheduler."""

from __future__ import annotations

import pytest

from dmlfe.cluster import find_profile, get_client, load_profile


def test_shipped_local_profile_is_valid_dask_config():
    cfg = load_profile("local")
    spec = cfg["dmlfe"]["cluster"]
    assert spec["kind"] == "local"
    assert spec["n_workers"] >= 1
    assert "distributed" in cfg  # the rest is plain dask configuration


def test_profile_builds_the_cluster_it_describes(tmp_path):
    prof = tmp_path / "two.yaml"
    prof.write_text(
        "dmlfe:\n  cluster:\n    kind: local\n    n_workers: 2\n    threads_per_worker: 1\n"
        "    memory_limit: 1GiB\n    processes: false\n"
        "array:\n  chunk-size: 7MiB\n"
    )
    import dask

    with get_client(cluster=str(prof)) as client:
        info = client.scheduler_info()
        assert len(info["workers"]) == 2
        assert {w["nthreads"] for w in info["workers"].values()} == {1}
        assert {w["memory_limit"] for w in info["workers"].values()} == {2**30}
        assert dask.config.get("array.chunk-size") == "7MiB"  # applied while open
    assert dask.config.get("array.chunk-size") != "7MiB"


def test_connect_to_running_scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc:
        with get_client(scheduler=lc.scheduler_address) as client:
            assert client.submit(sum, [1, 2, 3]).result() == 6
        # closing our client does not stop someone else's cluster
        assert lc.status.name == "running"


def test_profile_errors(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="nope"):
        find_profile("nope")
    bad = tmp_path / "bad.yaml"
    bad.write_text("dmlfe:\n  cluster:\n    kind: yarn\n")
    with pytest.raises(ValueError, match="yarn"):
        load_profile(str(bad))
    noaddr = tmp_path / "remote.yaml"
    noaddr.write_text("dmlfe:\n  cluster:\n    kind: scheduler\n")
    monkeypatch.setenv("DMLFE_CLUSTER_CONFIGS", str(tmp_path))
    with pytest.raises(ValueError, match="address"):
        load_profile("remote")  # found through DMLFE_CLUSTER_CONFIGS
    with pytest.raises(ValueError, match="not both"):
        with get_client(scheduler="tcp://127.0.0.1:1", cluster="local"):
            pass


def test_modules_of_worker_tasks_do_not_import_scikit_learn():
    """A fresh worker imports the modules of the tasks it unpickles: scikit-learn costs
    about 1 s there (a store fit on a new LocalCluster paid it before its first block)."""
    import subprocess
    import sys

    modules = ("dmlfe.relation.features", "dmlfe.relation.prototypes", "dmlfe.stats.pass_",
               "dmlfe.stats.gram", "dmlfe.solvers.matrix_free", "dmlfe.store.reader",
               "dmlfe.projection")
    code = (f"import sys; import {', '.join(modules)}; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
