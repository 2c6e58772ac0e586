"""Kernel MDDM on relation features (mddm sections 3.1.2 and 3.2.2).

Notation: p prototypes, R = sim(X, prototypes) (n x p) the relation features of the
n training documents, K = sim(prototypes, prototypes) (p x p) the kernel matrix of
the prototypes, L = Y B Y^T the label kernel (mddm section 3.3), H = I - 11^T / n.
A projection direction in the RKHS is q = sum_j c_j phi(prototype_j); a document's
projection is <phi(x), q> = r(x)^T c (mddm eq. 10 and 14) and ||q||^2 = c^T K c.
With every training document as a prototype (p = n) R = K = Q of the paper, and:

* MDDMp, mddm eq. 13:  Q H L H Q c = lambda Q c.
  Here A = R^T H L H R = Rc^T Yc B Yc^T Rc (from the statistics R^T Y, exactly the
  linear MDDM's A with R in place of X) and B = K.
* MDDMf, mddm eq. 20:  Q H L H Q c = lambda (mu Q Q + (1 - mu) Q) c, where section
  3.2.2 assumes Q centred so that c^T Q Q c is the variance of the projected training
  features (the uncorrelation constraint eq. 15). Reading: the mu term is that
  variance, c^T Rc^T Rc c (= c^T Q H Q c at p = n), the (1 - mu) term ||q||^2 =
  c^T K c; so B = mu Rc^T Rc + (1 - mu) K. On coefficient vectors c with 1^T c = 0
  this is the paper's doubly centred Q~ = H Q H term for term (c^T Q~ Q~ c =
  c^T Q H Q c, c^T Q~ c = c^T Q c, c^T Q~ H L H Q~ c = c^T Q H L H Q c).

Both are generalised problems solved by the dense driver solver (p x p). K must be
positive semi-definite (linear, cosine or Gaussian similarities); a singular K (e.g.
the linear kernel with more prototypes than features) is regularised by the solver
with a warning saying by how much.
"""

from __future__ import annotations

import numpy as np

from dmlfe.methods.mddm import LabelKernel, _dependence_matrix, _dependence_parts, _params
from dmlfe.methods.template import TraceTemplate, check_fraction, symmetrize
from dmlfe.stats.sufficient import SufficientStats


def _check_kernel(kernel: np.ndarray, stats: SufficientStats, method: str) -> np.ndarray:
    K = np.asarray(kernel, dtype=np.float64)
    p = stats.n_features
    if K.shape != (p, p):
        raise ValueError(f"{method}: the prototype kernel matrix has shape {K.shape}, expected "
                         f"({p}, {p}) (one row and column per prototype = relation feature)")
    return symmetrize(K)


def kernel_mddm_p(
    stats: SufficientStats,
    kernel: np.ndarray,
    label_kernel: LabelKernel = "linear",
    rbf_gamma: float | None = None,
) -> TraceTemplate:
    """Kernel MDDMp (mddm eq. 12-13): R^T H L H R c = lambda K c.

    Parameters
    ----------
    stats : SufficientStats
        Statistics of the relation features R (p columns).
    kernel : ndarray (p, p)
        K = sim(prototypes, prototypes).
    label_kernel, rbf_gamma
        As in :func:`dmlfe.methods.mddm.mddm_p`.
    """
    K = _check_kernel(kernel, stats, "kmddm_p")
    xty, Bl, F, _ = _dependence_parts(stats, label_kernel, rbf_gamma)
    return TraceTemplate(
        method="kmddm_p",
        params=_params(label_kernel, rbf_gamma),
        centred=True,
        n_features=stats.n_features,
        A=_dependence_matrix(xty, Bl),
        B=K,
        **_lowrank_form(F),
    )


def _lowrank_form(F: np.ndarray | None) -> dict:
    """A = F F^T (F = Rc^T Yc B^{1/2}, p x q) when the label kernel is positive
    semi-definite: the solver's q x q reduction then needs only K's Cholesky factor."""
    return {} if F is None else {"lowrank": F, "operator_form": True, "xx_coef": 0.0}


def kernel_mddm_f(
    stats: SufficientStats,
    kernel: np.ndarray,
    mu: float = 0.5,
    label_kernel: LabelKernel = "linear",
    rbf_gamma: float | None = None,
) -> TraceTemplate:
    """Kernel MDDMf (mddm eq. 18-20): R^T H L H R c = lambda (mu Rc^T Rc + (1 - mu) K) c.

    mu = 0 is kernel MDDMp; the statistics must include R^T R when mu > 0.
    """
    mu = check_fraction("mu", mu, "kmddm_f")
    K = _check_kernel(kernel, stats, "kmddm_f")
    xty, Bl, F, _ = _dependence_parts(stats, label_kernel, rbf_gamma)
    B = (1.0 - mu) * K
    if mu > 0.0:
        B = B + mu * stats.centred_xtx()
    return TraceTemplate(
        method="kmddm_f",
        params={"mu": mu, **_params(label_kernel, rbf_gamma)},
        centred=True,
        n_features=stats.n_features,
        A=_dependence_matrix(xty, Bl),
        B=symmetrize(B),
        **_lowrank_form(F),
    )
