"""The GRROOR paper's parameter search (section 5.4): λ, η, β and the latent size c chosen by
the average classification result ACR (eq. 39) of ML-kNN on the top-ranked features, on
inner folds (or one inner validation split) of the training data.

ACR(para) = Σ_{i=1}^{30} (HL_i + RL_i): the Hamming loss (eq. 33) plus the ranking loss of
ML-kNN (k = 10, smoothing 1, section 5.4) trained on the top i features, i = 1..30; smaller
is better.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import KFold, ParameterGrid, train_test_split

from dmlfe.evaluation import MLkNN
from dmlfe.params import validate
from dmlfe.selection.curves import selection_curves
from dmlfe.selection.grroor import GRROOR, PARAMS

#: The paper's values for each of λ, η and β (section 5.4).
PAPER_VALUES = (1e-3, 1e-2, 1e-1, 0.2, 0.4, 0.6, 0.8, 10.0, 100.0)
#: The paper's latent sizes c besides 2, as fractions of the number of labels k.
PAPER_LATENT_FRACTIONS = (0.25, 0.5, 0.75, 1.0)
#: ACR sums over the top i = 1..30 features (eq. 39).
ACR_FEATURES = 30
#: The order in which the staged search scans the parameters.
_AXES = ("lam", "beta", "eta", "n_latent")


def paper_latent_sizes(k: int, D: int) -> list[int]:
    """The paper's c ∈ {2, 0.25k, 0.5k, 0.75k, k} as distinct integers (fractions rounded
    up, so that 0.5k is GRROOR's default c), at most D (W^T W = I_c needs c <= D)."""
    sizes = {2, *(int(np.ceil(f * k)) for f in PAPER_LATENT_FRACTIONS)}
    return sorted(c for c in sizes if 1 <= c <= D)


def paper_grid(k: int, D: int) -> dict[str, list[Any]]:
    """The paper's full grid (section 5.4): 9 values each of λ, η, β and the c of
    :func:`paper_latent_sizes`, 9³ x 5 = 3,645 settings for k >= 8."""
    return {"lam": list(PAPER_VALUES), "eta": list(PAPER_VALUES), "beta": list(PAPER_VALUES),
            "n_latent": paper_latent_sizes(k, D)}


def acr(ranking: np.ndarray, X_fit: Any, Y_fit: np.ndarray, X_val: Any, Y_val: np.ndarray,
        n_features: int = ACR_FEATURES) -> float:
    """The average classification result of eq. 39 for a feature ranking (smaller is better).

    Parameters
    ----------
    ranking : feature indices, best first
    X_fit, Y_fit : the documents ML-kNN is trained on (ndarray or scipy.sparse, 0/1 labels)
    X_val, Y_val : the documents it is scored on
    n_features : int, default 30
        i runs over 1..n_features (the paper's 30), at most the number of features.

    Returns
    -------
    float
        Σ_i HL_i + RL_i: Hamming loss (eq. 33) plus ranking loss of ML-kNN (k = 10,
        smoothing 1) on the top i features.
    """
    m_max = min(int(n_features), len(ranking))
    curves = selection_curves(ranking, X_fit, Y_fit, {"validation": (X_val, Y_val)}, m_max,
                              lambda: MLkNN(k=10, s=1.0))
    met = curves["metrics"]["validation"]
    return float(np.sum(met["hamming_loss"]) + np.sum(met["ranking_loss"]))


