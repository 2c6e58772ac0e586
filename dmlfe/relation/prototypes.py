"""Choosing prototype documents and gathering their sparse rows.

Every choice is a function of the *global* row index (the document's position in
the training set), the labels and a seed -- never of how the rows are chunked or
how many workers there are -- so the same seed gives the same prototypes for any
chunk size and cluster (mope section 3.5: "select a collection of p seed
prototypes").

* ``"all"``: every training document (p = n; the exact kernel route).
* ``"random"``: p documents uniformly without replacement (numpy ``default_rng``).
* ``"stratified"``: label-stratified: documents grouped by their label set (rows of
  Y), p allocated to the groups in proportion to their sizes (largest remainders,
  ties to the larger group, then the earlier one), uniform within a group.
* ``"kmeans++"``: k-means++ seeding (Arthur & Vassilvitskii 2007) on the sparse
  vectors, one trial per step (:func:`kmeanspp_seeding`: the draws of
  :func:`sklearn.cluster.kmeans_plusplus` with ``n_local_trials=1``, without its dense
  p x D centres). It runs on the driver over a candidate pool (every document when
  n <= ``pool_size``, else a seeded uniform sample of ``pool_size`` of them) gathered
  as one CSR matrix.
* a sequence of row positions (:func:`fixed_rows`): those documents, the same whatever
  the data after them. Appends only add rows at a store's end, so after an append a fit
  given the earlier fit's ``prototype_indices_`` keeps its prototypes (and with them the
  similarity's scales, which come from the prototypes alone): its relation statistics
  are the earlier ones plus the appended rows' share, not computed from all rows again.
  The choices above depend on n and change.
* ``"auto"`` (the estimators' default, with ``n_prototypes="auto"``;
  :func:`resolve_prototypes`): every training document while n <=
  :data:`MAX_AUTO_PROTOTYPES`, else that many chosen by :data:`AUTO_SELECTION`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import compute_one, is_dask
from dmlfe.relation.kernels import row_sq_norms, sq_distances

SELECTIONS = ("all", "random", "stratified", "kmeans++")
#: The estimators' ``prototype_selection`` values: ``"auto"`` and :data:`SELECTIONS`.
SELECTION_CHOICES = ("auto", *SELECTIONS)

#: Most prototypes ``n_prototypes="auto"`` takes: p = min(n, this). Every relation-route
#: fit forms p x p matrices from the n x p relation features, R^T B R or R^T R (2 n p^2
#: flops each), and factorises or eigen-decomposes them (of order p^3 flops), so at
#: p = n the cost grows as n^3 and stops at ``max_dense_features``. With p capped it
#: grows as n p^2, linearly in n: at 2,000 each p x p matrix is 32 MB and its
#: factorisation 2.7e9 flops, and at R10's n = 6,490 the products are (2,000 / 6,490)^2,
#: under a tenth, of those at p = n. mope section 3.5 chooses p <= n seed prototypes for
#: this reason ("the computational cost can be further reduced to O(p^3)").
MAX_AUTO_PROTOTYPES = 2_000
#: How ``prototype_selection="auto"`` chooses fewer than n prototypes (see
#: :func:`resolve_prototypes` for why this one).
AUTO_SELECTION = "stratified"

#: Default most candidates k-means++ seeding looks at (their rows are gathered on the driver).
KMEANS_POOL = 20_000


def _take_rows(xb: Any, local: np.ndarray) -> sp.csr_matrix:
    return sp.csr_matrix(sp.csr_matrix(xb, dtype=np.float64)[local])


def gather_rows(X: Any, idx: Any, client: Any = None) -> sp.csr_matrix:
    """The rows ``idx`` (global row indices, any order) of X as one float64 CSR matrix.

    A dask X is read block by block on the workers; only the selected rows come back.
    """
    idx = np.asarray(idx, dtype=np.int64).ravel()
    n = int(X.shape[0])
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"prototype row index out of range: X has {n} rows, got indices "
                         f"{idx.min()} .. {idx.max()}")
    if not is_dask(X):
        Xm = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else sp.csr_matrix(
            np.asarray(X, dtype=np.float64))
        return sp.csr_matrix(Xm[idx])
    order = np.argsort(idx, kind="stable")
    sidx = idx[order]
    bounds = np.concatenate([[0], np.cumsum(X.chunks[0])]).astype(np.int64)
    blocks = X.to_delayed().ravel()
    parts = []
    for i, xb in enumerate(blocks):
        lo, hi = np.searchsorted(sidx, [bounds[i], bounds[i + 1]])
        if hi > lo:
            parts.append(delayed(_take_rows)(xb, sidx[lo:hi] - bounds[i]))
    got = compute_one(delayed(list)(parts), client=client) if parts else []
    D = int(X.shape[1])
    rows = sp.vstack(got, format="csr") if got else sp.csr_matrix((0, D))
    out = sp.csr_matrix(rows[np.argsort(order, kind="stable")], dtype=np.float64)
    out.sort_indices()
    return out


def _labels(Y: Any, client: Any) -> np.ndarray | sp.csr_matrix:
    """The labels on the driver: CSR when they come sparse (many labels: an n x q dense
    copy is what they cannot afford), else a dense 2-D array."""
    if Y is None:
        raise ValueError("prototype_selection='stratified' needs the labels Y")
    if is_dask(Y):
        Y = compute_one(Y, client=client)
    if sp.issparse(Y):
        return sp.csr_matrix(Y)
    Y = np.asarray(Y)
    return Y.reshape(Y.shape[0], -1)


def label_set_groups(Y: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """(inverse, counts) of the distinct label sets of the rows of a sparse 0/1 Y, in
    the order ``np.unique(Y.toarray() != 0, axis=0)`` gives them (rows compared entry
    by entry from label 0, absent before present) without the dense n x q array.

    Two rows' sorted label lists first differ at position i: the row with the smaller
    label there has that label and the other does not, so it is the larger row; a list
    that is a prefix of the other's is the smaller row. That is the order of the lists
    of negated labels compared as tuples.
    """
    Y = sp.csr_matrix(Y)
    Y.eliminate_zeros()
    Y.sort_indices()
    groups: dict[tuple[int, ...], int] = {}
    first = np.empty(Y.shape[0], dtype=np.int64)
    ind, ptr = Y.indices, Y.indptr
    for r in range(Y.shape[0]):
        key = tuple((-ind[ptr[r]:ptr[r + 1]]).tolist())
        first[r] = groups.setdefault(key, len(groups))
    keys = list(groups)
    rank = np.empty(len(keys), dtype=np.int64)
    rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
    inverse = rank[first]
    return inverse, np.bincount(inverse, minlength=len(keys))


def _stratified(Y: np.ndarray | sp.csr_matrix, p: int, rng: np.random.Generator
                ) -> np.ndarray:
    if sp.issparse(Y):
        inverse, counts = label_set_groups(Y)
    else:
        _, inverse, counts = np.unique((Y != 0).astype(np.uint8), axis=0,
                                       return_inverse=True, return_counts=True)
    inverse = inverse.ravel()
    n = Y.shape[0]
    quota = p * counts / n
    alloc = np.floor(quota).astype(np.int64)
    rest = p - int(alloc.sum())
    if rest:
        # largest remainders; ties to the larger group, then the earlier key
        order = np.lexsort((np.arange(len(counts)), -counts, -(quota - alloc)))
        alloc[order[:rest]] += 1
    chosen = []
    # each group's rows, ascending, without a scan of every row per group (at many labels
    # nearly every document has a label set of its own)
    by_group = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for g in np.flatnonzero(alloc):
        if alloc[g]:
            members = by_group[bounds[g]:bounds[g + 1]]
            chosen.append(rng.choice(members, size=int(alloc[g]), replace=False))
    return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)


def kmeanspp_seeding(X: Any, p: int, seed: int) -> np.ndarray:
    """Row indices of p k-means++ centres of the rows of X (D^2 sampling, one trial a step).

    Arthur & Vassilvitskii (2007): the first row uniformly, each next one with
    probability proportional to its squared distance to the nearest row chosen so far.
    The draws are those of :func:`sklearn.cluster.kmeans_plusplus` with
    ``n_local_trials=1`` and ``random_state=seed`` (the same ``RandomState`` calls in
    the same order), so the same rows come out up to round-off of the distances; the
    distances are :func:`dmlfe.relation.kernels.sq_distances` (a duplicate row is at
    distance 0). scikit-learn keeps every centre as a dense row: p x D float64, written
    one dense D-row per step, which dominates at a million features. Here a step is one
    sparse product of the chosen row with the pool's transpose, built once (timed by
    ``benchmarks/scale.py --parts selection``). Indices may repeat when rows do (every
    remaining distance 0); the caller tops them up.

    Parameters
    ----------
    X : scipy.sparse matrix or ndarray, shape (m, D)
        The candidate rows (m >= p >= 1).
    p : int
        How many centres.
    seed : int
        Seed of the ``numpy.random.RandomState`` that draws them.

    Returns
    -------
    ndarray of int64, shape (p,)
        Row indices into X in the order they were chosen.
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    X.sort_indices()
    m = X.shape[0]
    rs = np.random.RandomState(seed)
    sq = row_sq_norms(X)
    right = X.T.tocsr()  # D x m: a row's dot products with every row are row @ right

    def to_all(i: int) -> np.ndarray:
        return sq_distances((X[i] @ right).toarray(), sq[i:i + 1], sq)[0]

    picked = np.empty(p, dtype=np.int64)
    picked[0] = rs.choice(m, p=np.full(m, 1.0 / m))  # as sklearn: by probabilities
    closest = to_all(int(picked[0]))
    for c in range(1, p):
        cumulative = np.cumsum(closest)
        # round-off can put the draw at the last cumulative sum
        i = min(int(np.searchsorted(cumulative, rs.uniform() * cumulative[-1])), m - 1)
        closest = np.minimum(closest, to_all(i))
        picked[c] = i
    return picked


