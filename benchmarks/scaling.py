"""Large-corpus fits against the number of workers: where the time goes, and how it scales.

The synthetic corpus of ``scale.py``'s synthetic part (a Zipf vocabulary of
``--vocab-size`` words, 1..2-grams hashed to 2^20 features, every column used) is
ingested once per size into ``bench-out/scaling-work/``. Then, for each worker count W
of ``--workers`` and each method of ``--methods`` (d = ``--components``), one fit from
the store in a fresh child process on a new ``LocalCluster`` of W processes x 1 thread
(``cache=False``, default parameters otherwise), measured there: wall seconds, peak RSS
of the driver and its workers, passes, ``converged_``, ``max_residual_`` and the
warnings; on the n-space route (``solver_ == "thick-restart-lanczos"``) also its
breakdown from ``solver_info_``:

* per slot (worker): seconds in the pass (sparse products), the orthogonalisation (the
  Krylov block's projections and QR), restarts, the components' half pass, sending to
  the other slots and waiting for them;
* on the driver: wall, CPU (its own algebra and the serialisation of its messages),
  seconds waited for the slots and round trips.

From these: ``serial`` = the solve's wall time not covered by the busiest slot's work
and exchanges (the driver's own time and the latency of its calls), per pass and as a
fraction of the one-worker pass (``serial_fraction``: the Amdahl fraction that limits
the speed-up), and ``exchange`` = a slot's sending and waiting.

A read pass (the sum of every row block's stored values, one task per block) is timed
on each cluster too: the cost of reading X once. ``--before PATH`` runs the same fits
with PATH (a checkout of an older dmlfe) first on the children's path, in the same run.
``--model A.json B.json``: the scaling model (:func:`scaling_model`) fitted to earlier
outputs, several corpus sizes among them. ``--exact N``: the first N documents, PCA
and MVMD with both routes forced
(``route="feature", solver="randomized"`` against ``route="dual"``): the largest
relative difference of their eigenvalues. ``--reference``: scikit-learn's
TruncatedSVD(d) on the same X in memory, in a child process, for scale.

    python benchmarks/scaling.py --docs 100000 --workers 1,2 --methods mvmd,pca \\
        --exact 10000 --reference [--before ../before]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import OUT, emit, measured, run_case_child  # noqa: E402

WORK = OUT / "scaling-work"


def store_for(n_docs: int, vocab_size: int, workers: int, chunk_rows: int) -> tuple[Path, dict]:
    """The synthetic store of ``n_docs`` documents (ingested now unless it exists)."""
    import dmlfe
    from dmlfe.cluster import get_client

    path = WORK / f"synthetic_{n_docs}_{vocab_size}.zarr"
    rec: dict[str, Any] = {"docs": n_docs, "vocab_size": vocab_size, "path": str(path)}
    if path.exists():
        rec["ingest"] = "reused"
        return path, rec
    WORK.mkdir(parents=True, exist_ok=True)
    ing: dict[str, Any] = {"workers": workers}
    with measured(ing), get_client(n_workers=workers, threads_per_worker=1) as client:
        dmlfe.ingest(None, format="synthetic", out=path, overwrite=True, client=client,
                     n_docs=n_docs, vocab_size=vocab_size, vectorizer="hashing",
                     n_features=2**20, ngram_range=(1, 2), chunk_rows=chunk_rows)
    rec["ingest"] = ing
    return path, rec


# ------------------------------------------------------------------ one fit, in a child
def _block_nnz(xb: Any) -> int:
    return int(xb.nnz)


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Fit one case on a new LocalCluster and measure it (runs in the child)."""
    import dask

    import dmlfe
    from dmlfe.cluster import get_client

    rec: dict[str, Any] = dict(case)
    W = int(case["workers"])
    with get_client(n_workers=W, threads_per_worker=1,
                    memory_limit=case.get("memory_limit", "auto")) as client:
        store = dmlfe.open_store(case["store"])
        if case.get("read_pass", True):
            blocks = store.X.to_delayed().ravel()
            t0 = time.perf_counter()
            nnz = sum(client.gather(client.compute([dask.delayed(_block_nnz)(b)
                                                    for b in blocks])))
            rec["read_pass"] = {"seconds": round(time.perf_counter() - t0, 3), "nnz": nnz}
        kw = dict(case.get("params", {}))
        est = dmlfe.make_estimator(case["method"], n_components=case["components"],
                                   client=client, cache=False, **kw)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with measured(rec):
                est.fit(case["store"])
        rec.update(route=est.route_, solver=est.solver_, n_passes=int(est.n_passes_),
                   converged=bool(est.converged_),
                   max_residual=None if est.max_residual_ is None else float(
                       est.max_residual_),
                   d=int(est.n_components_),
                   eigenvalues_head=[float(v) for v in est.eigenvalues_[:3]],
                   eigenvalue_d=float(est.eigenvalues_[est.n_components_ - 1]),
                   warnings=[str(w.message)[:300] for w in caught
                             if issubclass(w.category, RuntimeWarning)])
        info = getattr(est, "solver_info_", None)
        if info:
            rec["solver_info"] = info
    return rec


