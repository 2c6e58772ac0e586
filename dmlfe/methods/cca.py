"""CCA, PLS and OPLS: projections that maximise correlation / covariance with the labels.

Labels are coded 0/1 and centred (mope section 2.2.2; mvmd eq. 4).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dmlfe.methods.template import (
    TraceTemplate,
    check_nonneg,
    factor_product,
    inv_sqrt_pd,
    symmetrize,
)
from dmlfe.stats.sufficient import SufficientStats

#: Largest dense D x q Xc^T Yc (bytes) that CCA with a sparse label side forms: on the
#: relation route D = p prototypes (2,000 x 30,000 labels is 0.45 GiB).
MAX_LABEL_PRODUCT_BYTES = 2**30
#: Columns of Xc^T Yc solved against the label side at a time.
SOLVE_COLUMNS = 256


def cca(stats: SufficientStats, gamma_x: float = 0.1, gamma_y: float = 0.1) -> TraceTemplate:
    """Regularised CCA, projection for X only.

    Xc^T Yc (Yc^T Yc + gamma_y I)^{-1} Yc^T Xc P = (Xc^T Xc + gamma_x I) P Lambda
    (mvmd eq. 40; mope eq. 14 with the rCCA constraint). gamma_x = gamma_y = 0.1
    as in the MVMD paper's comparison (section 7).
    """
    gx = check_nonneg("gamma_x", gamma_x, "cca")
    gy = check_nonneg("gamma_y", gamma_y, "cca")
    if stats.sparse_labels:
        return _cca_sparse_labels(stats, gx, gy)
    xty = stats.centred_xty()
    yty = stats.centred_yty()
    yty[np.diag_indices_from(yty)] += gy
    root = inv_sqrt_pd(
        yty,
        "cca: Yc^T Yc + gamma_y I",
        "a label is constant over all documents (never or always present); drop it or use "
        "gamma_y > 0",
    )
    F = xty @ root
    B = stats.centred_xtx()
    B[np.diag_indices_from(B)] += gx
    return TraceTemplate(
        method="cca",
        params={"gamma_x": gx, "gamma_y": gy},
        centred=True,
        n_features=stats.n_features,
        A=factor_product(F),
        B=B,
        xx_coef=0.0,
        lowrank=F,
        operator_form=True,
        label_factor=root,
        constraint=(1.0, gx),
    )


def _cca_sparse_labels(stats: SufficientStats, gx: float, gy: float) -> TraceTemplate:
    """CCA's A = T W T^T, T = Xc^T Yc, W = (Yc^T Yc + gamma_y I)^{-1}, with Y^T Y sparse.

    Yc^T Yc + gamma_y I = C - s s^T / n with C = Y^T Y + gamma_y I sparse and s the label
    counts, so W T^T = C^{-1} T^T + C^{-1} s (s^T C^{-1} T^T) / (n - s^T C^{-1} s)
    (Sherman and Morrison): one sparse LU factorisation of C (SuperLU, symmetric mode),
    T^T solved SOLVE_COLUMNS columns at a time. No q x q dense matrix; T itself is D x q
    dense (D = p on the relation route), refused above MAX_LABEL_PRODUCT_BYTES. The
    template has only the dense form (no q x q label factor), so the dual and
    matrix-free routes are not taken.
    """
    D, q, n = stats.n_features, stats.n_labels, float(stats.n)
    if 8 * D * q > MAX_LABEL_PRODUCT_BYTES:
        raise ValueError(
            f"cca: with q = {q:,} labels it forms the dense D x q Xc^T Yc, "
            f"{8 * D * q / 2**30:.2f} GiB for D = {D:,}, above MAX_LABEL_PRODUCT_BYTES = "
            f"{MAX_LABEL_PRODUCT_BYTES / 2**30:g} GiB; fit it on relation features "
            "(route='relation', fewer n_prototypes) or use MDDM (variant 'p') or MVMD, "
            "which need no such matrix")
    xty = stats.xty
    T = (xty.toarray() if sp.issparse(xty) else np.array(xty, dtype=np.float64))
    T -= np.outer(stats.sum_x, stats.sum_y) / n
    C = sp.csc_matrix(stats.yty + gy * sp.identity(q, format="csc"))
    try:
        lu = spla.splu(C, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                       options={"SymmetricMode": True})
    except RuntimeError:
        raise ValueError(
            "cca: Y^T Y + gamma_y I is singular: a label is never present in the training "
            "documents; drop it or use gamma_y > 0") from None
    s = np.asarray(stats.sum_y, dtype=np.float64)
    u = lu.solve(s)
    denom = n - float(s @ u)
    if not denom > 1e-12 * n:
        raise ValueError("cca: Yc^T Yc + gamma_y I is singular (a label is present in every "
                         "document); drop it or use gamma_y > 0")
    A = np.empty((D, D))
    for start in range(0, D, SOLVE_COLUMNS):
        Z = lu.solve(np.asfortranarray(T[start:start + SOLVE_COLUMNS].T))
        Z += np.outer(u, s @ Z) / denom
        A[:, start:start + SOLVE_COLUMNS] = T @ Z
    B = stats.centred_xtx()
    B[np.diag_indices_from(B)] += gx
    return TraceTemplate(method="cca", params={"gamma_x": gx, "gamma_y": gy}, centred=True,
                         n_features=D, A=symmetrize(A), B=B, xx_coef=0.0,
                         constraint=(1.0, gx))


def pls(stats: SufficientStats, dense: bool = True) -> TraceTemplate:
    """PLS: max tr(P^T Xc^T Yc Yc^T Xc P) s.t. P^T P = I (mope eq. 15).

    The same matrix as MDDMp with the linear label kernel; A = F F^T with
    F = Xc^T Yc, solved by the thin SVD of F (no D x D matrix).
    """
    if stats.sparse_labels:
        return TraceTemplate(method="pls", params={}, centred=True,
                             n_features=stats.n_features, label_scale=(0.0, 1.0))
    F = stats.centred_xty()
    return TraceTemplate(
        method="pls",
        params={},
        centred=True,
        n_features=stats.n_features,
        A=factor_product(F) if dense else None,
        xx_coef=0.0,
        lowrank=F,
        operator_form=True,
        label_factor=np.eye(stats.n_labels),
    )


def opls(stats: SufficientStats, gamma_x: float = 0.0) -> TraceTemplate:
    """Orthonormalised PLS: PLS's objective with P^T Xc^T Xc P = I (mope section 2.2.2).

    Parameters
    ----------
    gamma_x : float
        Optional ridge on the constraint, P^T (Xc^T Xc + gamma_x I) P = I. With 0 a
        singular scatter (D > n, constant features) is regularised by the solver,
        which warns how much it added.
    """
    gx = check_nonneg("gamma_x", gamma_x, "opls")
    F = stats.centred_xty()
    B = stats.centred_xtx()
    B[np.diag_indices_from(B)] += gx
    return TraceTemplate(
        method="opls",
        params={"gamma_x": gx},
        centred=True,
        n_features=stats.n_features,
        A=factor_product(F),
        B=B,
        xx_coef=0.0,
        lowrank=F,
        operator_form=True,
        label_factor=np.eye(stats.n_labels),
        constraint=(1.0, gx),
    )