@dataclass
class GRROORSearch:
    """What :func:`grroor_search` found.

    Attributes
    ----------
    best_params : dict
        The chosen ``lam``, ``eta``, ``beta`` and ``n_latent``.
    estimator : GRROOR
        GRROOR with ``best_params``, refitted on all the documents given to the search.
    results : list of dict
        One entry per setting evaluated, in order: ``params``, ``acr`` (the mean over the
        folds), ``acr_folds`` (each fold's), ``seconds`` (the GRROOR fits, all folds),
        ``n_iter`` and ``converged`` (the largest, and whether every fold's fit converged).
    n_fit, n_validation : int
        Documents in the inner training and validation parts (of the first fold).
    folds : list of (ndarray, ndarray)
        The row indices (into the ``X`` given to the search) of each fold's inner training
        and validation part.
    """

    best_params: dict[str, Any]
    estimator: GRROOR
    results: list[dict[str, Any]] = field(default_factory=list)
    n_fit: int = 0
    n_validation: int = 0
    folds: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def _coordinate_search(score: Callable[[dict[str, Any]], float], start: dict[str, Any],
                       axes: Mapping[str, Sequence[Any]], max_sweeps: int) -> None:
    """Scan one parameter at a time over its values, the others held at the best setting
    so far, for up to ``max_sweeps`` rounds or until a round changes nothing (``score``
    records every setting; repeated settings are looked up, not refitted)."""
    best, best_score = dict(start), score(start)
    for _ in range(max_sweeps):
        moved = False
        for name, values in axes.items():
            for v in values:
                cand = {**best, name: v}
                sc = score(cand)
                if sc < best_score:
                    best, best_score, moved = cand, sc, True
        if not moved:
            return


