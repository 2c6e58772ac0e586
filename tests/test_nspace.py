"""The large-n route: X in tiles on the workers, the template solved in the documents'
space (dmlfe.shards, dmlfe.solvers.nspace, dmlfe.stats.tiled), against dense references,
in this process and on a real LocalCluster."""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import labels_dask, sparse_dask

import dmlfe
from dmlfe.shards import ShardLostError, Slots, tile_blocks, tile_matrix
from dmlfe.shards import tiles as tiles_module
from dmlfe.solvers.nspace import nspace_eigh
from dmlfe.stats.pass_ import compute_stats
from dmlfe.stats.tiled import tiled_stats

METHODS = {  # xx_coef, centred, label factor (q -> K)
    "pca": (1.0, True, None),
    "lsi": (1.0, False, None),
    "mvmd": (0.5, True, lambda q: 2 * np.sqrt(0.5) * np.eye(q)),
}


def corpus(n: int = 300, D: int = 900, q: int = 4, seed: int = 0):
    """Hashed-text-like X: wider than tall, a third of its columns empty, Zipf scales."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.02, format="csr", random_state=seed)
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(1.0 + rng.permutation(D))))
    keep = np.ones(D)
    keep[rng.choice(D, D // 3, replace=False)] = 0.0
    X = sp.csr_matrix(X[:, rng.permutation(D)] @ sp.diags(keep))
    X.eliminate_zeros()
    Y = (rng.random((n, q)) < 0.3).astype(np.uint8)
    return sp.csr_matrix(X), Y


def dense_reference(X, Y, method, k):
    """Leading eigenpairs of A = c Xs^T Xs + F F^T formed densely (D x D)."""
    c, centred, factor = METHODS[method]
    Xd = X.toarray()
    Xs = Xd - Xd.mean(axis=0) if centred else Xd
    A = c * Xs.T @ Xs
    if factor is not None:
        F = Xs.T @ (Y - Y.mean(axis=0)) @ factor(Y.shape[1])
        A += F @ F.T
    w, V = np.linalg.eigh(A)
    return w[::-1][:k], V[:, ::-1][:, :k], A


def solve(X, Y, method, k, slots, **kw):
    c, centred, factor = METHODS[method]
    tiled = tile_matrix(X, Y, slots)
    try:
        return nspace_eigh(tiled, k, xx_coef=c, centred=centred,
                           label_factor=None if factor is None else factor(Y.shape[1]),
                           label_mean=Y.mean(axis=0), **kw)
    finally:
        tiled.release()


def check(res, X, Y, method, k, tol):
    w, V, A = dense_reference(X, Y, method, k)
    np.testing.assert_allclose(res.eigenvalues, w, rtol=1e-9)
    P = np.zeros((X.shape[1], k))
    P[res.columns] = res.components
    np.testing.assert_allclose(P.T @ P, np.eye(k), atol=1e-9)
    own = np.linalg.norm(A @ P - P * res.eigenvalues, axis=0) / res.eigenvalues
    assert own.max() <= tol
    # the sign rule: each column's largest |entry| is positive
    top = P[np.argmax(np.abs(P), axis=0), np.arange(k)]
    assert np.all(top > 0)
    # the same subspace as the dense solution, column by column up to sign
    np.testing.assert_allclose(np.abs(np.sum(P * V, axis=0)), 1.0, atol=1e-6)
    return P


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("n_local", [1, 3])
def test_in_this_process(method, n_local, monkeypatch):
    monkeypatch.setattr(tiles_module, "TILE_ROWS", 64)  # several parts per tile
    X, Y = corpus()
    res = solve(X, Y, method, 12, Slots(None, n_local=n_local), tol=1e-9)
    assert res.converged and res.info["slots"] == n_local
    check(res, X, Y, method, 12, 1e-8)
    # the columns are those some document uses, sorted
    np.testing.assert_array_equal(res.columns, np.flatnonzero(np.diff(X.tocsc().indptr)))


@pytest.mark.parametrize("fused_cond", [0.0, np.inf])
@pytest.mark.parametrize("method", ["pca", "mvmd"])
def test_the_second_round_either_way(method, fused_cond, monkeypatch):
    # projections of Q made by a product with Q (cond 0: always), or from the first
    # sweep's S R^+ (cond inf: always, even for MVMD's badly scaled early blocks)
    from dmlfe.solvers import nspace

    monkeypatch.setattr(nspace, "FUSED_COND", fused_cond)
    monkeypatch.setattr(nspace, "FUSED_ROWS", 50)  # several slabs a range
    X, Y = corpus(seed=3)
    res = solve(X, Y, method, 12, Slots(None, n_local=2), tol=1e-9)
    counts = res.info["second_rounds"]
    assert counts["product" if fused_cond else "fused"] == 0
    assert res.converged
    check(res, X, Y, method, 12, 1e-8)


@pytest.mark.parametrize("method", ["pca", "mvmd"])
def test_on_the_cluster_equals_in_this_process(method, cluster_client):
    X, Y = corpus(seed=1)
    here = solve(X, Y, method, 10, Slots(None, n_local=1), tol=1e-10)
    there = solve(X, Y, method, 10, Slots(cluster_client), tol=1e-10)
    assert there.info["slots"] == 2
    check(there, X, Y, method, 10, 1e-9)
    np.testing.assert_allclose(there.eigenvalues, here.eigenvalues, rtol=1e-12)
    np.testing.assert_allclose(there.components, here.components, atol=1e-9)
    # every slot did its share of the passes and said how long it took
    assert all(t["pass_xt"] > 0 and t["pass_x"] > 0 for t in there.info["slot_seconds"])


def test_a_head_of_label_directions_keeps_the_tail_accurate():
    # labels weighted far above the scatter (MVMD's beta near 1: K's head is 10^5-10^7 x
    # its tail, as on real text): every pair still meets tol relative to itself (the
    # dense reference itself is accurate to about eps x head / tail)
    X, Y = corpus(seed=2)
    tiled = tile_matrix(X, Y, Slots(None, n_local=2))
    K = 30.0 * np.eye(Y.shape[1])
    res = nspace_eigh(tiled, 12, xx_coef=1e-2, centred=True, label_factor=K,
                      label_mean=Y.mean(axis=0), tol=1e-8)
    Xd = X.toarray()
    Xs = Xd - Xd.mean(axis=0)
    F = Xs.T @ (Y - Y.mean(axis=0)) @ K
    A = 1e-2 * Xs.T @ Xs + F @ F.T
    w = np.linalg.eigvalsh(A)[::-1][:12]
    assert w[0] / w[-1] > 1e6
    np.testing.assert_allclose(res.eigenvalues, w, rtol=1e-7)
    P = np.zeros((X.shape[1], 12))
    P[res.columns] = res.components
    own = np.linalg.norm(A @ P - P * res.eigenvalues, axis=0) / res.eigenvalues
    assert own.max() < 1e-6


def test_tiles_hold_x_exactly(monkeypatch, cluster_client):
    monkeypatch.setattr(tiles_module, "TILE_ROWS", 7)
    X, Y = corpus(n=101, seed=3)
    for slots, source in ((Slots(None, n_local=3), X),
                          (Slots(cluster_client), sparse_dask(X, 13))):
        tiled = tile_blocks(source, labels_dask(Y, 13) if slots.distributed else Y, slots)
        got = np.zeros(X.shape)
        for s, handle in enumerate(tiled.slices):
            sl = slots.gather([handle])[0]
            for r, tile in enumerate(sl.tiles):
                for part, (a, b) in zip(tile.parts, tile.bounds, strict=True):
                    got[tiled.bounds[r] + a:tiled.bounds[r] + b][:, sl.columns] = \
                        part.T.toarray()
            assert np.all(sl.columns % slots.n == s)
        np.testing.assert_array_equal(got, X.toarray())
        labels = np.vstack(slots.gather(tiled.labels))
        np.testing.assert_array_equal(labels, Y)
        assert tiled.nnz == X.nnz
        # the statistics from the tiles are the statistics pass's
        mine, ref = tiled_stats(tiled), compute_stats(X, Y)
        for name in ("sum_x", "sumsq_x", "xty", "yty", "sum_y"):
            np.testing.assert_allclose(getattr(mine, name), getattr(ref, name), rtol=1e-12,
                                       atol=1e-13)
        assert mine.n == ref.n
        tiled.release()


def _store(tmp_path: Path, n: int, D: int, seed: int) -> Path:
    from helpers import write_store

    X, Y = corpus(n=n, D=D, seed=seed)
    path = tmp_path / "s.zarr"
    write_store(path, X, Y, ["train"] * n, chunk_rows=37)
    return path


@pytest.mark.parametrize("method", ["pca", "mvmd"])
def test_fit_from_a_store_equals_the_dual_route(method, tmp_path, cluster_client):
    # the check, both routes forced: the same eigenvalues to 1e-6; 40 components
    # are made in several calls (COMPONENT_COLUMNS)
    from dmlfe.solvers.nspace import COMPONENT_COLUMNS

    assert COMPONENT_COLUMNS < 40
    path = _store(tmp_path, 260, 1200, seed=4)
    kw = dict(n_components=40, client=cluster_client, cache=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # accurate by default: no warning
        est = dmlfe.make_estimator(method, route="feature", solver="randomized", **kw
                                   ).fit(str(path))
    dual = dmlfe.make_estimator(method, route="dual", **kw).fit(str(path))
    assert est.solver_ == "thick-restart-lanczos" and est.converged_
    assert est.max_residual_ <= 1e-3
    np.testing.assert_allclose(est.eigenvalues_[:40], dual.eigenvalues_[:40], rtol=1e-6)
    cos = np.abs(np.sum(est.components_ * dual.components_, axis=1))
    np.testing.assert_allclose(cos, 1.0, atol=1e-5)
    Z = est.transform(str(path))
    assert Z.shape == (260, 40)


def _logged_block(X, index: int, log: str):
    with open(log, "a") as f:
        f.write(f"{index}\n")
    return sp.csr_matrix(X)


def logged_dask(X, rows: int, log: Path) -> da.Array:
    blocks = [da.from_delayed(dask.delayed(_logged_block)(X[s:s + rows], i, str(log)),
                              shape=X[s:s + rows].shape, dtype=np.float64,
                              meta=sp.csr_matrix((0, X.shape[1])))
              for i, s in enumerate(range(0, X.shape[0], rows))]
    return da.concatenate(blocks, axis=0)


def test_the_fit_reads_x_once(tmp_path, cluster_client):
    # statistics and every pass come from the tiles: each row block is read once
    X, Y = corpus(n=240, D=1000, seed=5)
    log = tmp_path / "reads"
    est = dmlfe.MVMD(n_components=8, route="feature", solver="randomized",
                     client=cluster_client).fit(logged_dask(X, 30, log), labels_dask(Y, 30))
    reads = sorted(int(v) for v in log.read_text().split())
    assert reads == list(range(8))
    assert est.n_passes_ >= 10  # the Krylov passes read the tiles, not the blocks


def _held_keys(dask_scheduler) -> list[str]:
    return sorted(str(k) for k in dask_scheduler.tasks if str(k).startswith("dmlfe-"))


def _worker_actors(dask_worker) -> int:
    return len(dask_worker.state.actors)


def test_a_fit_leaves_nothing_on_the_workers(cluster_client):
    # the slots' actors hold each other's handles, and the driver's handles sit in
    # reference cycles: without an explicit release their tiles and bases outlived the fit
    # until the driver's garbage collector happened to run (here: never)
    import gc

    X, Y = corpus(n=200, D=800, seed=6)
    gc.collect()
    gc.disable()
    try:
        dmlfe.MVMD(n_components=6, route="feature", solver="randomized",
                   client=cluster_client).fit(sparse_dask(X, 40), labels_dask(Y, 40))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            keys = cluster_client.run_on_scheduler(_held_keys)
            actors = sum(cluster_client.run(_worker_actors).values())
            if not keys and not actors:
                break
            time.sleep(0.1)
    finally:
        gc.enable()
    assert keys == [] and actors == 0


def test_a_cluster_without_workers_is_refused_at_once():
    class NoWorkers:
        def scheduler_info(self):
            return {"workers": {}}

    with pytest.raises(dmlfe.errors.InputError, match="no workers"):
        Slots(NoWorkers())


def _actors(dask_scheduler) -> list[str]:
    return [str(k) for k in dask_scheduler.tasks if str(k).startswith("dmlfe-slot")]


def test_a_lost_worker_stops_the_solve_and_the_fit_starts_again():
    from distributed import Client, LocalCluster

    X, Y = corpus(n=1500, D=4000, seed=6)
    kw = dict(n_components=40, route="feature", solver="randomized", tol=1e-9)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="2GiB",
                           dashboard_address=":0")
    client = Client(cluster, set_as_default=False)
    try:
        clean = dmlfe.PCA(client=client, **kw).fit(sparse_dask(X, 50), labels_dask(Y, 50))
        victim = sorted(client.run(os.getpid).values())[0]
        before = set(client.run_on_scheduler(_actors))
        result: dict = {}

        def fit() -> None:
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    result["est"] = dmlfe.PCA(client=client, **kw).fit(sparse_dask(X, 50),
                                                                       labels_dask(Y, 50))
                result["warnings"] = [str(w.message) for w in caught]
            except BaseException as exc:
                import traceback

                result["error"] = exc
                result["trace"] = traceback.format_exc()

        thread = threading.Thread(target=fit, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not set(client.run_on_scheduler(_actors)) - before:  # this solve's slots
            assert time.monotonic() < deadline, "the solve never started"
            time.sleep(0.05)
        time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        thread.join(180)
        assert not thread.is_alive(), "the fit hung after a worker was killed"
        assert "error" not in result, result.get("trace")
        assert any("left the dask cluster" in w for w in result["warnings"]), result["warnings"]
        np.testing.assert_allclose(result["est"].eigenvalues_, clean.eigenvalues_, rtol=1e-9)
    finally:
        client.close()
        cluster.close()


def test_shard_lost_error_names_the_worker():
    err = ShardLostError("worker tcp://x:1 left the dask cluster")
    assert isinstance(err, dmlfe.errors.DmlfeError)
