"""ML-kNN (Zhang & Zhou 2007, Pattern Recognition 40(7)), exact, with blockwise neighbours.

Training (n documents, q labels, k neighbours, smoothing s):

* prior P(H1_l) = (s + #docs with l) / (2 s + n);
* for every training document its k nearest other training documents (leave-one-out),
  and C_l = how many of them carry label l;
* c1[l, j] (c0[l, j]) = training documents with (without) l whose C_l equals j, and
  P(E_j | H1_l) = (s + c1[l, j]) / (s (k + 1) + sum_j c1[l, j]) (likewise for H0).

Prediction: C_l from the k nearest training documents, the label is relevant when
P(H1) P(E_C | H1) > P(H0) P(E_C | H0) (a tie, which needs s = 0 or exact symmetry, is
not relevant). ``predict_proba`` is the posterior P(H1) P(E | H1) / (sum over b) (the
prior when both products are 0) and ``decision_function`` its log-odds
log(p / (1 - p)), > 0 where the label is predicted (+-inf for p = 1 / 0).

Neighbours are Euclidean; equal distances are broken by the lower training index so
results never depend on the block size. Queries are processed in blocks of rows
against the whole training set, so memory is O(block_rows x n); the training
embeddings are held in memory (n x d float64).
"""

from __future__ import annotations

import numbers
from typing import Any

import dask
import dask.array as da
import numpy as np

from dmlfe.compute import compute_one
from dmlfe.evaluation._common import MultiLabelBase, as_embeddings, labels_in_memory

# Distances held at once per query block: about 128 MiB of float64.
_BLOCK_ELEMS = 1 << 24


def _k_nearest(Q: np.ndarray, X: np.ndarray, x_sq: np.ndarray, k: int,
               exclude: np.ndarray | None) -> np.ndarray:
    """Indices (len(Q), k) of the k nearest rows of X, ties to the lower index.

    ``exclude[i]`` is a training row that query i may not use (itself), or None.
    """
    d2 = (np.einsum("ij,ij->i", Q, Q)[:, None] - 2.0 * (Q @ X.T)) + x_sq[None, :]
    if exclude is not None:
        d2[np.arange(len(Q)), exclude] = np.inf
    n = X.shape[0]
    if k >= n:
        return np.argsort(d2, axis=1, kind="stable")[:, :k]
    kth = np.partition(d2, k - 1, axis=1)[:, k - 1]
    inside = d2 <= kth[:, None]
    nb = inside.sum(axis=1)
    out = np.empty((len(Q), k), dtype=np.int64)
    clean = nb == k
    if clean.any():
        # Exactly k candidates: the set is determined; the order does not matter.
        rows = np.flatnonzero(clean)
        out[rows] = np.nonzero(inside[rows])[1].reshape(-1, k)
    for i in np.flatnonzero(~clean):
        # Ties at the k-th distance: keep the lowest indices among them.
        cand = np.flatnonzero(inside[i])
        order = np.lexsort((cand, d2[i, cand]))
        out[i] = cand[order[:k]]
    return out


def _check_label_size(n: int, q: int) -> None:
    """Refuse, before any label is read, a fit whose dense n x q neighbour counts (int64)
    pass :data:`~dmlfe.stats.sufficient.MAX_DENSE_LABEL_BYTES` (read at call time)."""
    from dmlfe.stats import sufficient

    need = 8 * n * q
    if need > sufficient.MAX_DENSE_LABEL_BYTES:
        raise ValueError(
            f"MLkNN: its leave-one-out neighbour label counts are a dense n x q int64 "
            f"array, {need / 2**30:.1f} GiB for n = {n:,} documents and q = {q:,} labels, "
            f"above MAX_DENSE_LABEL_BYTES = {sufficient.MAX_DENSE_LABEL_BYTES / 2**30:g} "
            "GiB; use KNNLabelVote (classifier 'knn-vote'), which keeps the labels sparse")


