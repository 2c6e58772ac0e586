"""GRROOR on yeast, enron and medical: ML-kNN on the top 1..50 selected features, the
GRROOR paper's protocol (section 5.4: ML-kNN with k = 10, smoothing 1; the standard
MULAN train/test split; metrics on the test set against the number of selected
features), beside a simple filter: chi² of each feature against each label, summed
over the labels (features shifted to be non-negative first, as chi² needs counts;
binary word features are unchanged).

For every data set and selector: average precision, ranking loss, coverage, Hamming
loss, macro-/micro-F1 and the eq. 38 redundancy of the selected set (centred cosines,
eq. 12) for m = 1..50, their means over m (the paper's Tables 4-5 report such means),
GRROOR's objective history and fit time. PNG curves (one per data set and measure) go
to bench-out/grroor/.

Prints JSON (also bench-out/grroor_curves.json).

    python benchmarks/grroor_curves.py [--sets yeast,enron,medical] [--max-features 50]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_selection import chi2

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import OUT, emit  # noqa: E402
from ppml_cv import load_mulan  # noqa: E402

from dmlfe import GRROOR, MLkNN, metrics  # noqa: E402
from dmlfe.pipeline import plots  # noqa: E402

MEASURES = ("average_precision", "ranking_loss", "coverage", "hamming_loss", "macro_f1",
            "micro_f1")


def chi2_ranking(X: Any, Y: np.ndarray) -> np.ndarray:
    """Features by decreasing chi² summed over labels (NaN, from constant features, as 0)."""
    Xn = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    Xn = Xn - Xn.min(axis=0)
    total = np.zeros(Xn.shape[1])
    for j in range(Y.shape[1]):
        if 0 < Y[:, j].sum() < len(Y):
            total += np.nan_to_num(chi2(Xn, Y[:, j])[0])
    return np.argsort(-total, kind="stable")


def curves(order: np.ndarray, Xtr: Any, Ytr: np.ndarray, Xte: Any, Yte: np.ndarray,
           m_max: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in (*MEASURES, "redundancy")}
    Xtr_d, Xte_d = Xtr.toarray(), Xte.toarray()
    for m in range(1, m_max + 1):
        sel = order[:m]
        clf = MLkNN(k=10, s=1.0).fit(Xtr_d[:, sel], Ytr)
        S = clf.decision_function(Xte_d[:, sel])
        P = clf.predict(Xte_d[:, sel])
        for k in MEASURES:
            f = getattr(metrics, k)
            out[k].append(float(f(Yte, S if k in metrics.RANKING_METRICS else P)))
        out["redundancy"].append(metrics.redundancy(Xtr, sel))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="yeast,enron,medical")
    ap.add_argument("--max-features", type=int, default=50)
    args = ap.parse_args()
    res: dict[str, Any] = {"protocol": "MULAN train/test split; ML-kNN k=10 s=1 on the top "
                           "m features, m = 1..max; GRROOR with its defaults",
                           "grroor_params": GRROOR().get_params(), "sets": {}}
    res["grroor_params"].pop("client")
    png = OUT / "grroor"
    for name in args.sets.split(","):
        Xtr, Ytr = load_mulan(name, ("train",))
        Xte, Yte = load_mulan(name, ("test",))
        m_max = min(args.max_features, Xtr.shape[1])
        t0 = time.perf_counter()
        g = GRROOR(n_features_to_select=m_max).fit(Xtr, Ytr)
        t_fit = time.perf_counter() - t0
        sel = {"grroor": g.ranking_, "chi2_sum": chi2_ranking(Xtr, Ytr)}
        entry: dict[str, Any] = {
            "n_train": Xtr.shape[0], "n_test": Xte.shape[0], "features": Xtr.shape[1],
            "labels": Ytr.shape[1],
            "grroor_fit": {"seconds": round(t_fit, 1), "n_iter": g.n_iter_,
                           "objective_first_last": [g.objective_history_[0],
                                                    g.objective_history_[-1]],
                           "objective_monotone": bool(np.all(np.diff(g.objective_history_)
                                                             <= 1e-10 * np.abs(
                                                                 g.objective_history_[:-1]))),
                           "theta_steps_rejected": g.theta_steps_rejected_,
                           "nonzero_scores": int((g.scores_ > 0).sum())},
            "curves": {}, "means_over_m": {},
        }
        for method, order in sel.items():
            c = curves(order, Xtr, Ytr, Xte, Yte, m_max)
            entry["curves"][method] = {k: [round(v, 5) for v in vals] for k, vals in c.items()}
            entry["means_over_m"][method] = {k: round(float(np.mean(v)), 4) for k, v in c.items()}
            print(name, method, entry["means_over_m"][method], file=sys.stderr, flush=True)
        for k in (*MEASURES, "redundancy"):
            series = {meth: {"test": list(enumerate(entry["curves"][meth][k], start=1))}
                      for meth in sel}
            plots.metric_vs_d(series, k, f"{name}: ML-kNN on selected features", png /
                              f"{name}-{k}.png", xlabel="number of selected features")
        res["sets"][name] = entry
    res["plots"] = str(png)
    emit(res, "grroor_curves")


if __name__ == "__main__":
    main()
