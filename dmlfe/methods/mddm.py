"""MDDM: multi-label dimensionality reduction via dependence maximisation (HSIC).

Zhang & Zhou, mddm section 3. With the label kernel L = Y B Y^T (mddm section 3.3;
B = I is the linear kernel L = Y Y^T, mddm eq. 2) the objective matrix is

    X^T H L H X = Xc^T Yc B Yc^T Xc = F F^T,   F = Xc^T Yc B^{1/2}   (D x q),

so A is never needed as a D x D matrix: the thin SVD of F solves MDDMp.
Labels are coded 0/1 (mddm section 3.1.1).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from dmlfe.methods.template import (
    TraceTemplate,
    check_fraction,
    check_nonneg,
    factor_product,
    psd_sqrt,
    symmetrize,
)
from dmlfe.stats.sufficient import SufficientStats

LabelKernel = Literal["linear", "rbf"] | np.ndarray


def rbf_label_correlation(stats: SufficientStats, gamma: float | None = None) -> np.ndarray:
    """RBF kernel between label columns (mddm section 3.3, after Liu et al. 2006).

    Each label s is the N-vector theta_s of its 0/1 column of Y, and
    B_st = exp(-gamma ||theta_s - theta_t||^2), with the squared distances taken
    from the raw Y^T Y: ||theta_s - theta_t||^2 = YtY_ss + YtY_tt - 2 YtY_st
    (the number of documents on which labels s and t disagree).

    Parameters
    ----------
    gamma : float, optional
        Kernel width; default 1 / N, so B_st = exp(-fraction of documents where
        s and t disagree).
    """
    if gamma is None:
        gamma = 1.0 / stats.n
    gamma = check_nonneg("rbf_gamma", gamma, "mddm")
    yty = stats.yty
    d = np.diag(yty)
    sq = np.clip(d[:, None] + d[None, :] - 2.0 * yty, 0.0, None)
    return np.exp(-gamma * sq)


def label_kernel_matrix(
    stats: SufficientStats, label_kernel: LabelKernel = "linear", rbf_gamma: float | None = None
) -> np.ndarray | None:
    """The q x q label-correlation matrix B of L = Y B Y^T; None for the linear kernel."""
    if isinstance(label_kernel, str):
        if label_kernel == "linear":
            return None
        if label_kernel == "rbf":
            return rbf_label_correlation(stats, rbf_gamma)
        raise ValueError(
            f"mddm: label_kernel={label_kernel!r} is unknown; use 'linear', 'rbf' or a "
            "q x q label-correlation matrix"
        )
    Bl = np.asarray(label_kernel, dtype=np.float64)
    q = stats.n_labels
    if Bl.shape != (q, q):
        raise ValueError(
            f"mddm: the label-correlation matrix has shape {Bl.shape}, expected ({q}, {q}) "
            "(one row and column per label)"
        )
    if not np.allclose(Bl, Bl.T, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(Bl).max()))):
        raise ValueError("mddm: the label-correlation matrix must be symmetric")
    return symmetrize(Bl)


def _dependence_parts(
    stats: SufficientStats, label_kernel: LabelKernel, rbf_gamma: float | None,
    xty: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(Xc^T Yc, B_label or None, F = Xc^T Yc K, K = B^{1/2}); F, K None when B is not PSD.

    ``xty``: Xc^T Yc when the caller has it (on the used features' rows only:
    :meth:`SufficientStats.centred_xty_rows`; F then has the same rows).
    """
    if xty is None:
        xty = stats.centred_xty()
    Bl = label_kernel_matrix(stats, label_kernel, rbf_gamma)
    if Bl is None:
        return xty, None, xty, np.eye(stats.n_labels)
    root = psd_sqrt(Bl)
    return xty, Bl, (None if root is None else xty @ root), root


def _dependence_matrix(xty: np.ndarray, Bl: np.ndarray | None) -> np.ndarray:
    """X^T H L H X = Xc^T Yc B Yc^T Xc (D x D)."""
    if Bl is None:
        return factor_product(xty)
    return symmetrize(xty @ Bl @ xty.T)


def _params(label_kernel: LabelKernel, rbf_gamma: float | None) -> dict:
    if isinstance(label_kernel, str):
        return {"label_kernel": label_kernel, "rbf_gamma": rbf_gamma}
    return {"label_kernel": np.asarray(label_kernel, dtype=float).tolist(), "rbf_gamma": None}


