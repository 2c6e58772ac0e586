"""CCA, PLS and OPLS: projections that maximise correlation / covariance with the labels.

Labels are coded 0/1 and centred (mope section 2.2.2; mvmd eq. 4).
"""

from __future__ import annotations

import numpy as np

from dmlfe.methods.template import TraceTemplate, check_nonneg, factor_product, inv_sqrt_pd
from dmlfe.stats.sufficient import SufficientStats


def cca(stats: SufficientStats, gamma_x: float = 0.1, gamma_y: float = 0.1) -> TraceTemplate:
    """Regularised CCA, projection for X only.

    Xc^T Yc (Yc^T Yc + gamma_y I)^{-1} Yc^T Xc P = (Xc^T Xc + gamma_x I) P Lambda
    (mvmd eq. 40; mope eq. 14 with the rCCA constraint). gamma_x = gamma_y = 0.1
    as in the MVMD paper's comparison (section 7).
    """
    gx = check_nonneg("gamma_x", gamma_x, "cca")
    gy = check_nonneg("gamma_y", gamma_y, "cca")
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


def pls(stats: SufficientStats, dense: bool = True) -> TraceTemplate:
    """PLS: max tr(P^T Xc^T Yc Yc^T Xc P) s.t. P^T P = I (mope eq. 15).

    The same matrix as MDDMp with the linear label kernel; A = F F^T with
    F = Xc^T Yc, solved by the thin SVD of F (no D x D matrix).
    """
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