def _kmeanspp(X: Any, n: int, p: int, rng: np.random.Generator, seed: int,
              pool_size: int, client: Any) -> np.ndarray:
    if n <= pool_size:
        pool = np.arange(n, dtype=np.int64)
    else:
        pool = np.sort(rng.choice(n, size=max(pool_size, p), replace=False))
    picked = np.unique(kmeanspp_seeding(gather_rows(X, pool, client), p, seed))
    if picked.size < p:
        # identical documents can be drawn twice: top up uniformly from the rest
        rest = np.setdiff1d(np.arange(pool.size), picked)
        picked = np.concatenate([picked, rng.choice(rest, size=p - picked.size, replace=False)])
    return pool[picked]


def fixed_rows(selection: Any, n: int | None = None) -> np.ndarray:
    """Prototype rows given as a sequence of row positions: ascending int64, checked to be
    distinct integers in [0, n) (any n >= 0 when ``n`` is None).

    Raises
    ------
    ValueError
        Naming the first bad entry: not an integer, negative, n or more, repeated; or an
        empty sequence.
    """
    rows = np.asarray(selection, dtype=object).ravel()
    if rows.size == 0:
        raise ValueError("prototype_selection is an empty list of rows: give at least one row "
                         f"position, or one of {SELECTIONS}")
    for v in rows:
        if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
            raise ValueError(f"prototype_selection holds {v!r}, not a row position: give row "
                             f"positions (ints) of the training documents, or one of {SELECTIONS}")
    rows = rows.astype(np.int64)
    bad = rows[(rows < 0) | (rows >= (np.iinfo(np.int64).max if n is None else n))]
    if bad.size:
        raise ValueError(f"prototype_selection row {int(bad[0])} is not a training document: "
                         f"positions lie in [0, {n}) ({n} training documents)")
    out, counts = np.unique(rows, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"prototype_selection names row {int(out[counts > 1][0])} more than "
                         "once: give each prototype row once")
    return out


