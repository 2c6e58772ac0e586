"""Time and peak memory of the MOPE paper's graph methods: K-NN graph and fits (issue 12).

Two corpora, each in a store on a LocalCluster (2 workers x 1 thread, 3 GiB each):

* ``r10``: Reuters R10 as :mod:`mope_r10` loads it (9,400 stories, tf-idf of 2,000
  terms; its ``load_r10`` ingests the store this benchmark then fits from);
* ``synthetic``: ``--docs`` documents of the project's synthetic corpus
  (:class:`dmlfe.readers.synthetic.SyntheticCorpus`, ``dmlfe.ingest(format="synthetic")``),
  hashed to 2^20 features.

Per corpus: the K-NN graph (K = ``--neighbors``) searched once into the store's graph
cache -- exact on R10, ``--knn-search`` on the synthetic corpus (approximate by default,
with its recall@K against the exact search on ``--recall-sample`` documents) -- then
each fit on the relation route (p = ``--prototypes`` random prototypes, gaussian
similarity, d = 20), reading that graph from the cache: MOPE schemes 1-3 (Psi), MESD
FDA / LFDA / OLPP-R, OLPP, SSMOPE, HSL. SSMOPE treats the store's "test" split as
unlabelled (``unlabelled_split``) where the store has one. Wall seconds and the peak
RSS of the driver and of driver + workers (:func:`_measure.measured`) per step; the
load average at start and end (the machine may be shared: the figures are indicative).

    nice python benchmarks/mope_scale.py                       # R10 + 10^5 synthetic
    nice python benchmarks/mope_scale.py --parts synthetic --docs 20000

JSON to stdout and bench-out/mope_scale.json (``--name``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import OUT, emit, measured  # noqa: E402
from mope_r10 import REUTERS, load_r10  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.cluster import get_client  # noqa: E402
from dmlfe.graph.knn import graph_dir_for, load_or_compute_graph  # noqa: E402
from dmlfe.store import open_store  # noqa: E402

#: (label, method, parameters) of every fit.
FITS: list[tuple[str, str, dict[str, Any]]] = [
    ("mope_scheme1_sorensen", "mope", dict(scheme=1, label_similarity="sorensen")),
    ("mope_scheme2_cosine", "mope", dict(scheme=2, label_similarity="cosine")),
    ("mope_scheme3_sorensen", "mope", dict(scheme=3)),
    ("mesd_fda", "mesd", dict(base="fda")),
    ("mesd_lfda", "mesd", dict(base="lfda")),
    ("mesd_olpp_r", "mesd", dict(base="olpp_r")),
    ("olpp", "olpp", {}),
    ("ssmope", "ssmope", {}),
    ("hsl", "hsl", {}),
]


def run_corpus(path: Path, args: argparse.Namespace, knn_search: str,
               client: Any) -> dict[str, Any]:
    store = open_store(path)
    rec: dict[str, Any] = {"n_documents": store.n_docs, "n_features": store.n_features,
                           "n_labels": store.n_labels, "nnz": store.nnz}
    shutil.rmtree(graph_dir_for(path), ignore_errors=True)
    graph: dict[str, Any] = {"n_neighbors": args.neighbors, "knn_search": knn_search}
    with measured(graph):
        g = load_or_compute_graph(store, args.neighbors, client=client, method=knn_search)
    graph.update(exact=g.exact, recall_at_k=g.recall, recall_sample=g.recall_sample)
    rec["knn_graph"] = graph
    print(f"[mope_scale] graph {graph}", file=sys.stderr)
    common = dict(n_components=20, route="relation", n_prototypes=args.prototypes,
                  prototype_selection="random", similarity="gaussian",
                  n_neighbors=args.neighbors, knn_search=knn_search, client=client)
    has_test = "test" in (store.info().get("splits") or {})
    for label, method, params in FITS:
        if args.methods and label not in args.methods.split(","):
            continue
        kw = dict(params)
        if method == "ssmope" and has_test:
            kw["unlabelled_split"] = "test"
        r: dict[str, Any] = {"params": {k: v for k, v in kw.items()}}
        with measured(r), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            est = dmlfe.make_estimator(method, **common, **kw).fit(str(path))
        r.update(n_passes=est.n_passes_, route=est.route_, solver=est.solver_,
                 n_components=est.n_components_)
        rec[label] = r
        print(f"[mope_scale] {label} {r}", file=sys.stderr)
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="r10,synthetic")
    ap.add_argument("--docs", type=int, default=100_000, help="synthetic documents")
    ap.add_argument("--neighbors", type=int, default=10, help="K of the K-NN graph")
    ap.add_argument("--prototypes", type=int, default=1000, help="relation-route p")
    ap.add_argument("--knn-search", default="approximate",
                    help="search of the synthetic corpus's graph (R10: exact)")
    ap.add_argument("--recall-sample", type=int, default=1000)
    ap.add_argument("--methods", default="", help="comma list of fit labels (default all)")
    ap.add_argument("--name", default="mope_scale", help="bench-out/NAME.json")
    args = ap.parse_args()
    result: dict[str, Any] = {
        "benchmark": "mope_scale", "machine": {"cpus": os.cpu_count(),
                                               "loadavg_at_start": os.getloadavg()},
        "cluster": "LocalCluster, 2 workers x 1 thread, 3 GiB each",
        "fits": "relation route, p random prototypes, gaussian similarity, d = 20; the "
                "graph read from the store's cache (searched in knn_graph)",
        "prototypes": args.prototypes}
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=OUT) as tmp, \
            get_client(n_workers=2, threads_per_worker=1, memory_limit="3GiB") as client:
        work = Path(tmp)
        for part in args.parts.split(","):
            t0 = time.perf_counter()
            if part == "r10":
                if not REUTERS.exists():
                    sys.exit(f"{REUTERS} not found (set DMLFE_DATA to the shared data folder)")
                ingest: dict[str, Any] = {}
                with measured(ingest):
                    load_r10(work)
                rec = run_corpus(work / "r10.zarr", args, "exact", client)
            else:
                path = work / f"synthetic_{args.docs}.zarr"
                ingest = {}
                with measured(ingest):
                    dmlfe.ingest(None, format="synthetic", out=path, client=client,
                                 n_docs=args.docs, vectorizer="hashing", n_features=2**20,
                                 chunk_rows=10_000)
                rec = run_corpus(path, args, args.knn_search, client)
            rec["ingest"] = ingest
            rec["part_seconds"] = round(time.perf_counter() - t0, 1)
            result[part] = rec
    result["machine"]["loadavg_at_end"] = os.getloadavg()
    emit(result, args.name)


if __name__ == "__main__":
    main()
