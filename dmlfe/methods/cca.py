"""CCA, PLS and OPLS: projections that maximise correlation / covariance with the labels.

Labels are coded 0/1 and centred (mope section 2.2.2; mvmd eq. 4).
"""

from __future__ import annotations

import numpy as np

from dmlfe.methods.label_space import LABEL_RANK, principal_label_side
from dmlfe.methods.template import (
    TraceTemplate,
    check_nonneg,
    factor_product,
    inv_sqrt_pd,
)
from dmlfe.stats.sufficient import SufficientStats


def cca(stats: SufficientStats, gamma_x: float = 0.1, gamma_y: float = 0.1,
        label_rank: int = LABEL_RANK) -> TraceTemplate:
    """Regularised CCA, projection for X only.

    Xc^T Yc (Yc^T Yc + gamma_y I)^{-1} Yc^T Xc P = (Xc^T Xc + gamma_x I) P Lambda
    (mvmd eq. 40; mope eq. 14 with the rCCA constraint). gamma_x = gamma_y = 0.1
    as in the MVMD paper's comparison (section 7). ``label_rank``: the principal label
    directions kept when the label side is sparse (see :func:`_cca_sparse_labels`);
    the dense label path (at most MAX_DENSE_LABELS labels) uses every label.
    """
    gx = check_nonneg("gamma_x", gamma_x, "cca")
    gy = check_nonneg("gamma_y", gamma_y, "cca")
    if stats.sparse_labels:
        return _cca_sparse_labels(stats, gx, gy, int(label_rank))
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


def _cca_sparse_labels(stats: SufficientStats, gx: float, gy: float,
                       label_rank: int) -> TraceTemplate:
    """CCA (mvmd eq. 40) with Y^T Y sparse: the label side in its leading principal
    directions (:func:`_principal_label_template`), whitened.

    With Yc^T Yc = V Theta V^T and the r = min(q, label_rank) leading pairs
    (Theta_r, V_r), the label side Yc V_r has the scatter Theta_r, so its whitening is
    the diagonal (Theta_r + gamma_y I)^{-1/2} and

        A = F F^T,   F = Xc^T Yc V_r (Theta_r + gamma_y I)^{-1/2}   (D x r),

    with no q x q dense matrix. This is CCA of X against the labels' r principal
    components (principal label space transformation, Tai & Lin 2012): exact when
    r = q, and then the same A as the dense path. Directions with Theta + gamma_y = 0
    (labels absent from every document, gamma_y = 0) carry Yc v = 0 and are left out.
    """
    return _principal_label_template(stats, "cca", {"gamma_x": gx, "gamma_y": gy}, gx,
                                     label_rank, gy)


def _principal_label_template(stats: SufficientStats, method: str, params: dict,
                              gx: float, label_rank: int,
                              gamma_y: float | None) -> TraceTemplate:
    """The template A = F F^T, B = Xc^T Xc + gamma_x I of CCA (``gamma_y``: the label
    side whitened) or OPLS (None: not whitened) with the label side in its r leading
    principal directions V_r, F = Xc^T Yc V_r [(Theta_r + gamma_y I)^{-1/2}].

    Xc^T Yc and the pairs (Theta_r, V_r) of Yc^T Yc come from
    :func:`~dmlfe.methods.label_space.principal_label_side`.
    """
    D, q = stats.n_features, stats.n_labels
    T, theta, V = principal_label_side(stats, method, label_rank)
    shift = 0.0 if gamma_y is None else gamma_y
    keep = theta + shift > 1e-12 * max(float(theta.max(initial=0.0)), 1.0)
    root = V[:, keep] if gamma_y is None else V[:, keep] / np.sqrt(theta[keep] + shift)
    F = T @ root
    B = stats.centred_xtx()
    B[np.diag_indices_from(B)] += gx
    r = int(root.shape[1])
    return TraceTemplate(method=method, params=params, centred=True,
                         n_features=D, A=factor_product(F), B=B, xx_coef=0.0, lowrank=F,
                         operator_form=True, label_factor=root, constraint=(1.0, gx),
                         notes=[f"the label side in its {r} leading principal directions "
                                f"of q = {q:,} (label_rank = {label_rank})"])


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


def opls(stats: SufficientStats, gamma_x: float = 0.0,
         label_rank: int = LABEL_RANK) -> TraceTemplate:
    """Orthonormalised PLS: PLS's objective with P^T Xc^T Xc P = I (mope section 2.2.2).

    Parameters
    ----------
    gamma_x : float
        Optional ridge on the constraint, P^T (Xc^T Xc + gamma_x I) P = I. With 0 a
        singular scatter (D > n, constant features) is regularised by the solver,
        which warns how much it added.
    label_rank : int
        With a sparse label side (more than MAX_DENSE_LABELS labels), the labels'
        leading principal directions kept: A = Xc^T Yc V_r V_r^T Yc^T Xc, OPLS against
        the labels' r principal components (exact when r reaches q); see
        :func:`_principal_label_template`.
    """
    gx = check_nonneg("gamma_x", gamma_x, "opls")
    if stats.sparse_labels:
        return _principal_label_template(stats, "opls", {"gamma_x": gx}, gx,
                                         int(label_rank), None)
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
