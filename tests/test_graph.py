"""Graph methods of the MOPE paper (dmlfe.graph) against dense numpy references.

Every reference is written here from the paper's formulas on dense n x n matrices
(mope eq. 7-9, 32-45; brute-force K-NN), independently of dmlfe.graph's sparse code.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import labels_dask, scheduler_graphs, sparse_dask, write_store

import dmlfe
from dmlfe.cli import main
from dmlfe.graph.combine import combine
from dmlfe.graph.knn import graph_dir_for, knn_graph, knn_recall, load_or_compute_graph
from dmlfe.graph.label_similarity import label_proximity
from dmlfe.model_io import load_model
from dmlfe.store import open_store

K = 4
REG = 1e-3


# --------------------------------------------------------------------------- data
def _data(n: int = 72, D: int = 14, q: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.35, random_state=seed, format="csr")
    X.data = rng.random(X.nnz) + 0.1
    Y = (rng.random((n, q)) < 0.35).astype(float)
    Y[Y.sum(axis=1) == 0, rng.integers(0, q)] = 1.0  # every document labelled
    return X, Y


@pytest.fixture(scope="module")
def data():
    return _data()


def brute_knn(Xd: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    D2 = ((Xd[:, None, :] - Xd[None, :, :]) ** 2).sum(-1)
    np.fill_diagonal(D2, np.inf)
    idx = np.argsort(D2, axis=1, kind="stable")[:, :k]  # ties: smaller index first
    return idx, D2


def dense_w(Xd: np.ndarray, k: int, kind: str = "gaussian", mode: str = "symmetrized",
            tau: float | None = None) -> np.ndarray:
    """W of mope section 2.1.1 on the K-NN adjacency, dense."""
    idx, D2 = brute_knn(Xd, k)
    n = Xd.shape[0]
    N = np.zeros((n, n), bool)
    N[np.repeat(np.arange(n), k), idx.ravel()] = True
    E = (N | N.T) if mode == "symmetrized" else (N & N.T)
    D2z = np.where(np.isfinite(D2), D2, 0.0)
    sq = (Xd ** 2).sum(1)
    if kind == "constant":
        V = np.ones((n, n))
    elif kind == "gaussian":  # eq. 7, tau = median non-zero neighbour distance
        nd = np.take_along_axis(D2, idx, 1)
        tau = float(np.median(nd[nd > 0])) if tau is None else tau
        V = np.exp(-D2z / tau)
    elif kind == "local_scaling":  # eq. 8
        sig = np.sqrt(np.take_along_axis(D2, idx, 1)[:, -1])
        V = np.exp(-D2z / np.outer(sig, sig))
    elif kind == "eq9":  # eq. 9, tau = 1
        V = 1.0 / (1.0 + D2z / (sq[:, None] + sq[None, :]))
    else:  # cosine
        V = (Xd @ Xd.T) / np.sqrt(np.outer(sq, sq))
    return np.where(E, V, 0.0)


def dense_g(Y: np.ndarray, scheme: int, sim: str, tau: float = 1.0, p: float = 2.0,
            kc: int | None = None):
    """G of mope section 3.3.1, dense n x n, from eq. 34-42."""
    n, c = Y.shape
    m = Y.sum(1)
    AND = Y @ Y.T
    OR = m[:, None] + m[None, :] - AND
    XOR = OR - AND
    sizes = Y.sum(0)
    if scheme == 1:
        return {"sorensen": 2 * AND / (m[:, None] + m[None, :]),
                "scaled_sorensen": 2 * (Y / sizes) @ Y.T / (m[:, None] + m[None, :]),
                "jaccard": AND / OR,
                "hamming_exp": np.exp(-XOR / tau),
                "hamming": 1 - XOR / c}[sim]
    if scheme == 2:
        Yc = Y - Y.mean(0)
        _, s, Vt = np.linalg.svd(Yc, full_matrices=False)
        P = Vt[s > 1e-12 * s.max()].T if kc is None else Vt[:kc].T  # eq. 39
        F = Y @ P
        dot = F @ F.T
        nn = np.diag(dot)
        if sim == "minkowski":
            return np.exp(-(np.abs(F[:, None] - F[None]) ** p).sum(-1) / tau)
        if sim == "tanimoto":
            return dot / (nn[:, None] + nn[None, :] - dot)
        return dot / np.sqrt(np.outer(nn, nn))
    YtY = Y.T @ Y
    Sig = YtY if sim == "yty" else 2 * YtY / (sizes[:, None] + sizes[None, :])
    return (Y @ Sig @ Y.T) / np.outer(m, m)  # eq. 42


def psi(W, G, comb, a=1.0, b=1.0, beta=1.0, gamma=1.0):
    E = W != 0
    if comb == "priority":  # eq. 43, general form; negative similarities count as 0
        W, G = np.maximum(W, 0), np.maximum(G, 0)
        v = gamma * G ** a / (1 + beta * (1 - W ** b)) + (1 - gamma) * W ** b
    elif comb == "hadamard":
        v = G * W
    else:
        v = beta * G + (1 - beta) * W
    return np.where(E, v, 0.0)


def lap(W):
    return np.diag(W.sum(1)) - W


def reference(Xd, A, B=None, reg=REG):
    """Eigenpairs of max tr(P^T X^T A X P) s.t. P^T (X^T B X + reg I) P = I (eq. 31)."""
    Ap = Xd.T @ A @ Xd
    if B is None:
        return sla.eigh(Ap)
    return sla.eigh(Ap, Xd.T @ B @ Xd + reg * np.eye(Xd.shape[1]))


def check(est, w, V, d):
    w, V = w[::-1][:d], V[:, ::-1][:, :d]
    np.testing.assert_allclose(est.eigenvalues_[:d], w, rtol=1e-8, atol=1e-10 * abs(w).max())
    angles = sla.subspace_angles(est.components_[:d].T, V)
    assert angles.max() < 1e-6, angles


def fit(name, X, Y, d=3, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return getattr(dmlfe, name)(n_components=d, n_neighbors=K, **kw).fit(X, Y)


# --------------------------------------------------------------------------- K-NN graph
def test_knn_equals_brute_force_and_ignores_chunking(data):
    X, _ = data
    X = sp.vstack([X, X[:3]]).tocsr()  # exact duplicates: ties at distance 0
    idx, D2 = brute_knn(X.toarray(), K)
    g = knn_graph(X, K)
    np.testing.assert_array_equal(g.indices, idx)
    np.testing.assert_allclose(g.sq_distances, np.take_along_axis(D2, idx, 1), atol=1e-12)
    for rows in (5, 16, 40):
        h = knn_graph(sparse_dask(X, rows), K)
        for a in ("indices", "sq_distances", "sq_norms"):
            np.testing.assert_array_equal(getattr(h, a), getattr(g, a))


@pytest.mark.parametrize("kind", ["constant", "gaussian", "local_scaling", "eq9", "cosine"])
@pytest.mark.parametrize("mode", ["symmetrized", "mutual"])
def test_feature_weights(data, kind, mode):
    X, _ = data
    W = knn_graph(X, K).weights(kind, None, mode).toarray()
    np.testing.assert_allclose(W, dense_w(X.toarray(), K, kind, mode), rtol=1e-10, atol=1e-12)


def test_knn_rejects_too_many_neighbours(data):
    X, _ = data
    with pytest.raises(ValueError, match="n_neighbors=72"):
        knn_graph(X, 72)


def topic_docs(n: int = 2000, topics: int = 40, seed: int = 1) -> sp.csr_matrix:
    """Sparse rows over 2^20 hashed columns: 20 words of the document's topic (50 each)
    and 5 from anywhere, l2-normalised like tf-idf rows."""
    rng = np.random.default_rng(seed)
    vocab = rng.choice(2**20, size=(topics, 50), replace=False)
    t = rng.integers(0, topics, n)
    cols = np.hstack([vocab[t[:, None], rng.integers(0, 50, (n, 20))],
                      rng.integers(0, 2**20, (n, 5))])
    X = sp.csr_matrix((rng.random(cols.size) + 0.2, cols.ravel(),
                       np.arange(0, cols.size + 1, 25)), shape=(n, 2**20))
    X.sum_duplicates()
    return sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1))))


def test_approximate_knn_recall_against_exact():
    pytest.importorskip("pynndescent")
    X = topic_docs(n=1200)  # enough for the recall check; both graphs' cost grows with n
    k = 10
    approx = knn_graph(sparse_dask(X, 500), k, method="approximate", recall_sample=300)
    exact = knn_graph(sparse_dask(X, 500), k, method="exact")
    n = X.shape[0]
    assert not approx.exact and exact.exact and approx.indices.shape == (n, k)
    # valid lists: other documents, distinct, ordered by (distance, index), and each
    # distance the true squared distance (rows differenced here, not expanded)
    idx = approx.indices
    assert ((idx >= 0) & (idx < n) & (idx != np.arange(n)[:, None])).all()
    assert (np.diff(np.sort(idx, axis=1), axis=1) > 0).all()
    d = approx.sq_distances
    assert ((np.diff(d, axis=1) > 0) | ((np.diff(d, axis=1) == 0)
                                        & (np.diff(idx, axis=1) > 0))).all()
    diff = X[np.repeat(np.arange(n), k)] - X[idx.ravel()]
    true = np.asarray(diff.multiply(diff).sum(axis=1)).reshape(n, k)
    np.testing.assert_allclose(d, true, rtol=1e-9, atol=1e-12)
    # recall@K over every document, ties at the exact K-th distance counted as found
    kth = exact.sq_distances[:, -1:]
    recall = float((d <= kth + 1e-9 * kth).mean())
    assert recall >= 0.9, recall
    assert knn_recall(approx, X, sample=n) == pytest.approx(recall, abs=1e-12)
    assert approx.recall_sample == 300 and abs(approx.recall - recall) < 0.05


def test_knn_search_auto_and_missing_library(data, monkeypatch):
    import dmlfe.graph.knn as knn

    X, Y = data
    assert knn_graph(X, K, method="auto").exact
    monkeypatch.setattr(knn, "EXACT_LIMIT", 50)  # 72 documents: auto goes approximate
    monkeypatch.setitem(__import__("sys").modules, "pynndescent", None)  # not installed
    with pytest.raises(ImportError, match=r"pip install 'dmlfe\[ann\]'"):
        knn_graph(X, K, method="auto")
    with pytest.raises(ImportError, match="dmlfe.ann"):
        fit("MOPE", X, Y, knn_search="approximate")
    with pytest.raises(ValueError, match="knn_search='nearest'"):
        knn_graph(X, K, method="nearest")


def test_cli_names_the_missing_extra(split_store, tmp_path, monkeypatch, capsys,
                                     cluster_client):
    path, _ = split_store
    monkeypatch.setitem(__import__("sys").modules, "pynndescent", None)  # not installed
    rc = main(["fit", str(path), "--method", "olpp", "--knn-search", "approximate",
               "--dim", "2", "--split", "train", "--out", str(tmp_path / "m"), "--quiet",
               "--scheduler", cluster_client.scheduler.address])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "error: the approximate K-NN search needs pynndescent" in err and "dmlfe[ann]" in err


def test_approximate_graph_cache_records_recall(tmp_path, data):
    pytest.importorskip("pynndescent")
    X, Y = data
    path = write_store(tmp_path / "a.zarr", X, Y.astype(np.int8), ["train"] * X.shape[0])
    g = load_or_compute_graph(open_store(path), K, method="approximate")
    import json

    (rec,) = graph_dir_for(path).glob("*.json")
    meta = json.loads(rec.read_text())
    assert meta["params"]["exact"] is False and meta["recall"] == g.recall
    assert meta["recall_sample"] == X.shape[0] and 0.0 < g.recall <= 1.0
    again = load_or_compute_graph(open_store(path), K, method="approximate")
    assert again.from_cache and not again.exact and again.recall == g.recall
    assert not load_or_compute_graph(open_store(path), K).from_cache  # exact: another entry
    est = fit("MOPE", str(path), None, knn_search="approximate")
    assert est.n_passes_ == 1  # the approximate graph came from the cache
    # searched: X gathered, the recall sample gathered and searched, the products pass
    assert fit("MOPE", str(path), None, knn_search="approximate", cache=False).n_passes_ == 4
    if g.recall == 1.0:  # NN-descent found the exact graph: the same fit
        ref = fit("MOPE", X, Y)
        np.testing.assert_allclose(est.eigenvalues_, ref.eigenvalues_, rtol=1e-9)


# --------------------------------------------------------------------------- G and Psi
@pytest.mark.parametrize("scheme,sim", [(1, "sorensen"), (1, "scaled_sorensen"),
                                        (1, "jaccard"), (1, "hamming"), (1, "hamming_exp"),
                                        (2, "cosine"), (2, "minkowski"), (2, "tanimoto"),
                                        (3, "sorensen"), (3, "yty")])
def test_label_proximity_on_the_graph(data, scheme, sim):
    X, Y = data
    W = knn_graph(X, K).weights("gaussian", None, "symmetrized")
    G = label_proximity(Y, W, scheme, sim, tau=0.7, minkowski_p=1.5)
    ref = dense_g(Y, scheme, sim, tau=0.7, p=1.5)
    assert np.array_equal(G.indptr, W.indptr) and np.array_equal(G.indices, W.indices)
    np.testing.assert_allclose(G.toarray(), np.where(W.toarray() != 0, ref, 0.0),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("comb,kw", [("priority", dict(a=0.3, b=1.3, beta=1.0)),
                                     ("priority", dict(b=0.5, scheme=2)),  # g < 0 clipped
                                     ("priority", dict(a=2.0, b=0.5, beta=3.0, gamma=0.6)),
                                     ("hadamard", {}), ("weighted_sum", dict(beta=0.3))])
def test_combinations(data, comb, kw):
    X, Y = data
    W = knn_graph(X, K).weights("gaussian", None, "symmetrized")
    scheme = kw.pop("scheme", 3)
    sim = {2: "cosine", 3: "sorensen"}[scheme]
    kc = 2 if scheme == 2 else None  # two label components: some g < 0
    G = label_proximity(Y, W, scheme, sim, label_components=kc)
    Gd = dense_g(Y, scheme, sim, kc=kc)
    assert scheme == 3 or (Gd < -0.1).any()
    ref = psi(W.toarray(), Gd, comb, **kw)
    np.testing.assert_allclose(combine(W, G, comb, **kw).toarray(), ref, rtol=1e-12,
                               atol=1e-14)


# --------------------------------------------------------------------------- methods
@pytest.mark.parametrize("kw", [
    dict(),
    dict(scheme=1, label_similarity="jaccard", combination="hadamard", constraint="degree"),
    dict(scheme=2, combination="weighted_sum", beta=0.4, constraint="embedding",
         feature_weight="local_scaling"),
    dict(scheme=3, label_similarity="yty", a=0.5, b=2.0, beta=2.0, gamma=0.7,
         feature_weight="cosine", graph_mode="mutual"),
    dict(scheme=2, label_similarity="cosine", b=1.3, label_components=2),  # g < 0 clipped
])
def test_mope_matches_dense_reference(data, kw):
    X, Y = data
    est = fit("MOPE", X, Y, **kw)
    Xd = X.toarray()
    W = dense_w(Xd, K, kw.get("feature_weight", "gaussian"), kw.get("graph_mode", "symmetrized"))
    G = dense_g(Y, kw.get("scheme", 3), kw.get("label_similarity") or
                {1: "sorensen", 2: "cosine", 3: "sorensen"}[kw.get("scheme", 3)],
                kc=kw.get("label_components"))
    A = psi(W, G, kw.get("combination", "priority"),
            **{k: kw[k] for k in ("a", "b", "beta", "gamma") if k in kw})
    B = {"orthogonal": None, "embedding": np.eye(len(A)),
         "degree": np.diag(A.sum(1))}[kw.get("constraint", "orthogonal")]
    check(est, *reference(Xd, A, B), 3)


def test_lpp_olpp_hsl_match_dense_reference(data):
    X, Y = data
    Xd = X.toarray()
    W = dense_w(Xd, K)
    check(fit("LPP", X, Y), *reference(Xd, W, np.diag(W.sum(1))), 3)
    check(fit("OLPP", X, Y), *reference(Xd, -lap(W)), 3)
    dc = (Y @ Y.T).sum(1)
    Sc = (Y @ Y.T) / np.sqrt(np.outer(dc, dc))  # clique expansion
    check(fit("HSL", X, Y), *reference(Xd, Sc, np.eye(len(Y))), 3)
    m, ne = Y.sum(1), Y.sum(0)
    Sz = (Y / ne) @ Y.T / np.sqrt(np.outer(m, m))  # Zhou's hypergraph
    check(fit("HSL", X, Y, hypergraph="hypergraph"), *reference(Xd, Sz, np.eye(len(Y))), 3)


def test_olpp_needs_an_integer_dimension(data):
    X, Y = data
    with pytest.raises(ValueError, match="give n_components as an int"):
        dmlfe.OLPP(n_components=0.9).fit(X, Y)


@pytest.mark.parametrize("scheme,sim,kc", [(1, "sorensen", None), (2, "cosine", 2)])
def test_ssmope_matches_eq_44(data, scheme, sim, kc):
    X, Y = data
    Y = Y.copy()
    Y[::3] = 0.0  # a third unlabelled
    est = fit("SSMOPE", X, Y, unsupervised_weight=0.3, scheme=scheme, gamma=0.5,
              label_components=kc)
    Xd = X.toarray()
    W = dense_w(Xd, K)
    lab = Y.sum(1) > 0
    # A^(SDR) from the labelled data alone (eq. 44): G of Y_l (scheme 2: PCA of Y_l)
    A_sdr = np.zeros_like(W)
    A_sdr[np.ix_(lab, lab)] = psi(W[np.ix_(lab, lab)], dense_g(Y[lab], scheme, sim, kc=kc),
                                  "priority", gamma=0.5)
    check(est, *reference(Xd, 0.3 * -lap(W) + 0.7 * A_sdr), 3)


@pytest.fixture(scope="module")
def split_store(tmp_path_factory, data):
    """The data in a store whose split marks a quarter of the documents 'unlabelled'
    (their labels are stored all the same) and a quarter 'test'."""
    X, Y = data
    splits = np.array(["train", "unlabelled", "train", "test"] * (X.shape[0] // 4))
    path = write_store(tmp_path_factory.mktemp("ss") / "s.zarr", X, Y.astype(np.int8), splits)
    return path, splits


SS_KW = dict(unsupervised_weight=0.3, scheme=1, gamma=0.5)


def test_ssmope_unlabelled_split_of_a_store(split_store, data):
    X, Y = data
    path, splits = split_store
    rows = splits != "test"
    est = fit("SSMOPE", str(path), None, split=["train", "unlabelled"],
              unlabelled_split="unlabelled", **SS_KW)
    assert est.n_samples_ == rows.sum() and est.method_params_["unlabelled_split"] == "unlabelled"
    # the same problem as arrays whose unlabelled rows of Y are zero (eq. 44: X_l = train)
    Ymask = Y[rows] * (splits[rows] == "train")[:, None]
    ref = fit("SSMOPE", X[rows], Ymask, **SS_KW)
    check(est, ref.eigenvalues_[::-1], ref.components_.T[:, ::-1], 3)
    # and not the problem with the stored labels of the unlabelled split
    with_labels = fit("SSMOPE", str(path), None, split=["train", "unlabelled"], **SS_KW)
    assert sla.subspace_angles(with_labels.components_.T, est.components_.T).max() > 1e-3
    with pytest.raises(ValueError, match="matches none of the .* training documents"):
        fit("SSMOPE", str(path), None, split="train", unlabelled_split="unlabelled")
    with pytest.raises(ValueError, match="matches none"):
        fit("SSMOPE", str(path), None, unlabelled_split="unlabeled")  # typo
    with pytest.raises(ValueError, match="needs X as a store path"):
        fit("SSMOPE", X, Y, unlabelled_split="unlabelled")


def test_cli_fit_ssmope_with_an_unlabelled_split(split_store, tmp_path, cluster_client, capsys):
    path, _ = split_store
    out = tmp_path / "ssmope-model"
    rc = main(["fit", str(path), "--method", "ssmope", "--split", "train,unlabelled",
               "--unlabelled-split", "unlabelled", "--unsupervised-weight", "0.3",
               "--scheme", "1", "--gamma", "0.5", "--n-neighbors", str(K), "--dim", "3",
               "--out", str(out), "--scheduler", cluster_client.scheduler.address])
    assert rc == 0
    assert "(split train,unlabelled)" in capsys.readouterr().out
    model = load_model(out)
    ref = fit("SSMOPE", str(path), None, split=["train", "unlabelled"],
              unlabelled_split="unlabelled", **SS_KW)
    assert model.method_params_["unlabelled_split"] == "unlabelled"
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-9)
    assert sla.subspace_angles(model.components_.T, ref.components_.T).max() < 1e-6


# ----------------------------------------------------------- MESD vs explicit duplication
def duplicated(Xd, Y):
    owner, label = np.nonzero(Y)  # one copy per (document, label), eq. 32's x_i^(s)
    return Xd[owner], owner, label


def single_label_template(base, owner, label, Wdoc, beta):
    """The single-label method's (A, B) on the duplicated samples (B None: B_p = I)."""
    nt = len(owner)
    same = label[:, None] == label[None, :]
    sizes = np.bincount(label)
    H = np.where(same, 1.0 / sizes[label][:, None], 0.0)
    one = np.ones((nt, nt)) / nt
    aff = Wdoc[owner][:, owner]  # copies inherit their documents' graph weights
    if base == "fda":  # eq. 10
        return H - one, np.eye(nt) - H
    if base == "mmc":  # eq. 11
        return (H - one) - (np.eye(nt) - H), None
    if base == "lfda":
        Ww = np.where(same, aff * H, 0.0)
        Wb = np.where(same, aff * (1.0 / nt - H), 1.0 / nt)
        return lap(Wb), lap(Ww)
    Wr = np.where(~same, aff, 0.0)  # olpp_r
    return -(lap(same.astype(float)) - beta * lap(Wr)), None