def resolve_prototypes(
    n: int,
    n_prototypes: int | str | None = "auto",
    selection: str | Sequence[int] = "auto",
) -> tuple[int, str | np.ndarray]:
    """p and the concrete selection an estimator's ``n_prototypes`` and
    ``prototype_selection`` mean for n training documents.

    * ``n_prototypes``: an int is p; None is every training document (p = n); ``"auto"``
      is min(n, :data:`MAX_AUTO_PROTOTYPES`), or n with ``selection="all"``.
    * ``selection``: ``"auto"`` is ``"all"`` when p = n, else :data:`AUTO_SELECTION`
      (label-stratified: every label combination keeps its share of the prototypes,
      so rare labels still have prototypes to be similar to). It reads only the labels,
      where k-means++ seeding makes p sequential sparse products over a gathered pool
      of documents. ``benchmarks/prototypes.py`` compares it with p = n, "random" and
      "kmeans++" (ML-kNN on R10's test split, ``benchmarks/results/prototypes-r10-*``):
      no choice was best for every method, the stratified one was best for three of
      the eight and at least as good as p = n for six. Row positions
      (:func:`fixed_rows`) are their own p.

    Parameters
    ----------
    n : int
        Number of training documents.
    n_prototypes : int, "auto" or None
    selection : {"auto", "all", "random", "stratified", "kmeans++"} or sequence of int

    Returns
    -------
    p : int
    selection : str or ndarray of int64
        One of :data:`SELECTIONS` (``"all"`` whenever p = n), or the ascending row
        positions.

    Raises
    ------
    ValueError
        For a value outside those listed above (the message names the parameter and
        the values it takes), or p and the selection disagreeing.
    """
    if not isinstance(selection, str):
        rows = fixed_rows(selection, n)
        if n_prototypes not in (None, "auto") and int(n_prototypes) != rows.size:
            raise ValueError(f"n_prototypes={n_prototypes} but prototype_selection names "
                             f"{rows.size} rows: leave n_prototypes out")
        return int(rows.size), rows
    if selection not in SELECTION_CHOICES:
        raise ValueError(f"prototype_selection={selection!r} is not one of "
                         f"{SELECTION_CHOICES} or a list of row positions")
    if n_prototypes is None or (n_prototypes == "auto" and selection == "all"):
        p = n
    elif isinstance(n_prototypes, str):
        if n_prototypes != "auto":
            raise ValueError(f"n_prototypes={n_prototypes!r} is not 'auto', None (every "
                             "training document) or a positive int")
        p = min(n, MAX_AUTO_PROTOTYPES)
    else:
        if isinstance(n_prototypes, bool) or int(n_prototypes) != n_prototypes:
            raise TypeError(f"n_prototypes={n_prototypes!r} is not 'auto', None (every "
                            "training document) or a positive int")
        p = int(n_prototypes)
        if not 1 <= p <= n:
            raise ValueError(f"n_prototypes={p} must lie between 1 and the number of training "
                             f"documents ({n}); use None for all of them or 'auto' for "
                             f"min(n, {MAX_AUTO_PROTOTYPES})")
    if p == n:  # every document, however it was asked for
        return p, "all"
    if selection == "auto":
        selection = AUTO_SELECTION
    elif selection == "all":
        raise ValueError(f"prototype_selection='all' takes every training document (n = "
                         f"{n}) but n_prototypes={p}; choose 'auto', 'random', 'stratified' "
                         "or 'kmeans++' for fewer")
    return p, selection


