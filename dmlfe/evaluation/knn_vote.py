"""Nearest-neighbour label vote in embedding space: exact, blocked, distributed.

For a query z, its k nearest training documents N(z) (exact search, no approximation)
vote for their labels::

    score_l(z) = sum_{j in N(z)} w_j y_jl / sum_{j in N(z)} w_j        in [0, 1]

with ``weights="uniform"`` w_j = 1 (the fraction of neighbours carrying l) and
``weights="similarity"`` w_j = max(cos(z, x_j), 0) (``metric="cosine"``) or
1 / (1 + ||z - x_j||) (``metric="euclidean"``); when every neighbour's weight is 0 (all
cosines <= 0) they vote uniformly. Scores are a scipy.sparse CSR matrix holding only the
labels some neighbour carries, so memory is O(n_query x k x labels per document), never
n_query x q: q may be tens of thousands.

Search: the queries and the training set are cut into row blocks; each (query block x
training block) pair gives its rows' k best candidates, and a query block's candidates
are merged (top k of top k's) by a tree reduction. Memory is O(block_rows x
train_block_rows) per running pair plus O(n_query x k) for the merged neighbours; the
training embeddings (n x d) and the labels (CSR, O(nnz)) are held by the driver. Equal
similarities (distances) are broken by the lower training index, so the neighbours do
not depend on the block sizes or the order of the merges.

Raw sparse features (a tf-idf or hashed CSR matrix of, say, 2^20 columns; a
scipy.sparse matrix or a dask array of CSR blocks) are never densified: the training
rows are kept as CSR (unit rows for cosine; their squared norms for euclidean), each
training block is transposed once per call, and each (query block x training block)
key is the sparse product ``q @ X_block.T`` made dense only at block size
(block_rows x train_block_rows); the top k, the merge and the tie rule are those of the
dense path. Memory: O(nnz) for the training rows (twice, with the transposed blocks
of a call) plus O(block_rows x train_block_rows) per running pair; nothing n_query x n
or n x D is dense. Dense inputs (embeddings) take the dense path unchanged.

With a dask query array, or a distributed client current, the pairs are dask tasks and
one ``dask.compute`` per call runs them all; the training blocks enter the graph once
each, shared by every query block (on a distributed client, above
:data:`dmlfe.compute.SCATTER_BYTES`, they are scattered to the workers once and reused
by the classifier's later calls on that client). With in-memory inputs and no client
the query blocks run in threads in this process.
"""

from __future__ import annotations

import functools
import numbers
import warnings
import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags

from dmlfe import compute as _compute
from dmlfe.compute import (
    computing_client,
    driver_threads,
    graph_operand,
    in_threads,
    run,
    tree_reduce,
)
from dmlfe.evaluation._common import as_embeddings, check_finite
from dmlfe.labels import class_indicators, first_non_binary_stored
from dmlfe.validation import checked_matrix

_METRICS = ("cosine", "euclidean")
_WEIGHTS = ("similarity", "uniform")
#: Default query rows per block and training rows per block: 1024 x 4096 similarities
#: (32 MiB of float64) per running pair.
_BLOCK_ROWS = 1024
_TRAIN_BLOCK_ROWS = 4096