def mddm_p(
    stats: SufficientStats,
    label_kernel: LabelKernel = "linear",
    rbf_gamma: float | None = None,
    dense: bool = True,
) -> TraceTemplate:
    """MDDMp: orthonormal projection directions.

    max tr(P^T X^T H L H X P) s.t. P^T P = I (mddm eq. 5-7; mvmd eq. 17-18),
    L = Y B Y^T (mddm section 3.3).

    Parameters
    ----------
    label_kernel : {"linear", "rbf"} or ndarray (q, q)
        "linear": L = Y Y^T; "rbf": B from :func:`rbf_label_correlation`;
        an array: B given.
    rbf_gamma : float, optional
        Width of the "rbf" label kernel.
    dense : bool
        Also form the D x D A. The operator form (xx_coef = 0, lowrank =
        Xc^T Yc B^{1/2}) is always returned when B is positive semi-definite.
    """
    if stats.sparse_labels:
        return _sparse_label_template("mddm_p", stats, label_kernel, rbf_gamma, 0.0, 1.0,
                                      _params(label_kernel, rbf_gamma))
    # without the dense A, F is kept on the used features' rows (no D x q array)
    xty, rows = (stats.centred_xty(), None) if dense else stats.centred_xty_rows()
    xty, Bl, F, K = _dependence_parts(stats, label_kernel, rbf_gamma, xty)
    if F is None and not dense:
        raise ValueError(
            "mddm_p: the label-correlation matrix is not positive semi-definite, so A has "
            "no low-rank form F F^T; use dense=True (needs only X^T Y, D x D memory)"
        )
    A = _dependence_matrix(xty, Bl) if dense else None
    return TraceTemplate(
        method="mddm_p",
        params=_params(label_kernel, rbf_gamma),
        centred=True,
        n_features=stats.n_features,
        A=A,
        xx_coef=0.0,
        lowrank=F,
        operator_form=F is not None,
        label_factor=K,
        lowrank_rows=rows,
    )


def _sparse_label_template(method: str, stats: SufficientStats, label_kernel: LabelKernel,
                           rbf_gamma: float | None, scatter_coef: float, label_coef: float,
                           params: dict) -> TraceTemplate:
    """The template of a sparse label side (more than MAX_DENSE_LABELS labels): A only as
    c Xc^T Xc + g Xc^T Yc Yc^T Xc, for the label-operator route."""
    if not (isinstance(label_kernel, str) and label_kernel == "linear"):
        given = repr(label_kernel) if isinstance(label_kernel, str) else "an array"
        raise ValueError(
            f"{method}: label_kernel={given} needs a dense q x q label-correlation matrix, "
            "but the statistics hold "
            f"q = {stats.n_labels:,} labels sparse ({8 * stats.n_labels ** 2 / 2**30:.2f} GiB "
            "dense); use label_kernel='linear' at this many labels")
    del rbf_gamma
    return TraceTemplate(method=method, params=params, centred=True,
                         n_features=stats.n_features, xx_coef=scatter_coef,
                         label_scale=(scatter_coef, label_coef))


def mddm_f(
    stats: SufficientStats,
    mu: float = 0.5,
    label_kernel: LabelKernel = "linear",
    rbf_gamma: float | None = None,
) -> TraceTemplate:
    """MDDMf: uncorrelated projected features.

    X^T H L H X p = lambda (mu Xc^T Xc + (1 - mu) I) p (mddm eq. 16-17; mvmd eq.
    19-20, where the same constant is called beta). The scatter in the constraint
    is the centred one (mddm section 3.2.1 assumes centred data). mu = 0.5 is the
    MDDM paper's setting (mddm section 4) and the MVMD paper's comparison; mu = 0
    is MDDMp.
    """
    mu = check_fraction("mu", mu, "mddm_f")
    xty, Bl, F, K = _dependence_parts(stats, label_kernel, rbf_gamma)
    A = _dependence_matrix(xty, Bl)
    if mu == 0.0:
        B = None
    else:
        B = stats.centred_xtx()  # a new array: scaled in place
        B *= mu
        B[np.diag_indices_from(B)] += 1.0 - mu
    params = {"mu": mu, **_params(label_kernel, rbf_gamma)}
    return TraceTemplate(
        method="mddm_f",
        params=params,
        centred=True,
        n_features=stats.n_features,
        A=A,
        B=B,
        xx_coef=0.0,
        lowrank=F,
        operator_form=F is not None,
        label_factor=K,
        constraint=None if mu == 0.0 else (mu, 1.0 - mu),
    )
