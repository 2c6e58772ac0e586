"""Binary relevance: one independent binary classifier per label."""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from scipy.special import expit
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold

from dmlfe.evaluation._common import MultiLabelBase, as_embeddings, labels_in_memory

DEFAULT_CS = (0.01, 0.1, 1.0, 10.0, 100.0)


def _label_scores(est: Any, zb: np.ndarray) -> np.ndarray:
    if hasattr(est, "decision_function"):
        return np.asarray(est.decision_function(zb), dtype=np.float64).ravel()
    proba = est.predict_proba(zb)
    return np.asarray(proba[:, list(est.classes_).index(1)], dtype=np.float64)


def _block_scores(zb: np.ndarray, state: list) -> np.ndarray:
    out = np.empty((zb.shape[0], len(state)), dtype=np.float64)
    for j, est in enumerate(state):
        out[:, j] = (np.inf if est == 1 else -np.inf) if isinstance(est, int) \
            else _label_scores(est, zb)
    return out


def _block_proba(zb: np.ndarray, state: list) -> np.ndarray:
    out = np.empty((zb.shape[0], len(state)), dtype=np.float64)
    for j, est in enumerate(state):
        if isinstance(est, int):
            out[:, j] = float(est)
        elif hasattr(est, "predict_proba"):
            proba = est.predict_proba(zb)
            out[:, j] = proba[:, list(est.classes_).index(1)]
        else:
            out[:, j] = expit(np.asarray(est.decision_function(zb), dtype=np.float64).ravel())
    return out


def _block_predict(zb: np.ndarray, state: list) -> np.ndarray:
    out = np.empty((zb.shape[0], len(state)), dtype=np.int8)
    for j, est in enumerate(state):
        out[:, j] = est if isinstance(est, int) else (np.asarray(est.predict(zb)) == 1)
    return out


class BinaryRelevance(MultiLabelBase):
    """One clone of a binary classifier per label.

    Parameters
    ----------
    estimator : scikit-learn classifier or None, default None
        Cloned and fitted once per label on targets 0/1. None: L2 logistic regression
        with C chosen from ``Cs`` by stratified ``cv``-fold cross-validation (accuracy)
        on the training set, refitted on all of it (as the MDDM paper chooses the SVM's
        C from {10^-2, ..., 10^2} by 5-fold cross-validation).
    Cs : sequence of float, default (0.01, 0.1, 1, 10, 100)
        Candidate C values for the default estimator.
    cv : int, default 5
        Folds for the default estimator; a label with fewer positive (or negative)
        training documents than ``cv`` uses that many folds, and with fewer than 2 the
        plain C = 1 fit.

    Attributes
    ----------
    estimators_ : list
        Per label: the fitted classifier, or the int 0 / 1 for a label never / always
        relevant in training, which is then always predicted 0 / 1 and scored -inf / +inf.
    best_C_ : ndarray (q,)
        C chosen for each label by the default estimator (NaN otherwise).
    n_features_in_, n_labels_, n_samples_ : int

    Notes
    -----
    ``decision_function`` gives the estimator's ``decision_function`` (else its
    ``predict_proba`` of class 1); ``predict_proba`` gives the estimator's
    ``predict_proba`` of class 1 (else the logistic function of its decision value), 1 / 0
    for a label constant in training. Fitting needs the embeddings in memory (dask input is
    computed once); prediction runs per row chunk for dask input.

    Examples
    --------
    One logistic regression per label, its C chosen by cross-validation:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> clf = dmlfe.BinaryRelevance().fit(X, Y)
    >>> clf.best_C_.shape, clf.predict(X).dtype
    ((3,), dtype('int8'))
    """

    def __init__(self, estimator: Any = None, Cs: tuple[float, ...] = DEFAULT_CS, cv: int = 5):
        self.estimator = estimator
        self.Cs = Cs
        self.cv = cv

    def _validate(self) -> None:
        cv = self.cv
        if isinstance(cv, bool) or not isinstance(cv, numbers.Integral) or cv < 2:
            raise ValueError(f"BinaryRelevance: cv={cv!r} must be an integer >= 2")
        Cs = np.asarray(self.Cs, dtype=np.float64).ravel()
        if Cs.size == 0 or not (Cs > 0).all():
            raise ValueError(f"BinaryRelevance: Cs={self.Cs!r} must be positive numbers")
        if self.estimator is not None and not hasattr(self.estimator, "fit"):
            raise ValueError(f"BinaryRelevance: estimator={self.estimator!r} is not a "
                             "scikit-learn classifier (no fit method)")

    def _default(self, y: np.ndarray) -> tuple[Any, float]:
        base = LogisticRegression(max_iter=2000)
        folds = int(min(self.cv, y.sum(), len(y) - y.sum()))
        if folds < 2:
            return base.fit, 1.0
        search = GridSearchCV(
            base, {"C": [float(c) for c in self.Cs]},
            cv=StratifiedKFold(folds, shuffle=True, random_state=0),
        )
        return search.fit, np.nan

    def fit(self, Z: Any, Y: Any) -> BinaryRelevance:
        """Fit one classifier per label on Z (n, d) and 0/1 labels Y (n, q).

        Parameters
        ----------
        Z : ndarray or dask array, shape (n, d)
        Y : ndarray, scipy.sparse or dask array, shape (n, q), entries 0/1

        Returns
        -------
        self
        """
        self._validate()
        Zi, Y = self._fit_input(Z, Y)
        if isinstance(Zi, da.Array):
            Zi = as_embeddings(Zi.compute())
        Yi = labels_in_memory(Y, Zi.shape[0], keep_sparse=True)
        if sp.issparse(Yi):
            Yi = Yi.tocsc()  # one label's column at a time, never n x q dense
        ests: list = []
        best = np.full(Yi.shape[1], np.nan)
        for j in range(Yi.shape[1]):
            y = (Yi[:, [j]].toarray().ravel() if sp.issparse(Yi) else Yi[:, j]).astype(np.int64)
            if y.min() == y.max():
                ests.append(int(y[0]))
                continue
            if self.estimator is not None:
                ests.append(clone(self.estimator).fit(Zi, y))
                continue
            fit, c = self._default(y)
            with warnings.catch_warnings():
                # Small folds of rare labels: sklearn warns, the search still works.
                warnings.filterwarnings("ignore", message=".*least populated class.*")
                fitted = fit(Zi, y)
            if hasattr(fitted, "best_estimator_"):
                best[j] = fitted.best_params_["C"]
                fitted = fitted.best_estimator_
            else:
                best[j] = c
            ests.append(fitted)
        self.estimators_ = ests
        self.best_C_ = best
        self.n_features_in_, self.n_labels_, self.n_samples_ = Zi.shape[1], Yi.shape[1], len(Zi)
        return self

    def _state(self) -> list:
        return self.estimators_

    _scores = staticmethod(_block_scores)
    _relevant = staticmethod(_block_predict)
    _probabilities = staticmethod(_block_proba)