def select_prototypes(
    X: Any,
    Y: Any = None,
    *,
    n_prototypes: int | None = None,
    selection: str | Sequence[int] = "all",
    random_state: int = 0,
    pool_size: int = KMEANS_POOL,
    client: Any = None,
) -> np.ndarray:
    """Global row indices (ascending, int64) of the prototype documents.

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        The training documents (only read by ``"kmeans++"``).
    Y : array-like or dask array (n, q), optional
        Labels (``"stratified"`` only).
    n_prototypes : int, "auto" or None
        p; None means every training document (p = n); ``"auto"`` min(n,
        :data:`MAX_AUTO_PROTOTYPES`) (see :func:`resolve_prototypes`).
    selection : {"auto", "all", "random", "stratified", "kmeans++"} or sequence of int
        See the module docstring. ``"all"`` needs ``n_prototypes`` None, "auto" or n;
        row positions (:func:`fixed_rows`) need it None, "auto" or their number.
    random_state : int
        Seed; the choice depends only on it, n (and Y / the rows for the
        label- and data-driven choices), never on the chunking.
    pool_size : int
        ``"kmeans++"``: most candidate documents gathered on the driver.
    """
    n = int(X.shape[0])
    if n == 0 and isinstance(selection, str):
        raise ValueError("no training documents to choose prototypes from")
    p, selection = resolve_prototypes(n, n_prototypes, selection)
    if not isinstance(selection, str):
        return selection
    if selection == "all" or p == n:
        return np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(int(random_state))
    if selection == "random":
        idx = rng.choice(n, size=p, replace=False)
    elif selection == "stratified":
        Yd = _labels(Y, client)
        if Yd.shape[0] != n:
            raise ValueError(f"Y has {Yd.shape[0]} rows but X has {n}")
        idx = _stratified(Yd, p, rng)
    else:
        idx = _kmeanspp(X, n, p, rng, int(random_state), int(pool_size), client)
    return np.sort(np.asarray(idx, dtype=np.int64))
