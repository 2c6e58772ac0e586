"""The MOPE paper's Experiments 1 and 2 on Reuters R10 (mope section 4): quality only.

Protocol (mope section 4.1-4.2, as far as dmlfe carries it):

* all 9,400 stories carrying one of the 10 most frequent topics, tf-idf of the 2,000
  most frequent terms (min_df 2, sublinear tf; the paper used 24,012 stemmed unigrams);
* label-stratified thirds for training, validation and test
  (:func:`dmlfe.pipeline.splits.stratified_split`, seed 0);
* relation features (mope section 3.5) with ``similarity="gaussian"``, a monotone
  function of the euclidean distance (dmlfe has no raw-distance relation feature);
  p prototypes drawn at random from the training stories (``--prototypes``; the paper
  used all of them);
* per label, Fisher's linear discriminant (:class:`dmlfe.evaluation.linear.PerLabelFLDA`)
  on the embeddings, macro-F1 on the test third;
* every method's settings (K, the Psi parameters a, b, beta, the label similarity, d)
  chosen by macro-F1 on the validation third; d from ``--dims`` (prefixes of one fit).

Experiment 2: 40 % and 80 % of the training stories keep their labels; SSMOPE (OLPP on
all training stories + MOPE on the labelled ones), OLPP (all training stories, no labels)
and MOPE (labelled stories only); the classifier is trained on the labelled stories.

No timings are taken (see the benchmark notes of the project). JSON goes to stdout and
bench-out/mope_r10.json (mope_r10-quick.json with ``--quick``).

    nice python benchmarks/mope_r10.py --quick     # p = 500, a small grid
    nice python benchmarks/mope_r10.py             # p = 1,000, the larger grid
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA, OUT  # noqa: E402

from dmlfe import ingest  # noqa: E402
from dmlfe.estimators import make_estimator  # noqa: E402
from dmlfe.evaluation.linear import PerLabelFLDA  # noqa: E402
from dmlfe.evaluation.metrics import macro_f1  # noqa: E402
from dmlfe.pipeline.splits import stratified_split  # noqa: E402
from dmlfe.store import open_store  # noqa: E402

REUTERS = DATA / "reuters21578" / "reuters21578.tar.gz"


def load_r10(work: Path) -> tuple[sp.csr_matrix, np.ndarray]:
    path = ingest(str(REUTERS), "reuters21578", work / "r10.zarr", top_n=10,
                  max_features=2000, min_df=2, sublinear_tf=True)
    store = open_store(path)
    X = sp.csr_matrix(store.X.compute(scheduler="threads"), dtype=np.float64)
    Y = np.asarray(store.Y.compute(scheduler="threads").toarray(), dtype=np.float64)
    return X, Y


class Bench:
    """Fits on the training third, scores on validation/test (macro-F1 of FLDA)."""

    def __init__(self, X: sp.csr_matrix, Y: np.ndarray, part: np.ndarray, args: Any) -> None:
        self.X, self.Y, self.part, self.args = X, Y, part, args
        self.dims = [int(d) for d in args.dims.split(",")]
        self.common = dict(route="relation", similarity="gaussian",
                           n_prototypes=args.prototypes, prototype_selection="random",
                           random_state=0)

    def scores(self, est: Any, train_rows: np.ndarray) -> dict[int, tuple[float, float]]:
        """d -> (validation macro-F1, test macro-F1) for each d of the grid."""
        Z = {k: est.transform(self.X[self.part == k]) for k in (1, 2)}
        Ztr = est.transform(self.X[train_rows])
        out = {}
        for d in self.dims:
            if d > est.components_.shape[0]:
                continue
            clf = PerLabelFLDA().fit(Ztr[:, :d], self.Y[train_rows])
            out[d] = tuple(round(float(macro_f1(self.Y[self.part == k],
                                                clf.predict(Z[k][:, :d]))), 4) for k in (1, 2))
        return out

    def run(self, method: str, grid: dict[str, list[Any]], *, labels: np.ndarray | None = None,
            fit_rows: np.ndarray | None = None, clf_rows: np.ndarray | None = None,
            max_d: int | None = None, **fixed: Any) -> dict[str, Any]:
        """Best setting of ``method`` over ``grid`` x d on validation; its test score."""
        fit_rows = np.flatnonzero(self.part == 0) if fit_rows is None else fit_rows
        clf_rows = fit_rows if clf_rows is None else clf_rows
        Yfit = self.Y[fit_rows] if labels is None else labels
        best: dict[str, Any] = {"validation_macro_f1": -1.0}
        tried = 0
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            params = {**fixed, **dict(zip(keys, values, strict=True))}
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    est = make_estimator(method, n_components=max_d or max(self.dims),
                                         **self.common,
                                         **params).fit(self.X[fit_rows], Yfit)
            except ValueError as exc:
                print(f"[mope_r10] {method} {params}: {exc}", file=sys.stderr)
                continue
            by_d = self.scores(est, clf_rows)
            for d, (val, test) in by_d.items():
                tried += 1
                if val > best["validation_macro_f1"]:
                    # the chosen setting's scores at every d: (validation, test) macro-F1
                    best = {"validation_macro_f1": val, "test_macro_f1": test, "d": d,
                            "params": params, "by_d": by_d}
        best["settings_tried"] = tried
        print(f"[mope_r10] {method} {fixed}: {best}", file=sys.stderr)
        return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--prototypes", type=int, default=None)
    ap.add_argument("--dims", default=None, help="comma-separated d grid")
    args = ap.parse_args()
    if args.prototypes is None:
        args.prototypes = 500 if args.quick else 1000
    if args.dims is None:
        args.dims = "10,20,50,100,200" if args.quick else "10,20,50,100,200,400,800"
    if not REUTERS.exists():
        sys.exit(f"{REUTERS} not found (set DMLFE_DATA to the shared data folder)")
    with tempfile.TemporaryDirectory() as tmp:
        X, Y = load_r10(Path(tmp))
    part = stratified_split(Y, [1, 1, 1], seed=0)
    bench = Bench(X, Y, part, args)
    Ks = [5, 10]
    psi = ([dict(a=1.0, b=1.0, beta=1.0), dict(a=0.3, b=1.3, beta=1.0)] if args.quick else
           [dict(a=a, b=b, beta=beta) for a, b, beta in
            itertools.product([0.3, 1.0], [1.0, 2.0], [1.0, 3.0])])
    psi_grid = {"n_neighbors": Ks, "psi": psi}

    def mope(fixed: dict[str, Any], grid: dict[str, list[Any]] | None = None,
             **kw: Any) -> dict[str, Any]:
        grid = dict(grid or {"n_neighbors": Ks})
        settings = grid.pop("psi", [{}])
        results = [bench.run("mope", grid, **fixed, **s, **kw) for s in settings]
        return max(results, key=lambda r: r["validation_macro_f1"])

    exp1: dict[str, Any] = {}
    # label proximity G alone (Psi with beta = 0: A = G^a on the graph; mope Fig. 2)
    for scheme, sim in [(1, "sorensen"), (1, "scaled_sorensen"), (1, "jaccard"),
                        (1, "hamming"), (2, "cosine"), (3, "sorensen")]:
        exp1[f"mope_G_only_scheme{scheme}_{sim}"] = mope(
            dict(scheme=scheme, label_similarity=sim, combination="priority", beta=0.0))
    # the three combinations with scheme 3 (mope Table 3)
    exp1["mope_scheme3_priority"] = mope(dict(scheme=3), psi_grid)
    exp1["mope_scheme3_hadamard"] = mope(dict(scheme=3, combination="hadamard"))
    exp1["mope_scheme3_weighted_sum"] = mope(
        dict(scheme=3, combination="weighted_sum"),
        {"n_neighbors": Ks, "psi": [dict(beta=b) for b in (0.25, 0.5, 0.75)]})
    # schemes 1 and 2 with the Psi parameters tuned for scheme 3, K tuned again
    best_psi = {k: exp1["mope_scheme3_priority"]["params"][k] for k in ("a", "b", "beta")}
    for scheme, sim in [(1, "sorensen"), (2, "cosine")]:
        exp1[f"mope_scheme{scheme}_{sim}_priority"] = mope(
            dict(scheme=scheme, label_similarity=sim, **best_psi))
    for base in ("fda", "lfda", "olpp_r"):
        grid: dict[str, list[Any]] = {"weighting": ["unweighted", "weighted"]}
        if base != "fda":
            grid["n_neighbors"] = Ks
        if base == "olpp_r":
            grid["beta"] = [0.1, 1.0]
        exp1[f"mesd_{base}"] = bench.run("mesd", grid, base=base)
    exp1["olpp"] = bench.run("olpp", {"n_neighbors": Ks})
    exp1["hsl_clique"] = bench.run("hsl", {}, hypergraph="clique")
    exp1["hsl_hypergraph"] = bench.run("hsl", {}, hypergraph="hypergraph")
    for name in ("pca", "lsi", "mddm_f", "cca"):
        exp1[name] = bench.run(name, {})
    exp1["mddm_p"] = bench.run("mddm_p", {}, max_d=int(Y.shape[1]))  # rank <= q

    exp2: dict[str, Any] = {}
    train = np.flatnonzero(part == 0)
    rng = np.random.default_rng(0)
    best3 = exp1["mope_scheme3_priority"]["params"]
    mope_fixed = {k: v for k, v in best3.items() if k != "n_neighbors"}
    for frac in (0.4, 0.8):
        labelled = np.sort(rng.choice(train, size=int(round(frac * train.size)),
                                      replace=False))
        Ymask = bench.Y[train].copy()
        Ymask[~np.isin(train, labelled)] = 0.0
        row = {
            "ssmope": bench.run("ssmope", {"n_neighbors": Ks,
                                           "unsupervised_weight": [0.1, 0.3, 0.5]},
                                labels=Ymask, fit_rows=train, clf_rows=labelled,
                                **mope_fixed),
            "olpp": bench.run("olpp", {"n_neighbors": Ks}, fit_rows=train, clf_rows=labelled),
            "mope": bench.run("mope", {"n_neighbors": Ks}, fit_rows=labelled, **mope_fixed),
        }
        exp2[f"{int(frac * 100)}%_labelled"] = row

    record = {"benchmark": "mope_r10", "quick": bool(args.quick),
              "n_documents": int(X.shape[0]), "n_features": int(X.shape[1]),
              "split_sizes": [int((part == k).sum()) for k in range(3)],
              "n_prototypes": args.prototypes, "dims": bench.dims,
              "relation_similarity": "gaussian", "classifier": "per-label FLDA (midpoint)",
              "experiment1": exp1, "experiment2": exp2}
    OUT.mkdir(exist_ok=True)
    out = OUT / ("mope_r10-quick.json" if args.quick else "mope_r10.json")
    text = json.dumps(record, indent=2, default=str)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
