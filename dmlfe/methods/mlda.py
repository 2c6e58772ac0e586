"""Multi-label LDA (MLDA, label-correlation weighted) and direct MLDA (DMLDA).

mvmd eq. 41-47. Neither centres X or Y (mvmd eq. 4 excludes LDA-type methods).
Both need, besides X^T Y, a *row-weighted* scatter that no other method uses:

    W = X^T diag(w) X,   w_i = sum_k Ylab_ik   (the row sums of the label matrix),

because S_w(Y) = diag(sum_k y(k)) - Y diag(n(1)) Y^T (mvmd eq. 42) puts w on the
diagonal. The statistics pass must accumulate W next to the usual sums:

* MLDA: on the weighted labels Ylab = Y' of mvmd eq. 44 (needs C, eq. 43, first:
  C comes from the 0/1 Y^T Y, so compute it from the labels before the X pass);
  ``stats`` are the sufficient statistics of (X, Y').
* DMLDA: on the plain 0/1 labels (eq. 46 is written with S_w(Y)); ``stats`` are
  those of (X, Y) and must include X^T X (the q I term of eq. 46).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dmlfe.methods.template import (
    TraceTemplate,
    cancellation_to_zero,
    check_nonneg,
    raw_xtx,
    symmetrize,
)
from dmlfe.stats.outer import dense_crossprod, weighted_crossprod
from dmlfe.stats.sufficient import SufficientStats


def label_correlation(yty: np.ndarray | sp.spmatrix) -> np.ndarray | sp.csr_matrix:
    """C of mvmd eq. 43: cosine similarity of the 0/1 label columns, from raw Y^T Y.

    A label that no document carries has a zero row and column. A sparse Y^T Y gives a
    CSR C with the same non-zeros (the label pairs some document carries together).
    """
    if sp.issparse(yty):
        yty = sp.csr_matrix(yty, dtype=np.float64)
        inv = _inv_counts(np.sqrt(np.clip(yty.diagonal(), 0.0, None)))
        return sp.csr_matrix(sp.diags(inv) @ yty @ sp.diags(inv))
    yty = np.asarray(yty, dtype=np.float64)
    norms = np.sqrt(np.clip(np.diag(yty), 0.0, None))
    denom = np.outer(norms, norms)
    C = np.zeros_like(yty)
    np.divide(yty, denom, out=C, where=denom > 0)
    return C


def mlda_weighted_labels(Y: np.ndarray | sp.spmatrix, C: np.ndarray) -> np.ndarray:
    """Y' of mvmd eq. 44, row by row: y'_i = C y_i / ||y_i||_1.

    Works on any block of rows (it needs only C), so a chunked pass can apply it.
    A document without labels keeps an all-zero row (weight 0 in both scatters).
    """
    Yd = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    Yd = Yd.astype(np.float64, copy=False)
    l1 = np.abs(Yd).sum(axis=1)
    out = Yd @ C  # C is symmetric: (C y_i)^T = y_i^T C
    np.divide(out, l1[:, None], out=out, where=l1[:, None] > 0)
    out[l1 == 0] = 0.0
    return out


class WeightedLabels:
    """Picklable label map Y -> Y' (mvmd eq. 44) for a chunked pass over the label blocks.

    ``describe()`` identifies it in the statistics cache key.
    """

    def __init__(self, C: np.ndarray) -> None:
        self.C = np.asarray(C, dtype=np.float64)

    def __call__(self, Yb: np.ndarray | sp.spmatrix) -> np.ndarray:
        return mlda_weighted_labels(Yb, self.C)

    def describe(self) -> dict:
        return {"mlda_weighted": self.C.round(15).tolist()}


class RowNormalisedLabels:
    """MLDA's label map for a sparse label side: R = diag(1 / ||y_i||_1) Y, so that the
    weighted labels of mvmd eq. 44 are Y' = R C, never formed (a document's row of Y'
    has a non-zero for every label that co-occurs with one of its own: with a few
    frequent labels, most of q). The statistics hold the sums of R; the row weights of
    the weighted scatter are those of Y', w = Y' 1 = R (C 1). :func:`mlda` applies C
    (``stats.label_correlation``) when it builds the template.
    """

    def __init__(self, C: sp.spmatrix) -> None:
        self.C = sp.csr_matrix(C, dtype=np.float64)
        self.c1 = np.asarray(self.C.sum(axis=1), dtype=np.float64).ravel()

    def sparse_block(self, Yb: sp.spmatrix) -> tuple[sp.csr_matrix, np.ndarray]:
        """(R, w) of one CSR block of 0/1 labels."""
        Yb = sp.csr_matrix(Yb, dtype=np.float64)
        R = sp.csr_matrix(sp.diags(_inv_counts(np.asarray(abs(Yb).sum(axis=1)).ravel())) @ Yb)
        return R, R @ self.c1

    def describe(self) -> dict:
        return {"mlda_row_normalised": {"q": int(self.C.shape[0]), "nnz": int(self.C.nnz)}}


#: Bytes of one dense D x (label block) slab of :func:`label_weighted_gram`.
LABEL_BLOCK_BYTES = 2**27


def label_weighted_gram(xty: np.ndarray | sp.spmatrix, weights: np.ndarray,
                        right: sp.spmatrix | None = None) -> np.ndarray:
    """F diag(weights) F^T (D x D, weights >= 0) with F = X^T Y (D x q) -- or F = X^T Y C
    when ``right`` = C is given -- a block of labels at a time: no dense D x q array
    beyond a :data:`LABEL_BLOCK_BYTES` slab, for a sparse label side. Each slab's
    product is one ``dsyrk`` of F_J diag(weights_J)^{1/2}, so the sum is exactly
    symmetric."""
    D, q = xty.shape
    if sp.issparse(xty):
        xty = sp.csr_matrix(xty, dtype=np.float64)
    root = np.sqrt(np.clip(np.asarray(weights, dtype=np.float64), 0.0, None))
    out = np.zeros((D, D))
    step = max(1, LABEL_BLOCK_BYTES // (8 * max(1, D)))
    for j in range(0, q, step):
        cols = slice(j, min(q, j + step))
        if not root[cols].any():
            continue
        F = xty @ right[:, cols] if right is not None else xty[:, cols]
        F = F.toarray() if sp.issparse(F) else np.asarray(F, dtype=np.float64)
        out += dense_crossprod((F * root[cols]).T)
    return out


def weighted_scatter(X: np.ndarray | sp.spmatrix, w: np.ndarray) -> np.ndarray:
    """X^T diag(w) X (D x D, float64) for one block of rows; sum it over blocks."""
    out = weighted_crossprod(X, w)
    return np.asarray(out.toarray() if sp.issparse(out) else out, dtype=np.float64)


def _inv_counts(counts: np.ndarray) -> np.ndarray:
    """n(1) = [1/n_1, ..., 1/n_q]; an empty label gets 0 (its column of Y is zero)."""
    out = np.zeros_like(counts, dtype=np.float64)
    np.divide(1.0, counts, out=out, where=counts > 0)
    return out


def _check_xtwx(stats: SufficientStats, xtwx: np.ndarray) -> None:
    D = stats.n_features
    if xtwx.shape != (D, D):
        raise ValueError(
            f"the row-weighted scatter X^T diag(w) X has shape {xtwx.shape}, expected ({D}, {D})"
        )


def _within(stats: SufficientStats, xtwx: np.ndarray, n1: np.ndarray) -> np.ndarray:
    """S_w = X^T S_w(Y) X = W - X^T Y diag(n(1)) Y^T X (mvmd eq. 41-42)."""
    _check_xtwx(stats, xtwx)
    if stats.sparse_labels:
        return symmetrize(xtwx - label_weighted_gram(stats.xty, n1))
    xty = stats.xty
    return symmetrize(xtwx - (xty * n1) @ xty.T)


def _mlda_factored(stats: SufficientStats, xtwx: np.ndarray, C: sp.spmatrix
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(S_b, S_w) of :func:`mlda` from the statistics of R = diag(1 / ||y||_1) Y
    (:class:`RowNormalisedLabels`): X^T Y' = (X^T R) C, n_k = (1^T R C)_k and
    X^T w = X^T R (C 1), applied a block of labels at a time."""
    _check_xtwx(stats, xtwx)
    C = sp.csr_matrix(C, dtype=np.float64)
    n_k = np.asarray(C.T @ np.asarray(stats.sum_y, dtype=np.float64)).ravel()
    between = label_weighted_gram(stats.xty, _inv_counts(n_k), right=C)
    xw = np.asarray(stats.xty @ np.asarray(C.sum(axis=1)).ravel()).ravel()
    total = float(n_k.sum())
    mean_part = np.outer(xw, xw) / total if total > 0 else np.zeros_like(between)
    Sb = cancellation_to_zero(between - mean_part, between, mean_part)
    return Sb, symmetrize(xtwx - between)


