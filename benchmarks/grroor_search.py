"""GRROOR with the paper's parameter search against summed chi² and random rankings, on the
MULAN train/test splits of yeast, enron, medical, emotions and scene.

For every data set: :func:`dmlfe.selection.grroor_search` on the training split (ACR,
eq. 39, the mean over 3 inner folds of it, ``--cv``; the test split is never seen), then the test
curves of the GRROOR protocol (section 5.4: ML-kNN k = 10, smoothing 1, on the top m
features, m = 1..50; :func:`dmlfe.selection.curves.selection_curves`) for the searched
GRROOR, GRROOR with its defaults, summed chi² and random rankings (the mean of 5 seeds).
Reported: the mean average precision over m for each, the seconds of each GRROOR fit
(the default fit on the training split, and every setting of the search) and the
paper's yeast figure (Table 5) beside ours.

``--defaults`` then scores every data set's chosen setting (c as its fraction of k) on
every data set's validation split and reports the one with the smallest mean ACR
relative to the current defaults' (how GRROOR's defaults were chosen). ``--speed`` adds
a default fit on a synthetic n = 5,000, D = 1,500 set.

Prints JSON (also bench-out/grroor_search.json).

    python benchmarks/grroor_search.py [--sets yeast,enron,medical,emotions,scene]
                                       [--cv 3 | --cv 0] [--defaults] [--speed]

``--cv 0`` is the paper's single 30 % validation split.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import emit  # noqa: E402
from ppml_cv import load_mulan  # noqa: E402

from dmlfe import GRROOR, MLkNN  # noqa: E402
from dmlfe.selection import grroor_search  # noqa: E402
from dmlfe.selection.curves import feature_ranking, selection_curves  # noqa: E402

#: GRROOR's mean average precision on yeast over the top 1..50 features (paper, Table 5).
PAPER_YEAST_AP = 0.7481
SETS = "yeast,enron,medical,emotions,scene"
M_MAX = 50
RANDOM_SEEDS = 5


def mean_ap(ranking: np.ndarray, data: dict[str, Any]) -> float:
    """Test average precision of ML-kNN on the top m features, averaged over m = 1..50."""
    c = selection_curves(ranking, data["Xtr"], data["Ytr"], {"test": (data["Xte"], data["Yte"])},
                         M_MAX, lambda: MLkNN(k=10, s=1.0))
    return round(float(np.mean(c["metrics"]["test"]["average_precision"])), 4)


def run_set(name: str, cv: int | None = 3) -> tuple[dict[str, Any], dict[str, Any]]:
    Xtr, Ytr = load_mulan(name, ("train",))
    Xte, Yte = load_mulan(name, ("test",))
    data = {"Xtr": Xtr, "Ytr": Ytr, "Xte": Xte, "Yte": Yte}
    t0 = time.perf_counter()
    search = grroor_search(Xtr, Ytr, cv=cv)
    search_s = time.perf_counter() - t0
    default_rank, default_info = feature_ranking("grroor", Xtr, Ytr, M_MAX)
    chi2_rank, _ = feature_ranking("chi2", Xtr, Ytr, M_MAX)
    D = Xtr.shape[1]
    random_ap = [mean_ap(np.random.default_rng(s).permutation(D), data)
                 for s in range(RANDOM_SEEDS)]
    secs = [r["seconds"] for r in search.results]
    entry = {
        "n_train": Xtr.shape[0], "n_test": Xte.shape[0], "features": D, "labels": Ytr.shape[1],
        "mean_ap_over_m": {
            "grroor_searched": mean_ap(search.estimator.ranking_, data),
            "grroor_defaults": mean_ap(default_rank, data),
            "chi2_sum": mean_ap(chi2_rank, data),
            "random_mean_of_5": round(float(np.mean(random_ap)), 4),
        },
        "random_each_seed": random_ap,
        "chosen": search.best_params,
        "search": {"settings": len(search.results), "seconds_total": round(search_s, 1),
                   "fit_seconds_per_setting": {"median": round(float(np.median(secs)), 3),
                                               "max": round(float(np.max(secs)), 3)},
                   "cv": cv, "n_fit": search.n_fit, "n_validation": search.n_validation,
                   "results": search.results},
        "default_fit": default_info,
    }
    if name == "yeast":
        entry["paper_yeast_ap"] = PAPER_YEAST_AP
    fractions = {**search.best_params, "n_latent": search.best_params["n_latent"] / Ytr.shape[1]}
    return entry, {"Xtr": Xtr, "Ytr": Ytr, "chosen_fraction": fractions}


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def choose_defaults(sets: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every set's chosen (λ, η, β, c/k) scored by ACR on every set's validation split,
    relative to the current defaults; the smallest mean ratio wins."""
    cands = [d["chosen_fraction"] for d in sets.values()]
    d0 = GRROOR()
    table: list[dict[str, Any]] = []
    for name, d in sets.items():
        k = d["Ytr"].shape[1]
        settings = [{"lam": d0.lam, "eta": d0.eta, "beta": d0.beta,
                     "n_latent": max(2, int(np.ceil(k / 2)))}]
        settings += [{**c, "n_latent": max(2, int(np.ceil(c["n_latent"] * k)))} for c in cands]
        res = grroor_search(d["Xtr"], d["Ytr"], cv=None,
                            grid=[{p: [v] for p, v in st.items()} for st in settings]).results
        acr = {_key(r["params"]): r["acr"] for r in res}
        base = acr[_key(settings[0])]
        table.append({"set": name, "ratios": [round(acr[_key(st)] / base, 4)
                                              for st in settings[1:]]})
    mean = np.mean([t["ratios"] for t in table], axis=0)
    best = int(np.argmin(mean))
    return {"candidates": cands, "per_set_acr_ratio_to_defaults": table,
            "mean_ratio": [round(float(x), 4) for x in mean], "best": cands[best],
            "best_mean_ratio": round(float(mean[best]), 4)}