Candidates = tuple[np.ndarray, np.ndarray]
#: classifier -> (client, training embeddings, block rows, scattered training blocks)
_SCATTERED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# --------------------------------------------------------------------------- kernels
def _unit_rows(a: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero: cosine 0 with everything)."""
    norms = np.sqrt(np.einsum("ij,ij->i", a, a))
    return a / np.where(norms > 0, norms, 1.0)[:, None]


def _top_k_rows(key: np.ndarray, k: int, offset: int) -> Candidates:
    """The k largest entries of each row of ``key``, ties to the lower column.

    Returns (values, training indices) of shape (rows, min(k, columns)), each row sorted
    by decreasing value then increasing index; indices are ``offset`` + column.
    """
    m, n = key.shape
    if k >= n:
        order = np.lexsort((np.broadcast_to(np.arange(n), key.shape), -key), axis=-1)
    else:
        kth = -np.partition(-key, k - 1, axis=1)[:, k - 1]
        inside = key >= kth[:, None]
        cols = np.empty((m, k), dtype=np.int64)
        clean = inside.sum(axis=1) == k
        if clean.any():
            rows = np.flatnonzero(clean)
            cols[rows] = np.nonzero(inside[rows])[1].reshape(-1, k)
        for i in np.flatnonzero(~clean):
            # ties at the k-th value: the lowest columns among them
            cand = np.flatnonzero(inside[i])
            cols[i] = cand[np.lexsort((cand, -key[i, cand]))[:k]]
        vals = np.take_along_axis(key, cols, axis=1)
        order = np.take_along_axis(cols, np.lexsort((cols, -vals), axis=-1), axis=1)
    return np.take_along_axis(key, order, axis=1), order.astype(np.int64) + offset


def _merge(*parts: Candidates, k: int) -> Candidates:
    """Top k of several candidate lists of the same rows (associative, order-free)."""
    vals = np.concatenate([p[0] for p in parts], axis=1)
    idx = np.concatenate([p[1] for p in parts], axis=1)
    order = np.lexsort((idx, -vals), axis=-1)[:, :k]
    return np.take_along_axis(vals, order, axis=1), np.take_along_axis(idx, order, axis=1)


def _pair_top_k(Q: np.ndarray, X: np.ndarray, offset: int, k: int, metric: str,
                block_rows: int) -> Candidates:
    """Candidates of the query rows ``Q`` among the training block ``X`` (global rows
    ``offset``..): key = cosine (X has unit rows) or minus the squared distance."""
    Q = Q.toarray() if sp.issparse(Q) else np.asarray(Q)
    Q = Q.astype(np.float64, copy=False)
    if offset == 0:  # once per query block (the first training block)
        check_finite(Q, 0)
    x_sq = np.einsum("ij,ij->i", X, X) if metric == "euclidean" else None
    out = []
    for r0 in range(0, max(Q.shape[0], 1), block_rows):
        q = Q[r0:r0 + block_rows]
        if metric == "cosine":
            key = _unit_rows(q) @ X.T
        else:
            key = _minus_sq_distances(q @ X.T, np.einsum("ij,ij->i", q, q), x_sq)
        out.append(_top_k_rows(key, k, offset))
    return _stacked(out)


def _minus_sq_distances(cross: np.ndarray, q_sq: np.ndarray, x_sq: np.ndarray
                        ) -> np.ndarray:
    """-||q - x||^2 = 2 q.x - |q|^2 - |x|^2 from the cross products (in their array),
    round-off above 0 clipped."""
    cross *= 2.0
    cross -= q_sq[:, None]
    cross -= x_sq[None, :]
    return np.minimum(cross, 0.0, out=cross)


def _stacked(out: list[Candidates]) -> Candidates:
    """The candidates of consecutive query slices as one list."""
    if len(out) == 1:
        return out[0]
    return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])


def _csr_nbytes(a: sp.csr_matrix) -> int:
    """Bytes held by a CSR matrix's three arrays."""
    return int(a.data.nbytes + a.indices.nbytes + a.indptr.nbytes)


def _checked_csr(a: Any, offset: int) -> sp.csr_matrix:
    """``a`` (CSR or dense block) as float64 CSR with summed duplicates; raise naming
    the first non-finite stored entry (global row ``offset + r``)."""
    a = sp.csr_matrix(a, dtype=np.float64)
    a.sum_duplicates()
    bad = np.flatnonzero(~np.isfinite(a.data))
    if bad.size:
        r = int(np.searchsorted(a.indptr, bad[0], side="right") - 1)
        raise ValueError(f"Z[row {offset + r}, dim {a.indices[bad[0]]}] = "
                         f"{a.data[bad[0]].item()!r}: features must be finite")
    return a


def _csr_sq_norms(a: sp.csr_matrix) -> np.ndarray:
    """Squared Euclidean norm of each row of a CSR matrix (duplicates summed)."""
    sq = np.zeros(a.shape[0])
    rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
    np.add.at(sq, rows, a.data * a.data)
    return sq


def _csr_unit_rows(a: sp.csr_matrix) -> sp.csr_matrix:
    """Rows of a CSR matrix scaled to unit length (zero rows stay zero)."""
    norms = np.sqrt(_csr_sq_norms(a))
    scale = 1.0 / np.where(norms > 0, norms, 1.0)
    return sp.csr_matrix((a.data * np.repeat(scale, np.diff(a.indptr)), a.indices,
                          a.indptr), shape=a.shape)


