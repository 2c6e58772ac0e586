"""The similarity registry (dmlfe.relation.similarities): one declaration serves the
relation route and the graph methods' K-NN weights.

A toy similarity registered here alone, 1 / (tau + ||x - p||^2) with a default tau, is
checked against dense numpy formulas written here: as relation features, as graph
weights, and through whole fits (the relation route and LPP, in memory and on the
LocalCluster); dmlfe's own similarities are checked on both uses against the formulas
of mope eq. 7-9.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import labels_dask, sparse_dask

import dmlfe
from dmlfe.cli import build_parser
from dmlfe.graph.knn import knn_graph
from dmlfe.model_io import load_model
from dmlfe.relation import RelationMap, SimilaritySpec, get_similarity, register_similarity
from dmlfe.relation.similarities import (
    Pairs,
    all_similarities,
    similarity_names,
    unregister_similarity,
)

K = 4
REG = 1e-3
TOY_TAU = 2.0


def _toy(p: Pairs) -> np.ndarray:
    return 1.0 / (p.tau + p.sq_dist)


@pytest.fixture
def toy():
    spec = register_similarity(SimilaritySpec("toy_inverse", _toy, aliases=("toy",),
                                              needs_tau=True, default_tau=TOY_TAU))
    yield spec
    unregister_similarity("toy_inverse")
    assert "toy_inverse" not in all_similarities()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    n, D, q = 60, 10, 3
    X = sp.random(n, D, density=0.4, random_state=8, format="csr",
                  data_rvs=lambda k: rng.uniform(0.1, 1.0, k))
    Y = (rng.random((n, q)) < 0.4).astype(float)
    Y[np.arange(n), rng.integers(0, q, n)] = 1.0
    return X, Y


def sq_dist(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)


def knn_mask(Xd: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Brute-force K-NN: the symmetrized edge mask and the (n, k) neighbour indices."""
    D2 = sq_dist(Xd, Xd)
    np.fill_diagonal(D2, np.inf)
    idx = np.argsort(D2, axis=1, kind="stable")[:, :k]
    N = np.zeros(D2.shape, bool)
    N[np.repeat(np.arange(len(Xd)), k), idx.ravel()] = True
    return N | N.T, idx


def test_the_registry_lists_dmlfe_own_similarities():
    rel, graph = similarity_names("relation"), similarity_names("graph")
    assert set(rel) == {"linear", "cosine", "gaussian", "local_scaling",
                        "inverse_normalized_distance"}
    assert set(graph) == {"constant", "gaussian", "local_scaling", "eq9", "cosine"}
    assert get_similarity("EQ9") is get_similarity("inverse-normalized-distance")
    assert {n for n, s in all_similarities().items() if s.psd} == {"linear", "cosine",
                                                                     "gaussian"}
    with pytest.raises(ValueError, match="feature_weight='linear'"):
        get_similarity("linear", "graph")
    with pytest.raises(ValueError, match="similarity='constant'"):
        get_similarity("constant", "relation")
    with pytest.raises(ValueError, match="registered already"):
        register_similarity(SimilaritySpec("rbf", _toy))