def child(case: dict[str, Any], pythonpath: str | None, timeout: float) -> dict[str, Any]:
    return run_case_child(__file__, case, pythonpath, timeout)


# ------------------------------------------------------------------ the breakdown
def breakdown(rec: dict[str, Any]) -> dict[str, Any] | None:
    """Busy, exchange and serial seconds of one n-space fit (see the module docstring)."""
    info = rec.get("solver_info")
    if not info:
        return None
    slots = info["slot_seconds"]
    work = ("pass_xt", "pass_x", "pass_sum", "orthogonalise", "restart", "components")
    busy = [sum(s.get(k, 0.0) for k in work) for s in slots]
    exchange = [s.get("send", 0.0) + s.get("wait", 0.0) for s in slots]
    driver = info["driver"]
    busiest = max(b + e for b, e in zip(busy, exchange, strict=True))
    passes = max(int(info.get("krylov_passes", rec["n_passes"])), 1)
    return {"solve_wall": round(driver["wall"], 3), "driver_cpu": round(driver["driver_cpu"], 3),
            "round_trips": driver["round_trips"], "passes": passes,
            "slot_busy": [round(b, 3) for b in busy],
            "slot_exchange": [round(e, 3) for e in exchange],
            "slot_pass": [round(sum(s.get(k, 0.0) for k in work[:3]), 3) for s in slots],
            "slot_pass_xt": [round(s.get("pass_xt", 0.0), 3) for s in slots],
            "slot_pass_x": [round(s.get("pass_x", 0.0), 3) for s in slots],
            "slot_pass_sum": [round(s.get("pass_sum", 0.0), 3) for s in slots],
            "slot_orthogonalise": [round(s.get("orthogonalise", 0.0), 3) for s in slots],
            "slot_components": [round(s.get("components", 0.0), 3) for s in slots],
            "serial": round(max(driver["wall"] - busiest, 0.0), 3),
            "serial_per_pass": round(max(driver["wall"] - busiest, 0.0) / passes, 4),
            "busy_per_pass_mean": round(float(np.mean(busy)) / passes, 4)}


