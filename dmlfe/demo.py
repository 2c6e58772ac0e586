"""The main job on the embedded default: synthetic corpus -> store -> fits -> embeddings.

``dmlfe demo`` runs it. Everything it needs is generated here, so it runs on a fresh
machine without data files.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

DEMO_METHODS: dict[str, dict[str, Any]] = {
    "mddm_p": {"n_components": 0.999},
    "mvmd": {"beta": 0.5, "n_components": 0.999},
    "pca": {"n_components": 50},
}


def run_demo(out: str | Path, *, n_docs: int = 20_000, seed: int = 0, chunk_rows: int = 2_000,
             max_features: int = 3_000, client: Any = None, progress: bool = True) -> dict:
    """Ingest a synthetic corpus, fit label-aware projections on its training split,
    embed its test split, and write a JSON summary.

    Returns the summary (also written to ``out/summary.json``).
    """
    import dmlfe
    from dmlfe.estimators import make_estimator
    from dmlfe.projection import write_embeddings

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    store_path = dmlfe.ingest(
        None, format="synthetic", out=out / "synthetic.zarr", chunk_rows=chunk_rows,
        client=client, overwrite=True, progress=progress, n_docs=n_docs, seed=seed,
        max_features=max_features, fit_split="train",
    )
    store = dmlfe.open_store(store_path)
    info = store.info()
    summary: dict[str, Any] = {
        "store": str(store_path),
        "shape": info["shape"],
        "nnz": info["nnz"],
        "splits": info["splits"],
        "labels": info["n_labels"],
        "ingest_seconds": round(time.perf_counter() - t0, 2),
        "methods": {},
    }
    test = store.subset("test")
    for name, params in DEMO_METHODS.items():
        t1 = time.perf_counter()
        est = make_estimator(name, split="train", client=client, **params)
        est.fit(store_path)
        Z = est.transform(test.X)
        emb = write_embeddings(Z, out / f"embeddings-{name}.zarr", ids=test.ids, client=client,
                               overwrite=True, attrs={"method": name, "split": "test"})
        summary["methods"][name] = {
            "n_components": est.n_components_,
            "solver": est.solver_,
            "passes": est.n_passes_,
            "top_eigenvalues": [round(float(v), 6) for v in est.eigenvalues_[:5]],
            "embeddings": str(emb),
            "seconds": round(time.perf_counter() - t1, 2),
        }
        if progress:
            print(f"[dmlfe] {name}: d={est.n_components_} via {est.solver_} "
                  f"({summary['methods'][name]['seconds']} s)", file=sys.stderr)
    summary["total_seconds"] = round(time.perf_counter() - t0, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
