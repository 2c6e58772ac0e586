"""Helpers shared by the tests: the shared corpora, dask arrays and stores built from
in-memory data, compute counters and synthetic spectra.

Test modules import them as ``from helpers import ...`` (pytest puts ``tests/`` on
``sys.path``, as it does for ``conftest.py``); the fixtures stay in ``conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DMLFE_DATA", ROOT.parent / "shared" / "data"))


def data_path(*parts: str) -> Path:
    """Path to a file of the shared corpora; skips the test when it is absent."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared corpus file {p} not found (set DMLFE_DATA to the shared/data folder)")
    return p


def mulan_arrays(name: str, part: str = "train"):
    """A MULAN set's split as (CSR float64 X, 0/1 int8 Y), labels in the XML's order."""
    import numpy as np
    import scipy.sparse as sp

    from dmlfe.readers.arff import read_mulan

    src = read_mulan(data_path("mulan", f"{name}-{part}.arff"), data_path("mulan", f"{name}.xml"))
    batches = list(src.batches(1024))
    X = sp.vstack([sp.csr_matrix(b.X) for b in batches], format="csr").astype(np.float64)
    return X, np.vstack([b.Y.toarray() for b in batches]).astype(np.int8)


def sparse_dask(X, rows: int):
    """A dask array of CSR row blocks of ``rows`` rows, as a store hands them out."""
    import dask
    import dask.array as da
    import numpy as np
    import scipy.sparse as sp

    X = sp.csr_matrix(X)
    blocks = [
        da.from_delayed(dask.delayed(sp.csr_matrix)(X[s : s + rows]),
                        shape=X[s : s + rows].shape, dtype=np.float64,
                        meta=sp.csr_matrix((0, X.shape[1])))
        for s in range(0, X.shape[0], rows)
    ]
    return da.concatenate(blocks, axis=0)


def labels_dask(Y, rows: int):
    """Labels as a dask array chunked by ``rows`` rows."""
    import dask.array as da
    import numpy as np

    return da.from_array(np.asarray(Y), chunks=(rows, -1))


def write_store(path, X, Y, splits, chunk_rows: int = 16, label_names=None):
    """A real store of (X, Y) with these splits, written in three pieces (labels named
    L0, L1, ... unless ``label_names`` are given)."""
    from dmlfe.store import StoreWriter, write_piece

    n = X.shape[0]
    ids = [f"doc{i:03d}" for i in range(n)]
    cuts = [0, n // 3, n]
    with StoreWriter(path, chunk_rows=chunk_rows) as w:
        pieces = [
            write_piece(w.tmp_path, k, X[a:b], Y[a:b], ids[a:b], list(splits[a:b]), {})
            for k, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True))
        ]
        return w.finalize(pieces, n_features=X.shape[1],
                          label_names=list(label_names or
                                           [f"L{j}" for j in range(Y.shape[1])]),
                          feature_names=[f"f{j}" for j in range(X.shape[1])])


class CountingScheduler:
    """Synchronous scheduler that counts how many times dask computes (xarray's idiom)."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, dsk, keys, **kwargs):
        import dask

        self.count += 1
        return dask.get(dsk, keys, **kwargs)


def count_computes(fn):
    """(fn(), the number of dask computes it made)."""
    import dask

    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        out = fn()
    return out, counter.count


def scheduler_graphs(client) -> int:
    """How many graphs the cluster's scheduler has received (every compute is one).

    Registers a counting scheduler plugin on first use; take differences around a fit.
    """
    from distributed.diagnostics.plugin import SchedulerPlugin

    class GraphCounter(SchedulerPlugin):
        name = "dmlfe-test-graph-counter"

        def __init__(self) -> None:
            self.count = 0

        def update_graph(self, scheduler, **kwargs) -> None:
            self.count += 1

    def count(dask_scheduler):
        plugin = dask_scheduler.plugins.get(GraphCounter.name)
        return None if plugin is None else plugin.count

    if client.run_on_scheduler(count) is None:
        client.register_plugin(GraphCounter(), name=GraphCounter.name)
    return client.run_on_scheduler(count)


def decaying_data(n: int = 150, D: int = 40, q: int = 3, seed: int = 5,
                  zero_fraction: float = 0.2):
    """Sparse-ish X whose covariance spectrum decays geometrically (clear eigengaps)."""
    import numpy as np
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(D, D)))
    X = (rng.normal(size=(n, D)) * 0.8 ** np.arange(D)) @ Q.T + rng.uniform(0, 2, size=D)
    X[rng.uniform(size=X.shape) < zero_fraction] = 0.0
    Y = (rng.uniform(size=(n, q)) < 0.4).astype(np.uint8)
    return sp.csr_matrix(X), Y


def principal_cosines(A, B):
    """Cosines of the principal angles between the row spaces of A and B (1: same)."""
    import numpy as np

    qa, _ = np.linalg.qr(A.T)
    qb, _ = np.linalg.qr(B.T)
    return np.linalg.svd(qa.T @ qb, compute_uv=False)


def low_rank_psd(m: int, rank: int, decay: float, seed: int = 0):
    """An m x m PSD matrix F F^T of this rank whose factor's columns decay geometrically."""
    import numpy as np

    rng = np.random.default_rng(seed)
    F = rng.normal(size=(m, rank)) * decay ** np.arange(rank)
    return F @ F.T


#: Label and word sets of :func:`labelled_docs`.
DOC_LABELS = ["alpha", "beta", "gamma", "delta"]
DOC_WORDS = [f"w{i:03d}" for i in range(300)]


def labelled_docs(seed: int, n: int, start: int, split: str) -> list[dict]:
    """``n`` JSON Lines records (``id`` d<start>.., Zipf-distributed words, one or two
    labels, ``split``), the same for the same seed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(DOC_WORDS) + 1)
    p /= p.sum()
    out = []
    for k in range(n):
        words = rng.choice(DOC_WORDS, size=int(rng.integers(3, 30)), p=p)
        labs = sorted(rng.choice(DOC_LABELS, size=int(rng.integers(1, 3)),
                                 replace=False).tolist())
        out.append({"id": f"d{start + k}", "text": " ".join(words), "labels": labs,
                    "split": split})
    return out
