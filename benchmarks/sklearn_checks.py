"""scikit-learn conformance: ``check_estimator`` over every public estimator and classifier.

For each estimator prints how many of scikit-learn's checks pass, fail, are expected
to fail (with the reason the estimator declares, see ``dmlfe.validation.expected_failed_checks``) or
are skipped, and the names of the failing checks with the first line of their error.
Prints JSON (also written to bench-out/sklearn_checks.json). Not a timing benchmark.

    python benchmarks/sklearn_checks.py            # every estimator
    python benchmarks/sklearn_checks.py PCA MVMD   # some of them
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import emit  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.validation import expected_failed_checks  # noqa: E402

NAMES = ("PCA", "LSI", "MDDM", "MVMD", "CCA", "PLS", "OPLS", "MLSI", "MLDA", "DMLDA",
         "KernelMDDM", "MultiLabelRidge", "MLkNN", "BinaryRelevance", "PerLabelFLDA", "PPML",
         "GRROOR")


#: Non-default parameters: the checks fit on 10 documents, and ML-kNN needs more than k;
#: GRROOR's alternating iterations are cut short (the checks test the API, not the fit).
PARAMS = {"MLkNN": {"k": 3}, "GRROOR": {"n_features_to_select": 1, "max_iter": 5}}


def run_checks(name: str) -> dict:
    est = getattr(dmlfe, name)(**PARAMS.get(name, {}))
    expected = expected_failed_checks(est)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, expected_failed_checks=expected, on_fail=None,
                                  on_skip=None)
    counts = {"passed": 0, "failed": 0, "xfail": 0, "skipped": 0}
    failures = {}
    for r in results:
        counts[r["status"]] += 1
        if r["status"] == "failed":
            msg = str(r["exception"]).strip().splitlines()
            failures[r["check_name"]] = (msg[0] if msg else type(r["exception"]).__name__)[:200]
    return {"estimator": name, "checks": len(results), **counts, "failures": failures}


def main(argv: list[str]) -> None:
    emit([run_checks(n) for n in (argv or NAMES)], "sklearn_checks")


if __name__ == "__main__":
    main(sys.argv[1:])