def summarise(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Speed-ups against one worker and the serial fraction, per method and code."""
    out = []
    keys = sorted({(r["method"], r.get("code", "after")) for r in runs})
    for method, code in keys:
        mine = sorted((r for r in runs if r["method"] == method and r.get("code", "after") == code
                       and "seconds" in r), key=lambda r: r["workers"])
        if not mine:
            continue
        one = next((r for r in mine if r["workers"] == 1), None)
        one_pass = None
        if one is not None and breakdown(one):
            b1 = breakdown(one)
            one_pass = b1["busy_per_pass_mean"]
        for r in mine:
            row = {"method": method, "code": code, "workers": r["workers"],
                   "seconds": r["seconds"], "read_pass": r.get("read_pass", {}).get("seconds"),
                   "n_passes": r["n_passes"], "max_residual": r["max_residual"],
                   "converged": r["converged"], "warnings": len(r["warnings"]),
                   "peak_rss_total_mib": r.get("peak_rss_total_mib")}
            if one is not None:
                row["speedup_vs_1"] = round(one["seconds"] / r["seconds"], 2)
            b = breakdown(r)
            if b is not None:
                row["serial_per_pass"] = b["serial_per_pass"]
                if one_pass:
                    row["serial_fraction"] = round(b["serial_per_pass"] / one_pass, 4)
            out.append(row)
    return out


def _terms(r: dict[str, Any]) -> dict[str, float]:
    b = breakdown(r)
    W = r["workers"]
    return {"workers": W, "docs": r["docs"], "serial": b["serial"],
            "work_per_slot": round(float(np.mean(b["slot_busy"])), 3),
            "exchange_per_slot": round(float(np.mean(b["slot_exchange"])), 3),
            "outside": round(r["seconds"] - b["solve_wall"], 3), "fit_seconds": r["seconds"]}


def scaling_model(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """time(n, W) = serial + work(n, W) + exchange(n, W) + outside(n, W), its terms
    measured on the n-space fits of one method (``runs`` may hold several corpus sizes),
    and predictions for 8, 16 and 64 workers at 10^6 and 10^7 documents.

    ``work`` is a slot's busy seconds (sparse products, orthogonalisation, restarts,
    components): W-fold parallel, but slower per stored value as more workers share the
    machine's memory bandwidth; ``exchange`` a slot's seconds sending and waiting for the
    others (latency per message and step, and n x b numbers per pass); ``serial`` the
    solve's seconds outside the busiest slot (the driver and its calls); ``outside`` the
    fit's seconds outside the solve (reading X into tiles, the statistics, gathering the
    components). Where a worker count was measured at two sizes, each term is fitted as
    a + b n (a: what the passes cost whatever n is); at one size it is taken as
    proportional to n (an upper bound for latency-bound terms). A worker count never
    measured takes the largest measured one's terms with its work spread over more
    workers at the same efficiency: an extrapolation, marked so.
    """
    fits = [r for r in runs if r.get("code", "after") == "after" and breakdown(r)]
    if not fits:
        return None
    method = fits[0]["method"]
    measured = sorted((_terms(r) for r in fits if r["method"] == method),
                      key=lambda t: (t["workers"], t["docs"]))
    keys = ("work_per_slot", "exchange_per_slot", "outside")
    laws: dict[int, dict[str, tuple[float, float]]] = {}
    for W in sorted({t["workers"] for t in measured}):
        at = [t for t in measured if t["workers"] == W]
        law = {}
        for key in keys:
            if len({t["docs"] for t in at}) >= 2:
                slope, icpt = np.polyfit([t["docs"] for t in at], [t[key] for t in at], 1)
                law[key] = (float(max(icpt, 0.0)), float(max(slope, 0.0)))
            else:
                law[key] = (0.0, at[0][key] / at[0]["docs"])
        law["serial"] = (float(np.mean([t["serial"] for t in at])), 0.0)
        laws[W] = law
    top = max(laws)
    predictions = []
    for n in (10**6, 10**7):
        for W in (8, 16, 64):
            law = laws.get(W)
            extrapolated = law is None
            if law is None:
                law = dict(laws[top])
                a, b = law["work_per_slot"]
                law["work_per_slot"] = (a * top / W, b * top / W)
            t = sum(a + b * n for a, b in law.values())
            predictions.append({"docs": n, "workers": W, "fit_seconds": round(t, 1),
                                "extrapolated_workers": extrapolated})
    return {"method": method, "measured": measured,
            "laws": {str(W): {k: [round(a, 4), float(f"{b:.4g}")] for k, (a, b) in law.items()}
                     for W, law in laws.items()},
            "predictions": predictions}


# ------------------------------------------------------------------ exactness, reference
def exactness(store: str, n: int, components: int) -> dict[str, Any]:
    """The first n documents, both routes forced: the largest relative eigenvalue gap."""
    import dmlfe
    from dmlfe.cluster import get_client

    view = dmlfe.open_store(store).take(np.arange(n))
    X = view.X.compute(scheduler="threads").tocsr()
    Y = np.asarray(view.Y.compute(scheduler="threads").toarray())
    out: dict[str, Any] = {"docs": n, "components": components}
    with get_client(n_workers=2, threads_per_worker=1) as client:
        for method in ("pca", "mvmd"):
            kw = dict(n_components=components, client=client, cache=False)
            feat = dmlfe.make_estimator(method, route="feature", solver="randomized",
                                        **kw).fit(X, Y)
            dual = dmlfe.make_estimator(method, route="dual", **kw).fit(X, Y)
            a, b = feat.eigenvalues_[:components], dual.eigenvalues_[:components]
            out[method] = {"solver": feat.solver_,
                           "max_rel_eigenvalue_diff": float(np.max(np.abs(a - b) / np.abs(b))),
                           "max_residual": feat.max_residual_,
                           "n_passes": int(feat.n_passes_)}
    return out


REFERENCE = """
import sys, time, numpy as np, dmlfe
from sklearn.decomposition import TruncatedSVD
s = dmlfe.open_store(sys.argv[1])
X = s.X.compute(scheduler="threads").tocsr()
t = time.perf_counter()
TruncatedSVD(n_components=int(sys.argv[2]), random_state=0).fit(X)
result = {"tool": "sklearn TruncatedSVD", "seconds": round(time.perf_counter() - t, 3),
          "n_components": int(sys.argv[2])}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--docs", type=int, default=100_000)
    ap.add_argument("--vocab-size", type=int, default=1_000_000)
    ap.add_argument("--chunk-rows", type=int, default=5_000)
    ap.add_argument("--workers", default="1,2", help="comma list of worker counts")
    ap.add_argument("--methods", default="mvmd,pca")
    ap.add_argument("--components", type=int, default=100)
    ap.add_argument("--before", help="a checkout of an older dmlfe, run in the same way")
    ap.add_argument("--before-workers", help="worker counts for --before (default: all)")
    ap.add_argument("--exact", type=int, default=0, help="documents for the exactness check")
    ap.add_argument("--reference", action="store_true", help="scikit-learn TruncatedSVD too")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--name", default="scaling")
    ap.add_argument("--model", nargs="+", metavar="JSON",
                    help="fit the scaling model to earlier outputs (several sizes) and stop")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    if args.model:
        runs = []
        for path in args.model:
            res = json.loads(Path(path).read_text())
            docs = int(res["store"]["docs"])
            runs += [{**r, "docs": r.get("docs", docs)} for r in res["runs"]]
        emit({"inputs": args.model, "model": scaling_model(runs)}, args.name)
        return
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                          "loadavg_at_start": os.getloadavg()},
                              "before": args.before}
    path, result["store"] = store_for(args.docs, args.vocab_size,
                                      max(int(w) for w in args.workers.split(",")),
                                      args.chunk_rows)
    workers = [int(w) for w in args.workers.split(",")]
    before_workers = workers if not args.before_workers else \
        [int(w) for w in args.before_workers.split(",")]
    runs = []
    for W in workers:
        for method in args.methods.split(","):
            case = {"store": str(path), "method": method, "components": args.components,
                    "workers": W}
            rec = child({**case, "code": "after", "docs": args.docs}, None, args.timeout)
            print(f"after  W={W} {method}: {rec.get('seconds')} s "
                  f"({rec.get('status', 'ok')})", file=sys.stderr, flush=True)
            runs.append(rec)
            if args.before and W in before_workers:
                rec = child({**case, "code": "before", "docs": args.docs}, args.before,
                            args.timeout)
                print(f"before W={W} {method}: {rec.get('seconds')} s "
                      f"({rec.get('status', 'ok')})", file=sys.stderr, flush=True)
                runs.append(rec)
    result["runs"] = runs
    result["summary"] = summarise(runs)
    result["model"] = scaling_model(runs)
    if args.exact:
        result["exactness"] = exactness(str(path), args.exact, min(args.components, 100))
    if args.reference:
        from _measure import run_reference

        result["reference"] = run_reference(REFERENCE, str(path), str(args.components))
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    emit(result, args.name)


if __name__ == "__main__":
    main()
