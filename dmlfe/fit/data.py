"""The training data of one fit: a store opened once, or arrays checked once."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, replace
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp

from dmlfe.compute import cluster_threads, driver_threads, is_dask, run
from dmlfe.fit.plan import DataShape
from dmlfe.labels import class_indicators, first_non_binary, first_non_binary_stored
from dmlfe.stats import sufficient
from dmlfe.store import Store, open_store


@dataclass(frozen=True)
class FitData:
    """X and Y of a fit and, when they come from a store, the store (view) itself.

    Attributes
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
    Y : dask array or ndarray (n, q)
    store : Store or None
        The opened store, already restricted to the fit's split; the statistics cache
        and the model's provenance read it, so it is opened once per fit.
    labels_ignored : bool
        Y was replaced by no label columns (:meth:`without_labels`): the statistics
        cache keys them apart from the store's labelled ones.
    """

    X: Any
    Y: Any
    store: Store | None = None
    labels_ignored: bool = False

    def without_labels(self) -> FitData:
        """The same rows with no label columns: what an unsupervised fit reads of a store
        with more labels than the dense label statistics take (their X^T Y and Y^T Y,
        which such a fit never uses, would be D x q and q x q)."""
        n = int(self.X.shape[0])
        Y = (da.zeros((n, 0), chunks=(self.X.chunks[0], 0), dtype=np.uint8)
             if is_dask(self.X) else np.zeros((n, 0), dtype=np.uint8))
        return replace(self, Y=Y, labels_ignored=True)

    @property
    def shape(self) -> DataShape:
        q = int(self.Y.shape[1]) if self.Y.ndim == 2 else 1
        in_memory = self.store is None and not is_dask(self.X)
        return DataShape(int(self.X.shape[0]), int(self.X.shape[1]), q, in_memory)

    def gathered(self, progress: bool = False, sparse_labels: bool = False) -> FitData:
        """X (one CSR matrix) and Y (an ndarray) read to the driver in one pass; same store.

        The driver reads the store's chunks itself, in its own threads, whatever client
        exists: it opened the store, and sending the blocks through workers that have
        no more threads than it only adds their transfer (``benchmarks/scale.py``
        compares the two).

        ``sparse_labels``: Y stays CSR (the label-operator route); otherwise a store's CSR
        labels are made dense up to MAX_DENSE_LABELS labels, as the dense label paths take
        them.
        """
        X, Y = run(self.X, self.Y, desc="reading X to the driver", progress=progress,
                   scheduler="threads")
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        if sp.issparse(Y) and Y.shape[1] <= sufficient.MAX_DENSE_LABELS and not sparse_labels:
            Y = Y.toarray()  # the dense label paths (dual, relation) take it as it was
        Y = sp.csr_matrix(Y) if sp.issparse(Y) else np.asarray(Y)
        return replace(self, X=X, Y=Y)

    def reblocked(self, max_rows: int) -> FitData:
        """The same data in row blocks of at most ``max_rows`` (stores only; arrays as they are)."""
        if self.store is None:
            return self
        view = self.store.reblock(max_rows)
        out = replace(self, X=view.X, Y=view.Y, store=view, labels_ignored=False)
        return out.without_labels() if self.labels_ignored else out


def _checked_sparse_labels(Y: Any, n: int) -> sp.csr_matrix:
    """A wide sparse label matrix kept sparse (a dense n x q copy is what many labels
    cannot afford), checked as a dense one is."""
    Y = sp.csr_matrix(Y)
    if Y.shape[0] != n:
        raise ValueError(f"X has {n} rows but Y has {Y.shape[0]}")
    bad = first_non_binary_stored(Y)
    if bad is not None:
        r, c, v = bad
        raise ValueError(f"Y must be a 0/1 indicator matrix; Y[{r}, {c}] = {v.item()!r}")
    return Y


def gather_reason(data: FitData, client: Any, max_bytes: int,
                  n_prototypes: int | None = None) -> str | None:
    """Why the fit reads X to the driver instead of running its passes on the cluster,
    or None to keep the passes.

    For the dual route (the Gram and map-back passes) and, given ``n_prototypes``, the
    relation route with its dense p x p solve (the relation features and their
    statistics). Only for a store (whose non-zero count is known without a pass) whose
    sparse arrays (12 bytes per stored value and 8 per row) fit in ``max_bytes``, when
    the cluster has no more threads than the driver's own products use
    (:func:`dmlfe.compute.driver_threads`): the blocks would then be computed with no
    more parallelism than on the driver, and each result would still have to travel
    there (the dual route's 8 n^2 bytes of Gram tiles; the relation route's p x p
    partial per row block), against X's bytes read once. The driver holds the n x n
    Gram or p x p statistics anyway; X beside it is what the in-memory fit holds.
    """
    if data.store is None or max_bytes <= 0:
        return None
    workers, own = cluster_threads(client), driver_threads()
    if workers is not None and workers > own:
        return None
    n = int(data.X.shape[0])
    nbytes = 12 * int(data.store.nnz) + 8 * (n + 1)  # a subset's count reads row counts
    if nbytes > max_bytes:
        return None
    where = "dask's local scheduler" if workers is None else f"the cluster's {workers} threads"
    if n_prototypes is None:
        ran, sent = "the Gram, solve and map back", f"{8 * n * n / 2**20:.0f} MiB of Gram tiles"
    else:
        ran = "the relation features, their statistics and the solve"
        sent = (f"a {n_prototypes:,} x {n_prototypes:,} partial per row block "
                f"({8 * n_prototypes ** 2 / 2**20:.0f} MiB each)")
    return (f"X ({nbytes / 2**20:.1f} MiB <= max_gather_bytes) was read by the driver in one "
            f"pass and {ran} ran there ({own} threads; {where} would add only the transfer "
            f"of {sent})")


def is_path(X: Any) -> bool:
    return isinstance(X, str | os.PathLike)


def is_store(X: Any) -> bool:
    """A store path or an opened :class:`~dmlfe.store.Store` (``open_store(...)``, or one
    of its ``subset(...)``)."""
    return is_path(X) or isinstance(X, Store)


def as_store(X: Any) -> Store:
    """The store a path names, or the given :class:`~dmlfe.store.Store` as it is."""
    return X if isinstance(X, Store) else open_store(X)


def warn_test_documents(store: Any, owner: str) -> None:
    """Warn when a fit reads every document of a store that has a 'test' split: its
    test documents would then be in the training data (a view chosen by split or rows
    is the caller's choice, and no warning)."""
    cats = store.split_categories
    if not cats or "test" not in cats or store.selection:
        return
    n_test = store.subset("test").n_docs
    if n_test:
        warnings.warn(
            f"{owner} is fitted on all {store.n_docs:,} documents of store {store.path}, "
            f"its {n_test:,} 'test' documents included; fit on the training split only "
            "(split='train') to keep them out",
            UserWarning, stacklevel=3)


def fit_data(X: Any, Y: Any, split: Any, owner: str, supervised: bool = True) -> FitData:
    """Open a store path once, or take an opened store (and select its split), or check
    in-memory X and Y.

    In-memory X must already be checked (:func:`dmlfe.validation.checked_matrix`). Y may
    be a 0/1 documents x labels matrix or 1-D class labels (one column per class, see
    :func:`dmlfe.labels.class_indicators`, a column for each class, two for a binary
    target); it may be left out when the method is not
    ``supervised`` (it then has no label columns).

    Raises
    ------
    ValueError
        Y given with a store path, Y missing for a supervised method, ``split`` without
        a store, a shape mismatch, or labels that are not 0/1 (the message names the
        entry).
    """
    if is_store(X):
        if Y is not None:
            raise ValueError("Y must not be given with a store: the labels come from the "
                             "store (pass X and Y as arrays to use other labels)")
        store = as_store(X)
        if split is not None:
            store = store.subset(split)
        else:
            warn_test_documents(store, owner)
        return FitData(store.X, store.Y, store)
    if Y is None:
        if supervised:
            # scikit-learn's wording, which its estimator checks look for
            raise ValueError(f"{owner} requires y to be passed, but the target y is None: "
                             f"{owner}.fit needs Y (a 0/1 label indicator matrix) unless X is "
                             "a store path")
        Y = (da.zeros((X.shape[0], 0), chunks=(X.chunks[0], 0), dtype=np.int8) if is_dask(X)
             else np.zeros((X.shape[0], 0), dtype=np.int8))
    if split is not None:
        raise ValueError("split= applies only when X is a store path")
    if is_dask(X):
        return FitData(X, Y)
    X = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(X, np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (documents x features), got shape {X.shape}")
    if sp.issparse(Y) and Y.ndim == 2 and Y.shape[1] > sufficient.MAX_DENSE_LABELS:
        return FitData(X, _checked_sparse_labels(Y, X.shape[0]))
    Y = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    if Y.ndim == 1:
        Y = class_indicators(Y, owner, every_class=True)[0]
    if Y.shape[0] != X.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
    bad = first_non_binary(Y)
    if bad is not None:
        r, c = bad
        raise ValueError(f"Y must be a 0/1 indicator matrix; Y[{r}, {c}] = {Y[r, c].item()!r}")
    return FitData(X, Y)
