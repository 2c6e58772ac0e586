"""Relation-route benchmark: Reuters ModApte R10, 2^20 hashed 1-3-gram tf-idf.

PCA, MVMD, MDDMf and CCA through the relation route (mope section 3.5; linear
similarity, i.e. R = X X_proto^T on the l2-normalised tf-idf rows) with p = n (every
training story) and p = 2,000 (uniform random prototypes, seed 0), next to the same
methods on the feature route on unigram tf-idf (the ``--unigram-features`` most
frequent train terms, so that the dense D x D route runs). For each: fit time and
peak RSS (driver + workers), d, solver, and micro-/macro-F1 on the ModApte test
stories of a ridge classifier on the embeddings (one ridge regression per label on
+-1 targets with intercept, alpha = 0.01, threshold 0; trained on the training
embeddings).

Prints JSON (also written to bench-out/relation.json, or relation-quick.json).

    python benchmarks/relation.py            # the full benchmark
    python benchmarks/relation.py --quick    # p = 300 / 1000 and 1000 unigram terms
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA, OUT, emit, measured  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.cluster import get_client  # noqa: E402
from dmlfe.estimators import make_estimator  # noqa: E402
from dmlfe.stats.cache import stats_dir_for  # noqa: E402

REUTERS = DATA / "reuters21578" / "reuters21578.tar.gz"
METHODS = ("pca", "mvmd", "mddm_f", "cca")


def ridge_f1(Z_train: np.ndarray, Y_train: np.ndarray, Z_test: np.ndarray,
             Y_test: np.ndarray, alpha: float = 0.01) -> dict[str, float]:
    """Micro/macro F1 of per-label ridge regressions on +-1 targets (threshold 0)."""
    from sklearn.linear_model import Ridge
    from sklearn.metrics import f1_score

    model = Ridge(alpha=alpha, fit_intercept=True).fit(Z_train, 2.0 * Y_train - 1.0)
    pred = (model.predict(Z_test) > 0).astype(np.uint8)
    return {"micro_f1": round(float(f1_score(Y_test, pred, average="micro", zero_division=0)), 4),
            "macro_f1": round(float(f1_score(Y_test, pred, average="macro", zero_division=0)), 4)}


def _n_components(method: str, args: argparse.Namespace) -> Any:
    # PCA / MVMD: a fixed d; MDDMf / CCA have at most q = 10 non-zero eigenvalues, and the
    # MDDM paper's thr = 0.999 picks d among them
    return args.dim if method in ("pca", "mvmd") else 0.999


def run_one(method: str, store: Path, client: Any, args: argparse.Namespace,
            Ys: tuple[np.ndarray, np.ndarray], **params: Any) -> dict:
    rec: dict[str, Any] = {"method": method, **{k: v for k, v in params.items()
                                                 if k != "max_dense_features"}}
    est = make_estimator(method, n_components=_n_components(method, args), split="train",
                         client=client, **params)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with measured(rec):
                est.fit(str(store))
        rec["warnings"] = sorted({str(w.message)[:160] for w in caught})
    except Exception as exc:  # keep the other methods' figures
        rec.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:800])
        traceback.print_exc()
        return rec
    rec.update(status="ok", route=est.route_, route_reason=est.route_reason_,
               solver=est.solver_, d=est.n_components_, n_passes=est.n_passes_,
               stats_from_cache=est.stats_from_cache_, regularization=est.regularization_,
               columns=int(est.components_.shape[1]))
    if est.relation_ is not None:
        rec["relation"] = est.relation_
    s = dmlfe.open_store(store)
    tr: dict[str, Any] = {}
    with measured(tr):
        Z_train = np.asarray(est.transform(s.subset("train").X).compute())
        Z_test = np.asarray(est.transform(s.subset("test").X).compute())
    rec["transform"] = tr
    rec.update(ridge_f1(Z_train, Ys[0], Z_test, Ys[1]))
    print(" ".join(f"{k}={rec.get(k)}" for k in ("method", "route", "d", "seconds",
                                                   "peak_rss_total_mib", "micro_f1",
                                                   "macro_f1")), file=sys.stderr, flush=True)
    return rec


def labels(store: Path) -> tuple[np.ndarray, np.ndarray]:
    s = dmlfe.open_store(store)
    return (np.asarray(s.subset("train").Y.compute(scheduler="sync").toarray()),
            np.asarray(s.subset("test").Y.compute(scheduler="sync").toarray()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--prototypes", default="all,2000",
                    help="comma list of p values ('all' = every training story)")
    ap.add_argument("--dim", type=int, default=100, help="d of PCA and MVMD")
    ap.add_argument("--unigram-features", type=int, default=3000)
    ap.add_argument("--chunk-rows", type=int, default=4600,
                    help="store chunk rows")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true",
                    help="p = 300 and 1000, 1000 unigram terms, d = 50")
    args = ap.parse_args()
    if args.quick:
        args.prototypes, args.unigram_features, args.dim = "300,1000", 1000, 50
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    protos = [None if p == "all" else int(p) for p in args.prototypes.split(",") if p]
    if not REUTERS.exists():
        sys.exit(f"Reuters-21578 not found at {REUTERS}; set DMLFE_DATA to the data folder")

    work = OUT / ("relation-work-quick" if args.quick else "relation-work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    base = {"modapte": True, "top_n": 10, "fit_split": "train"}
    corpora = {
        "hashed_1to3": {**base, "vectorizer": "hashing", "n_features": 2**20,
                        "ngram_range": (1, 3)},
        "unigram": {**base, "vectorizer": "tfidf", "max_features": args.unigram_features},
    }
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
                    "loadavg_at_start": [round(x, 2) for x in os.getloadavg()]},
        "workers": args.workers, "threads_per_worker": 1, "quick": args.quick,
        "data": str(REUTERS), "classifier": "per-label Ridge(alpha=0.01, fit_intercept=True) "
        "on +-1 targets, threshold 0, trained on the training embeddings",
        "notes": [
            "seconds / peak_rss_*: the fit (prototype choice, statistics pass, solve); the "
            "relation fits with the same p share one statistics pass (cached beside the "
            "store; stats_from_cache says which fit reused it)",
            "relation route: linear similarity on l2-normalised tf-idf rows (= cosine)",
            "shared 2-core machine: wall times are noisy",
        ],
        "corpora": {}, "runs": [],
    }
    t0 = time.perf_counter()
    with get_client(n_workers=args.workers, threads_per_worker=1,
                    memory_limit="8GiB") as client:
        stores = {}
        for name, opts in corpora.items():
            store = work / f"{name}.zarr"
            ing: dict[str, Any] = {}
            with measured(ing):
                dmlfe.ingest(REUTERS, format="reuters21578", out=store, overwrite=True,
                             chunk_rows=args.chunk_rows, client=client, **opts)
            s = dmlfe.open_store(store)
            tr = s.subset("train")
            ing.update(D=int(s.n_features), n_train=int(tr.X.shape[0]),
                       n_test=int(s.subset("test").X.shape[0]),
                       nnz_train=int(tr.row_nnz.sum().compute(scheduler="sync")),
                       options={k: (list(v) if isinstance(v, tuple) else v)
                                for k, v in opts.items()})
            results["corpora"][name] = ing
            stores[name] = store
        Ys = labels(stores["hashed_1to3"])
        for p in protos:
            for m in methods:
                sel = "all" if p is None else "random"
                results["runs"].append(run_one(
                    m, stores["hashed_1to3"], client, args, Ys, route="relation",
                    n_prototypes=p, prototype_selection=sel, similarity="linear",
                    max_dense_features=20_000) | {"corpus": "hashed_1to3"})
        Yu = labels(stores["unigram"])
        for m in methods:
            results["runs"].append(run_one(m, stores["unigram"], client, args, Yu,
                                           route="feature") | {"corpus": "unigram"})
    results["total_seconds"] = round(time.perf_counter() - t0, 1)
    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    for store in stores.values():
        shutil.rmtree(stats_dir_for(store), ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    emit(results, "relation-quick" if args.quick else "relation")


if __name__ == "__main__":
    main()
