"""The method family and the dense solvers against independent dense references.

Every reference below is written directly from the papers' formulas with explicit
n x n matrices (the centring matrix H, label kernels, S_w(Y), ...) built from the
raw X and Y; none of them calls dmlfe.methods. The statistics fed to dmlfe are
computed here with plain numpy from the same dense X and Y.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.linalg as sla
from helpers import mulan_arrays

from dmlfe.methods import (
    cca,
    dmlda,
    label_correlation,
    lsi,
    mddm_f,
    mddm_p,
    mlda,
    mlda_weighted_labels,
    mlsi,
    mvmd,
    opls,
    pca,
    pls,
    weighted_scatter,
)
from dmlfe.methods.registry import METHODS, get_method
from dmlfe.solvers.dense import (
    eigh,
    eigh_generalized,
    solve_dense,
    thin_svd,
)
from dmlfe.solvers.dimension import choose_dimension, n_genuine
from dmlfe.solvers.result import flip_signs
from dmlfe.stats.sufficient import SufficientStats

BETA = 0.5
GAMMA = 0.1
MU = 0.5


# --------------------------------------------------------------------------- data


def make_stats(X: np.ndarray, Y: np.ndarray) -> SufficientStats:
    """Raw sums of (X, Y) with plain numpy."""
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    return SufficientStats(
        n=X.shape[0],
        sum_x=X.sum(axis=0),
        sum_y=Y.sum(axis=0),
        xty=X.T @ Y,
        yty=Y.T @ Y,
        xtx=X.T @ X,
    )


def random_data(n: int, D: int, q: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random features with non-zero means (so centring matters) and 0/1 labels.

    Every document has at least one label and every label at least two documents,
    so that eq. 44's 1/||y_i||_1 and every 1/n_k exist.
    """
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D)) * rng.uniform(0.5, 3.0, size=D) + rng.uniform(-2, 5, size=D)
    Y = (rng.uniform(size=(n, q)) < 0.35).astype(np.float64)
    Y[np.arange(n), rng.integers(0, q, size=n)] = 1.0
    return X, Y


def read_train(name: str) -> tuple[np.ndarray, np.ndarray]:
    X, Y = mulan_arrays(name)
    return X.toarray(), Y.astype(np.float64)


# ------------------------------------------------------- references from the papers


def _H(n: int) -> np.ndarray:
    """Centring matrix H = I - u u^T / l (mvmd eq. 5)."""
    return np.eye(n) - np.ones((n, n)) / n


