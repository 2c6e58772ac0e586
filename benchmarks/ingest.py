"""Ingestion benchmark: IMDB (MEKA ARFF) and synthetic corpora up to 1M documents.

Prints JSON (also written to bench-out/ingest.json): for each corpus, documents/s,
peak RSS of the driver and of driver + workers, store size, and the same work done
in memory by the reference tool in a separate process in the same run:
scikit-learn's TfidfVectorizer on the synthetic texts, and an in-memory
scipy.sparse build of IMDB (the ARFF parsed whole, then saved as .npz).

    python benchmarks/ingest.py                      # IMDB + synthetic 100k and 1M
    python benchmarks/ingest.py --sizes 20000 --no-imdb --no-reference
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measure import DATA, OUT, dir_size, emit, measured, run_reference  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.cluster import get_client  # noqa: E402
from dmlfe.store import open_store  # noqa: E402

SKLEARN_REF = """
import sys, time
from dmlfe.readers.synthetic import SyntheticCorpus
from sklearn.feature_extraction.text import TfidfVectorizer
n = int(sys.argv[1])
t0 = time.perf_counter()
texts = [t for b in SyntheticCorpus(n, seed=0).batches(10000) for t in b.texts]
t1 = time.perf_counter()
X = TfidfVectorizer().fit_transform(texts)
t2 = time.perf_counter()
result = {"tool": "sklearn TfidfVectorizer (in memory)", "generate_seconds": round(t1 - t0, 3),
          "vectorise_seconds": round(t2 - t1, 3), "shape": list(X.shape), "nnz": int(X.nnz)}
"""

IMDB_REF = """
import sys, time
import scipy.sparse as sp
from dmlfe.readers.arff import read_meka
t0 = time.perf_counter()
src = read_meka(sys.argv[1])
blocks = list(src.batches(20000))
X = sp.vstack([b.X for b in blocks]).tocsr()
sp.save_npz(sys.argv[2], X)
result = {"tool": "in-memory scipy.sparse build + save_npz",
          "seconds": round(time.perf_counter() - t0, 3), "shape": list(X.shape), "nnz": int(X.nnz)}
"""


def bench_store(path: Path, rec: dict) -> None:
    s = open_store(path)
    rec.update(n_docs=s.n_docs, n_features=s.n_features, nnz=int(s.nnz),
               store_bytes=dir_size(path))
    rec["docs_per_s"] = round(s.n_docs / rec["seconds"], 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,1000000", help="synthetic corpus sizes")
    ap.add_argument("--chunk-rows", type=int, default=20_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-imdb", action="store_true")
    ap.add_argument("--no-reference", action="store_true")
    args = ap.parse_args()

    work = OUT / "ingest-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results: dict = {"machine": {"cpus": __import__("os").cpu_count(),
                                 "python": platform.python_version()},
                     "workers": args.workers, "chunk_rows": args.chunk_rows, "runs": []}
    with get_client(n_workers=args.workers, threads_per_worker=1,
                    memory_limit="6GiB") as client:
        imdb = DATA / "meka" / "IMDB.arff.bz2"
        if not args.no_imdb and imdb.exists():
            rec = {"corpus": "IMDB (MEKA ARFF)", "tool": "dmlfe ingest"}
            with measured(rec):
                dmlfe.ingest(imdb, format="meka", out=work / "imdb.zarr",
                             chunk_rows=args.chunk_rows, client=client)
            bench_store(work / "imdb.zarr", rec)
            if not args.no_reference:
                rec["reference"] = run_reference(IMDB_REF, str(imdb), str(work / "imdb.npz"))
            results["runs"].append(rec)
            print(rec, file=sys.stderr)
        for n in [int(s) for s in args.sizes.split(",") if s]:
            rec = {"corpus": f"synthetic n_docs={n}", "tool": "dmlfe ingest (tf-idf unigrams)"}
            with measured(rec):
                dmlfe.ingest(None, format="synthetic", out=work / f"syn{n}.zarr",
                             chunk_rows=args.chunk_rows, client=client, n_docs=n, seed=0)
            bench_store(work / f"syn{n}.zarr", rec)
            shutil.rmtree(work / f"syn{n}.zarr")
            if not args.no_reference:
                rec["reference"] = run_reference(SKLEARN_REF, str(n))
            results["runs"].append(rec)
            print(rec, file=sys.stderr)
    emit(results, "ingest")


if __name__ == "__main__":
    main()
