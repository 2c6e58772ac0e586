"""Small data is fast: in-memory fits on MULAN medical beside scikit-learn's TruncatedSVD.

medical's training set (333 documents x 1,449 binary word features, 45 labels) in memory
as a CSR matrix; dmlfe.PCA, dmlfe.MVMD and sklearn.decomposition.TruncatedSVD, all with
d = ``--d`` (default 20), fitted in the same process and the same BLAS thread setting:
one warm-up fit each, then ``--repeats`` (default 5) timed fits, the median reported;
then one more fit under tracemalloc for the peak of Python/numpy allocations during the
fit. Also the route and solver dmlfe took, the process' peak RSS, the load average
before and after, and the BLAS thread pools.

On a loaded machine multi-threaded BLAS can be 100x slower than one thread (threads
spinning for cores that other processes hold): ``--blas-threads 1`` (threadpoolctl, a
scikit-learn dependency) applies one setting to all three.

Prints JSON (also bench-out/small_data.json).

    python benchmarks/small_data.py [--d 20] [--repeats 5] [--blas-threads N]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import tracemalloc
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import TruncatedSVD
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA, emit  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.readers.arff import read_mulan  # noqa: E402


def load_medical() -> tuple[sp.csr_matrix, np.ndarray]:
    src = read_mulan(DATA / "mulan" / "medical-train.arff", DATA / "mulan" / "medical.xml")
    batches = list(src.batches(4096))
    X = sp.vstack([sp.csr_matrix(b.X) for b in batches], format="csr").astype(np.float64)
    Y = sp.vstack([b.Y for b in batches]).toarray().astype(np.int8)
    return X, Y


def time_fits(make: Any, X: Any, Y: Any, repeats: int) -> dict[str, Any]:
    model = make().fit(X, Y)  # warm-up: imports, caches
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        make().fit(X, Y)
        seconds.append(time.perf_counter() - t0)
    tracemalloc.start()
    make().fit(X, Y)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out: dict[str, Any] = {"median_seconds": round(statistics.median(seconds), 4),
                           "seconds": [round(s, 4) for s in seconds],
                           "peak_traced_mib": round(peak / 2**20, 2)}
    for attr in ("route_", "solver_", "route_reason_"):
        if hasattr(model, attr):
            out[attr.rstrip("_")] = getattr(model, attr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="limit BLAS/OpenMP threads for all three (default: as they are)")
    args = ap.parse_args()
    X, Y = load_medical()
    res: dict[str, Any] = {"data": "MULAN medical train", "shape": list(X.shape),
                           "labels": int(Y.shape[1]), "d": args.d, "repeats": args.repeats,
                           "loadavg_before": [round(v, 2) for v in os.getloadavg()]}
    limit = (threadpool_limits(args.blas_threads) if args.blas_threads is not None
             else nullcontext())
    with limit:
        res["blas"] = [{"api": i["internal_api"], "threads": i["num_threads"]}
                       for i in threadpool_info()]
        fits = {
            "dmlfe_pca": lambda: dmlfe.PCA(n_components=args.d),
            "dmlfe_mvmd": lambda: dmlfe.MVMD(n_components=args.d),
            "sklearn_truncated_svd": lambda: TruncatedSVD(n_components=args.d, random_state=0),
        }
        res["fits"] = {name: time_fits(make, X, Y, args.repeats) for name, make in fits.items()}
    ref = res["fits"]["sklearn_truncated_svd"]["median_seconds"]
    for name in ("dmlfe_pca", "dmlfe_mvmd"):
        res["fits"][name]["x_truncated_svd"] = round(res["fits"][name]["median_seconds"] / ref, 2)
    res["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    res["loadavg_after"] = [round(v, 2) for v in os.getloadavg()]
    emit(res, "small_data")


if __name__ == "__main__":
    main()
