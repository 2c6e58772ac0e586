"""MVMD: maximise feature variance and feature-label dependence together."""

from __future__ import annotations

import numpy as np

from dmlfe.methods.template import TraceTemplate, check_fraction
from dmlfe.stats.outer import add_crossprod
from dmlfe.stats.sufficient import SufficientStats


def mvmd(stats: SufficientStats, beta: float = 0.5, dense: bool = True) -> TraceTemplate:
    """MVMD (mvmd eq. 30-37).

    G = (1 - beta) Xc^T Xc + beta Xc^T Y'c Y'c^T Xc,  G P = P Lambda,  P^T P = I,

    with labels coded +-1 (mvmd eq. 3), Y' = 2Y - 1, both X and Y' centred by H
    (mvmd eq. 4) and H kept in the dependence term; neither term is rescaled.
    Centring removes the shift, so Xc^T Y'c = 2 Xc^T Yc (0/1 statistics).
    beta = 0 is PCA, beta = 1 is MDDMp; 0.5 is the paper's setting (section 7).

    Parameters
    ----------
    dense : bool
        Form G (D x D, needs X^T X). The operator form xx_coef = 1 - beta,
        lowrank = sqrt(beta) Xc^T Y'c is always returned.
    """
    beta = check_fraction("beta", beta, "mvmd")
    if stats.sparse_labels:
        # G = (1 - beta) Xc^T Xc + beta Xc^T Y'c Y'c^T Xc with Y'c = 2 Yc
        return TraceTemplate(method="mvmd", params={"beta": beta}, centred=True,
                             n_features=stats.n_features, xx_coef=1.0 - beta,
                             label_scale=(1.0 - beta, 4.0 * beta))
    F = np.sqrt(beta) * (2.0 * stats.centred_xty())
    A = None
    if dense:
        A = stats.centred_xtx()  # a new array: updated in place, exactly symmetric
        A *= 1.0 - beta
        add_crossprod(A, F.T)
    return TraceTemplate(
        method="mvmd",
        params={"beta": beta},
        centred=True,
        n_features=stats.n_features,
        A=A,
        xx_coef=1.0 - beta,
        lowrank=F,
        operator_form=True,
        label_factor=2.0 * np.sqrt(beta) * np.eye(stats.n_labels),
    )