def test_every_similarity_is_one_function_for_both_uses(data):
    """Relation features sim(X, X) on the K-NN edges equal the graph's weights, for each
    similarity offered on both uses (same tau; local scaling aside: each use defines its
    own sigma), and both equal the dense formulas."""
    X, _ = data
    Xd = X.toarray()
    D2, sq, G = sq_dist(Xd, Xd), (Xd ** 2).sum(1), Xd @ Xd.T
    formulas = {
        "cosine": G / np.sqrt(np.outer(sq, sq)),
        "gaussian": np.exp(-D2 / 0.8),
        "eq9": 1.0 / (0.8 + D2 / (sq[:, None] + sq[None, :])),
    }
    E, _ = knn_mask(Xd, K)
    g = knn_graph(X, K)
    for name, ref in formulas.items():
        W = g.weights(name, 0.8).toarray()
        np.testing.assert_allclose(W, np.where(E, ref, 0.0), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
        R = RelationMap(X, name, tau=0.8).transform(X)
        np.testing.assert_allclose(R, ref, rtol=1e-10, atol=1e-12, err_msg=name)


def test_toy_similarity_as_relation_features_and_graph_weights(data, toy):
    X, _ = data
    Xd = X.toarray()
    P = X[[1, 5, 8, 13, 21, 34]]
    ref = 1.0 / (TOY_TAU + sq_dist(Xd, P.toarray()))
    rmap = RelationMap(P, "toy")  # the alias; tau: the declared default
    assert rmap.similarity == "toy_inverse" and rmap.tau == TOY_TAU
    np.testing.assert_allclose(rmap.transform(X), ref, rtol=1e-12)
    np.testing.assert_allclose(RelationMap(P, "toy", tau=0.5).transform(X),
                               1.0 / (0.5 + sq_dist(Xd, P.toarray())), rtol=1e-12)
    E, _ = knn_mask(Xd, K)
    W = knn_graph(X, K).weights("toy_inverse", None).toarray()
    np.testing.assert_allclose(W, np.where(E, 1.0 / (TOY_TAU + sq_dist(Xd, Xd)), 0.0),
                               rtol=1e-12, atol=1e-15)


def _lpp_reference(F: np.ndarray, W: np.ndarray) -> np.ndarray:
    """LPP's eigenvalues, largest first: F^T W F p = l (F^T D(W) F + reg I) p."""
    w = sla.eigh(F.T @ W @ F, F.T @ np.diag(W.sum(1)) @ F + REG * np.eye(F.shape[1]),
                 eigvals_only=True)
    return w[::-1]


def _lpp(X, Y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return dmlfe.LPP(n_components=3, n_neighbors=K, reg=REG, **kw).fit(X, Y)


def _check(est, ref):
    np.testing.assert_allclose(est.eigenvalues_[:3], ref[:3], rtol=1e-8,
                               atol=1e-10 * abs(ref).max())


def test_toy_similarity_in_lpp_and_on_the_relation_route(data, toy, cluster_client, tmp_path):
    """LPP weighted by the toy on the feature route, and on relation features of the toy
    (every document a prototype), in memory and on the LocalCluster in several chunkings."""
    X, Y = data
    Xd = X.toarray()
    E, _ = knn_mask(Xd, K)
    W = np.where(E, 1.0 / (TOY_TAU + sq_dist(Xd, Xd)), 0.0)
    R = 1.0 / (TOY_TAU + sq_dist(Xd, Xd))  # relation features: prototypes = all documents
    feature_ref, relation_ref = _lpp_reference(Xd, W), _lpp_reference(R, W)
    _check(_lpp(X, Y, feature_weight="toy_inverse"), feature_ref)
    rel = _lpp(X, Y, feature_weight="toy_inverse", route="relation", similarity="toy")
    assert rel.route_ == "relation" and rel.relation_map_.similarity == "toy_inverse"
    _check(rel, relation_ref)
    for rows in (13, 25):
        est = _lpp(sparse_dask(X, rows), labels_dask(Y, rows), client=cluster_client,
                   feature_weight="toy_inverse", route="relation", similarity="toy_inverse")
        _check(est, relation_ref)
    # the saved model names the toy and loads through the registry
    back = load_model(rel.save(tmp_path / "m"))
    np.testing.assert_allclose(back.transform(X), rel.transform(X), rtol=1e-12)


def test_the_command_line_offers_a_registered_similarity(toy):
    args = build_parser().parse_args(["fit", "s.zarr", "--method", "lpp", "--out", "m",
                                      "--feature-weight", "toy_inverse", "--similarity", "toy"])
    assert (args.feature_weight, args.similarity) == ("toy_inverse", "toy")


def test_the_command_line_refuses_an_unregistered_similarity(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["fit", "s.zarr", "--method", "lpp", "--out", "m",
                                   "--feature-weight", "toy_inverse"])
    assert "invalid choice: 'toy_inverse'" in capsys.readouterr().err
