"""Growing corpora (issue 34): a refit after an append against a fresh fit, same run.

A synthetic corpus of ``--docs`` documents is ingested (hashing to ``--features``), a fit
fills the statistics cache beside the store, ``--append`` further documents of the same
generator are appended (:func:`dmlfe.append`), and the refit -- which reads only the
appended documents when its statistics are sufficient -- is timed against a fresh fit of
the grown store (``cache=False``: every row read), each in a fresh process. The refit's
eigenvalues and components are compared with the fresh fit's.

Cases: MDDM ``variant="p"`` (X^T Y at any D) on the hashed store, PCA on the feature
route (X^T X) on a second store hashed to ``--small-features``, PCA on the matrix-free
route (``solver="randomized"``) on that store, whose refit starts from the Ritz vectors
the fit before the append saved beside it and their scatter image (warm start: its passes
over X against a fresh fit's -- the fresh fit's statistics pass included, the refit's
statistics and start image reading the appended rows only -- with both fits' tol, the
largest residual and eigenvalue error of each against numpy's eigh of the grown store's
centred X^T X; X stays in the store when the documents outnumber the features -- with
fewer, the n-space route is taken, which has no warm start), and MVMD on the dual
route (the n x n Gram cached beside the store, extended by the appended rows' products)
on R10: the ModApte training stories with one of the ten most frequent topics
(``--r10-train``, default all 6,490), hashed to ``--features`` with the idf of the
training split, then the first ``--r10-append`` (65) test stories appended; the refit and
the fresh fit both use all rows. The stories are written as JSON Lines from the
Reuters reader's batches (:func:`dmlfe.readers.reuters.read_reuters21578` with
``modapte=True, top_n=10``: the texts and labels ``--format reuters21578 --modapte
--top-n 10`` stores), because the store must hold the training stories only.

    python benchmarks/incremental.py                       # 200,000 + 2,000 at 2^20
    python benchmarks/incremental.py --docs 20000 --append 200 --repeat 1
    python benchmarks/incremental.py --docs 2000 --append 20 --r10-train 300 \
        --r10-append 20 --repeat 1                          # a check that it runs
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import numpy as np  # noqa: E402
from _measure import DATA, OUT, emit, measured, run_case_child  # noqa: E402

WORK = OUT / "incremental-work"
REUTERS = DATA / "reuters21578" / "reuters21578.tar.gz"
CASES = {"mddm_p": ("MDDM", {"variant": "p"}, "big"),
         "pca_feature": ("PCA", {"route": "feature"}, "small"),
         "mvmd_dual": ("MVMD", {"route": "dual"}, "r10"),
         "pca_matrix_free": ("PCA", {"route": "feature", "solver": "randomized"}, "small")}
#: Cases whose solver passes over X: what counts there is the passes of the warm refit
#: against those of a fresh fit.
MATRIX_FREE_CASES = ("pca_matrix_free",)


def child(case: dict) -> None:
    """One fit in this fresh process: JSON with seconds, rows read, eigenvalues, and the
    components saved beside the store for the comparison."""
    import dmlfe
    from dmlfe.cluster import get_client

    name, params, _ = CASES[case["case"]]
    rec: dict = {}
    kind = getattr(dmlfe, name)  # the imports it makes are not the fit's time
    with get_client(n_workers=case["workers"], threads_per_worker=1) as client:
        with measured(rec):
            est = kind(n_components=10, client=client, cache=case["cache"],
                       **params).fit(case["store"])
    if case.get("save"):
        np.save(case["save"], est.components_)
    print(json.dumps({**rec, "rows_read": int(est.rows_read_), "n_samples": int(est.n_samples_),
                      "n_passes": int(est.n_passes_), "max_residual": est.max_residual_,
                      "tol": est.get_params().get("tol"),
                      "stats_from_cache": bool(est.stats_from_cache_),
                      "warm_start": (est.solver_info_ or {}).get("warm_start"),
                      "eigenvalues": [float(v) for v in est.eigenvalues_[:10]]}))


def dense_accuracy(store: Path, fits: dict[str, tuple[Path, list[float]]]) -> dict:
    """Each fit's components (saved, d x D) and eigenvalues against numpy's eigh of the
    store's centred scatter Xc^T Xc (PCA's eigenvalues): the largest residual
    ||C u_i - lambda_i u_i|| and eigenvalue error, both over the largest eigenvalue
    (what the matrix-free stopping rule measures against ``tol``)."""
    import dmlfe

    X = dmlfe.open_store(store).X.compute().tocsr()
    sums = np.asarray(X.sum(axis=0)).ravel()
    C = (X.T @ X).toarray() - np.outer(sums, sums) / X.shape[0]
    del X
    ref = np.linalg.eigvalsh(C)[::-1]
    out = {}
    for mode, (path, values) in fits.items():
        U = np.load(path).T
        lam = np.asarray(values)[:U.shape[1]]
        res = np.linalg.norm(C @ U - U * lam, axis=0)
        out[mode] = {"max_residual_over_theta1": float(res.max() / ref[0]),
                     "max_eigenvalue_error_over_theta1":
                         float(np.max(np.abs(lam - ref[:lam.size])) / ref[0])}
    return out


def write_jsonl(corpus, start: int, stop: int, path: Path) -> None:
    """Documents ``start .. stop`` of the synthetic corpus as JSON Lines."""
    with open(path, "w", encoding="utf-8") as f:
        step = 10_000
        for lo in range(start, stop, step):
            part = corpus._slice(lo, min(lo + step, stop))
            for i in range(len(part)):
                f.write(json.dumps({"id": part.ids[i], "text": part.texts[i],
                                    "labels": part.labels[i], "split": part.splits[i]}) + "\n")


def write_r10(train: Path, test: Path, n_train: int, n_test: int) -> None:
    """The first ``n_train`` (0: all) R10 training stories and the first ``n_test`` test
    stories as JSON Lines, from the Reuters reader's batches; test stories keep only the
    topics the written training stories have (all ten in the full set)."""
    from dmlfe.readers.reuters import read_reuters21578

    left = {"train": n_train or None, "test": n_test}
    topics: set[str] = set()
    with open(train, "w", encoding="utf-8") as ftr, open(test, "w", encoding="utf-8") as fte:
        for batch in read_reuters21578(REUTERS, modapte=True, top_n=10):
            for i, split in enumerate(batch.splits):
                labels = batch.labels[i]
                if split == "test":
                    labels = [lab for lab in labels if lab in topics]
                if left[split] == 0 or not labels:
                    continue
                if split == "train":
                    topics.update(labels)
                left[split] = None if left[split] is None else left[split] - 1
                f = ftr if split == "train" else fte
                f.write(json.dumps({"id": batch.ids[i], "text": batch.texts[i],
                                    "labels": labels, "split": split}) + "\n")
            if left["train"] == 0 and left["test"] == 0:
                break


def forget_version(store: Path, n_docs: int) -> None:
    """Remove the cache entries (statistics, the dual route's Gram, the matrix-free start
    block) of the store's version with ``n_docs`` documents."""
    for meta in Path(str(store) + ".stats").glob("*.json"):
        if json.loads(meta.read_text())["params"]["data"]["shape"][0] == n_docs:
            matrix = meta.name.endswith((".gram.json", ".start.json",
                                         ".startimage.json"))
            meta.with_suffix(".npy" if matrix else ".npz").unlink(missing_ok=True)
            meta.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=200_000)
    ap.add_argument("--append", type=int, default=2_000)
    ap.add_argument("--features", type=int, default=2**20)
    ap.add_argument("--small-features", type=int, default=2**12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--r10-train", type=int, default=0,
                    help="R10 training stories in the dual-route case (0: all 6,490)")
    ap.add_argument("--r10-append", type=int, default=65,
                    help="R10 test stories appended in the dual-route case")
    ap.add_argument("--cases", default=",".join(CASES),
                    help=f"the cases to run, comma-separated (default all: {', '.join(CASES)})")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        child(json.loads(args.case))
        return

    import dmlfe
    from dmlfe.readers.synthetic import SyntheticCorpus

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    total = args.docs + args.append
    corpus = SyntheticCorpus(total, seed=0)
    first, more = WORK / "first.jsonl", WORK / "more.jsonl"
    write_jsonl(corpus, 0, args.docs, first)
    write_jsonl(corpus, args.docs, total, more)
    result: dict = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                "load_average_start": os.getloadavg()},
                    "date": time.strftime("%Y-%m-%d"), "docs": args.docs,
                    "appended": args.append, "workers": args.workers, "cases": {}}
    cases = {c: CASES[c] for c in args.cases.split(",")}
    wanted = {kind for _, _, kind in cases.values()}
    r10_train, r10_test = WORK / "r10-train.jsonl", WORK / "r10-test.jsonl"
    if "r10" in wanted:
        write_r10(r10_train, r10_test, args.r10_train, args.r10_append)
    stores = {kind: v for kind, v in {"big": (first, args.features),
                                      "small": (first, args.small_features),
                                      "r10": (r10_train, args.features)}.items()
              if kind in wanted}
    sources = {"big": more, "small": more, "r10": r10_test}
    totals = {"big": total, "small": total}
    paths = {}
    for kind, (source, n_features) in stores.items():
        path = WORK / f"{kind}.zarr"
        rec: dict = {}
        with measured(rec):
            dmlfe.ingest(source, "jsonl", path, vectorizer="hashing", n_features=n_features,
                         id_field="id", split_field="split", fit_split="train",
                         chunk_rows=20_000)
        result[f"ingest_{kind}"] = rec
        paths[kind] = path
    script = str(Path(__file__).resolve())
    # fits before the append: they fill the statistics cache beside each store
    for case, (_, _, kind) in cases.items():
        run_case_child(script, {"case": case, "store": str(paths[kind]), "cache": True,
                                "workers": args.workers})
    for kind, path in paths.items():
        rec = {}
        with measured(rec):
            dmlfe.append(path, sources[kind], id_field="id", split_field="split")
        result[f"append_{kind}"] = rec
        totals[kind] = dmlfe.open_store(path).n_docs
    for case, (_, _, kind) in cases.items():
        runs = {"refit": [], "fresh": []}
        for r in range(args.repeat):
            for mode in ("refit", "fresh"):
                if mode == "refit":  # extend the earlier statistics again each time
                    forget_version(paths[kind], totals[kind])
                save = str(WORK / f"{case}-{mode}.npy") if r == 0 else None
                runs[mode].append(run_case_child(
                    script, {"case": case, "store": str(paths[kind]),
                             "cache": mode == "refit", "workers": args.workers,
                             "save": save}))
        med = {m: statistics.median(x["seconds"] for x in v) for m, v in runs.items()}
        a, b = (np.load(WORK / f"{case}-{m}.npy") for m in ("refit", "fresh"))
        ea, eb = (np.array(runs[m][0]["eigenvalues"]) for m in ("refit", "fresh"))
        result["cases"][case] = {
            "runs": runs, "median_seconds": med,
            "refit_over_fresh": round(med["refit"] / med["fresh"], 4),
            "rows_read": {m: runs[m][0]["rows_read"] for m in runs},
            "eigenvalues_max_rel_diff": float(np.max(np.abs(ea - eb) / np.abs(eb))),
            "components_max_abs_diff": float(np.max(np.abs(a - b)))}
        if case in MATRIX_FREE_CASES:
            passes = {m: runs[m][0]["n_passes"] for m in runs}
            exact = dense_accuracy(paths[kind], {
                m: (WORK / f"{case}-{r}.npy", runs[r][0]["eigenvalues"])
                for m, r in (("fresh", "fresh"), ("warm", "refit"))})
            result["cases"][case].update({
                "passes": {"fresh": passes["fresh"], "warm": passes["refit"]},
                "passes_counted": "passes over every row of X (n_passes_): the fresh fit's "
                                  "statistics pass and each solver pass; the refit's "
                                  "statistics and start image read the appended rows only",
                "warm_over_fresh_passes": round(passes["refit"] / passes["fresh"], 4),
                "tol": {"fresh": runs["fresh"][0]["tol"], "warm": runs["refit"][0]["tol"]},
                "max_residual": {"fresh": runs["fresh"][0]["max_residual"],
                                 "warm": runs["refit"][0]["max_residual"]},
                "against_dense_eigh": exact,
                "warm_start": runs["refit"][0]["warm_start"]})
    result["machine"]["load_average_end"] = os.getloadavg()
    emit(result, "incremental")


if __name__ == "__main__":
    main()
