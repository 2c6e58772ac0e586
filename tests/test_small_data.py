"""Small data is fast: an in-memory fit builds no dask graph and starts no cluster, and
takes the n x n route when n <= D/2 with the results of the distributed path."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from dask.delayed import Delayed
from helpers import count_computes, data_path, labels_dask, sparse_dask

import dmlfe
from dmlfe import make_estimator
from dmlfe.methods.registry import all_methods
from dmlfe.readers.arff import read_mulan


@pytest.fixture(scope="module")
def medical():
    src = read_mulan(data_path("mulan", "medical-train.arff"), data_path("mulan", "medical.xml"))
    batches = list(src.batches(4096))
    X = sp.vstack([sp.csr_matrix(b.X) for b in batches], format="csr").astype(np.float64)
    Y = sp.vstack([b.Y for b in batches]).toarray().astype(np.int8)
    assert X.shape == (333, 1449) and Y.shape == (333, 45)
    return X, Y


def _graphs_built(monkeypatch) -> list[str]:
    """Every dask array, delayed object, client or cluster created from now on is recorded."""
    import distributed

    made: list[str] = []
    new, init = da.Array.__new__, Delayed.__init__
    for cls in (distributed.Client, distributed.LocalCluster):
        def refuse(self, *a, _name=cls.__name__, **k):
            made.append(_name)
            raise RuntimeError(f"an in-memory fit started a {_name}")
        monkeypatch.setattr(cls, "__init__", refuse)

    def array_new(cls, *a, **k):
        made.append("array")
        return new(cls, *a, **k)

    def delayed_init(self, *a, **k):
        made.append("delayed")
        init(self, *a, **k)

    monkeypatch.setattr(da.Array, "__new__", array_new)
    monkeypatch.setattr(Delayed, "__init__", delayed_init)
    return made


@pytest.mark.parametrize("cls", [dmlfe.PCA, dmlfe.MVMD])
def test_in_memory_fit_builds_no_graph_and_equals_the_distributed_path(medical, cls,
                                                                        monkeypatch):
    X, Y = medical
    made = _graphs_built(monkeypatch)
    mem, computes = count_computes(lambda: cls(n_components=20).fit(X, Y))
    monkeypatch.undo()
    assert computes == 0 and made == []
    assert mem.route_ == "dual" and "in-memory" in mem.route_reason_

    # the same route on dask row blocks (the distributed pass machinery), and the
    # feature route (the D x D problem) in memory: same eigenvalues and subspace
    dist = cls(n_components=20, route="dual").fit(sparse_dask(X, 100), labels_dask(Y, 100))
    assert dist.route_ == "dual"
    np.testing.assert_allclose(mem.components_, dist.components_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(mem.eigenvalues_, dist.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(mem.mean_, dist.mean_, rtol=0, atol=1e-14)
    feat = cls(n_components=20, route="feature").fit(X, Y)
    np.testing.assert_allclose(mem.eigenvalues_[:20], feat.eigenvalues_[:20], rtol=1e-8)
    overlap = np.abs(mem.components_ @ feat.components_.T)  # |cos| of matching components
    np.testing.assert_allclose(np.diag(overlap)[:10], 1.0, atol=1e-6)


def test_store_fits_keep_the_feature_route(tmp_path):
    # the n x n preference is for in-memory X only: a store's dual route costs a second
    # pass over the data and bypasses the statistics cache
    from helpers import write_store

    rng = np.random.default_rng(0)
    X = sp.random(40, 100, density=0.2, random_state=1, format="csr")
    Y = (rng.uniform(size=(40, 3)) < 0.4).astype(np.uint8)
    store = write_store(tmp_path / "s.zarr", X, Y, ["train"] * 40)
    assert dmlfe.PCA(n_components=3, cache=False).fit(store).route_ == "feature"
    assert dmlfe.PCA(n_components=3).fit(X).route_ == "dual"
    assert dmlfe.PCA(n_components=3, solver="dense").fit(X).route_ == "feature"


@pytest.mark.filterwarnings("ignore:.*span an arbitrary part:RuntimeWarning")
@pytest.mark.parametrize("method", sorted(all_methods()))
def test_every_method_fits_in_memory_without_a_graph(method, monkeypatch):
    # n > D/2: the in-memory and the dask-array fits take the same route, so they must
    # agree to round-off; the graph methods' K-NN graph and products included
    rng = np.random.default_rng(3)
    X = sp.random(60, 40, density=0.3, random_state=4, format="csr")
    Y = (rng.uniform(size=(60, 4)) < 0.4).astype(np.uint8)
    Y[0] = 1  # every label present
    made = _graphs_built(monkeypatch)
    mem, computes = count_computes(lambda: make_estimator(method, n_components=2).fit(X, Y))
    monkeypatch.undo()
    assert computes == 0 and made == [], (computes, set(made))
    dist = make_estimator(method, n_components=2).fit(sparse_dask(X, 25), labels_dask(Y, 25))
    assert dist.route_ == mem.route_
    np.testing.assert_allclose(mem.eigenvalues_[:2], dist.eigenvalues_[:2], rtol=1e-9,
                               atol=1e-12 * abs(dist.eigenvalues_[0]))
    k = int(mem.n_genuine_)  # components in a null space are arbitrary
    np.testing.assert_allclose(mem.components_[:k], dist.components_[:k], rtol=0, atol=1e-8)
