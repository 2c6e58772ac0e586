"""Feature rankings and their evaluation curves: a classifier on the top m features,
m = 1..M, scored on held-out documents (the GRROOR paper's protocol, section 5.4:
ML-kNN with k = 10 and smoothing 1 on the 1..50 best features), with the eq. 38
redundancy of each selected set.

One code path for ``dmlfe run``'s ``select`` stage and ``benchmarks/grroor_curves.py``.
Selectors (:data:`SELECTORS`):

* ``grroor``: :class:`dmlfe.selection.GRROOR`'s ranking (its scores θ, eq. 16);
* ``chi2``: a per-label filter, chi² of each feature against each label summed over
  the labels (:func:`chi2_scores`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.feature_selection import chi2

from dmlfe.evaluation.metrics import metric_report, redundancy
from dmlfe.selection.grroor import GRROOR


def chi2_scores(X: Any, Y: np.ndarray) -> np.ndarray:
    """chi² of every feature against every label, summed over the labels (D,).

    Features are shifted to be non-negative first (chi² needs counts; binary and count
    features are unchanged). Labels that are constant in Y, and constant features
    (chi² NaN), contribute 0.
    """
    Y = np.asarray(Y)
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        low = X.min(axis=0).toarray().ravel()
        # shifting a column with negative entries makes it dense anyway
        Xn = X.toarray() - np.minimum(low, 0.0) if (low < 0).any() else X
    else:
        X = np.asarray(X, dtype=np.float64)
        Xn = X - np.minimum(X.min(axis=0), 0.0)
    total = np.zeros(X.shape[1])
    for j in range(Y.shape[1]):
        if 0 < Y[:, j].sum() < len(Y):
            with np.errstate(invalid="ignore", divide="ignore"):
                total += np.nan_to_num(chi2(Xn, Y[:, j])[0])
    return total


def _grroor(X: Any, Y: np.ndarray, m_max: int, params: dict[str, Any]
            ) -> tuple[np.ndarray, dict[str, Any]]:
    unknown = sorted(set(params) - set(GRROOR().get_params()))
    if unknown:
        # lambda_ was GRROOR's name for λ in 0.1.0 (renamed: sklearn reads it as fitted)
        hint = "; lambda_ is now called lam" if "lambda_" in unknown else ""
        raise ValueError(f"selector grroor has no parameter(s) {unknown}{hint}; its "
                         f"parameters are {sorted(GRROOR().get_params())}")
    g = GRROOR(n_features_to_select=m_max, **params).fit(X, Y)
    h = g.objective_history_
    info = {"n_iter": int(g.n_iter_), "converged": bool(g.converged_),
            "objective_first_last": [float(h[0]), float(h[-1])],
            "objective_monotone": bool(np.all(np.diff(h) <= 1e-10 * np.abs(h[:-1]))),
            "nonzero_scores": int((g.scores_ > 0).sum())}
    return np.asarray(g.ranking_), info


def _chi2(X: Any, Y: np.ndarray, m_max: int, params: dict[str, Any]
          ) -> tuple[np.ndarray, dict[str, Any]]:
    if params:
        raise ValueError(f"selector chi2 takes no parameters; got {sorted(params)}")
    return np.argsort(-chi2_scores(X, Y), kind="stable"), {}


#: Selector name -> ranking function (X, Y, m_max, params) -> (ranking, info).
SELECTORS: dict[str, Callable[..., tuple[np.ndarray, dict[str, Any]]]] = {
    "grroor": _grroor,
    "chi2": _chi2,
}


def feature_ranking(name: str, X: Any, Y: np.ndarray, m_max: int,
                    params: Mapping[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """All D feature indices, best first, by selector ``name``, and facts about the fit.

    Parameters
    ----------
    name : {"grroor", "chi2"}
    X : ndarray or scipy.sparse, (n, D); Y : 0/1 ndarray (n, k)
    m_max : int
        The largest number of features that will be kept (GRROOR's
        ``n_features_to_select``).
    params : dict, optional
        The selector's parameters (GRROOR's, e.g. ``alpha``, ``beta``).

    Returns
    -------
    ranking : ndarray (D,) of int
    info : dict
        ``seconds`` and, for GRROOR, ``n_iter``, ``converged``, the objective's first and
        last values, whether it was monotone and how many scores are non-zero.
    """
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; choose from {', '.join(SELECTORS)}")
    t0 = time.perf_counter()
    ranking, info = SELECTORS[name](X, Y, int(m_max), dict(params or {}))
    return ranking, {**info, "seconds": round(time.perf_counter() - t0, 3)}


def _columns(X: Any, sel: np.ndarray) -> np.ndarray:
    Xs = X[:, sel]
    return Xs.toarray() if sp.issparse(Xs) else np.asarray(Xs)


def selection_curves(ranking: np.ndarray, X_train: Any, Y_train: np.ndarray,
                     held_out: Mapping[str, tuple[Any, np.ndarray]], m_max: int,
                     make_classifier: Callable[[], Any]) -> dict[str, Any]:
    """A fresh classifier on the top m features for m = 1..m_max, scored on held-out data.

    Parameters
    ----------
    ranking : feature indices, best first (at least ``m_max`` of them)
    X_train, Y_train : the training documents (ndarray or scipy.sparse) and 0/1 labels
    held_out : role -> (X, Y), e.g. ``{"test": (X_test, Y_test)}``
    m_max : int
    make_classifier : callable returning an unfitted classifier with ``fit``,
        ``predict`` and ``decision_function`` (e.g. ``lambda: MLkNN(k=10, s=1.0)``)

    Returns
    -------
    dict
        ``m`` (1..m_max), ``metrics[role][name]`` (one value per m, every measure of
        :func:`dmlfe.metrics.metric_report`), ``redundancy`` (eq. 38 of each selected
        set on the training documents, centred features) and ``selected`` (the top
        ``m_max`` indices).
    """
    ranking = np.asarray(ranking, dtype=np.int64)
    if ranking.size < m_max:
        raise ValueError(f"the ranking has {ranking.size} features; m_max={m_max} needs more")
    out: dict[str, Any] = {"m": list(range(1, m_max + 1)),
                           "metrics": {role: {} for role in held_out}, "redundancy": [],
                           "selected": ranking[:m_max].tolist()}
    for m in range(1, m_max + 1):
        sel = ranking[:m]
        clf = make_classifier().fit(_columns(X_train, sel), Y_train)
        for role, (X, Y) in held_out.items():
            Xs = _columns(X, sel)
            P, S = clf.predict(Xs), clf.decision_function(Xs)  # knn-vote's are CSR
            rep = metric_report(Y, P.toarray() if sp.issparse(P) else np.asarray(P),
                                (S.toarray() if sp.issparse(S) else np.asarray(S)
                                 ).astype(np.float64, copy=False))
            for k, v in rep.items():
                out["metrics"][role].setdefault(k, []).append(float(v))
        out["redundancy"].append(float(redundancy(X_train, sel)))
    return out
