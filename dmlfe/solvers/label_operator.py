"""The label-operator route: label-aware methods at thousands to hundreds of thousands
of labels, with no D x q, q x q or n x q dense array.

MDDMp with the linear label kernel (mddm eq. 5-7) and MVMD (mvmd eq. 30-37) are both

    A = c Xc^T Xc + g Xc^T Yc Yc^T Xc,      B = I,

with Xc = H X, Yc = H Y (0/1 labels; MVMD's +-1 coding is g = 4 beta, c = 1 - beta,
MDDMp's c = 0, g = 1). With many labels the dense forms fail on the label side: the
D x q F = Xc^T Yc of the thin SVD (2^20 x 30,000 is 250 GB), MVMD's q x q label factor,
the n-space route's n x q basis of Yc. Here A is only applied, by sparse products with
X and Y held on the driver as CSR matrices (read once, 12 bytes per stored value):

    A V = Xc^T (c W + g Yc (Yc^T W)),   W = Xc V,

each centred product being the raw sparse one minus a rank-one term
(Xc V = X V - 1 (m_x^T V)), so X and Y stay sparse. A costs two products with X and two
with Y per column, whatever q is: its cost is that of PCA's operator plus O(nnz(Y)).
The non-zero pairs of A = Xc^T L^T L Xc, with L = [sqrt(c) I_n; sqrt(g) Yc^T] (so
L^T L = c I + g Yc Yc^T), are also those of the (n + q) x (n + q) operator
K = L Xc Xc^T L^T (q x q when c = 0: MDDMp's g Yc^T Xc Xc^T Yc): its eigenvectors u
give the components p = Xc^T L^T u / sqrt(theta). The pairs are found in whichever
space is smaller, the used features or this stacked one (hashed text: 2^20 features
of which a few hundred thousand are used, against n + q), since the basis'
orthogonalisation grows with the dimension while the products cost the same.

The leading pairs are found by the thick-restart block Lanczos method of
:mod:`dmlfe.linalg.krylov` on the driver (:class:`~dmlfe.linalg.krylov.ArraySpace`),
stopped when every kept pair's residual is at most ``tol`` times its own eigenvalue;
the components live on the used features only (``columns``). The trace, a threshold
``n_components``' denominator, is c tr(Xc^T Xc) + g ||Xc^T Yc||_F^2, from the
statistics' sparse X^T Y (computed for a threshold only).

Memory on the driver: X and X^T (12 bytes per stored value each), Y and Y^T, the
Krylov basis (8 x dimension x basis bytes) and the components.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.linalg.krylov import (
    BLOCK,
    FLOOR,
    MAX_PASSES,
    TOL,
    ArraySpace,
    KrylovResult,
    ThickRestartLanczos,
)
from dmlfe.solvers.dimension import n_genuine, threshold_cap, threshold_rounds
from dmlfe.solvers.result import EigenResult, flip_signs_inplace
from dmlfe.stats.sufficient import SufficientStats


def _centred(M: sp.csr_matrix, V: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """(M - 1 mean^T) V: the product with the centred rows of M."""
    out = np.asarray(M @ V)
    out -= mean @ V
    return out


def _centred_t(MT: sp.csr_matrix, W: np.ndarray, mean: np.ndarray,
               rows: int = 1 << 15) -> np.ndarray:
    """(M - 1 mean^T)^T W, given M^T: the product with the centred columns.

    The rank-one term is subtracted a slab of ``rows`` rows at a time: with a million
    used features its outer product would be a second array of the result's size.
    """
    out = np.asarray(MT @ W)
    total = W.sum(axis=0)
    for a in range(0, out.shape[0], rows):
        out[a:a + rows] -= np.outer(mean[a:a + rows], total)
    return out


def _renumbered(X: sp.csr_matrix, columns: np.ndarray) -> sp.csr_matrix:
    """X[:, columns] sharing X's values and row pointer (only the column indices are
    new: at a million documents the values are a gigabyte); the indices stay unsorted
    within a row, which the products do not need. A stored value in a column outside
    ``columns`` (an explicit zero) takes the slicing copy instead."""
    # in X's index dtype, so that the new indices are made at their final size
    pos = np.full(X.shape[1], -1, dtype=X.indices.dtype)
    pos[columns] = np.arange(columns.size)
    idx = pos[X.indices]
    if idx.size and idx.min() < 0:
        return sp.csr_matrix(X[:, columns])
    return sp.csr_matrix((X.data, idx, X.indptr), shape=(X.shape[0], columns.size),
                         copy=False)


class LabelOperator:
    """A = c Xc^T Xc + g Xc^T Yc Yc^T Xc on the used features, applied by sparse
    products (see the module docstring).

    Parameters
    ----------
    X : scipy.sparse matrix (n, D)
        The training documents (held on the driver).
    Y : scipy.sparse matrix or ndarray (n, q)
        Their 0/1 labels.
    stats : SufficientStats
        Their statistics (the means and the used features).
    scatter_coef, label_coef : float
        c and g.
    """

    def __init__(self, X: Any, Y: Any, stats: SufficientStats, scatter_coef: float,
                 label_coef: float) -> None:
        X = sp.csr_matrix(X, dtype=np.float64)
        self.columns = stats.used_columns()
        used = np.arange(X.shape[1]) if self.columns is None else self.columns
        # the features numbered by falling document frequency: the rows of a block that
        # X V reads for each stored value then lie mostly in the few frequent features'
        # rows, which stay in the CPU's caches (hashed columns scatter those reads over
        # the whole block)
        counts = np.bincount(X.indices, minlength=X.shape[1])[used]
        self.order = np.argsort(-counts, kind="stable")
        self.X = X = _renumbered(X, used[self.order])
        self.XT = sp.csr_matrix(X.T)
        self.Y = sp.csr_matrix(Y, dtype=np.float64)
        self.YT = sp.csr_matrix(self.Y.T)
        self.mean_x = stats.mean_x[used[self.order]]
        self.mean_y = stats.mean_y
        self.c, self.g = float(scatter_coef), float(label_coef)
        self.n = int(X.shape[0])

    @property
    def n_used(self) -> int:
        """Used features: the dimension of the feature-space operator."""
        return int(self.X.shape[1])

    @property
    def n_labels(self) -> int:
        return int(self.Y.shape[1])

    def sorted_rows(self, P: np.ndarray) -> np.ndarray:
        """Rows of P (in this operator's feature order) in the order of ``columns``."""
        out = np.empty_like(P)
        out[self.order] = P
        return out

    # the four centred products; each is the sparse one less a rank-one term
    def xc(self, V: np.ndarray) -> np.ndarray:
        """Xc V (n x k)."""
        return _centred(self.X, V, self.mean_x)

    def xct(self, W: np.ndarray) -> np.ndarray:
        """Xc^T W (used x k)."""
        return _centred_t(self.XT, W, self.mean_x)

    def yc(self, U: np.ndarray) -> np.ndarray:
        """Yc U (n x k)."""
        return _centred(self.Y, U, self.mean_y)

    def yct(self, W: np.ndarray) -> np.ndarray:
        """Yc^T W (q x k)."""
        return _centred_t(self.YT, W, self.mean_y)

    def feature_product(self, V: np.ndarray) -> np.ndarray:
        """A V for V on the used features."""
        W = self.xc(V)
        Z = self.yc(self.yct(W))
        Z *= self.g
        if self.c:
            Z += self.c * W
        return self.xct(Z)

    @property
    def n_stacked(self) -> int:
        """Dimension of the stacked space: n + q (q when c = 0)."""
        return (self.n if self.c else 0) + self.n_labels

    def lt(self, U: np.ndarray) -> np.ndarray:
        """L^T U (n x k), L = [sqrt(c) I_n; sqrt(g) Yc^T] (the first block only if c > 0)."""
        top = self.n if self.c else 0
        out = self.yc(U[top:])
        out *= np.sqrt(self.g)
        if self.c:
            out += np.sqrt(self.c) * U[:top]
        return out

    def l(self, W: np.ndarray) -> np.ndarray:  # noqa: E743 - the factor's name
        """L W ((n + q) x k, or q x k if c = 0)."""
        bottom = self.yct(W)
        bottom *= np.sqrt(self.g)
        return np.vstack([np.sqrt(self.c) * W, bottom]) if self.c else bottom

    def stacked_product(self, U: np.ndarray) -> np.ndarray:
        """K U = L Xc Xc^T L^T U: the operator whose non-zero pairs are A's."""
        return self.l(self.xc(self.xct(self.lt(U))))

    def stacked_components(self, U: np.ndarray, theta: np.ndarray,
                           slab: int = 16) -> np.ndarray:
        """The components p = Xc^T L^T u / sqrt(theta) of the stacked pairs (U, theta),
        rows in the order of ``columns``; a pair at round-off (theta at most FLOOR x the
        largest) gives 0.

        Made ``slab`` columns at a time into the result, so that neither the n x k
        L^T U nor a second used x k array (the reordering) exists beside it.
        """
        k = U.shape[1]
        out = np.zeros((self.n_used, k))
        keep = theta > FLOOR * max(float(theta.max(initial=0.0)), np.finfo(float).tiny)
        for a in range(0, k, slab):
            cols = slice(a, min(a + slab, k))
            P = self.xct(self.lt(U[:, cols]))
            P /= np.sqrt(np.where(keep[cols], theta[cols], 1.0))
            P[:, ~keep[cols]] = 0.0
            out[self.order, cols] = P
        return out

    def stacked_space(self) -> bool:
        """Whether the pairs are found in the stacked space (the smaller basis)."""
        return self.n_stacked < self.n_used


def label_trace(stats: SufficientStats, scatter_coef: float, label_coef: float) -> float:
    """tr(A) = c tr(Xc^T Xc) + g ||Xc^T Yc||_F^2 from the raw sums (X^T Y sparse or dense).

    ||X^T Y - s_x s_y^T / n||_F^2 = ||X^T Y||_F^2 - 2 s_x^T X^T Y s_y / n
    + ||s_x||^2 ||s_y||^2 / n^2, without forming the D x q difference.
    """
    n = float(stats.n)
    sx, sy = stats.sum_x, stats.sum_y
    total = 0.0
    if scatter_coef:
        if stats.sumsq_x is None:
            raise ValueError("the statistics lack the column sums of squares of X; "
                             "recompute them")
        total += scatter_coef * (float(np.sum(stats.sumsq_x)) - float(sx @ sx) / n)
    if label_coef:
        S = stats.xty
        sq = float(S.multiply(S).sum()) if sp.issparse(S) else float(np.sum(np.square(S)))
        cross = float(sx @ np.asarray(S @ sy).ravel())
        fro = sq - 2.0 * cross / n + float(sx @ sx) * float(sy @ sy) / n ** 2
        total += label_coef * max(fro, 0.0)
    return total


def _pairs(op: LabelOperator, k: int, *, tol: float, max_passes: int, seed: int,
           block: int, solver: ThickRestartLanczos | None
           ) -> tuple[ThickRestartLanczos, ArraySpace, KrylovResult]:
    if solver is None:
        stacked = op.stacked_space()
        space = ArraySpace(op.stacked_product if stacked else op.feature_product,
                           op.n_stacked if stacked else op.n_used)
        solver = ThickRestartLanczos(space, block=min(block, space.dim), tol=tol, floor=FLOOR,
                                     max_passes=max_passes, seed=seed)
    return solver, solver.space, solver.solve(min(k, solver.space.dim))


def solve_label_operator(template: Any, X: Any, Y: Any, stats: SufficientStats,
                         n_components: int | float, *, max_components: int | None = None,
                         threshold_memory: int = 2**32, tol: float = TOL,
                         max_passes: int = MAX_PASSES, random_state: int = 0,
                         block: int = BLOCK) -> EigenResult:
    """The leading pairs of a template with ``label_scale = (c, g)`` on the driver.

    Returns an :class:`~dmlfe.solvers.result.EigenResult` with every computed pair, the
    components on the used features (``columns``), their residuals relative to their
    own eigenvalues' scale, and the trace; d is chosen by the caller.
    """
    c, g = template.label_scale
    op = LabelOperator(X, Y, stats, c, g)
    # a threshold's denominator; an int n_components needs no trace (nor X^T Y)
    trace = None if isinstance(n_components, numbers.Integral) else label_trace(stats, c, g)
    stacked = op.stacked_space()
    dim = op.n_stacked if stacked else op.n_used
    state: dict[str, Any] = {"solver": None}

    def solve(k: int) -> KrylovResult:
        state["solver"], state["space"], res = _pairs(
            op, k, tol=tol, max_passes=max_passes, seed=random_state, block=block,
            solver=state["solver"])
        return res

    rounds = None
    note = None
    if isinstance(n_components, numbers.Integral):
        res = solve(int(n_components))
    else:
        cap, note = threshold_cap(dim, max_components,
                                  threshold_memory // (8 * max(op.n_used, 1)),
                                  threshold_memory)

        def one(k: int) -> tuple[np.ndarray, float, KrylovResult]:
            r = solve(k)
            return r.eigenvalues, trace, r

        res, rounds = threshold_rounds(one, float(n_components), cap)
    space: ArraySpace = state["space"]
    vectors = space.vectors(res.coefficients)
    theta = np.clip(res.eigenvalues, 0.0, None)
    components = (op.stacked_components(vectors, theta) if stacked
                  else op.sorted_rows(vectors))
    info = {"route": "label-operator", "space": "stacked" if stacked else "features",
            "dimension": int(dim), "tol": tol, "block": res.info.get("block"),
            "max_basis": res.info.get("max_basis"), "restarts": res.restarts}
    if rounds is not None:
        info["rounds"] = rounds
        info["cap_note"] = note
    return EigenResult(components=flip_signs_inplace(components), columns=op.columns,
                       eigenvalues=res.eigenvalues, n_components=int(res.eigenvalues.size),
                       n_genuine=n_genuine(res.eigenvalues), solver="label-operator-lanczos",
                       n_passes=0, converged=bool(res.converged),
                       residuals=res.residuals, trace=trace, info=info)

