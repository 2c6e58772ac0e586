"""Linear multi-label classifiers fitted from one pass of moment statistics.

* :class:`MultiLabelRidge`: the MVMD paper's baseline, multi-output ridge regression on
  +-1 targets with an unpenalised intercept.
* :class:`PerLabelFLDA`: the MOPE paper's classifier, a two-class Fisher linear
  discriminant for each label.

Both need only n, the means, the centred scatter Z^T Z and the cross products Z^T Y,
accumulated chunk by chunk (one dask compute for dask embeddings); ``predict`` and
``decision_function`` run per row chunk and return dask arrays for dask input.
``predict_proba`` maps each score through a logistic function (see each class).
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import scipy.linalg as sla
from scipy.special import expit

from dmlfe.evaluation._common import Moments, MultiLabelBase, moments


def _linear_scores(zb: np.ndarray, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    W, b = state
    return np.asarray(zb, dtype=np.float64) @ W + b


def _positive(zb: np.ndarray, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return (_linear_scores(zb, state) > 0).astype(np.int8)


def _solve_spd(A: np.ndarray, B: np.ndarray, what: str) -> np.ndarray:
    try:
        return sla.solve(A, B, assume_a="pos")
    except (sla.LinAlgError, ValueError) as exc:
        raise ValueError(f"{what}: the system is singular ({exc}); use a positive "
                         "regularisation") from exc


class _LinearMultiLabel(MultiLabelBase):
    coef_: np.ndarray
    intercept_: np.ndarray

    def _state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.coef_, self.intercept_

    _scores = staticmethod(_linear_scores)
    _relevant = staticmethod(_positive)

    def _record(self, m: Moments) -> None:
        self.n_features_in_ = m.scatter.shape[0]
        self.n_labels_ = m.cross.shape[1]
        self.n_samples_ = int(m.n)
        if m.n < 2:
            raise ValueError(f"{type(self).__name__}.fit needs at least 2 documents; got "
                             f"{m.n} sample(s)")


class MultiLabelRidge(_LinearMultiLabel):
    """Multi-output ridge regression on +-1 targets with an unpenalised intercept.

    Minimises ``||T - Z W - 1 b^T||_F^2 + alpha ||W||_F^2`` with ``T = 2 Y - 1``; a label is
    relevant where its output is > 0 (the MVMD paper's baseline, alpha 0.01).

    Parameters
    ----------
    alpha : float, default 0.01
        Ridge penalty (>= 0) on the weights, not on the intercept.

    Attributes
    ----------
    coef_ : ndarray, shape (d, q)
    intercept_ : ndarray, shape (q,)
    n_features_in_, n_labels_, n_samples_ : int

    Notes
    -----
    ``predict_proba`` is a calibration of the score s, not a fitted probability model:
    ridge on +-1 targets estimates E[T | z] = 2 P(relevant | z) - 1 linearly, i.e.
    P ~ (1 + s) / 2 near the threshold; ``predict_proba`` uses expit(2 s), which has the
    same value (1/2) and slope there, is strictly increasing (the ranking is the
    score's) and stays in (0, 1).

    W = (Zc^T Zc + alpha I)^-1 Zc^T Tc on centred Z and T, b = mean(T) - mean(Z) W, which
    is scikit-learn's ``Ridge(alpha, fit_intercept=True)``. Fitting reads the data once;
    dask embeddings (row chunks) are reduced chunk-wise in one compute.

    Examples
    --------
    On the embeddings of a fitted projection:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> Z = dmlfe.MVMD(n_components=3).fit(X, Y).transform(X)
    >>> clf = dmlfe.MultiLabelRidge(alpha=0.01).fit(Z, Y)
    >>> clf.decision_function(Z).shape
    (60, 3)
    """

    def __init__(self, alpha: float = 0.01):
        self.alpha = alpha

    def fit(self, Z: Any, Y: Any) -> MultiLabelRidge:
        """Fit on embeddings Z (n, d) and a 0/1 label matrix Y (n, q).

        Parameters
        ----------
        Z : ndarray or dask array (row chunks), shape (n, d)
        Y : ndarray, scipy.sparse or dask array, shape (n, q), entries 0/1

        Returns
        -------
        self
        """
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, numbers.Real) or not a >= 0:
            raise ValueError(f"MultiLabelRidge: alpha={a!r} must be a real number >= 0")
        m = moments(*self._fit_input(Z, Y))
        self._record(m)
        d = self.n_features_in_
        # Targets T = 2Y - 1: centred cross products scale by 2, the mean maps affinely.
        W = _solve_spd(m.scatter + float(a) * np.eye(d), 2.0 * m.cross,
                       f"MultiLabelRidge(alpha={a})")
        self.coef_ = W
        self.intercept_ = (2.0 * m.mean_y - 1.0) - m.mean_z @ W
        return self

    @staticmethod
    def _probabilities(zb: np.ndarray, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        return expit(2.0 * _linear_scores(zb, state))


class PerLabelFLDA(_LinearMultiLabel):
    """Fisher's linear discriminant for each label (the MOPE paper's classifier).

    For label l with classes 1 (relevant) and 0, the pooled within-class covariance
    ``S = (S_0 + S_1) / n`` (scatter about each class mean) gives the direction
    ``w = (S + eps I)^-1 (m_1 - m_0)`` and the score
    ``g(z) = w^T (z - (m_0 + m_1) / 2)  [+ log(n_1 / n_0)]``; relevant where g(z) > 0.

    Parameters
    ----------
    threshold : {"midpoint", "prior"}, default "midpoint"
        ``"midpoint"``: Fisher's rule, cut halfway between the projected class means
        (equal priors). ``"prior"``: add log(n_1 / n_0), the Gaussian Bayes rule with the
        training class frequencies (scikit-learn's ``LinearDiscriminantAnalysis`` and
        MATLAB's ``classify(..., 'linear')`` defaults).
    reg : float, default 1e-6
        eps = reg * trace(C) / d with C the total covariance of Z (the same for every
        label), keeping S invertible when some directions carry no within-class spread.

    Attributes
    ----------
    coef_ : ndarray, shape (d, q)
        The directions w, one column per label (zero for a label constant in training).
    intercept_ : ndarray, shape (q,)
        -w^T (m_0 + m_1) / 2 [+ log(n_1 / n_0)]; +inf / -inf for a label that was always /
        never relevant in training, which is then always / never predicted (and ranked
        first / last by ``decision_function``).
    n_features_in_, n_labels_, n_samples_ : int

    Notes
    -----
    The decision value is the log-odds of the two-Gaussian model with shared covariance
    S (equal priors for ``"midpoint"``), so it is comparable across labels;
    ``predict_proba`` is its logistic function, that model's P(relevant | z). All labels
    come from one pass of moments (n, means, Z^T Z, Z^T Y): S_W = S_T - n_0 n_1 / n
    d d^T with d = m_1 - m_0, and the q solves share one Cholesky factor of S_T / n + eps I
    through the Sherman-Morrison formula.

    Examples
    --------
    The two-Gaussian model of each label, one pass of moments for all of them:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> clf = dmlfe.PerLabelFLDA().fit(X, Y)
    >>> bool((clf.predict(X) == Y).mean() > 0.9)
    True
    >>> bool(((clf.predict_proba(X) > 0) & (clf.predict_proba(X) < 1)).all())
    True
    """

    def __init__(self, threshold: str = "midpoint", reg: float = 1e-6):
        self.threshold = threshold
        self.reg = reg

    def fit(self, Z: Any, Y: Any) -> PerLabelFLDA:
        """Fit one discriminant per label on Z (n, d) and 0/1 labels Y (n, q).

        Parameters
        ----------
        Z : ndarray or dask array (row chunks), shape (n, d)
        Y : ndarray, scipy.sparse or dask array, shape (n, q), entries 0/1

        Returns
        -------
        self
        """
        if self.threshold not in ("midpoint", "prior"):
            raise ValueError(f"PerLabelFLDA: threshold={self.threshold!r} must be "
                             "'midpoint' or 'prior'")
        r = self.reg
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not r >= 0:
            raise ValueError(f"PerLabelFLDA: reg={r!r} must be a real number >= 0")
        m = moments(*self._fit_input(Z, Y))
        self._record(m)
        n, d, q = m.n, self.n_features_in_, self.n_labels_
        total = m.scatter / n
        eps = float(r) * np.trace(total) / d
        B = total + eps * np.eye(d)
        try:
            cho = sla.cho_factor(B)
        except sla.LinAlgError as exc:
            raise ValueError(f"PerLabelFLDA(reg={r}): the covariance of Z is singular; use "
                             "reg > 0 or drop constant embedding dimensions") from exc
        n1 = m.mean_y * n
        n0 = n - n1
        W = np.zeros((d, q))
        b = np.empty(q)
        varies = (n1 > 0.5) & (n0 > 0.5)
        b[~varies & (n1 > 0.5)] = np.inf
        b[~varies & (n1 <= 0.5)] = -np.inf
        if varies.any():
            n1v, n0v = n1[varies], n0[varies]
            # Class means relative to the overall mean: m_1 - mz = C/n1, m_0 - mz = -C/n0.
            C = m.cross[:, varies]
            delta = C * (n / (n1v * n0v))
            u = sla.cho_solve(cho, delta)
            c = n1v * n0v / n**2
            denom = 1.0 - c * np.einsum("ij,ij->j", delta, u)
            w = u / denom
            mid = m.mean_z[:, None] + 0.5 * (C / n1v - C / n0v)
            bias = -np.einsum("ij,ij->j", w, mid)
            if self.threshold == "prior":
                bias = bias + np.log(n1v / n0v)
            W[:, varies] = w
            b[varies] = bias
        self.coef_ = W
        self.intercept_ = b
        return self

    @staticmethod
    def _probabilities(zb: np.ndarray, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        # the score is the two-Gaussian model's log-odds (module docstring)
        return expit(_linear_scores(zb, state))