def ref_problem(name: str, X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(A, B) of each method from the papers, with dense n x n algebra."""
    n, D = X.shape
    q = Y.shape[1]
    H = _H(n)
    I_D = np.eye(D)
    Xc, Yc = H @ X, H @ Y  # mvmd eq. 4: both centred except for LDA-type methods
    if name == "pca":  # mvmd eq. 11
        return Xc.T @ Xc, None
    if name == "lsi":  # mope eq. 2: no centring
        return X.T @ X, None
    if name in ("mddm_p", "pls"):  # mddm eq. 6, L = Y Y^T; mope eq. 15
        L = Y @ Y.T
        return X.T @ H @ L @ H @ X, None
    if name == "mddm_p_rbf":  # mddm section 3.3: L = Y B Y^T, B = rbf over label columns
        sq = np.array([[np.sum((Y[:, s] - Y[:, t]) ** 2) for t in range(q)] for s in range(q)])
        Bl = np.exp(-sq / n)
        return X.T @ H @ (Y @ Bl @ Y.T) @ H @ X, None
    if name == "mddm_f":  # mddm eq. 17 with centred X in the constraint
        L = Y @ Y.T
        return X.T @ H @ L @ H @ X, MU * Xc.T @ Xc + (1 - MU) * I_D
    if name == "mvmd":  # mvmd eq. 34 with +-1 labels (eq. 3) and H kept
        Yp = 2 * Y - 1
        return (1 - BETA) * Xc.T @ Xc + BETA * Xc.T @ H @ Yp @ Yp.T @ H @ Xc, None
    if name == "cca":  # mvmd eq. 40
        A = Xc.T @ Yc @ np.linalg.inv(Yc.T @ Yc + GAMMA * np.eye(q)) @ Yc.T @ Xc
        return A, Xc.T @ Xc + GAMMA * I_D
    if name == "opls":  # mope section 2.2.2
        return Xc.T @ Yc @ Yc.T @ Xc, Xc.T @ Xc
    if name == "mlsi":  # mvmd eq. 39
        M = (1 - BETA) * Xc @ Xc.T + BETA * Yc @ Yc.T + GAMMA * np.eye(n)
        return Xc.T @ Xc, Xc.T @ np.linalg.inv(M) @ Xc + GAMMA * I_D
    u = np.ones((n, 1))
    if name == "mlda":  # mvmd eq. 41-44, 47 on the weighted labels
        C = np.empty((q, q))
        for k in range(q):
            for j in range(q):
                yk, yj = Y[:, k], Y[:, j]
                C[k, j] = yk @ yj / (np.linalg.norm(yk) * np.linalg.norm(yj))
        Yw = np.vstack([C @ Y[i] / np.abs(Y[i]).sum() for i in range(n)])
        n_k = (u.T @ Yw).ravel()  # n_k = u^T y'(k)
        n1 = 1.0 / n_k
        Sw_Y = np.diag(Yw.sum(axis=1)) - Yw @ np.diag(n1) @ Yw.T
        tot = Yw.sum(axis=1, keepdims=True)  # sum_k y'(k)
        Sb_Y = Yw @ np.diag(n1) @ Yw.T - tot @ tot.T / n_k.sum()
        return X.T @ Sb_Y @ X, X.T @ Sw_Y @ X + GAMMA * I_D
    if name == "dmlda":  # mvmd eq. 45-47, symmetric part of the cross term
        n1 = 1.0 / (u.T @ Y).ravel()
        Sw_Y = np.diag(Y.sum(axis=1)) - Y @ np.diag(n1) @ Y.T
        cross = u @ n1[None, :] @ Y.T
        Sb_Y = q * np.eye(n) - (cross + cross.T) + n * Y @ np.diag(n1 * n1) @ Y.T - Sw_Y
        return X.T @ Sb_Y @ X, X.T @ Sw_Y @ X + GAMMA * I_D
    raise KeyError(name)


def ref_solve(A: np.ndarray, B: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """All eigenpairs, descending; generalised eigenvalues used directly."""
    A = (A + A.T) / 2
    if B is None:
        w, V = np.linalg.eigh(A)
    else:
        w, V = sla.eigh(A, (B + B.T) / 2)
    return w[::-1], V[:, ::-1]


def build(name: str, X: np.ndarray, Y: np.ndarray, stats: SufficientStats):
    """dmlfe's template for ``name`` (statistics per the registry's label coding)."""
    if name == "mddm_p_rbf":
        return mddm_p(stats, label_kernel="rbf")
    if name == "mlda":
        Yw = mlda_weighted_labels(Y, label_correlation(stats.yty))
        return mlda(make_stats(X, Yw), weighted_scatter(X, Yw.sum(axis=1)))
    if name == "dmlda":
        return dmlda(stats, weighted_scatter(X, Y.sum(axis=1)))
    if name == "opls":
        return opls(stats, gamma_x=0.0)
    return {
        "pca": pca,
        "lsi": lsi,
        "mddm_p": mddm_p,
        "pls": pls,
        "mddm_f": mddm_f,
        "mvmd": mvmd,
        "cca": cca,
        "mlsi": mlsi,
    }[name](stats)


ALL = [
    "pca",
    "lsi",
    "mddm_p",
    "mddm_p_rbf",
    "pls",
    "mddm_f",
    "mvmd",
    "cca",
    "opls",
    "mlsi",
    "mlda",
    "dmlda",
]


def check_against_reference(name: str, X: np.ndarray, Y: np.ndarray) -> None:
    stats = make_stats(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # none of these problems needs regularising
        res = solve_dense(build(name, X, Y, stats), n_components=0.999)
    A, B = ref_problem(name, X, Y)
    w_ref, V_ref = ref_solve(A, B)
    k_ref = int(np.sum(w_ref > 1e-10 * w_ref[0]))
    assert res.n_genuine == k_ref
    w = res.eigenvalues
    np.testing.assert_allclose(w[:k_ref], w_ref[:k_ref], rtol=1e-8, atol=1e-12 * w_ref[0])
    # d from eq. 15 written out on the reference eigenvalues
    c = np.cumsum(w_ref[:k_ref])
    d_ref = int(np.argmax(c >= 0.999 * c[-1])) + 1
    assert res.n_components == d_ref
    # leading subspaces by principal angles, wherever the eigengap makes them unique
    V = solve_dense(build(name, X, Y, stats), n_components=k_ref).components
    checked = 0
    for k in range(1, min(k_ref, 8) + 1):
        gap = (w_ref[k - 1] - w_ref[k]) / w_ref[0] if k < w_ref.size else 1.0
        if gap < 1e-4:
            continue
        angles = sla.subspace_angles(V[:, :k], V_ref[:, :k])
        assert np.max(angles) < 1e-6, (k, np.max(angles))
        checked += 1
    assert checked >= 1


@pytest.mark.parametrize("name", ALL)
def test_method_matches_reference_tall_random(name):
    X, Y = random_data(n=60, D=9, q=4, seed=1)
    check_against_reference(name, X, Y)


@pytest.mark.parametrize("name", [m for m in ALL if m != "opls"])
def test_method_matches_reference_wide_random(name):
    # D > n: the centred scatter is singular; the methods' own ridges keep B definite
    X, Y = random_data(n=18, D=25, q=3, seed=2)
    check_against_reference(name, X, Y)


@pytest.mark.parametrize("name", ALL)
def test_method_matches_reference_emotions(name):
    X, Y = read_train("emotions")
    assert X.shape == (391, 72) and Y.shape == (391, 6)
    check_against_reference(name, X, Y)


# ---------------------------------------------------- operator form vs dense form


@pytest.mark.parametrize(
    "build_fn",
    [
        pytest.param(lambda s, dense: pca(s, dense=dense), id="pca"),
        pytest.param(lambda s, dense: lsi(s, dense=dense), id="lsi"),
        pytest.param(lambda s, dense: mvmd(s, beta=0.3, dense=dense), id="mvmd"),
        pytest.param(lambda s, dense: mddm_p(s, dense=dense), id="mddm_p"),
        pytest.param(lambda s, dense: mddm_p(s, "rbf", dense=dense), id="mddm_p_rbf"),
        pytest.param(lambda s, dense: pls(s, dense=dense), id="pls"),
    ],
)
def test_operator_form_equals_dense_A(build_fn):
    X, Y = random_data(n=50, D=11, q=4, seed=3)
    stats = make_stats(X, Y)
    dense = build_fn(stats, True)
    op = build_fn(stats, False)
    assert op.A is None and op.operator_form
    A_op = op.operator_matrix(stats)
    np.testing.assert_allclose(A_op, dense.A, rtol=1e-10, atol=1e-10 * np.abs(dense.A).max())


def test_operator_form_parameters():
    X, Y = random_data(n=50, D=11, q=4, seed=4)
    stats = make_stats(X, Y)
    Xc = X - X.mean(axis=0)
    Yc = Y - Y.mean(axis=0)
    t = mvmd(stats, beta=0.25, dense=False)
    assert t.xx_coef == pytest.approx(0.75) and t.centred
    # sqrt(beta) Xc^T Y'c with Y' = 2Y - 1
    np.testing.assert_allclose(t.lowrank, 0.5 * Xc.T @ (2 * Y - 1 - (2 * Y - 1).mean(0)))
    t = mddm_p(stats, dense=False)
    assert t.xx_coef == 0.0 and t.is_pure_lowrank
    np.testing.assert_allclose(t.lowrank, Xc.T @ Yc, atol=1e-10)
    assert not lsi(stats, dense=False).centred


def test_operator_only_template_needs_matrix_free_solver():
    X, Y = random_data(n=30, D=6, q=3, seed=5)
    with pytest.raises(ValueError, match="matrix-free"):
        solve_dense(pca(make_stats(X, Y), dense=False))


def test_operator_form_without_xtx():
    X, Y = random_data(n=30, D=6, q=3, seed=5)
    stats = make_stats(X, Y)
    stats.xtx = None
    # the low-rank methods need only X^T Y
    assert solve_dense(mddm_p(stats, dense=False), 2).solver == "thin_svd"
    assert mvmd(stats, dense=False).lowrank.shape == (6, 3)
    with pytest.raises(ValueError, match="need_xtx=True"):
        pca(stats, dense=True)


# ------------------------------------------------------------------------ solvers


def test_thin_svd_equals_dense_eigh():
    rng = np.random.default_rng(6)
    F = rng.normal(size=(40, 5))
    w, U = thin_svd(F)
    assert U.shape == (40, 5)
    w_ref, V_ref = np.linalg.eigh(F @ F.T)
    w_ref, V_ref = w_ref[::-1], V_ref[:, ::-1]
    np.testing.assert_allclose(w, w_ref[:5], rtol=1e-10)
    for k in range(1, 6):
        assert np.max(sla.subspace_angles(U[:, :k], V_ref[:, :k])) < 1e-8
    # both paths use the same sign convention, so the vectors agree exactly
    w2, V2 = eigh(F @ F.T)
    np.testing.assert_allclose(U, V2[:, :5], atol=1e-8)


@pytest.mark.parametrize("used", [3, 8, 30])
def test_thin_svd_of_a_factor_with_zero_rows(used):
    """Zero rows (unused hashed features) are left out of the SVD when most rows are
    zero: the same pairs as the SVD of the whole factor, and zero rows in U."""
    rng = np.random.default_rng(used)
    F = np.zeros((60, 5))
    rows = rng.choice(60, size=used, replace=False)
    F[rows] = rng.normal(size=(used, 5))
    w, U = thin_svd(F)
    Ur, s, _ = np.linalg.svd(F, full_matrices=False)
    np.testing.assert_allclose(w, s**2, rtol=1e-12, atol=1e-12 * s[0] ** 2)
    assert U.shape == (60, 5)
    keep = s > 1e-8 * s[0]
    np.testing.assert_allclose(np.abs(U.T @ Ur)[np.ix_(keep, keep)], np.eye(keep.sum()),
                               atol=1e-10)
    unused = np.setdiff1d(np.arange(60), rows)
    assert np.abs(U[np.ix_(unused, keep)]).max() < 1e-12


def test_lowrank_template_uses_thin_svd_and_matches_eigh():
    X, Y = random_data(n=50, D=12, q=4, seed=7)
    t = mddm_p(make_stats(X, Y))
    r_svd = solve_dense(t, n_components=4)
    assert r_svd.solver == "thin_svd" and r_svd.eigenvalues.size == 4
    t.lowrank, t.operator_form = None, False  # force the dense path on the same A
    r_eig = solve_dense(t, n_components=4)
    assert r_eig.solver == "eigh" and r_eig.eigenvalues.size == 12
    np.testing.assert_allclose(r_svd.eigenvalues, r_eig.eigenvalues[:4], rtol=1e-9)
    np.testing.assert_allclose(r_svd.components, r_eig.components, atol=1e-8)


def test_generalized_eigenvalues_are_not_rayleigh_quotients_of_unit_vectors():
    rng = np.random.default_rng(8)
    G = rng.normal(size=(6, 6))
    A = G @ G.T
    B = np.diag([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    w, V, reg = eigh_generalized(A, B)
    assert reg == 0.0
    np.testing.assert_allclose(A @ V, B @ V * w, atol=1e-10)
    np.testing.assert_allclose(V.T @ B @ V, np.eye(6), atol=1e-10)
    assert np.all(np.diff(w) <= 0)


def test_singular_constraint_is_regularised_with_warning():
    X, Y = random_data(n=10, D=15, q=3, seed=9)
    stats = make_stats(X, Y)
    t = opls(stats)  # B = Xc^T Xc has rank <= 9 < 15
    expected = 1e-8 * np.trace(t.B) / 15
    with pytest.warns(RuntimeWarning, match=r"near-singular.*added [0-9.e+-]+ \* I"):
        res = solve_dense(t, n_components=2)
    assert res.solver == "eigh_generalized"
    assert res.regularization == pytest.approx(expected, rel=1e-6)
    B_reg = t.B + res.regularization * np.eye(15)
    A = t.A
    P = res.components
    np.testing.assert_allclose(A @ P, B_reg @ P * res.eigenvalues[:2], atol=1e-6 * np.abs(A).max())


def test_well_conditioned_constraint_is_not_touched():
    X, Y = random_data(n=60, D=8, q=3, seed=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = solve_dense(cca(make_stats(X, Y)), 2)
    assert res.regularization == 0.0


def test_indefinite_constraint_is_refused():
    with pytest.raises(ValueError, match="indefinite"):
        eigh_generalized(np.eye(3), np.diag([1.0, -0.5, 2.0]))


def test_sign_convention():
    rng = np.random.default_rng(11)
    G = rng.normal(size=(7, 7))
    A = G @ G.T
    w1, V1 = eigh(A)
    idx = np.argmax(np.abs(V1), axis=0)
    assert np.all(V1[idx, np.arange(7)] > 0)
    # flipping any column of an eigenbasis is undone by the convention
    flipped = V1 * np.array([1, -1, 1, -1, -1, 1, -1])
    np.testing.assert_array_equal(flip_signs(flipped), V1)
    # permuting the problem permutes the components (no hidden sign choice)
    perm = rng.permutation(7)
    _, V2 = eigh(A[np.ix_(perm, perm)])
    np.testing.assert_allclose(V2, V1[perm], atol=1e-10)


def test_small_genuine_eigenvalues_are_kept():
    # PCA of data whose last direction has variance 1e-8 of the first: genuine, kept
    rng = np.random.default_rng(12)
    Q, _ = np.linalg.qr(rng.normal(size=(4, 4)))
    Z = rng.normal(size=(200, 4))
    Z = (Z - Z.mean(0)) @ np.linalg.inv(np.linalg.cholesky(np.cov(Z.T, bias=True)).T)
    X = (Z * np.array([1.0, 0.5, 0.1, 1e-4])) @ Q.T + 3.0
    Y = (rng.uniform(size=(200, 2)) < 0.5).astype(float)
    res = solve_dense(pca(make_stats(X, Y)), n_components=1.0)
    assert res.n_genuine == 4 and res.n_components == 4
    np.testing.assert_allclose(res.eigenvalues, 200 * np.array([1.0, 0.25, 0.01, 1e-8]), rtol=1e-6)


# ---------------------------------------------------------------- dimension choice


def test_choose_dimension_threshold_and_roundoff():
    w = np.array([4.0, 3.0, 2.0, 1.0, 1e-12, -1e-13])
    assert n_genuine(w) == 4
    assert choose_dimension(w, 0.5) == 2  # 7 >= 5
    assert choose_dimension(w, 0.75) == 3  # 7 < 7.5 <= 9
    assert choose_dimension(w, 0.95) == 4  # 9 < 9.5
    assert choose_dimension(w, 1.0) == 4  # never into round-off
    assert choose_dimension(w, 3) == 3
    assert n_genuine(np.array([1.0, 1e-9, 1e-11, -1e-3])) == 2


@pytest.mark.parametrize("bad", [0, 7, 0.0, 1.5, -0.2, True])
def test_choose_dimension_rejects(bad):
    with pytest.raises((ValueError, TypeError)):
        choose_dimension(np.array([3.0, 2.0, 1.0, 0.5, 0.1, 0.0]), bad)


def test_fixed_d_into_roundoff_warns():
    X, Y = random_data(n=40, D=8, q=2, seed=13)
    with pytest.warns(RuntimeWarning, match="null space"):
        res = solve_dense(mddm_f(make_stats(X, Y)), n_components=4)
    assert res.n_genuine == 2 and res.n_components == 4


# ----------------------------------------------------------------------- registry


def test_registry():
    assert set(METHODS) == {
        "pca", "lsi", "mddm_p", "mddm_f", "mvmd", "cca", "pls", "opls", "mlsi", "mlda", "dmlda",
        "lpp", "olpp", "mope", "mesd", "ssmope", "hsl",
    }  # fmt: skip
    assert get_method("MDDMp") is METHODS["mddm_p"]
    assert METHODS["mvmd"].params == {"beta": 0.5}
    assert METHODS["mlsi"].params == {"beta": 0.5, "gamma_x": 0.1, "gamma_xy": 0.1,
                                      "label_rank": 256}
    assert METHODS["mddm_f"].params["mu"] == 0.5
    assert not METHODS["lsi"].centred and not METHODS["mlda"].centred
    assert METHODS["mlda"].needs_weighted_xtx and METHODS["mlda"].labels == "mlda_weighted"
    assert METHODS["mddm_p"].lowrank_only and not METHODS["mddm_p"].needs_xtx
    with pytest.raises(ValueError, match="unknown method 'nmf'"):
        get_method("nmf")
    X, Y = random_data(n=30, D=5, q=2, seed=14)
    stats = make_stats(X, Y)
    for name, spec in METHODS.items():
        if spec.needs_weighted_xtx or spec.needs_graph:  # graph builders: tests/test_graph.py
            continue
        t = spec.build(stats, **spec.params)
        assert t.method == name and t.centred == spec.centred
        assert t.generalized == spec.generalized


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: mvmd(s, beta=1.5), "beta=1.5"),
        (lambda s: mddm_f(s, mu=-0.1), "mu=-0.1"),
        (lambda s: cca(s, gamma_x=-1), "gamma_x=-1"),
        (lambda s: mlsi(s, gamma_xy=0.0), "gamma_xy=0.0"),
        (lambda s: mddm_p(s, label_kernel="cosine"), "label_kernel='cosine'"),
        (lambda s: mddm_p(s, label_kernel=np.eye(5)), r"shape \(5, 5\)"),
    ],
)
def test_parameter_errors_name_the_parameter(call, match):
    X, Y = random_data(n=20, D=4, q=3, seed=15)
    with pytest.raises(ValueError, match=match):
        call(make_stats(X, Y))


def test_mlsi_beta_one_uses_woodbury_branch():
    X, Y = random_data(n=40, D=6, q=3, seed=16)
    n = X.shape[0]
    H = _H(n)
    Xc, Yc = H @ X, H @ Y
    B_ref = Xc.T @ np.linalg.inv(Yc @ Yc.T + 0.2 * np.eye(n)) @ Xc + 0.3 * np.eye(6)
    t = mlsi(make_stats(X, Y), beta=1.0, gamma_x=0.3, gamma_xy=0.2)
    np.testing.assert_allclose(t.B, B_ref, rtol=1e-8, atol=1e-10 * np.abs(B_ref).max())


@pytest.mark.parametrize("m", [0, 1, 9, 200])
def test_spd_inverse_in_place_and_exactly_symmetric(m):
    from dmlfe.methods.template import spd_inverse

    rng = np.random.default_rng(m)
    W = rng.standard_normal((m, m + 2))
    M = W @ W.T + 0.1 * np.eye(m)
    ref = np.linalg.inv(M) if m else np.zeros((0, 0))
    work = M.copy()
    work[np.tril_indices(m, -1)] = np.nan  # only the upper triangle is read
    got = spd_inverse(work)
    assert got is work
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * (np.abs(ref).max() if m else 1))
    np.testing.assert_array_equal(got, got.T)
    if m > 1:
        with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
            spd_inverse(-M.copy())
        with pytest.raises(ValueError, match="in place"):
            spd_inverse(np.asfortranarray(M))