def neighbour_label_counts(Q: np.ndarray, X: np.ndarray, Y: np.ndarray, k: int,
                           offset: int | None = None, block_rows: int | None = None
                           ) -> np.ndarray:
    """For each query row, how many of its k nearest training rows carry each label.

    Parameters
    ----------
    Q : ndarray (m, d)
        Query embeddings.
    X, Y : ndarray (n, d), (n, q)
        Training embeddings and 0/1 labels.
    k : int
    offset : int, optional
        When the queries are training rows offset..offset+m-1, each excludes itself
        (leave-one-out).
    block_rows : int, optional
        Query rows per distance block; by default about 16 million distances a block.

    Returns
    -------
    ndarray (m, q) of int64
    """
    Q = np.asarray(Q, dtype=np.float64)
    n = X.shape[0]
    step = block_rows or max(1, _BLOCK_ELEMS // max(n, 1))
    x_sq = np.einsum("ij,ij->i", X, X)
    out = np.empty((Q.shape[0], Y.shape[1]), dtype=np.int64)
    for r0 in range(0, Q.shape[0], step):
        r1 = min(r0 + step, Q.shape[0])
        excl = None if offset is None else np.arange(offset + r0, offset + r1)
        idx = _k_nearest(Q[r0:r1], X, x_sq, k, excl)
        out[r0:r1] = Y[idx].sum(axis=1, dtype=np.int64)
    return out


def _joint(zb: np.ndarray, state: dict) -> tuple[np.ndarray, np.ndarray]:
    """P(H1) P(E_C | H1) and P(H0) P(E_C | H0) for each query row and label."""
    counts = neighbour_label_counts(zb, state["X"], state["Y"], state["k"],
                                    block_rows=state["block_rows"])
    lab = np.arange(counts.shape[1])[None, :]
    p1 = state["prior"][None, :] * state["like1"][lab, counts]
    p0 = (1.0 - state["prior"])[None, :] * state["like0"][lab, counts]
    return p1, p0


def _block_posterior(zb: np.ndarray, state: dict) -> np.ndarray:
    p1, p0 = _joint(zb, state)
    tot = p1 + p0
    return np.divide(p1, tot, out=np.broadcast_to(state["prior"], p1.shape).copy(),
                     where=tot > 0)


def _block_log_odds(zb: np.ndarray, state: dict) -> np.ndarray:
    # from the posterior itself, so that equal posteriors get equal scores (same ranking)
    post = _block_posterior(zb, state)
    with np.errstate(divide="ignore"):
        return np.log(post) - np.log1p(-post)


def _block_predict(zb: np.ndarray, state: dict) -> np.ndarray:
    p1, p0 = _joint(zb, state)
    return (p1 > p0).astype(np.int8)


def _loo_counts_block(zb: np.ndarray, X: np.ndarray, Y: np.ndarray, k: int,
                      block_info: dict | None = None, block_rows: int | None = None
                      ) -> np.ndarray:
    offset = block_info[0]["array-location"][0][0]
    return neighbour_label_counts(zb, X, Y, k, offset=offset, block_rows=block_rows)


class MLkNN(MultiLabelBase):
    """Multi-label k nearest neighbours, exactly as published by Zhang & Zhou (2007).

    Parameters
    ----------
    k : int, default 10
        Neighbours (Euclidean); must be smaller than the number of training documents.
    s : float, default 1.0
        Smoothing of the prior and likelihood estimates (1 = Laplace), >= 0.
    block_rows : int or None, default None
        Query rows per distance block (memory block_rows x n_train float64); None picks
        about 16 million distances per block. Results do not depend on it.

    Attributes
    ----------
    prior_ : ndarray (q,)
        P(H1_l).
    cond_prob_true_, cond_prob_false_ : ndarray (q, k + 1)
        P(E_j | H1_l) and P(E_j | H0_l), j = 0..k.
    n_features_in_, n_labels_, n_samples_ : int

    Notes
    -----
    The training embeddings and labels are kept (in memory) for the neighbour search;
    dask embeddings are computed once in ``fit``. The leave-one-out neighbour counts of
    the training set and, for dask queries, ``predict``/``decision_function`` run per row
    chunk as dask tasks. See the module docstring for the algorithm and tie rules.

    Examples
    --------
    Neighbour counts on embeddings (here three features of a small matrix):

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> clf = dmlfe.MLkNN(k=10).fit(X[:, :3], Y)
    >>> clf.predict_proba(X[:, :3]).shape
    (60, 3)
    >>> clf.cond_prob_true_.shape  # P(E_j | H1_l), j = 0..k
    (3, 11)
    """

    def __init__(self, k: int = 10, s: float = 1.0, block_rows: int | None = None):
        self.k = k
        self.s = s
        self.block_rows = block_rows

    def _validate(self) -> None:
        k, s, br = self.k, self.s, self.block_rows
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
            raise ValueError(f"MLkNN: k={k!r} must be an integer >= 1")
        if isinstance(s, bool) or not isinstance(s, numbers.Real) or not s >= 0:
            raise ValueError(f"MLkNN: s={s!r} must be a real number >= 0")
        if br is not None and (isinstance(br, bool) or not isinstance(br, numbers.Integral)
                               or br < 1):
            raise ValueError(f"MLkNN: block_rows={br!r} must be a positive integer or None")

    def fit(self, Z: Any, Y: Any) -> MLkNN:
        """Estimate priors and neighbour-count likelihoods from the training set.

        Parameters
        ----------
        Z : ndarray or dask array (row chunks), shape (n, d)
        Y : ndarray, scipy.sparse or dask array, shape (n, q), entries 0/1

        Returns
        -------
        self
        """
        self._validate()
        k, s = int(self.k), float(self.s)
        Zi, Y = self._fit_input(Z, Y)
        chunks = Zi.chunks[0] if isinstance(Zi, da.Array) else None
        X = np.ascontiguousarray(Zi.compute() if chunks is not None else Zi)
        if chunks is not None:
            as_embeddings(X)  # the finiteness check, now that the values exist
        n = X.shape[0]
        _check_label_size(n, int(Y.shape[1]) if getattr(Y, "ndim", 1) == 2 else 1)
        Yi = labels_in_memory(Y, n)
        if k >= n:
            raise ValueError(f"MLkNN: k={k} needs at least k + 1 = {k + 1} training documents "
                             f"(leave-one-out neighbours); got {n} sample(s). Lower k.")
        if chunks is not None and len(chunks) > 1:
            Xd = da.from_array(X, chunks=(chunks, X.shape[1]))
            counts = compute_one(Xd.map_blocks(
                _loo_counts_block, dask.delayed(X, pure=True), dask.delayed(Yi, pure=True), k,
                block_rows=self.block_rows, chunks=(chunks, (Yi.shape[1],)), dtype=np.int64,
                meta=np.empty((0, Yi.shape[1]), dtype=np.int64)))
        else:
            counts = neighbour_label_counts(X, X, Yi, k, offset=0, block_rows=self.block_rows)
        q = Yi.shape[1]
        n1 = Yi.sum(axis=0, dtype=np.int64)
        self.prior_ = (s + n1) / (2.0 * s + n)
        c1 = np.zeros((q, k + 1), dtype=np.int64)
        c0 = np.zeros((q, k + 1), dtype=np.int64)
        lab = np.broadcast_to(np.arange(q), counts.shape)
        rel = Yi.astype(bool)
        np.add.at(c1, (lab[rel], counts[rel]), 1)
        np.add.at(c0, (lab[~rel], counts[~rel]), 1)
        self.cond_prob_true_ = (s + c1) / (s * (k + 1) + c1.sum(axis=1, keepdims=True))
        self.cond_prob_false_ = (s + c0) / (s * (k + 1) + c0.sum(axis=1, keepdims=True))
        self._X, self._Y = X, Yi
        self.n_features_in_, self.n_labels_, self.n_samples_ = X.shape[1], q, n
        return self

    def _state(self) -> dict:
        return {"X": self._X, "Y": self._Y, "k": int(self.k), "block_rows": self.block_rows,
                "prior": self.prior_, "like1": self.cond_prob_true_,
                "like0": self.cond_prob_false_}

    _scores = staticmethod(_block_log_odds)
    _relevant = staticmethod(_block_predict)
    _probabilities = staticmethod(_block_posterior)