def mlda(stats: SufficientStats, xtwx: np.ndarray, gamma_xy: float = 0.1) -> TraceTemplate:
    """MLDA with label-correlation weights (mvmd eq. 41-44, 47).

    S_b P = (S_w + gamma_xy I) P Lambda with, for the weighted labels Y',
    S_w = X^T diag(w) X - X^T Y' diag(n(1)) Y'^T X and
    S_b = X^T Y' diag(n(1)) Y'^T X - (1/n) X^T w w^T X, w = Y' 1, n_k = 1^T y'(k),
    n = sum_k n_k. X is not centred.

    Parameters
    ----------
    stats : SufficientStats
        Statistics of (X, Y') with Y' from :func:`mlda_weighted_labels`.
        With a sparse label side (``stats.label_correlation`` set): statistics of
        R = diag(1 / ||y_i||_1) Y, Y' = R C (:class:`RowNormalisedLabels`).
    xtwx : ndarray (D, D)
        X^T diag(Y' 1) X.
    gamma_xy : float
        Ridge on S_w; 0.1 in the MVMD paper's comparison.
    """
    g = check_nonneg("gamma_xy", gamma_xy, "mlda")
    C = getattr(stats, "label_correlation", None)
    if C is not None:
        Sb, Sw = _mlda_factored(stats, xtwx, C)
    else:
        n_k = np.asarray(stats.sum_y, dtype=np.float64)
        n1 = _inv_counts(n_k)
        xty = stats.xty
        Sw = _within(stats, xtwx, n1)
        xw = xty.sum(axis=1)  # X^T w, w = Y' 1
        total = float(n_k.sum())
        between = (xty * n1) @ xty.T
        mean_part = np.outer(xw, xw) / total if total > 0 else np.zeros_like(between)
        Sb = cancellation_to_zero(between - mean_part, between, mean_part)
    B = Sw
    B[np.diag_indices_from(B)] += g
    return TraceTemplate(
        method="mlda",
        params={"gamma_xy": g},
        centred=False,
        n_features=stats.n_features,
        A=symmetrize(Sb),
        B=B,
    )