def grroor_search(X: Any, Y: Any, estimator: GRROOR | None = None,
                  grid: Mapping[str, Sequence[Any]] | Sequence[Mapping[str, Sequence[Any]]]
                  | str | None = None,
                  validation_size: float = 0.3, random_state: int = 0,
                  max_sweeps: int = 2, n_features: int = ACR_FEATURES,
                  cv: int | None = 3) -> GRROORSearch:
    """Choose GRROOR's λ, η, β and c as the paper does (section 5.4, eq. 39), by ACR on
    inner folds of the training data (or one inner validation split), and refit on all of it.

    The paper grid-searches λ, η, β over {10^-3, 10^-2, 10^-1, 0.2, 0.4, 0.6, 0.8, 10,
    100} and c over {2, 0.25k, 0.5k, 0.75k, k} (α = 1, σ² = 1, p = 5) and keeps the
    setting with the smallest ACR (eq. 39). All 3,645 settings of that grid are a day of
    fits per data set, so by default the search is *staged*: coordinate-wise over the same
    values, starting at ``estimator``'s setting, it scans λ, then β, then η, then c, each
    over all its paper values with the others held at the best setting so far, and
    repeats the round (at most ``max_sweeps`` times) while it still improves. One
    round is at most 9 + 9 + 9 + 5 settings; it finds the grid's best wherever the ACR
    is unimodal along each parameter, and is otherwise a local optimum of the grid.
    ``grid="paper"`` runs the full grid, a mapping any grid of its own.

    The paper scores ACR on one validation split. On small training sets (medical: 333
    documents, 100 of them in a 30 % split, 45 labels) one split's ACR is noisy enough to
    pick a setting that is worse on other documents; by default ACR is therefore the mean
    over ``cv`` = 3 shuffled folds (each setting fitted on two thirds, scored on the
    other third), three times the fits of one split. ``cv=None`` is the paper's single
    split of ``validation_size``.

    The test split of a data set must not be passed here: the validation documents are
    drawn from ``X`` and ``Y`` (the training data), and the returned estimator is refit
    on all of ``X`` and ``Y``.

    Parameters
    ----------
    X : ndarray or scipy.sparse (n, D)
        Training documents (in memory: the search shares the data-only parts of the fit,
        :class:`~dmlfe.selection.grroor._Problem`, between its settings).
    Y : array-like (n, k), entries 0/1
    estimator : GRROOR, optional
        The other parameters (α, p, σ², ``max_iter``, ``tol``...) and the start of the
        staged search; default ``GRROOR()``.
    grid : None, "paper", mapping of parameter name to values, or a list of mappings
        None: the staged search over the paper's values; "paper": the paper's full grid
        (:func:`paper_grid`); a mapping: every combination of its values (names of
        GRROOR's parameters; those left out keep ``estimator``'s value); a list of
        mappings: the union of their grids (as scikit-learn's ``ParameterGrid``).
    validation_size : float, default 0.3
        With ``cv=None``: the fraction of the documents held out to score ACR.
    random_state : int, default 0
        Seed of the folds' shuffle (or of the validation split).
    max_sweeps : int, default 2
        Rounds of the staged search at most.
    n_features : int, default 30
        ACR's top 1..n_features features (eq. 39).
    cv : int >= 2 or None, default 3
        ACR as the mean over this many shuffled folds of ``X`` (scikit-learn's ``KFold``);
        None: one validation split of ``validation_size`` (the paper's protocol).

    Returns
    -------
    GRROORSearch
        ``best_params``, the refitted ``estimator`` and every setting's ``results``.
    """
    base = clone(estimator) if estimator is not None else GRROOR()
    validate(base.get_params(), PARAMS, "GRROOR")
    X, Y01 = clone(base)._inputs(X, Y)
    k, D = Y01.shape[1], X.shape[1]
    n = X.shape[0]
    if cv is None:
        folds = [tuple(train_test_split(np.arange(n), test_size=validation_size,
                                        random_state=random_state))]
    else:
        if isinstance(cv, bool) or not isinstance(cv, int | np.integer) or not 2 <= cv <= n:
            raise ValueError(f"grroor_search: cv={cv!r}; give an integer from 2 to the "
                             f"number of documents ({n}), or None for one validation split")
        folds = list(KFold(int(cv), shuffle=True, random_state=random_state).split(np.arange(n)))
    parts = [(X[f], Y01[f], X[v], Y01[v], base._problem(X[f], Y01[f])) for f, v in folds]
    results: list[dict[str, Any]] = []
    cache: dict[tuple, float] = {}

    def score(params: dict[str, Any]) -> float:
        key = tuple(sorted(params.items()))
        if key not in cache:
            g = clone(base).set_params(**params)
            validate(g.get_params(), PARAMS, "GRROOR")
            acrs, seconds, n_iter, converged = [], 0.0, 0, True
            for X_fit, Y_fit, X_val, Y_val, problem in parts:
                t0 = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)  # recorded below
                    g._fit_problem(problem)
                seconds += time.perf_counter() - t0
                acrs.append(acr(g.ranking_, X_fit, Y_fit, X_val, Y_val, n_features))
                n_iter, converged = max(n_iter, int(g.n_iter_)), converged and g.converged_
            cache[key] = float(np.mean(acrs))
            results.append({"params": dict(params), "acr": cache[key],
                            "acr_folds": [round(a, 6) for a in acrs],
                            "seconds": round(seconds, 3), "n_iter": n_iter,
                            "converged": bool(converged)})
        return cache[key]

    if isinstance(grid, str) and grid != "paper":
        raise ValueError(f"grroor_search: grid={grid!r}; give None (the staged search), "
                         "'paper' (the paper's full grid) or a mapping of parameter values")
    if grid is None:
        c0 = base.n_latent if base.n_latent is not None else min(D, max(2, int(np.ceil(k / 2))))
        start = {"lam": base.lam, "eta": base.eta, "beta": base.beta, "n_latent": c0}
        axes = {name: paper_grid(k, D)[name] for name in _AXES}
        _coordinate_search(score, start, axes, max_sweeps)
    else:
        spec = paper_grid(k, D) if grid == "paper" else grid
        for params in ParameterGrid(spec if isinstance(spec, Mapping) else list(spec)):
            score(params)
    best = min(results, key=lambda r: r["acr"])["params"]
    refit = clone(base).set_params(**best).fit(X, Y01)
    return GRROORSearch(best_params=best, estimator=refit, results=results,
                        n_fit=len(folds[0][0]), n_validation=len(folds[0][1]),
                        folds=[(np.asarray(f), np.asarray(v)) for f, v in folds])
