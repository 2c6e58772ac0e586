"""Fits do not depend on the cluster: chunking, worker count or a worker dying mid-pass.

Real ``distributed.LocalCluster``s of worker processes (one thread each). The same
fit (MVMD and CCA, n_components=3, on a few hundred sparse documents handed over as a
dask array of CSR row blocks) with two chunk sizes on 1, 2 and 4 workers gives the
in-memory fit's eigenvalues to 1e-10 relative and, the components being sign-fixed,
the same components and embeddings. A worker process killed while it holds a block of
the statistics pass is restarted by its nanny, dask recomputes the lost tasks, and
the fit's eigenvalues are identical to a clean fit's.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import labels_dask, sparse_dask
from test_estimators import sparse_data

from dmlfe.estimators import CCA, MVMD

N_COMPONENTS = 3
CHUNK_ROWS = (37, 128)
WORKERS = (1, 2, 4)
METHODS = {"mvmd": lambda **kw: MVMD(n_components=N_COMPONENTS, **kw),
           "cca": lambda **kw: CCA(n_components=N_COMPONENTS, **kw)}


@pytest.fixture(autouse=True)
def _quiet_distributed(caplog):
    """The scheduler and the killed worker's nanny log warnings; they are expected."""
    caplog.set_level(logging.CRITICAL, logger="distributed")
    yield


def local_cluster(n_workers: int):
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                           memory_limit="2GiB", dashboard_address=":0")
    return cluster, Client(cluster, set_as_default=False)


def rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| relative to the largest |b|."""
    return float(np.abs(a - b).max() / np.abs(b).max())


def sign_aligned(Z: np.ndarray, Z_ref: np.ndarray) -> np.ndarray:
    """Z with each column's sign flipped to agree with Z_ref's."""
    s = np.sign(np.sum(Z * Z_ref, axis=0))
    s[s == 0] = 1.0
    return Z * s


def fits_across_clusters(X: sp.csr_matrix, Y: np.ndarray) -> list[dict]:
    """Every method x chunk size x worker count, fitted and projected on a cluster; one
    LocalCluster per worker count, closed after its fits."""
    out = []
    for n_workers in WORKERS:
        cluster, client = local_cluster(n_workers)
        try:
            assert len(client.scheduler_info()["workers"]) == n_workers
            for rows in CHUNK_ROWS:
                Xd, Yd = sparse_dask(X, rows), labels_dask(Y, rows)
                for name, make in METHODS.items():
                    est = make(client=client).fit(Xd, Yd)
                    Z = client.compute(est.transform(Xd)).result()
                    out.append({"method": name, "rows": rows, "workers": n_workers,
                                "est": est, "Z": np.asarray(Z)})
        finally:
            client.close()
            cluster.close()
    return out


def test_fits_agree_across_chunkings_and_worker_counts():
    _, X, Y = sparse_data(n=300, D=40, q=5, seed=3)
    refs = {name: make().fit(X, Y) for name, make in METHODS.items()}  # in memory
    runs = fits_across_clusters(X, Y)
    assert len(runs) == len(METHODS) * len(CHUNK_ROWS) * len(WORKERS)
    for run in runs:
        ref, est = refs[run["method"]], run["est"]
        assert est.n_components_ == ref.n_components_ == N_COMPONENTS
        assert est.eigenvalues_.shape == ref.eigenvalues_.shape
        assert rel_diff(est.eigenvalues_, ref.eigenvalues_) <= 1e-10, run
        # sign-fixed components: equal entry by entry, not only up to sign
        assert rel_diff(est.components_, ref.components_) <= 1e-7, run
        np.testing.assert_allclose(est.mean_, ref.mean_, rtol=1e-12, atol=1e-12)
        Z_ref = ref.transform(X)
        assert run["Z"].shape == Z_ref.shape
        assert rel_diff(sign_aligned(run["Z"], Z_ref), Z_ref) <= 1e-8, run
        assert rel_diff(run["Z"], Z_ref) <= 1e-8, run


# --------------------------------------------------------------------------- a worker dies
def _gated_block(X: sp.csr_matrix, index: int, gate: int, flags: str) -> sp.csr_matrix:
    """A CSR row block. Each call is logged (``flags/calls``); block ``gate`` records its
    worker's pid (``flags/started``) and waits for the test's go-ahead (``flags/go``), so
    that the kill lands while the pass is running, with other blocks done before it."""
    flag = Path(flags)
    with open(flag / "calls", "a") as f:
        f.write(f"{index}\n")
    if index == gate:
        with open(flag / "started", "a") as f:
            f.write(f"{os.getpid()}\n")
        deadline = time.monotonic() + 60.0
        while not (flag / "go").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("the test never let the gated block go")
            time.sleep(0.02)
    return sp.csr_matrix(X)


def gated_dask(X: sp.csr_matrix, rows: int, gate: int, flags: Path) -> da.Array:
    """sparse_dask whose block ``gate`` waits for ``flags / 'go'``."""
    blocks = [
        da.from_delayed(dask.delayed(_gated_block)(X[s:s + rows], i, gate, str(flags)),
                        shape=X[s:s + rows].shape, dtype=np.float64,
                        meta=sp.csr_matrix((0, X.shape[1])))
        for i, s in enumerate(range(0, X.shape[0], rows))
    ]
    return da.concatenate(blocks, axis=0)


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_worker_killed_mid_pass_gives_the_same_fit(tmp_path):
    _, X, Y = sparse_data(n=400, D=40, q=5, seed=5)
    rows = 40
    n_blocks = X.shape[0] // rows
    cluster, client = local_cluster(2)
    try:
        Yd = labels_dask(Y, rows)
        clean = MVMD(n_components=N_COMPONENTS, client=client).fit(sparse_dask(X, rows), Yd)
        pids = client.run(os.getpid)  # worker address -> pid
        assert len(pids) == 2

        result: dict = {}

        def fit() -> None:
            try:
                result["est"] = MVMD(n_components=N_COMPONENTS, client=client).fit(
                    gated_dask(X, rows, n_blocks // 2, tmp_path), Yd)
            except BaseException as exc:  # reported by the assertion below
                result["error"] = exc

        thread = threading.Thread(target=fit, daemon=True)
        thread.start()
        started = tmp_path / "started"
        _wait_for(started.exists, 60, "the first block to start")
        victim = int(started.read_text().split()[0])
        (address,) = [a for a, pid in pids.items() if pid == victim]
        os.kill(victim, signal.SIGKILL)  # a worker process of this test's own cluster
        _wait_for(lambda: address not in client.scheduler_info()["workers"], 60,
                  "the scheduler to lose the killed worker")
        (tmp_path / "go").touch()
        thread.join(120)
        assert not thread.is_alive(), "the fit did not finish after the worker was killed"
        assert "error" not in result, result.get("error")
        runs = started.read_text().split()
        assert len(runs) >= 2 and runs[0] == str(victim) and runs[-1] != str(victim)
        calls = (tmp_path / "calls").read_text().split()
        assert sorted(set(calls)) == sorted(str(i) for i in range(n_blocks))
        assert len(calls) > n_blocks  # the killed worker's blocks were computed again
        est = result["est"]
        np.testing.assert_array_equal(est.eigenvalues_, clean.eigenvalues_)
        np.testing.assert_array_equal(est.components_, clean.components_)
        np.testing.assert_array_equal(est.mean_, clean.mean_)
        _wait_for(lambda: len(client.scheduler_info()["workers"]) == 2, 60,
                  "the nanny to restart the worker")
        assert victim not in client.run(os.getpid).values()
    finally:
        client.close()
        cluster.close()