@dataclass
class WeightedPencil:
    """A = X^T Phi Phi^T X, B = X^T (diag(w) - V V^T) X + gamma I in the n-space (X not
    centred): what the dual route needs of MLDA instead of its D x D template
    (:func:`dmlfe.solvers.dual.solve_dual`'s ``weighted``)."""

    method: str
    params: dict
    phi: np.ndarray
    w: np.ndarray
    V: np.ndarray
    gamma: float


def mlda_nspace(Yw: np.ndarray, gamma_xy: float = 0.1) -> WeightedPencil:
    """MLDA's S_b and S_w + gamma I (:func:`mlda`) as n-space factors of the weighted
    labels Y' (mvmd eq. 44).

    S_b = X^T Y' Cq Y'^T X with Cq = diag(n(1)) - 1 1^T / N (N = sum_k n_k), which is
    positive semi-definite (Cauchy-Schwarz: sum x_k^2 / n_k >= (sum x_k)^2 / N), so
    Phi = Y' Cq^{1/2}; S_w = X^T (diag(w) - V V^T) X with w = Y' 1, V = Y' diag(n(1))^{1/2}.
    """
    g = check_nonneg("gamma_xy", gamma_xy, "mlda")
    Yw = np.asarray(Yw, dtype=np.float64)
    n_k = Yw.sum(axis=0)
    n1 = _inv_counts(n_k)
    # Cq on the labels some document carries: an empty label's column of Y' is zero, and
    # with it Cq would not be positive semi-definite (its n(1) entry is 0, not 1 / 0)
    kept = np.flatnonzero(n_k > 0)
    Cq = np.diag(n1[kept]) - 1.0 / float(n_k.sum()) if kept.size else np.zeros((0, 0))
    ev, U = np.linalg.eigh(Cq)
    root = U * np.sqrt(np.clip(ev, 0.0, None))  # Cq = root root^T up to round-off
    return WeightedPencil("mlda", {"gamma_xy": g}, Yw[:, kept] @ root, Yw.sum(axis=1),
                          Yw * np.sqrt(n1), g)


