"""GRROOR on yeast, enron and medical: ML-kNN on the top 1..50 selected features, the
GRROOR paper's protocol (section 5.4: ML-kNN with k = 10, smoothing 1; the standard
MULAN train/test split; metrics on the test set against the number of selected
features), beside a simple filter: chi² of each feature against each label, summed
over the labels.

The same code path as ``dmlfe run``'s ``select`` stage (pipelines/mulan.yaml has one):
:func:`dmlfe.selection.curves.feature_ranking`, :func:`~dmlfe.selection.curves.
selection_curves` and :func:`dmlfe.pipeline.plots.metric_panels`.

For every data set and selector: average precision, ranking loss, coverage, Hamming
loss, macro-/micro-F1 and the eq. 38 redundancy of the selected set (centred cosines,
eq. 12) for m = 1..50, their means over m (the paper's Tables 4-5 report such means),
and GRROOR's fit (iterations, convergence, objective). One PNG per data set goes to
bench-out/grroor/. ``--grid`` adds GRROOR fits over beta x lam (the paper tunes its
trade-offs over a grid, α fixed at 1), scored on the same test curves.

Prints JSON (also bench-out/grroor_curves.json).

    python benchmarks/grroor_curves.py [--sets yeast,enron,medical] [--max-features 50]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import OUT, emit  # noqa: E402
from ppml_cv import load_mulan  # noqa: E402

from dmlfe import GRROOR, MLkNN  # noqa: E402
from dmlfe.pipeline import plots  # noqa: E402
from dmlfe.pipeline.config import METRICS, SELECTION_METRICS  # noqa: E402
from dmlfe.selection.curves import feature_ranking, selection_curves  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default="yeast,enron,medical")
    ap.add_argument("--max-features", type=int, default=50)
    ap.add_argument("--grid", action="store_true", help="also GRROOR over beta x lam")
    args = ap.parse_args()
    params = GRROOR().get_params()
    params.pop("client")
    res: dict[str, Any] = {"protocol": "MULAN train/test split; ML-kNN k=10 s=1 on the top "
                           "m features, m = 1..max; GRROOR with its defaults",
                           "grroor_params": params, "sets": {}}
    png = OUT / "grroor"
    for name in args.sets.split(","):
        Xtr, Ytr = load_mulan(name, ("train",))
        Xte, Yte = load_mulan(name, ("test",))
        m_max = min(args.max_features, Xtr.shape[1])
        entry: dict[str, Any] = {"n_train": Xtr.shape[0], "n_test": Xte.shape[0],
                                 "features": Xtr.shape[1], "labels": Ytr.shape[1],
                                 "fits": {}, "curves": {}, "means_over_m": {}}
        selectors = {"grroor": ("grroor", {}), "chi2_sum": ("chi2", {})}
        if args.grid:  # the paper's grid values for β and λ (α stays 1, as the paper's)
            for b in (0.1, 1.0, 10.0):
                for lam in (0.1, 1.0, 10.0):
                    if (b, lam) != (10.0, 10.0):
                        selectors[f"grroor_b{b:g}_l{lam:g}"] = ("grroor",
                                                                {"beta": b, "lam": lam})
        for label, (sel, p) in selectors.items():
            ranking, info = feature_ranking(sel, Xtr, Ytr, m_max, p)
            c = selection_curves(ranking, Xtr, Ytr, {"test": (Xte, Yte)}, m_max,
                                 lambda: MLkNN(k=10, s=1.0))
            vals = {k: c["metrics"]["test"][k] for k in SELECTION_METRICS}
            vals["redundancy"] = c["redundancy"]
            entry["fits"][label] = info
            entry["curves"][label] = {k: [round(v, 5) for v in x] for k, x in vals.items()}
            entry["means_over_m"][label] = {k: round(float(np.mean(x)), 4)
                                            for k, x in vals.items()}
            print(name, label, info, entry["means_over_m"][label], file=sys.stderr, flush=True)
        panels = {k: {lab: {"test" if k != "redundancy" else "train":
                            list(enumerate(entry["curves"][lab][k], start=1))}
                      for lab in ("grroor", "chi2_sum")}
                  for k in (*SELECTION_METRICS, "redundancy")}
        plots.metric_panels(panels, f"{name}: ML-kNN on the top m selected features",
                            png / f"{name}.png", "number of selected features m",
                            {**METRICS, "redundancy": True})
        res["sets"][name] = entry
    res["plots"] = str(png)
    emit(res, "grroor_curves")


if __name__ == "__main__":
    main()
