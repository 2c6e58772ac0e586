"""MLSI: multi-label informed latent semantic indexing."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla

from dmlfe.methods.label_space import LABEL_RANK, principal_label_side
from dmlfe.methods.template import (
    TraceTemplate,
    check_fraction,
    check_nonneg,
    spd_inverse,
    symmetrize,
)
from dmlfe.stats.sufficient import SufficientStats


def _xt_minv_x(S: np.ndarray, xty: np.ndarray, yty: np.ndarray, beta: float,
               gamma_xy: float) -> np.ndarray:
    """Xc^T ((1 - beta) Xc Xc^T + beta Yc Yc^T + gamma_xy I_n)^{-1} Xc without any n x n matrix.

    With Z = [sqrt(1 - beta) Xc, sqrt(beta) Yc] (n x (D + q)) the middle matrix is
    Z Z^T + g I, and Z^T (Z Z^T + g I)^{-1} Z = I - g (Z^T Z + g I)^{-1}. Since
    Xc = Z E with E = [I / sqrt(1 - beta); 0], the product is
    (I - g [(Z^T Z + g I)^{-1}]_{DD}) / (1 - beta): only the (D + q) square Gram
    Z^T Z, which comes from the centred statistics. This form does not subtract
    two nearly equal matrices, unlike the Woodbury expansion, which is used only
    for beta = 1 where E does not exist.

    ``S``, ``xty``, ``yty``: Xc^T Xc (overwritten with the result), Xc^T Yc and
    Yc^T Yc -- or, for a sparse label side, Xc^T Yc V_r and Theta_r, the label side
    Yc V_r in its r leading principal directions.
    """
    D, q = xty.shape
    g = gamma_xy
    if beta < 1.0:
        c = np.sqrt(beta * (1.0 - beta))

        def middle() -> np.ndarray:  # Z^T Z + g I
            Z = np.empty((D + q, D + q))
            np.multiply(S, 1.0 - beta, out=Z[:D, :D])
            Z[:D, D:] = c * xty
            Z[D:, :D] = c * xty.T
            Z[D:, D:] = beta * yty
            Z[np.diag_indices_from(Z)] += g
            return Z

        try:  # one triangle read
            inv = spd_inverse(middle())
        except np.linalg.LinAlgError:  # positive definite in exact arithmetic only
            inv = symmetrize(sla.inv(symmetrize(middle()), check_finite=False))
        # (I - g inv_DD) / (1 - beta), written into S (no further D x D array)
        np.multiply(inv[:D, :D], -g / (1.0 - beta), out=S)
        del inv
        S[np.diag_indices_from(S)] += 1.0 / (1.0 - beta)
        return S
    # beta = 1: (Yc Yc^T + g I)^{-1} = (I - Yc (Yc^T Yc + g I)^{-1} Yc^T) / g
    K = yty.copy()
    K[np.diag_indices_from(K)] += g
    return symmetrize((S - xty @ sla.solve(K, xty.T, assume_a="pos")) / g)


def mlsi(
    stats: SufficientStats, beta: float = 0.5, gamma_x: float = 0.1, gamma_xy: float = 0.1,
    label_rank: int = LABEL_RANK,
) -> TraceTemplate:
    """MLSI (mvmd eq. 39).

    (Xc^T Xc) P = (Xc^T ((1 - beta) Xc Xc^T + beta Yc Yc^T + gamma_xy I)^{-1} Xc
    + gamma_x I) P Lambda, labels 0/1 centred. beta = 0.5 is the recommended value
    and gamma_x = gamma_xy = 0.1 the MVMD paper's setting (section 7).
    gamma_xy must be > 0: without it the n x n middle matrix is singular
    whenever n > D + q.

    With a sparse label side (more than MAX_DENSE_LABELS labels) Yc Yc^T is that of
    Yc V_r, the labels in their r = min(q, ``label_rank``) leading principal
    directions (:func:`~dmlfe.methods.label_space.principal_label_side`): exact when r
    reaches q, and no (D + q) square matrix.
    """
    beta = check_fraction("beta", beta, "mlsi")
    gx = check_nonneg("gamma_x", gamma_x, "mlsi")
    gxy = check_nonneg("gamma_xy", gamma_xy, "mlsi", strict=True)
    notes = []
    if stats.sparse_labels:
        T, theta, V = principal_label_side(stats, "mlsi", label_rank)
        xty, yty = T @ V, np.diag(theta)
        notes.append(f"the label side in its {V.shape[1]} leading principal directions of "
                     f"q = {stats.n_labels:,} (label_rank = {label_rank})")
    else:
        xty, yty = stats.centred_xty(), stats.centred_yty()
    B = _xt_minv_x(stats.centred_xtx(), xty, yty, beta, gxy)
    B[np.diag_indices_from(B)] += gx
    return TraceTemplate(
        method="mlsi",
        params={"beta": beta, "gamma_x": gx, "gamma_xy": gxy},
        centred=True,
        n_features=stats.n_features,
        A=stats.centred_xtx(),
        B=B,
        xx_coef=1.0,
        operator_form=True,
        inverse_constraint=(1.0 - beta, beta, gxy, gx),
        notes=notes,
    )