@dataclass
class DirectPencil:
    """A = X^T (diag(a_diag) + F C F^T) X, B = X^T (diag(w) - V V^T) X + gamma I in the
    n-space (X not centred): what the dual route's operator form needs of DMLDA instead
    of its D x D template (:func:`dmlfe.solvers.dual.solve_dual`'s ``weighted``). F is
    n x m with m small, C symmetric m x m (A's middle matrix may be indefinite)."""

    method: str
    params: dict
    a_diag: np.ndarray
    a_factor: np.ndarray
    a_core: np.ndarray
    w: np.ndarray
    V: np.ndarray
    gamma: float


def dmlda_nspace(Y: np.ndarray, gamma_xy: float = 0.1) -> DirectPencil:
    """DMLDA's S_b and S_w + gamma I (:func:`dmlda`) as n-space matrices of the 0/1 labels.

    S_w = X^T (diag(w) - V V^T) X with w = Y 1, V = Y diag(n(1))^{1/2}, and
    S_b = X^T M_b X with M_b = q I - (1 a^T + a 1^T) + l Y diag(n(1)^2) Y^T - S_w(Y),
    a = Y n(1), l the number of documents (mvmd eq. 45-46, the cross term symmetrised
    as in :func:`dmlda`): M_b = diag(q - w) + [Y, 1, a] C [Y, 1, a]^T with
    C = diag(n(1) + l n(1)^2) on the labels and [[0, -1], [-1, 0]] on (1, a).
    """
    g = check_nonneg("gamma_xy", gamma_xy, "dmlda")
    Y = np.asarray(Y, dtype=np.float64)
    n, q = Y.shape
    n1 = _inv_counts(Y.sum(axis=0))
    w = Y.sum(axis=1)
    a = Y @ n1
    core = np.zeros((q + 2, q + 2))
    core[np.diag_indices(q)] = n1 + n * n1 * n1
    core[q, q + 1] = core[q + 1, q] = -1.0
    factor = np.hstack([Y, np.ones((n, 1)), a[:, None]])
    return DirectPencil("dmlda", {"gamma_xy": g}, q - w, factor, core, w, Y * np.sqrt(n1), g)


def dmlda(stats: SufficientStats, xtwx: np.ndarray, gamma_xy: float = 0.1) -> TraceTemplate:
    """Direct MLDA (mvmd eq. 45-47).

    S_b = X^T (q I - (u n(1)^T Y^T + Y n(1) u^T) + l Y diag(n(1) o n(1)) Y^T - S_w(Y)) X,
    S_b P = (S_w + gamma_xy I) P Lambda, 0/1 labels, X not centred. The cross
    term -2 u n(1)^T Y^T of eq. 46 is not symmetric as printed; its symmetric
    part is used (the quadratic form p^T S_b p is the same either way). In terms
    of the statistics, with s = X^T u and v = X^T Y n(1):

        S_b = q X^T X - (s v^T + v s^T) + l X^T Y diag(n(1)^2) Y^T X - S_w.

    Parameters
    ----------
    stats : SufficientStats
        Statistics of (X, Y), 0/1 labels, with X^T X.
    xtwx : ndarray (D, D)
        X^T diag(Y 1) X (w_i = number of labels of document i).
    """
    g = check_nonneg("gamma_xy", gamma_xy, "dmlda")
    n1 = _inv_counts(np.asarray(stats.sum_y, dtype=np.float64))
    xty = stats.xty
    q = stats.n_labels
    Sw = _within(stats, xtwx, n1)
    v = np.asarray(xty @ n1).ravel()
    s = stats.sum_x
    between = label_weighted_gram(xty, n1 * n1) if stats.sparse_labels else \
        (xty * (n1 * n1)) @ xty.T
    terms = (q * raw_xtx(stats), np.outer(s, v) + np.outer(v, s), stats.n * between, Sw)
    Sb = cancellation_to_zero(terms[0] - terms[1] + terms[2] - terms[3], *terms)
    B = Sw.copy()
    B[np.diag_indices_from(B)] += g
    return TraceTemplate(
        method="dmlda",
        params={"gamma_xy": g},
        centred=False,
        n_features=stats.n_features,
        A=symmetrize(Sb),
        B=B,
    )