def _pair_top_k_sparse(Q: Any, XT: sp.csr_matrix, x_sq: np.ndarray | None, offset: int,
                       k: int, metric: str, block_rows: int) -> Candidates:
    """:func:`_pair_top_k` for sparse features: the training block is given transposed
    (``XT``: features x block rows, CSR; unit columns for cosine) with its rows' squared
    norms ``x_sq`` (euclidean). Each key is the sparse product ``q @ XT`` made dense only
    at block size (block_rows x training block rows); then the same top k."""
    Q = _checked_csr(Q, 0) if offset == 0 else sp.csr_matrix(Q, dtype=np.float64)
    out = []
    for r0 in range(0, max(Q.shape[0], 1), block_rows):
        q = Q[r0:r0 + block_rows]
        if metric == "cosine":
            key = (_csr_unit_rows(q) @ XT).toarray()
        else:
            key = _minus_sq_distances((q @ XT).toarray(), _csr_sq_norms(q), x_sq)
        out.append(_top_k_rows(key, k, offset))
    return _stacked(out)


# --------------------------------------------------------------------------- labels
def _labels_csr(Y: Any, n: int, owner: str) -> sp.csr_matrix:
    """The 0/1 label matrix as CSR (int8, sorted indices, no stored zeros)."""
    if isinstance(Y, da.Array):
        if Y.ndim != 2:
            raise ValueError(f"{owner}: Y must be a 2-D documents x labels 0/1 matrix; got "
                             f"shape {Y.shape}")
        Y = Y.rechunk({1: -1}) if len(Y.chunks[1]) != 1 else Y
        blocks = dask.compute(*Y.to_delayed().ravel())
        Y = sp.vstack([sp.csr_matrix(b) for b in blocks], format="csr") if blocks else None
    elif sp.issparse(Y):
        Y = sp.csr_matrix(Y)
    else:
        Y = np.asarray(Y)
        if Y.ndim != 2:
            raise ValueError(f"{owner}: Y must be a 2-D documents x labels 0/1 matrix; got "
                             f"shape {Y.shape} (reshape a single label to (n, 1))")
        bad = ~np.isin(Y, (0, 1))
        if bad.any():
            r, c = np.argwhere(bad)[0]
            raise ValueError(f"{owner}: Y[row {r}, label {c}] = {Y[r, c].item()!r}: Y must "
                             "be a 0/1 documents x labels indicator matrix")
        Y = sp.csr_matrix(Y != 0)
    if Y is None or Y.shape[0] != n:
        raise ValueError(f"{owner}: Y has shape {None if Y is None else Y.shape} but Z has "
                         f"{n} rows; they must match")
    Y = Y.copy()
    Y.sum_duplicates()
    bad = first_non_binary_stored(Y)
    if bad is not None:
        r, c, v = bad
        raise ValueError(f"{owner}: Y[row {r}, label {c}] = {v.item()!r}: Y must be a 0/1 "
                         "documents x labels indicator matrix")
    Y.eliminate_zeros()
    Y.sort_indices()
    return sp.csr_matrix((Y.data.astype(np.int8), Y.indices.astype(np.int32),
                          Y.indptr.astype(np.int64)), shape=Y.shape)


