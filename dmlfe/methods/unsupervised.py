"""Unsupervised members of the family: PCA (centred) and LSI (uncentred)."""

from __future__ import annotations

from dmlfe.methods.template import TraceTemplate, raw_xtx
from dmlfe.stats.sufficient import SufficientStats


def pca(stats: SufficientStats, dense: bool = True, overwrite: bool = False) -> TraceTemplate:
    """Principal component analysis.

    max tr(P^T Xc^T Xc P) s.t. P^T P = I, i.e. Xc^T Xc P = P Lambda
    (mvmd eq. 10-11; mope eq. 1). Xc = H X is the centred data (mvmd eq. 4-5).

    Parameters
    ----------
    stats : SufficientStats
        Needs ``xtx`` only when ``dense``.
    dense : bool
        Form A = Xc^T Xc (D x D). With False only the operator form
        (xx_coef = 1, no low-rank part) is returned, for the matrix-free solver.
    overwrite : bool
        A is ``stats``' own X^T X, centred in place (:meth:`SufficientStats.centred_xtx`):
        the statistics hold no X^T X afterwards. For statistics that are the caller's.
    """
    A = stats.centred_xtx(overwrite=overwrite) if dense else None
    return TraceTemplate(
        method="pca",
        params={},
        centred=True,
        n_features=stats.n_features,
        A=A,
        xx_coef=1.0,
        operator_form=True,
    )


def lsi(stats: SufficientStats, dense: bool = True) -> TraceTemplate:
    """Latent semantic indexing: PCA without centring.

    min ||X - X P P^T||_F^2 s.t. P^T P = I (mope eq. 2), i.e. X^T X P = P Lambda
    with the *uncentred* X^T X; projections are Z = X P.
    """
    A = raw_xtx(stats).copy() if dense else None
    return TraceTemplate(
        method="lsi",
        params={},
        centred=False,
        n_features=stats.n_features,
        A=A,
        xx_coef=1.0,
        operator_form=True,
    )
