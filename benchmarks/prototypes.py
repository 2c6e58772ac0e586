"""The relation route's default prototypes against every training document (issue 33).

For each relation-route method (MOPE, SSMOPE, MESD, HSL, LPP, OLPP, KernelMDDM p and f),
R10 (ModApte train / test, TITLE + BODY, the 1..3-grams hashed to ``--features``
columns: :func:`scale.r10_store`), ``n_components=10``, ``route="relation"`` (what
``route="auto"`` takes for these methods at 2^20; forced at smaller D, where auto would
take the feature route):

* ``p=n``: ``n_prototypes=None``, ``prototype_selection="all"`` (the default before);
* ``default``: the estimator's defaults (``n_prototypes="auto"``,
  ``prototype_selection="auto"``: min(n, MAX_AUTO_PROTOTYPES) chosen by AUTO_SELECTION);
* with ``--selections``: ``n_prototypes="auto"`` and each listed selection, to compare
  the ways of choosing the default's p prototypes; with ``--counts``: other p (the
  default selection), to compare caps.

Each fit runs in a fresh process: fit seconds and peak RSS (of the fit), then the
classification measures of ML-kNN (k = 10, s = 1; :class:`dmlfe.MLkNN`) trained on the
train embeddings and scored on the test embeddings with
:func:`dmlfe.metrics.metric_report` (average precision, micro- and macro-F1, one-error).
Cases run one after another (one method at a time), never in parallel.

    python benchmarks/prototypes.py --features 2048
    python benchmarks/prototypes.py --features 1048576 --selections random,kmeans++ \
        --counts 1000
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
from _measure import emit, measured, run_case_child  # noqa: E402
from scale import SETTLE_SECONDS, WORK, _split, r10_store  # noqa: E402

#: The methods whose default route at 2^20 is the relation route.
METHODS = ("mope", "ssmope", "mesd", "hsl", "lpp", "olpp", "kmddm_p", "kmddm_f")
#: Measures of metric_report kept in the table.
MEASURES = ("average_precision", "micro_f1", "macro_f1", "one_error")


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """Fit, transform and classify one case (in the child process)."""
    from dmlfe import MLkNN
    from dmlfe.estimators import make_estimator
    from dmlfe.metrics import metric_report

    rec: dict[str, Any] = dict(case)
    X, Y = _split(case["store"], "train")
    Xt, Yt = _split(case["store"], "test")
    est = make_estimator(case["method"], n_components=10, route="relation",
                         **case["params"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with measured(rec):
            est.fit(X, Y)
    rec.update(p=int(est.relation_map_.n_prototypes),
               prototype_selection=est.relation_["prototype_selection"],
               route_reason=est.route_reason_, solver=est.solver_,
               warnings=sorted({str(w.message)[:120] for w in caught}))
    Z, Zt = np.asarray(est.transform(X)), np.asarray(est.transform(Xt))
    clf = MLkNN(k=10, s=1.0).fit(Z, Y)
    report = metric_report(Yt, clf.predict(Zt), clf.predict_proba(Zt))
    rec.update({m: round(float(report[m]), 4) for m in MEASURES})
    return rec


def cases(store: str, selections: list[str], counts: list[int]) -> list[dict[str, Any]]:
    variants = {"p=n": {"n_prototypes": None, "prototype_selection": "all"}, "default": {}}
    variants |= {f"auto/{s}": {"prototype_selection": s} for s in selections}
    variants |= {f"p={p}": {"n_prototypes": p} for p in counts}
    variants |= {f"p={p}/{s}": {"n_prototypes": p, "prototype_selection": s}
                 for p in counts for s in selections}
    return [{"store": store, "method": m, "variant": v, "params": params}
            for m in METHODS for v, params in variants.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--features", type=int, default=2**20,
                    help="hashed feature columns of the R10 store (default 2^20)")
    ap.add_argument("--selections", default="",
                    help="comma list of other selections for the default's p (random, "
                    "kmeans++, ...)")
    ap.add_argument("--counts", default="",
                    help="comma list of other p (the default selection and each of "
                    "--selections), e.g. 1000")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma list")
    ap.add_argument("--variants", default="",
                    help="comma list: only these variants (e.g. p=1000/kmeans++)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per case")
    ap.add_argument("--tag", default="", help="suffix of the results file's name")
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    WORK.mkdir(parents=True, exist_ok=True)
    store = str(r10_store(args.features))
    chosen = set(args.methods.split(","))
    todo = [c for c in cases(store, [s for s in args.selections.split(",") if s],
                             [int(p) for p in args.counts.split(",") if p])
            if c["method"] in chosen and (not args.variants
                                          or c["variant"] in args.variants.split(","))]
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(),
                                          "loadavg_at_start": os.getloadavg()},
                              "features": args.features, "runs": []}
    for case in todo:
        time.sleep(SETTLE_SECONDS)
        rec = run_case_child(__file__, case, timeout=args.timeout)
        rec["loadavg_after"] = os.getloadavg()
        rec.pop("store", None)
        result["runs"].append(rec)
        print(json.dumps({k: rec.get(k) for k in ("method", "variant", "p", "seconds",
                                                   "peak_rss_total_mib", *MEASURES,
                                                   "status")}), file=sys.stderr, flush=True)
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    result["table"] = [{k: r.get(k) for k in ("method", "variant", "p", "prototype_selection",
                                              "seconds", "peak_rss_total_mib", *MEASURES)}
                       for r in result["runs"]]
    emit(result, f"prototypes-{args.features}" + (f"-{args.tag}" if args.tag else ""))


if __name__ == "__main__":
    main()