# --------------------------------------------------------------------------- estimator
class KNNLabelVote(ClassifierMixin, BaseEstimator):
    """Labels voted by the k nearest training documents in embedding space (exact).

    ``score_l(z)`` = the weighted fraction of z's k nearest training documents that
    carry label l (see the module :mod:`dmlfe.evaluation.knn_vote` for the formula, the
    blocking and the distributed search). Scores are sparse: a CSR matrix with only the
    labels some neighbour carries, for label sets of any size.

    Parameters
    ----------
    n_neighbors : int, default 10
        Neighbours k, >= 1. More than the training documents: clamped to their number
        with a warning (``n_neighbors_`` is the k used).
    metric : {"cosine", "euclidean"}, default "cosine"
        Cosine similarity (zero embeddings have cosine 0 with everything) or Euclidean
        distance.
    weights : {"similarity", "uniform"}, default "similarity"
        A neighbour's vote: its cosine clipped at 0, or 1 / (1 + distance) for
        ``metric="euclidean"``; or 1 for every neighbour. The votes are normalised by
        their sum, so each score is in [0, 1]; when every weight is 0 the neighbours
        vote uniformly.
    block_rows : int or None, default None
        Query rows per block (None: 1024).
    train_block_rows : int or None, default None
        Training rows per block (None: 4096). Memory per running pair is
        block_rows x train_block_rows float64; results do not depend on either.

    Attributes
    ----------
    n_neighbors_ : int
        The neighbours used: min(n_neighbors, ``n_samples_``).
    n_features_in_, n_labels_, n_samples_ : int
    labels_data_, labels_indices_, labels_indptr_ : ndarray
        The training labels as the arrays of a CSR matrix (``train_labels_``).
    train_embeddings_ : ndarray (``n_samples_``, ``n_features_in_``)
        The training embeddings (unit rows for ``metric="cosine"``); dense input only.
    train_data_, train_indices_, train_indptr_ : ndarray
        Sparse input only: the training rows as the arrays of a CSR matrix (unit rows
        for ``metric="cosine"``).
    train_sq_norms_ : ndarray (``n_samples_``,)
        Sparse input and ``metric="euclidean"`` only: the rows' squared norms.
    sparse_features_ : bool
        Whether the training rows are sparse (the sparse search path).
    classes_ : ndarray
        ``arange(n_labels_)`` for a label matrix; the class values for 1-D class labels
        (binary or multi-class: a column per class, ``predict`` gives the class of the
        largest vote and ``predict_proba`` dense class votes).
    target_type_ : str
        "multilabel-indicator", "binary" or "multiclass".

    Notes
    -----
    Ties: equal similarities go to the lower training index; equal scores in
    :meth:`predict` and :meth:`predict_top_k` to the lower label index. The search is
    exact; its memory O(block_rows x train_block_rows + n_query x n_neighbors) besides
    the training embeddings and labels. Dask embeddings are computed once in ``fit``.

    Sparse features (scipy.sparse, or a dask array of CSR blocks) are kept as CSR and
    searched by sparse products made dense only at block size (module
    :mod:`dmlfe.evaluation.knn_vote`): ``train_data_``, ``train_indices_``,
    ``train_indptr_`` (and ``train_sq_norms_`` for euclidean) replace
    ``train_embeddings_``, and a saved classifier (:mod:`dmlfe.io.classifier`) stores
    them as those arrays. Queries are then taken as CSR (dense ones converted).

    Examples
    --------
    >>> import numpy as np
    >>> import dmlfe
    >>> rng = np.random.default_rng(0)
    >>> Z = rng.normal(size=(50, 4))
    >>> Y = (Z[:, :3] > 0).astype(int)
    >>> clf = dmlfe.KNNLabelVote(n_neighbors=5).fit(Z, Y)
    >>> S = clf.predict_proba(Z[:3])      # scipy.sparse CSR, scores in [0, 1]
    >>> S.shape, bool(S.max() <= 1)
    ((3, 3), True)
    >>> idx, top = clf.predict_top_k(Z[:3], 2)
    >>> idx.shape
    (3, 2)
    """

    _xfail_checks: ClassVar[dict[str, str]] = {
        "check_supervised_y_2d": "a 2-D y is a documents x labels 0/1 matrix here, so a "
                                 "column of class labels is refused (give 1-D class labels), "
                                 "not ravelled with a DataConversionWarning",
        "check_classifier_multioutput": "a label matrix's scores and predictions are "
                                        "scipy.sparse CSR (label sets of any size), not "
                                        "dense arrays",
    }

    def __init__(self, n_neighbors: int = 10, metric: str = "cosine",
                 weights: str = "similarity", block_rows: int | None = None,
                 train_block_rows: int | None = None):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.weights = weights
        self.block_rows = block_rows
        self.train_block_rows = train_block_rows

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.sparse = True
        return tags

    # ------------------------------------------------------------------ checks
    def _validate(self) -> None:
        name = type(self).__name__
        k = self.n_neighbors
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"{name}: n_neighbors={k!r} must be an integer >= 1")
        if self.metric not in _METRICS:
            raise ValueError(f"{name}: metric={self.metric!r} must be one of "
                             f"{', '.join(_METRICS)}")
        if self.weights not in _WEIGHTS:
            raise ValueError(f"{name}: weights={self.weights!r} must be one of "
                             f"{', '.join(_WEIGHTS)}")
        for p in ("block_rows", "train_block_rows"):
            v = getattr(self, p)
            if v is not None and (isinstance(v, bool) or not isinstance(v, numbers.Integral)
                                  or v < 1):
                raise ValueError(f"{name}: {p}={v!r} must be a positive integer or None")

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_labels_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(Z, Y) first")

    @property
    def train_labels_(self) -> sp.csr_matrix:
        """The training labels, (``n_samples_``, ``n_labels_``) CSR of 0/1."""
        self._check_fitted()
        return sp.csr_matrix((self.labels_data_, self.labels_indices_, self.labels_indptr_),
                             shape=(self.n_samples_, self.n_labels_))

    @property
    def sparse_features_(self) -> bool:
        """Whether it was fitted on sparse features (kept as CSR, searched sparsely)."""
        self._check_fitted()
        return hasattr(self, "train_indptr_")

    def _train(self) -> np.ndarray | sp.csr_matrix:
        """The training rows: the dense embeddings, or CSR over the stored arrays (no
        copy; unit rows for ``metric="cosine"``)."""
        if not self.sparse_features_:
            return self.train_embeddings_
        return sp.csr_matrix((self.train_data_, self.train_indices_, self.train_indptr_),
                             shape=(self.n_samples_, self.n_features_in_), copy=False)

    def _blocks(self) -> tuple[int, int]:
        return (int(self.block_rows or _BLOCK_ROWS),
                int(self.train_block_rows or _TRAIN_BLOCK_ROWS))

    # ------------------------------------------------------------------ fit
    def fit(self, Z: Any, Y: Any) -> KNNLabelVote:
        """Keep the training embeddings and labels (CSR) for the neighbour search.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array (row chunks), shape (n, d)
            Training embeddings, or raw sparse features: a scipy.sparse matrix or a dask
            array of CSR blocks is kept as CSR (never densified) and searched sparsely.
        Y : ndarray, scipy.sparse or dask array (blocks CSR or dense), shape (n, q)
            0/1 labels; kept as CSR, never densified.

        Returns
        -------
        self
        """
        self._validate()
        name = type(self).__name__
        if Y is None:
            raise ValueError(f"{name} requires y to be passed, but the target y is None: "
                             "fit(Z, Y) needs the labels")
        self.target_type_, classes = "multilabel-indicator", None
        if not (isinstance(Y, da.Array) or sp.issparse(Y)):
            Y = np.asarray(Y)
            if Y.ndim == 1:
                # 1-D class labels: a 0/1 column per class; a neighbour votes for its class
                Y, classes, self.target_type_ = class_indicators(Y, name, every_class=True)
        if isinstance(Z, da.Array):
            Zi = as_embeddings(Z)
            if isinstance(Y, da.Array) and Y.ndim == 2:  # one compute for both
                Yr = Y.rechunk({1: -1}) if len(Y.chunks[1]) != 1 else Y
                X, *yblocks = dask.compute(Zi, *Yr.to_delayed().ravel())
                Y = sp.vstack([sp.csr_matrix(b) for b in yblocks], format="csr")
            else:
                X = Zi.compute()
            if sp.issparse(X):  # CSR blocks: raw features, kept sparse
                X = _checked_csr(X, 0)
            else:
                X = np.ascontiguousarray(X)
                as_embeddings(X)  # the finiteness check, now that the values exist
            self.n_features_in_ = X.shape[1]
        else:
            X = checked_matrix(self, Z, reset=True)
            X = (_checked_csr(X, 0) if sp.issparse(X)
                 else np.ascontiguousarray(as_embeddings(X)))
        n = X.shape[0]
        Yc = _labels_csr(Y, n, name)
        k = int(self.n_neighbors)
        if k > n:
            warnings.warn(f"{name}: n_neighbors={k} is more than the {n} training "
                          f"documents; using n_neighbors_={n}", UserWarning, stacklevel=2)
            k = n
        for stale in ("train_embeddings_", "train_data_", "train_indices_", "train_indptr_",
                      "train_sq_norms_"):
            self.__dict__.pop(stale, None)  # a refit may switch dense <-> sparse
        if sp.issparse(X):
            X.sort_indices()
            if self.metric == "cosine":
                X = _csr_unit_rows(X)
            else:
                self.train_sq_norms_ = _csr_sq_norms(X)
            self.train_data_, self.train_indices_, self.train_indptr_ = (
                X.data, X.indices, X.indptr)
        else:
            self.train_embeddings_ = _unit_rows(X) if self.metric == "cosine" else X
        self.labels_data_, self.labels_indices_, self.labels_indptr_ = (
            Yc.data, Yc.indices, Yc.indptr)
        self.n_neighbors_ = k
        self.classes_ = np.arange(Yc.shape[1]) if classes is None else classes
        self.n_samples_, self.n_labels_ = n, int(Yc.shape[1])
        self.n_features_in_ = int(X.shape[1])
        return self

    # ------------------------------------------------------------------ search
    def _query(self, Z: Any) -> np.ndarray | da.Array:
        self._check_fitted()
        if isinstance(Z, da.Array):
            if Z.ndim != 2 or Z.shape[1] != self.n_features_in_:
                raise ValueError(f"Z has shape {Z.shape}, but {type(self).__name__} is "
                                 f"expecting {self.n_features_in_} features as input; "
                                 "project with the same model")
            if self.sparse_features_:  # blocks stay as they are (CSR or dense)
                Z = Z.rechunk({1: -1}) if len(Z.chunks[1]) != 1 else Z
                return Z.astype(np.float64) if Z.dtype != np.float64 else Z
            return as_embeddings(Z)
        Z = checked_matrix(self, Z, reset=False)
        if self.sparse_features_:
            return _checked_csr(Z, 0)
        return as_embeddings(Z)

    def kneighbors(self, Z: Any) -> tuple[np.ndarray, np.ndarray]:
        """The exact nearest training documents of each query row.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array, shape (m, d)

        Returns
        -------
        similarity : ndarray (m, ``n_neighbors_``) of float64
            Cosine similarity (``metric="cosine"``) or distance (``"euclidean"``), best
            first.
        indices : ndarray (m, ``n_neighbors_``) of int64
            Training row indices; equal similarities (distances) to the lower index.
        """
        vals, idx = self._search(self._query(Z))
        if self.metric == "euclidean":
            vals = np.sqrt(np.maximum(-vals, 0.0))
        return vals, idx

    def _search(self, Q: np.ndarray | sp.csr_matrix | da.Array) -> Candidates:
        k = self.n_neighbors_
        bq, bt = self._blocks()
        n = self.n_samples_
        starts = range(0, n, bt)
        client = computing_client()
        if isinstance(Q, da.Array) or client is not None:
            return self._search_dask(Q, starts, client)
        m = Q.shape[0]
        if m == 0:
            return np.empty((0, k)), np.empty((0, k), dtype=np.int64)
        q_starts = list(range(0, m, bq))
        vals = np.empty((m, k))
        idx = np.empty((m, k), dtype=np.int64)
        if self.sparse_features_:
            tblocks = self._sparse_blocks(starts, bt)

            def pair(q: Any, j: int, t0: int) -> Candidates:
                return _pair_top_k_sparse(q, *tblocks[j], t0, k, self.metric, bq)
        else:
            X = self.train_embeddings_

            def pair(q: Any, j: int, t0: int) -> Candidates:
                return _pair_top_k(q, X[t0:t0 + bt], t0, k, self.metric, bq)

        def one(q0: int) -> None:
            q = Q[q0:q0 + bq]
            acc = None
            for j, t0 in enumerate(starts):
                part = pair(q, j, t0)
                acc = part if acc is None else _merge(acc, part, k=k)
            vals[q0:q0 + bq], idx[q0:q0 + bq] = acc

        in_threads(one, q_starts, threads=driver_threads())
        return vals, idx

    def _search_dask(self, Q: np.ndarray | da.Array, starts: Sequence[int], client: Any
                     ) -> Candidates:
        k = self.n_neighbors_
        bq, bt = self._blocks()
        if Q.shape[0] == 0:
            return np.empty((0, k)), np.empty((0, k), dtype=np.int64)
        sparse = self.sparse_features_
        if isinstance(Q, da.Array):
            qblocks = list(Q.to_delayed().ravel())
        elif sparse:
            qblocks = [graph_operand(Q[a:a + bq], client, nbytes=_csr_nbytes(Q))
                       for a in range(0, Q.shape[0], bq)]
        else:
            qblocks = [graph_operand(np.ascontiguousarray(Q[a:a + bq]), client,
                                     nbytes=Q.nbytes) for a in range(0, Q.shape[0], bq)]
        # each training block enters the graph once, shared by every query block
        tblocks = self._training_blocks(client, starts, bt)
        if sparse:  # a block is (its transpose, its squared norms): two operands
            spair = dask.delayed(_pair_top_k_sparse, pure=True)
            pairs = [[spair(qb, tb[0], tb[1], t0, k, self.metric, bq)
                      for tb, t0 in zip(tblocks, starts, strict=True)] for qb in qblocks]
        else:
            pair = dask.delayed(_pair_top_k, pure=True)
            pairs = [[pair(qb, tb, t0, k, self.metric, bq)
                      for tb, t0 in zip(tblocks, starts, strict=True)] for qb in qblocks]
        # per query block: a tree reduction of its pairs (top k of top k's), on the workers
        roots = [tree_reduce(p, functools.partial(_merge, k=k)) for p in pairs]
        out = run(*roots, desc="knn-vote search", client=client)
        return np.concatenate([o[0] for o in out]), np.concatenate([o[1] for o in out])

    def _training_blocks(self, client: Any, starts: Sequence[int], bt: int) -> list[Any]:
        """The training blocks as graph operands: delayed keys, or -- on a distributed
        client, above :data:`dmlfe.compute.SCATTER_BYTES` -- futures scattered once and
        kept for this classifier's later calls on that client (released with it)."""
        if self.sparse_features_:
            token = self.train_data_
            nbytes = _csr_nbytes(self._train())
            blocks: list[Any] = self._sparse_blocks(starts, bt)
        else:
            token = X = self.train_embeddings_
            nbytes = X.nbytes
            blocks = [np.ascontiguousarray(X[t0:t0 + bt]) for t0 in starts]
        if client is None or nbytes <= _compute.SCATTER_BYTES:
            if self.sparse_features_:
                return [(graph_operand(xt, None, nbytes=0),
                         None if sq is None else graph_operand(sq, None)) for xt, sq in blocks]
            return [graph_operand(b, None) for b in blocks]
        hit = _SCATTERED.get(self)
        if (hit is not None and hit[0]() is client and hit[1] is token and hit[2] == bt
                and getattr(client, "status", None) == "running"):
            return hit[3]
        if self.sparse_features_:
            xts = client.scatter([xt for xt, _ in blocks], hash=False)
            sqs = ([None] * len(blocks) if blocks[0][1] is None
                   else client.scatter([sq for _, sq in blocks], hash=False))
            futures: list[Any] = list(zip(xts, sqs, strict=True))
        else:
            futures = client.scatter(blocks, hash=False)
        _SCATTERED[self] = (weakref.ref(client), token, bt, futures)
        return futures

    def _sparse_blocks(self, starts: Sequence[int], bt: int
                       ) -> list[tuple[sp.csr_matrix, np.ndarray | None]]:
        """The sparse training blocks as (transpose: features x rows CSR, squared norms
        of the rows or None for cosine), built once per search (O(nnz) memory)."""
        X = self._train()
        sq = getattr(self, "train_sq_norms_", None)
        return [(sp.csr_matrix(X[t0:t0 + bt].T), None if sq is None else sq[t0:t0 + bt])
                for t0 in starts]

    # ------------------------------------------------------------------ scores
    def _neighbour_weights(self, vals: np.ndarray) -> np.ndarray:
        if self.weights == "uniform":
            w = np.ones_like(vals)
        elif self.metric == "cosine":
            w = np.maximum(vals, 0.0)
        else:
            w = 1.0 / (1.0 + np.sqrt(np.maximum(-vals, 0.0)))
        total = w.sum(axis=1, keepdims=True)
        none = total[:, 0] <= 0
        w[none] = 1.0
        total[none] = w.shape[1]
        return w / total

    def _scores(self, Z: Any) -> sp.csr_matrix:
        vals, idx = self._search(self._query(Z))
        m, k = idx.shape
        W = sp.csr_matrix((self._neighbour_weights(vals).ravel(), idx.ravel(),
                           np.arange(0, m * k + 1, k)), shape=(m, self.n_samples_))
        S = sp.csr_matrix(W @ self.train_labels_.astype(np.float64))
        S.sum_duplicates()
        S.sort_indices()
        np.clip(S.data, 0.0, 1.0, out=S.data)  # round-off of the normalised sums
        return S

    def _one_class(self, Z: Any) -> tuple[np.ndarray, np.ndarray]:
        """1-D targets: (dense class scores, index of the best class, lower on ties)."""
        P = self._scores(Z).toarray()
        return P, np.argmax(P, axis=1)

    def predict_proba(self, Z: Any) -> sp.csr_matrix | np.ndarray:
        """Vote scores in [0, 1]: (m, ``n_labels_``) CSR, only labels of some neighbour stored.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array, shape (m, d)
            Query embeddings; a dask array (or a current distributed client) runs the
            search as dask tasks in one compute.

        Returns
        -------
        scipy.sparse.csr_matrix of float64
            score_l = sum of the neighbours' normalised weights over those carrying l.
            For 1-D class targets (fitted on class labels): a dense (m, classes) array,
            the classes' vote fractions (rows sum to 1).
        """
        self._check_fitted()
        if self.target_type_ != "multilabel-indicator":
            return self._one_class(Z)[0]
        return self._scores(Z)

    def decision_function(self, Z: Any) -> sp.csr_matrix | np.ndarray:
        """The same scores as :meth:`predict_proba` (CSR; rankings need only their order).

        For a binary 1-D target: (m,) the greater class's vote minus 1/2 (> 0 where it
        is predicted); for a multi-class one the dense class votes.
        """
        self._check_fitted()
        if self.target_type_ == "binary":
            return self._one_class(Z)[0][:, -1] - 0.5
        return self.predict_proba(Z)

    def predict(self, Z: Any, threshold: float = 0.5) -> sp.csr_matrix | np.ndarray:
        """Labels whose score is >= ``threshold``, at least one per document.

        A document with no score at the threshold gets its best-scored label (the lower
        label index on equal scores), so no prediction is empty -- unless none of its
        neighbours carries any label.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array, shape (m, d)
        threshold : float, default 0.5
            In (0, 1]: 0.5 is a (weighted) majority of the neighbours.

        Returns
        -------
        scipy.sparse.csr_matrix of int8, (m, ``n_labels_``), entries 0/1
            For 1-D class targets: the (m,) classes of the largest vote (the lower class
            on ties; ``threshold`` does not apply).
        """
        if not 0.0 < float(threshold) <= 1.0:
            raise ValueError(f"threshold={threshold!r} must be in (0, 1]")
        self._check_fitted()
        if self.target_type_ != "multilabel-indicator":
            return self.classes_[self._one_class(Z)[1]]
        S = self._scores(Z)
        keep = S.data >= threshold
        rows = np.repeat(np.arange(S.shape[0]), np.diff(S.indptr))
        empty = np.flatnonzero(np.bincount(rows[keep], minlength=S.shape[0]) == 0)
        for i in empty:
            a, b = S.indptr[i], S.indptr[i + 1]
            if b > a:  # indices are sorted: argmax takes the lowest label among equals
                keep[a + int(np.argmax(S.data[a:b]))] = True
        counts = np.bincount(rows[keep], minlength=S.shape[0])
        return sp.csr_matrix((np.ones(int(keep.sum()), dtype=np.int8), S.indices[keep],
                              np.concatenate([[0], np.cumsum(counts)])), shape=S.shape)

    def predict_top_k(self, Z: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The k best-scored labels of each document, best first.

        Equal scores go to the lower label index; a document with fewer than k scored
        labels is completed by the lowest unscored labels (score 0), as a dense argsort
        would.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array, shape (m, d)
        k : int
            1 <= k <= ``n_labels_``.

        Returns
        -------
        indices : ndarray (m, k) of int64
        scores : ndarray (m, k) of float64
        """
        self._check_fitted()
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or not \
                1 <= k <= self.n_labels_:
            raise ValueError(f"k={k!r} must be an integer in 1..{self.n_labels_} (labels)")
        return top_k_of_csr(self._scores(Z), int(k))


def top_k_of_csr(S: sp.csr_matrix, k: int, block_rows: int = 4096
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(indices, scores), (m, k) each: every row's k largest entries of a CSR matrix of
    non-negative scores, ties and unstored zeros to the lower column.

    Rows are taken ``block_rows`` at a time: memory O(block_rows x the most entries a row
    stores) besides the (m, k) outputs.
    """
    S = sp.csr_matrix(S)
    S.sort_indices()
    m = S.shape[0]
    out_i = np.empty((m, k), dtype=np.int64)
    out_s = np.empty((m, k))
    for r0 in range(0, m, block_rows):
        out_i[r0:r0 + block_rows], out_s[r0:r0 + block_rows] = _top_k_csr_block(
            S[r0:r0 + block_rows], k)
    return out_i, out_s


def _top_k_csr_block(S: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    m = S.shape[0]
    counts = np.diff(S.indptr)
    width = max(int(counts.max(initial=0)), 1)
    vals = np.full((m, width), -np.inf)
    cols = np.full((m, width), np.iinfo(np.int64).max, dtype=np.int64)
    rows = np.repeat(np.arange(m), counts)
    pos = np.arange(S.nnz) - np.repeat(S.indptr[:-1], counts)
    vals[rows, pos] = S.data
    cols[rows, pos] = S.indices
    order = np.lexsort((cols, -vals), axis=-1)
    vals = np.take_along_axis(vals, order, axis=1)
    cols = np.take_along_axis(cols, order, axis=1)
    out_i = np.empty((m, k), dtype=np.int64)
    out_s = np.empty((m, k))
    take = min(k, width)
    out_i[:, :take], out_s[:, :take] = cols[:, :take], vals[:, :take]
    positive = (vals[:, :take] > 0).sum(axis=1)
    for i in np.flatnonzero(positive < k):
        # the rest score 0: the lowest labels not among the p positive ones
        p = int(positive[i])
        out_i[i, p:] = np.setdiff1d(np.arange(k + p), cols[i, :p])[:k - p]
        out_s[i, p:] = 0.0
    return out_i, out_s