def synthetic_speed() -> dict[str, Any]:
    """A default fit on n = 5,000 dense documents x D = 1,500 features, k = 20 labels."""
    rng = np.random.default_rng(0)
    n, D, k = 5000, 1500, 20
    X = rng.normal(size=(n, D))
    Y = (X[:, :k] @ rng.normal(size=(k, k)) + rng.normal(size=(n, k)) > 1.0).astype(np.int8)
    t0 = time.perf_counter()
    g = GRROOR().fit(X, Y)
    return {"n": n, "features": D, "labels": k, "seconds": round(time.perf_counter() - t0, 2),
            "n_iter": g.n_iter_, "converged": g.converged_}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=SETS)
    ap.add_argument("--cv", type=int, default=3,
                    help="inner folds of the search's ACR (0: one 30%% validation split)")
    ap.add_argument("--defaults", action="store_true", help="also choose defaults across sets")
    ap.add_argument("--speed", action="store_true", help="also the synthetic 5,000 x 1,500 fit")
    args = ap.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per fit in the output
    params = GRROOR().get_params()
    params.pop("client")
    cv = args.cv or None
    res: dict[str, Any] = {
        "protocol": "MULAN train/test split; grroor_search (staged, ACR eq. 39 "
                    + (f"averaged over {cv} inner folds" if cv else "on 30%") + " of the "
                    "training split) chooses lam, eta, beta, n_latent; test: ML-kNN k=10 s=1 on "
                    "the top m features, mean average precision over m = 1..50",
        "grroor_defaults": params, "paper_yeast_ap": PAPER_YEAST_AP, "sets": {}}
    kept: dict[str, dict[str, Any]] = {}
    for name in args.sets.split(","):
        res["sets"][name], kept[name] = run_set(name, cv)
        print(name, res["sets"][name]["mean_ap_over_m"], res["sets"][name]["chosen"],
              res["sets"][name]["search"]["fit_seconds_per_setting"], file=sys.stderr, flush=True)
    res["table"] = {name: e["mean_ap_over_m"] for name, e in res["sets"].items()}
    if args.defaults:
        res["defaults_choice"] = choose_defaults(kept)
    if args.speed:
        res["synthetic_speed"] = synthetic_speed()
    emit(res, "grroor_search")


if __name__ == "__main__":
    main()