@pytest.mark.parametrize("base", ["fda", "lfda", "mmc", "olpp_r"])
@pytest.mark.parametrize("weighting", ["unweighted", "weighted"])
def test_mesd_equals_explicit_duplication(data, base, weighting):
    X, Y = data
    est = fit("MESD", X, Y, base=base, weighting=weighting, beta=0.7)
    Xd = X.toarray()
    Xt, owner, label = duplicated(Xd, Y)
    A, B = single_label_template(base, owner, label, dense_w(Xd, K), 0.7)
    if weighting == "weighted":  # eq. 33: every copy pair weighted by 1 / (m_i m_j)
        m = Y.sum(1)[owner]
        A = A / np.outer(m, m)
    check(est, *reference(Xt, A, B), 3)


# --------------------------------------------------------------------------- routes
def test_relation_route_is_the_same_problem_on_r(data):
    X, Y = data
    est = fit("MOPE", X, Y, route="relation", similarity="gaussian", n_prototypes=30,
              prototype_selection="random")
    assert est.route_ == "relation" and est.components_.shape == (3, 30)
    R = est.relation_map_.transform(X)
    W = dense_w(X.toarray(), K)  # the graph is over the documents, whatever the route
    A = psi(W, dense_g(Y, 3, "sorensen"), "priority")
    check(est, *reference(R, A), 3)
    mesd = fit("MESD", X, Y, base="lfda", route="relation", similarity="gaussian",
               n_prototypes=30, prototype_selection="random")
    Xt, owner, label = duplicated(R, Y)
    check(mesd, *reference(Xt, *single_label_template("lfda", owner, label, W, 1.0)), 3)


