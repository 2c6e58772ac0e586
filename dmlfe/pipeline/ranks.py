"""Average ranks, the Friedman test and the Nemenyi critical difference (Demšar 2006).

Used by the reports to compare k methods over N data sets (mvmd §7): each data
set ranks the methods (1 = best, ties share the average rank); the Friedman
statistic tests whether the average ranks R_j differ,

    chi2_F = 12 N / (k (k + 1)) * (sum_j R_j^2 - k (k + 1)^2 / 4),

with Iman and Davenport's less conservative F_F = (N - 1) chi2_F / (N (k - 1) - chi2_F),
F-distributed with k - 1 and (k - 1)(N - 1) degrees of freedom. Two methods differ
significantly (Nemenyi) when their average ranks differ by at least

    CD = q_alpha sqrt(k (k + 1) / (6 N)),

q_alpha being the Studentized range statistic (infinite degrees of freedom) over sqrt 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


def rank_matrix(scores: np.ndarray, lower_is_better: bool = False) -> np.ndarray:
    """Ranks of the methods (columns) on each data set (rows); 1 = best, ties averaged."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"scores must be 2-D (data sets x methods), got shape {s.shape}")
    if np.isnan(s).any():
        r, c = np.argwhere(np.isnan(s))[0]
        raise ValueError(f"scores[{r}, {c}] is NaN: every method needs a score on every "
                         "data set to be ranked")
    return stats.rankdata(s if lower_is_better else -s, axis=1)


def q_alpha(k: int, alpha: float = 0.05) -> float:
    """Nemenyi's critical value for k methods: Studentized range quantile / sqrt 2."""
    if k < 2:
        raise ValueError(f"the Nemenyi test needs k >= 2 methods, got {k}")
    return float(stats.studentized_range.ppf(1.0 - alpha, k, np.inf) / np.sqrt(2.0))


def critical_difference(k: int, n: int, alpha: float = 0.05) -> float:
    """Nemenyi critical difference of average ranks for k methods on n data sets."""
    if n < 1:
        raise ValueError(f"need n >= 1 data sets, got {n}")
    return q_alpha(k, alpha) * float(np.sqrt(k * (k + 1) / (6.0 * n)))


@dataclass
class FriedmanResult:
    """Friedman / Iman-Davenport statistics and the Nemenyi CD for average ranks."""

    k: int
    n: int
    chi2: float
    p_chi2: float
    ff: float
    p_ff: float
    df1: int
    df2: int
    cd: float
    alpha: float

    def to_dict(self) -> dict:
        return asdict(self)


def friedman(avg_ranks: np.ndarray, n: int, alpha: float = 0.05) -> FriedmanResult:
    """Friedman chi2_F, Iman-Davenport F_F (with p-values) and the Nemenyi CD.

    Parameters
    ----------
    avg_ranks : array (k,)
        Average rank of each method over the n data sets.
    n : int
        Number of data sets.
    """
    R = np.asarray(avg_ranks, dtype=np.float64)
    k = int(R.size)
    if k < 2:
        raise ValueError(f"the Friedman test needs k >= 2 methods, got {k}")
    chi2 = 12.0 * n / (k * (k + 1)) * (float(np.sum(R**2)) - k * (k + 1) ** 2 / 4.0)
    chi2 = max(chi2, 0.0)  # round-off when all ranks are equal
    df1, df2 = k - 1, (k - 1) * (n - 1)
    denom = n * (k - 1) - chi2
    if df2 == 0:
        ff, p_ff = float("nan"), float("nan")
    elif denom <= 0:  # every data set ranks the methods alike
        ff, p_ff = float("inf"), 0.0
    else:
        ff = (n - 1) * chi2 / denom
        p_ff = float(stats.f.sf(ff, df1, df2))
    return FriedmanResult(k=k, n=int(n), chi2=float(chi2), p_chi2=float(stats.chi2.sf(chi2, df1)),
                          ff=float(ff), p_ff=p_ff, df1=df1, df2=df2,
                          cd=critical_difference(k, n, alpha), alpha=alpha)


def compare(table: Mapping[str, Mapping[str, float]], lower_is_better: bool = False,
            alpha: float = 0.05) -> dict:
    """Ranks of methods over data sets from ``table[dataset][method] = score``.

    Only methods scored on every data set take part. Returns a dict with
    ``methods``, ``datasets``, ``ranks`` (per data set), ``average_ranks`` and, with
    two or more data sets and methods, ``friedman`` (see :class:`FriedmanResult`).
    """
    datasets = list(table)
    methods = [m for m in (table[datasets[0]] if datasets else {})
               if all(m in table[d] for d in datasets)]
    S = np.array([[table[d][m] for m in methods] for d in datasets], dtype=np.float64)
    out: dict = {"methods": methods, "datasets": datasets, "lower_is_better": lower_is_better}
    if not methods or not datasets:
        out.update(ranks={}, average_ranks={}, friedman=None)
        return out
    Rk = rank_matrix(S, lower_is_better)
    avg = Rk.mean(axis=0)
    out["ranks"] = {d: dict(zip(methods, map(float, Rk[i]), strict=True))
                    for i, d in enumerate(datasets)}
    out["average_ranks"] = dict(zip(methods, map(float, avg), strict=True))
    out["friedman"] = (friedman(avg, len(datasets), alpha).to_dict()
                       if len(datasets) >= 2 and len(methods) >= 2 else None)
    return out
