"""Issue 33 part 3: the relation route's default prototypes.

``n_prototypes="auto"`` is min(n, MAX_AUTO_PROTOTYPES) and ``prototype_selection="auto"``
is "all" at p = n, else label-stratified. The cap is lowered here so that the data stay
small. References: the label strata counted by hand, and the eigenproblems of mddm
eq. 20 (kernel MDDMf) and of MDDMf on relation features written out with numpy from the
chosen prototypes' rows and solved with scipy.linalg.eigh.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
from helpers import write_store

import dmlfe
from dmlfe.cli import main
from dmlfe.relation import prototypes

CAP = 30
#: Label sets of the 90 documents: 45 x {L0}, 27 x {L1}, 18 x {L0, L2} (a third of
#: each is a whole number of prototypes at p = 30: 15, 9 and 6).
STRATA = ((45, (0,)), (27, (1,)), (18, (0, 2)))


def _data(seed: int = 0, n_features: int = 40):
    rng = np.random.default_rng(seed)
    n = sum(size for size, _ in STRATA)
    X = sp.random(n, n_features, density=0.25, random_state=seed + 1, format="csr",
                  data_rvs=lambda k: rng.uniform(0.1, 1.0, k))
    Y = np.zeros((n, 3), dtype=np.uint8)
    start = 0
    for size, labels in STRATA:
        Y[start:start + size, list(labels)] = 1
        start += size
    perm = rng.permutation(n)
    return sp.csr_matrix(X[perm]), Y[perm]


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(prototypes, "MAX_AUTO_PROTOTYPES", CAP)
    return CAP


def _strata_counts(Y: np.ndarray, rows: np.ndarray) -> list[int]:
    keys = [tuple(r) for r in Y[rows]]
    return sorted(keys.count(k) for k in set(keys))


def _top(A: np.ndarray, B: np.ndarray, d: int) -> np.ndarray:
    m = A.shape[0]
    return sla.eigh(A, B, eigvals_only=True, subset_by_index=[m - d, m - 1])[::-1]


def test_the_default_is_min_n_cap_label_stratified(small_cap, caplog):
    X, Y = _data()
    with caplog.at_level(logging.INFO, logger="dmlfe.fit.run"):
        est = dmlfe.MDDM(n_components=2, route="relation").fit(X, Y)
    assert est.get_params()["n_prototypes"] == "auto"
    assert est.get_params()["prototype_selection"] == "auto"
    rows = est.prototype_indices_
    assert rows.shape == (CAP,) and np.all(np.diff(rows) > 0)
    # each label set keeps its share: CAP * (45, 27, 18) / 90
    assert _strata_counts(Y, rows) == [6, 9, 15]
    assert est.relation_["n_prototypes"] == CAP
    assert est.relation_["prototype_selection"] == "stratified"
    said = f"p = min(n, MAX_AUTO_PROTOTYPES) = min(90, {CAP}) = {CAP} prototypes chosen by " \
           "'stratified'"
    assert said in est.route_reason_
    assert said in caplog.text
    np.testing.assert_array_equal(est.relation_map_.prototypes.toarray(), X[rows].toarray())
    # another seed, other prototypes, the same shares
    other = dmlfe.MDDM(n_components=2, route="relation", random_state=5).fit(X, Y)
    assert not np.array_equal(other.prototype_indices_, rows)
    assert _strata_counts(Y, other.prototype_indices_) == [6, 9, 15]


def test_at_most_cap_documents_are_all_prototypes_and_none_still_means_all(small_cap):
    X, Y = _data()
    few = dmlfe.MDDM(n_components=2, route="relation").fit(X[:CAP], Y[:CAP])
    np.testing.assert_array_equal(few.prototype_indices_, np.arange(CAP))
    assert few.relation_["prototype_selection"] == "all"
    assert f"p = n = {CAP} prototypes (every training document)" in few.route_reason_
    for kw in ({"n_prototypes": None}, {"prototype_selection": "all"},
               {"n_prototypes": None, "prototype_selection": "all"}):
        est = dmlfe.MDDM(n_components=2, route="relation", **kw).fit(X, Y)
        np.testing.assert_array_equal(est.prototype_indices_, np.arange(90))
        assert est.relation_["prototype_selection"] == "all"
    # an int p below n with the default selection: stratified too
    est = dmlfe.MDDM(n_components=2, route="relation", n_prototypes=60).fit(X, Y)
    assert est.prototype_indices_.size == 60 and _strata_counts(Y, est.prototype_indices_) \
        == [12, 18, 30]
    # a selection of the default's p
    est = dmlfe.MDDM(n_components=2, route="relation", prototype_selection="random").fit(X, Y)
    expect = np.sort(np.random.default_rng(0).choice(90, size=CAP, replace=False))
    np.testing.assert_array_equal(est.prototype_indices_, expect)


def test_kernel_mddm_default_on_a_cluster_equals_eq20_on_its_prototypes(
        small_cap, tmp_path, cluster_client):
    X, Y = _data(seed=3)
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=17)  # 6 chunks
    tau, mu, d = 3.0, 0.5, 2  # rank of H Y Y^T H: 2
    # max_gather_bytes=0: the relation features and their statistics on the workers
    est = dmlfe.KernelMDDM(n_components=d, variant="f", mu=mu, tau=tau, cache=False,
                           client=cluster_client, max_gather_bytes=0).fit(str(store))
    assert est.route_ == "relation" and est.relation_["similarity"] == "gaussian"
    rows = est.prototype_indices_
    assert rows.size == CAP and _strata_counts(Y, rows) == [6, 9, 15]
    mem = dmlfe.KernelMDDM(n_components=d, variant="f", mu=mu, tau=tau).fit(X, Y)
    np.testing.assert_array_equal(mem.prototype_indices_, rows)  # whatever the chunking
    # mddm eq. 20 on relation features, from the prototypes' rows
    Xd = X.toarray()

    def gauss(A, B):
        sq = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2)
        return np.exp(-sq / tau)

    R, K = gauss(Xd, Xd[rows]), gauss(Xd[rows], Xd[rows])
    n = Xd.shape[0]
    H = np.eye(n) - 1.0 / n
    A = R.T @ H @ (Y @ Y.T).astype(float) @ H @ R
    B = mu * R.T @ H @ R + (1 - mu) * K + est.regularization_ * np.eye(CAP)
    w = _top(A, B, d)
    np.testing.assert_allclose(est.eigenvalues_[:d], w, rtol=1e-8, atol=1e-10 * w[0])
    np.testing.assert_allclose(mem.eigenvalues_[:d], w, rtol=1e-8, atol=1e-10 * w[0])


def test_mddm_default_relation_route_equals_eigh_of_its_template(small_cap):
    X, Y = _data(seed=7)
    d = 2
    est = dmlfe.MDDM(n_components=d, variant="f", route="relation").fit(X, Y)
    R = X.toarray() @ X[est.prototype_indices_].toarray().T  # linear similarity
    Rc, Yc = R - R.mean(axis=0), Y - Y.mean(axis=0)
    A = Rc.T @ Yc @ Yc.T @ Rc
    B = 0.5 * Rc.T @ Rc + 0.5 * np.eye(CAP)
    w = _top(A, B, d)
    np.testing.assert_allclose(est.eigenvalues_[:d], w, rtol=1e-8, atol=1e-10 * w[0])


@pytest.mark.parametrize(("kw", "message"), [
    ({"n_prototypes": "many"}, r"n_prototypes='many' is not 'auto', None \(every training "
                               r"document\) or an int in \[1, inf\]"),
    ({"n_prototypes": 0}, r"n_prototypes=0 must be an int in \[1, inf\]"),
    ({"n_prototypes": 2.5}, r"n_prototypes=2.5 must be an int"),
    ({"prototype_selection": "best"},
     r"prototype_selection='best' is not one of \('auto', 'all', 'random', 'stratified', "
     r"'kmeans\+\+'\)"),
    ({"n_prototypes": 91}, r"n_prototypes=91 must lie between 1 and the number of training "
                           r"documents \(90\); use None for all of them or 'auto'"),
    ({"n_prototypes": 20, "prototype_selection": "all"},
     r"prototype_selection='all' takes every training document \(n = 90\) but "
     r"n_prototypes=20; choose 'auto', 'random'"),
])
def test_bad_values_name_the_parameter_and_the_allowed_values(kw, message):
    X, Y = _data()
    with pytest.raises((ValueError, TypeError), match=message):
        dmlfe.MDDM(n_components=2, route="relation", **kw).fit(X, Y)


def test_a_bad_count_off_the_relation_route_is_not_an_error():
    # n_prototypes only matters on the relation route: the feature route ignores it
    X, Y = _data()
    est = dmlfe.MDDM(n_components=2, route="feature", n_prototypes=500).fit(X, Y)
    assert est.route_ == "feature"


def test_resolve_prototypes():
    cap = prototypes.MAX_AUTO_PROTOTYPES
    resolve = prototypes.resolve_prototypes
    assert resolve(cap + 5) == (cap, prototypes.AUTO_SELECTION)
    assert resolve(cap - 5) == (cap - 5, "all")
    assert resolve(cap + 5, None) == (cap + 5, "all")
    assert resolve(cap + 5, "auto", "all") == (cap + 5, "all")
    assert resolve(cap + 5, "auto", "kmeans++") == (cap, "kmeans++")
    assert resolve(50, 50, "random") == (50, "all")  # p = n is every document
    p, rows = resolve(50, "auto", [7, 3])
    assert p == 2 and rows.tolist() == [3, 7]


def test_cli_default_and_all(tmp_path, small_cap, capsys):
    X, Y = _data()
    store = tmp_path / "s.zarr"
    write_store(store, X, Y, ["train"] * X.shape[0], chunk_rows=40)
    for extra, said in (([], f"p = {CAP} prototypes (stratified)"),
                        (["--prototype-selection", "all"], "p = 90 prototypes (all)"),
                        (["--prototypes", "45"], "p = 45 prototypes (stratified)")):
        out_dir = tmp_path / f"m{len(extra)}{extra[-1] if extra else ''}"
        assert main(["fit", str(store), "--method", "mddm_f", "--dim", "2", "--route",
                     "relation", "--out", str(out_dir), *extra]) == 0
        assert said in capsys.readouterr().out