def test_auto_route_takes_relation_features_above_the_dense_limit(data):
    X, Y = data
    est = fit("MOPE", X, Y, max_dense_features=10, n_prototypes=5, similarity="gaussian",
              prototype_selection="random")
    assert est.route_ == "relation"


def test_local_cluster_several_chunkings(data, cluster_client):
    X, Y = data
    base = {n: fit(n, X, Y, **kw) for n, kw in
            [("MOPE", {}), ("MESD", dict(base="lfda", weighting="weighted"))]}
    g = knn_graph(X, K)
    for rows in (9, 25):
        h = knn_graph(sparse_dask(X, rows), K, client=cluster_client)
        np.testing.assert_array_equal(h.indices, g.indices)
        np.testing.assert_array_equal(h.sq_distances, g.sq_distances)
    for rows in (25, 40):
        for name, kw in [("MOPE", {}), ("MESD", dict(base="lfda", weighting="weighted"))]:
            est = fit(name, sparse_dask(X, rows), labels_dask(Y, rows), client=cluster_client,
                      **kw)
            np.testing.assert_allclose(est.eigenvalues_, base[name].eigenvalues_, rtol=1e-9)
            assert sla.subspace_angles(est.components_.T,
                                       base[name].components_.T).max() < 1e-6


def test_store_graph_cache(tmp_path, data):
    X, Y = data
    path = write_store(tmp_path / "g.zarr", X, Y.astype(np.int8), ["train"] * X.shape[0])
    first = fit("MOPE", str(path), None)
    saved = sorted(p.name for p in graph_dir_for(path).iterdir())
    assert [p.rsplit(".", 1)[1] for p in saved] == ["json", "npz"]
    again = fit("MOPE", str(path), None)
    np.testing.assert_array_equal(again.components_, first.components_)
    ref = fit("MOPE", X, Y)
    np.testing.assert_allclose(first.eigenvalues_, ref.eigenvalues_, rtol=1e-10)


def test_passes_count_the_knn_search(tmp_path, data, cluster_client):
    X, Y = data
    path = write_store(tmp_path / "p.zarr", X, Y.astype(np.int8), ["train"] * X.shape[0])

    def counted(name, **kw):
        before = scheduler_graphs(cluster_client)
        est = fit(name, str(path), None, client=cluster_client, **kw)
        return est, scheduler_graphs(cluster_client) - before

    # three graphs: the labels (n x q, to the driver), the K-NN search, the products pass
    first, graphs = counted("MOPE")
    assert (graphs, first.n_passes_) == (3, 2)
    again, graphs = counted("MOPE")  # the graph is read from <store>.graph/
    assert (graphs, again.n_passes_) == (2, 1)
    fda, graphs = counted("MESD", base="fda")  # needs no graph
    assert (graphs, fda.n_passes_) == (2, 1)
    fresh, graphs = counted("OLPP", cache=False)
    assert (graphs, fresh.n_passes_) == (3, 2)
    assert fit("LPP", X, Y).n_passes_ == 2  # arrays: always searched
