"""Exact K-nearest-neighbour graph over documents, blockwise on the cluster (mope section 2.1.1).

The graph is searched once per data set and reused by every graph method (MOPE, MESD,
LPP/OLPP, SSMOPE): its neighbour lists are saved beside the store like the statistics
cache (``<store>.graph/``), keyed by the store's fingerprint, its selection and K.

Search. X arrives in row blocks (CSR). One task per pair (row block b, row block c)
computes the squared euclidean distances ||x_i - x_j||^2 = ||x_i||^2 + ||x_j||^2 -
2 x_i.x_j from the sparse Gram block (:func:`dmlfe.relation.kernels.sq_distances`) and
keeps the K best candidates of every row of b among the rows of c; the candidate lists of
b are then merged into its K nearest neighbours. Ordering is by (distance, column index),
so ties go to the smaller index and the graph does not depend on the chunking or on the
number of workers: a pair's distance is computed from the same two rows in the same
order whichever blocks hold them. The document itself is not its own neighbour; an exact
duplicate is (at distance 0). Cost O(n^2) distance evaluations: the exact search is
meant for n up to about 10^5 (:data:`EXACT_LIMIT`).

After an append to a store, :func:`extend_graph` makes the exact graph of all rows from
the saved graph of the rows before it with the appended rows' distances only (each
appended row with every row): an old row's list takes an appended row only when it comes
before its K-th neighbour in the (distance, index) order.

Approximate search (``method="approximate"``, or ``"auto"`` above :data:`EXACT_LIMIT`
documents): NN-descent (Dong, Moses & Li 2011) as implemented by pynndescent (the
optional extra ``dmlfe[ann]``). Chosen because it takes sparse CSR rows as they are
(tf-idf with up to 2^20 columns: the graph-index libraries faiss, hnswlib and annoy
need dense vectors, n x 2^20 floats) with the euclidean metric on sparse input, and is
the K-NN engine of UMAP, so it is maintained and tested on this kind of data. It is not
blockwise: X is gathered on the driver (its CSR arrays, float32 inside pynndescent)
and the search runs there on one thread, from random neighbour lists (its random-
projection-tree start degenerates on such wide sparse rows, see
:func:`approximate_neighbours`); memory is about the sparse matrix twice (float64 copy
+ float32 copy) plus the n x (K + 1) indices and distances of its heaps. Its
neighbour lists are then re-scored exactly (float64 squared distances, the same
expansion as the exact search) and ordered by (distance, index). Its recall@K against
the exact search is measured on a seeded sample of documents (:func:`knn_recall`, the
exact blockwise search restricted to the sample's rows) and kept with the graph.

Weights: the similarities of :mod:`dmlfe.relation.similarities` offered as graph
weights (``constant``, ``gaussian``, ``local_scaling``, ``eq9``, ``cosine`` and any
registered later; mope section 2.1.1, all symmetric in i and j), computed by the same
functions as on the relation route, from the edges' squared distances and the rows'
squared norms. On the graph, a width tau left out is the similarity's default (1.0 for
``eq9``) or, for the Gaussian, the median of the non-zero neighbour distances (the
paper does not fix one); sigma_i of ``local_scaling`` is the distance to the K-th
nearest neighbour (1.0 when that distance is 0).

The n x n matrix W keeps an edge when j is among the K nearest neighbours of i or
(``"symmetrized"``) i among those of j, or (``"mutual"``) both.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe._version import __version__
from dmlfe.compute import (
    compute_one,
    driver_threads,
    in_threads,
    is_dask,
    row_block_list,
    to_float_block,
    tree_reduce,
)
from dmlfe.errors import InputError, MissingExtraError
from dmlfe.relation.kernels import row_sq_norms, sq_distances
from dmlfe.relation.prototypes import gather_rows
from dmlfe.relation.similarities import Pairs, get_similarity, similarity_names
from dmlfe.stats.cache import arrays_digest, earlier_version, stats_key
from dmlfe.tempfiles import write_atomically

log = logging.getLogger(__name__)

#: dmlfe's own weights of the graph's edges (the registry,
#: :func:`dmlfe.relation.similarities.similarity_names`, also lists later registrations).
FEATURE_WEIGHTS = similarity_names("graph")
#: How the directed K-NN lists become an undirected graph.
GRAPH_MODES = ("symmetrized", "mutual")
#: Rows per distance slice inside one task (bounds the dense slice x block matrix).
SLICE_ROWS = 1024
#: Bumped when the meaning of a saved graph changes.
GRAPH_FORMAT = 1
#: How the graph is searched: exact blockwise, NN-descent, or by n (``"auto"``).
KNN_METHODS = ("auto", "exact", "approximate")
#: ``"auto"`` searches exactly up to this many documents, approximately above.
EXACT_LIMIT = 100_000
#: Documents on which the recall of an approximate graph is measured.
RECALL_SAMPLE = 1000


@dataclass(frozen=True)
class KNNGraph:
    """The K nearest neighbours of every document.

    Attributes
    ----------
    indices : ndarray (n, K) int64
        Neighbours of row i, nearest first (ties: smaller index first).
    sq_distances : ndarray (n, K) float64
        Their squared euclidean distances.
    sq_norms : ndarray (n,) float64
        ||x_i||^2 (for the eq. 9 and cosine weights).
    from_cache : bool
    exact : bool
        Searched exactly (else by NN-descent).
    recall : float or None
        Approximate graphs: recall@K against the exact search on ``recall_sample``
        documents (:func:`knn_recall`); None for exact ones.
    recall_sample : int
    n_passes : int
        Passes over X the search made: 1 exact; 3 approximate (X gathered, the recall
        sample gathered and searched exactly); 0 when read from the cache.
    n_distances : int or None
        Pairwise distances the exact search computed: n^2 from scratch, m (2 n + m) when
        a graph of n rows was extended by m appended ones (:func:`extend_graph`), 0 when
        read from the cache; None for NN-descent.
    """

    indices: np.ndarray
    sq_distances: np.ndarray
    sq_norms: np.ndarray
    from_cache: bool = False
    exact: bool = True
    recall: float | None = None
    recall_sample: int = 0
    n_passes: int = 1
    n_distances: int | None = None

    @property
    def n(self) -> int:
        return int(self.indices.shape[0])

    @property
    def k(self) -> int:
        return int(self.indices.shape[1])

    def edge_weights(self, kind: str = "gaussian", tau: float | None = None) -> np.ndarray:
        """(n, K) weights of the directed edges i -> indices[i, k] (module docstring)."""
        spec = get_similarity(kind, "graph")
        d2 = self.sq_distances
        if spec.needs_tau and tau is None:
            tau = default_gaussian_tau(d2) if spec.default_tau is None else spec.default_tau
        pairs = Pairs(sq_dist=d2, x_sq=self.sq_norms[:, None], p_sq=self.sq_norms[self.indices],
                      tau=tau if spec.needs_tau else None)
        if spec.needs_scale:
            sigma = np.sqrt(d2[:, -1])
            sigma = np.where(sigma > 0.0, sigma, 1.0)
            pairs.x_scale, pairs.p_scale = sigma[:, None], sigma[self.indices]
        return spec.weights(pairs)

    def matrix(self, values: np.ndarray | None = None, mode: str = "symmetrized") -> sp.csr_matrix:
        """The symmetric n x n matrix with ``values`` (default 1) on the graph's edges."""
        n, K = self.indices.shape
        vals = np.ones((n, K)) if values is None else np.asarray(values, dtype=np.float64)
        M = sp.csr_matrix((vals.ravel(), self.indices.ravel(), np.arange(0, n * K + 1, K)),
                          shape=(n, n))
        if mode == "symmetrized":
            # both directions carry the same value (the weights are symmetric), so the max
            # is the union of the two edge sets
            W = M.maximum(M.T)
        elif mode == "mutual":
            P = M.copy()
            P.data[:] = 1.0
            W = M.multiply(P.multiply(P.T))
        else:
            raise ValueError(f"graph mode {mode!r} is not one of {GRAPH_MODES}")
        W = sp.csr_matrix(W)
        W.sort_indices()
        return W

    def weights(self, kind: str = "gaussian", tau: float | None = None,
                mode: str = "symmetrized") -> sp.csr_matrix:
        """W (n x n, symmetric, sparse) with ``kind`` weights (module docstring)."""
        return self.matrix(self.edge_weights(kind, tau), mode)


def default_gaussian_tau(d2: np.ndarray) -> float:
    """Median of the non-zero neighbour distances (1.0 when there is none)."""
    pos = d2[d2 > 0.0]
    return float(np.median(pos)) if pos.size else 1.0


# --------------------------------------------------------------------------- search
def _sorted_csr(xb: Any) -> sp.csr_matrix:
    x = to_float_block(xb)
    x = sp.csr_matrix(x)
    x.sort_indices()
    return x


def _best(d2: np.ndarray, cols: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the k smallest (d2, col) pairs ordered by (d2, col); inf-padded."""
    m, c = d2.shape
    if c == 0:
        return np.full((m, k), np.inf), np.full((m, k), -1, dtype=np.int64)
    kk = min(k, c)
    # every entry <= the kk-th smallest value is a candidate (ties included), so the
    # index tie-break below sees all of them
    kth = np.partition(d2, kk - 1, axis=1)[:, kk - 1]
    rows, pos = np.nonzero(d2 <= kth[:, None])
    vals, cidx = d2[rows, pos], cols[pos]
    order = np.lexsort((cidx, vals, rows))
    rows, vals, cidx = rows[order], vals[order], cidx[order]
    starts = np.searchsorted(rows, np.arange(m))
    rank = np.arange(rows.size) - starts[rows]
    keep = rank < kk
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    out_d[rows[keep], rank[keep]] = vals[keep]
    out_i[rows[keep], rank[keep]] = cidx[keep]
    return out_d, out_i


def _pair_candidates(xb: Any, xc: Any, rows_b: np.ndarray, start_c: int,
                     k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k best neighbours of the query rows xb (global indices ``rows_b``) among
    block c's rows (a row is not its own neighbour)."""
    xb, xc = _sorted_csr(xb), _sorted_csr(xc)
    nb_sq, nc_sq = row_sq_norms(xb), row_sq_norms(xc)
    xct = sp.csr_matrix(xc.T)
    cols = start_c + np.arange(xc.shape[0], dtype=np.int64)
    starts = list(range(0, xb.shape[0], SLICE_ROWS))
    outs: list[tuple[np.ndarray, np.ndarray]] = [None] * len(starts)  # type: ignore[list-item]

    def slice_best(j: int) -> None:
        s = starts[j]
        piece = xb[s:s + SLICE_ROWS]
        # scipy's product, not stats.outer.dense_outer: each entry is summed in column
        # order whatever the blocks, so the graph is identical across chunkings (BLAS
        # sums in an order that depends on the shapes)
        G = (piece @ xct).toarray()
        d2 = sq_distances(G, nb_sq[s:s + SLICE_ROWS], nc_sq)
        r = np.arange(piece.shape[0])
        own = rows_b[s:s + SLICE_ROWS] - start_c
        inside = (own >= 0) & (own < xc.shape[0])
        d2[r[inside], own[inside]] = np.inf  # a document is not its own neighbour
        outs[j] = _best(d2, cols, k)

    # slices are independent and scipy's product releases the GIL: the driver's CPUs
    # share them (one thread inside a dask task, where the workers are the parallelism)
    in_threads(slice_best, range(len(starts)), threads=driver_threads())
    return np.vstack([o[0] for o in outs]), np.vstack([o[1] for o in outs])


def _merge(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    k = parts[0][0].shape[1]
    d = np.hstack([p[0] for p in parts])
    i = np.hstack([p[1] for p in parts])
    # sort by (distance, index) with the padding (-1, inf) last
    cols = _row_order(d, np.where(i < 0, np.iinfo(np.int64).max, i))
    d = np.take_along_axis(d, cols, axis=1)[:, :k]
    i = np.take_along_axis(i, cols, axis=1)[:, :k]
    return d, i


def _norms(xb: Any) -> np.ndarray:
    return row_sq_norms(_sorted_csr(xb))


def _check_k(n: int, n_neighbors: int) -> int:
    k = int(n_neighbors)
    if k < 1 or k >= n:
        raise InputError(f"n_neighbors={n_neighbors!r} must lie between 1 and n - 1 = {n - 1} "
                         "(the K-NN graph needs K other documents per document)")
    return k


def exact_neighbours(X: Any, k: int, rows: np.ndarray | None = None, *, client: Any = None,
                     progress: bool = False
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The exact blockwise search (module docstring) for all documents or for ``rows``.

    Returns (squared distances (m, k), indices (m, k), ||x_i||^2 of all n rows or None
    when ``rows`` is given); m = n, or len(rows) in the order given.
    """
    if rows is None and not is_dask(X):
        # in memory X is one block: the block functions run here, without a dask graph
        d, i = _pair_candidates(X, X, np.arange(X.shape[0], dtype=np.int64), 0, k)
        return d, i, _norms(X)
    blocks, starts = row_block_list(X)
    nonempty = [b for b in range(len(blocks)) if starts[b + 1] > starts[b]]
    if rows is None:
        queries = [(blocks[b], np.arange(starts[b], starts[b + 1], dtype=np.int64))
                   for b in nonempty]
    else:  # one query block of the gathered rows (a sample: small)
        rows = np.asarray(rows, dtype=np.int64)
        queries = [(gather_rows(X, rows, client=client), rows)]
    results = []
    for xq, rq in queries:
        parts = [delayed(_pair_candidates, pure=True)(xq, blocks[c], rq, int(starts[c]), k)
                 for c in nonempty]
        norms = delayed(_norms, pure=True)(xq) if rows is None else None
        results.append((tree_reduce(parts, _merge), norms))
    out = compute_one(delayed(list)(results), client=client, progress=progress,
                      desc="K-NN graph" if rows is None else "exact K-NN of a sample")
    d = np.vstack([r[0][0] for r in out])
    i = np.vstack([r[0][1] for r in out])
    return d, i, (np.concatenate([r[1] for r in out]) if rows is None else None)


def _grow_block(xb: Any, new: sp.csr_matrix, start: int, n_old: int, k: int
                ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], int]:
    """One row block of the old rows (first row ``start``) against the appended rows
    ``new`` (rows ``n_old`` on): the block's rows' k best among them, theirs among the
    block's rows, and the distances computed (each pair in both orientations, as the
    search from scratch computes it, so the two agree to the last bit)."""
    rows_b = start + np.arange(xb.shape[0], dtype=np.int64)
    rows_new = n_old + np.arange(new.shape[0], dtype=np.int64)
    return (_pair_candidates(xb, new, rows_b, n_old, k),
            _pair_candidates(new, xb, rows_new, start, k), 2 * xb.shape[0] * new.shape[0])


def extend_graph(graph: KNNGraph, X: Any, *, client: Any = None,
                 progress: bool = False) -> KNNGraph:
    """The exact K-NN graph of the rows of X from ``graph``, the exact graph of its first
    ``graph.n`` rows (a store view before an append: appends only add rows at the end).

    Only products with the appended rows are computed: their lists among all rows, and
    the old rows' candidates among them, merged into the old lists (an old row's list
    changes only where an appended row comes before its K-th neighbour); the old x old
    distances are never computed again. Distances are those of the search from scratch
    (the same two rows, the same expansion) and lists are ordered by (distance, index),
    so the result equals :func:`knn_graph`'s exact graph of all rows, ties included.
    One pass: the appended rows are read to the driver (they are few), then each old row
    block meets them where it is.

    Parameters
    ----------
    graph : KNNGraph
        Exact (NN-descent lists are searched again instead: their candidates depend on
        all rows).
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray (N >= graph.n rows)
    client, progress
        As in :func:`knn_graph`.

    Returns
    -------
    KNNGraph
        ``n_distances`` = m (2 n + m) for m appended rows to n, against N^2 from scratch.
    """
    n_old, n, k = graph.n, int(X.shape[0]), graph.k
    if not graph.exact:
        raise ValueError("an approximate (NN-descent) graph cannot be extended: search again")
    if n_old > n:
        raise ValueError(f"the graph covers {n_old} rows but X has only {n}")
    if n_old == n:
        return replace(graph, from_cache=False, n_passes=0, n_distances=0)
    if is_dask(X):
        new = _sorted_csr(compute_one(X[n_old:], client=client, progress=progress,
                                      desc="reading the appended rows"))
        blocks, starts = row_block_list(X[:n_old])
        shared = delayed(new, pure=True)  # one copy in the graph, not one per task
        tasks = [delayed(_grow_block, pure=True)(blocks[b], shared, int(starts[b]), n_old, k)
                 for b in range(len(blocks)) if starts[b + 1] > starts[b]]
        parts = compute_one(delayed(list)(tasks), client=client, progress=progress,
                            desc="K-NN graph extension")
    else:
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        new = _sorted_csr(X[n_old:])
        parts = [_grow_block(X[:n_old], new, 0, n_old, k)]
    own = _pair_candidates(new, new, n_old + np.arange(n - n_old, dtype=np.int64), n_old, k)
    d_old, i_old = _merge((graph.sq_distances, graph.indices),
                          (np.vstack([p[0][0] for p in parts]),
                           np.vstack([p[0][1] for p in parts])))
    d_new, i_new = _merge(own, *[p[1] for p in parts])
    m = n - n_old
    return KNNGraph(indices=np.vstack([i_old, i_new]), sq_distances=np.vstack([d_old, d_new]),
                    sq_norms=np.concatenate([graph.sq_norms, _norms(new)]),
                    n_distances=sum(p[2] for p in parts) + m * m)


def resolve_method(method: str, n: int) -> bool:
    """Whether ``method`` searches exactly for n documents (``"auto"``: n <= EXACT_LIMIT)."""
    if method not in KNN_METHODS:
        raise ValueError(f"knn_search={method!r} is not one of {KNN_METHODS}")
    return method == "exact" or (method == "auto" and n <= EXACT_LIMIT)


def require_nndescent() -> Any:
    """pynndescent's NNDescent, or MissingExtraError naming the extra to install."""
    try:
        from pynndescent import NNDescent
    except ImportError:
        raise MissingExtraError("the approximate K-NN search needs pynndescent: pip install "
                                "'dmlfe[ann]' (or use knn_search='exact')") from None
    return NNDescent


def approximate_neighbours(X: Any, k: int, *, random_state: int = 0, client: Any = None
                           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NN-descent K-NN (module docstring): (squared distances, indices, ||x_i||^2), each
    list re-scored exactly and ordered by (distance, index); X gathered on the driver."""
    NNDescent = require_nndescent()
    n = int(X.shape[0])
    Xm = gather_rows(X, np.arange(n), client=client)
    # K + 1: the search returns the document itself among its neighbours. No random-
    # projection-tree start: on sparse rows with ~2^20 columns its splits leave leaves of
    # thousands of documents and a leaf-update buffer quadratic in the leaf size
    # (gigabytes, then an allocation failure, at a few thousand), so the descent starts at random
    index = NNDescent(Xm, metric="euclidean", n_neighbors=min(k + 1, n),
                      random_state=random_state, n_jobs=1, low_memory=True, compressed=True,
                      tree_init=False)
    found = np.asarray(index.neighbor_graph[0], dtype=np.int64)
    del index
    if (found < 0).any():
        raise RuntimeError(f"NN-descent found fewer than K + 1 = {k + 1} neighbours for some "
                           "documents; use knn_search='exact'")
    own = found == np.arange(n)[:, None]
    # drop the document itself, or the last neighbour where it was not found
    drop = np.where(own.any(axis=1), own.argmax(axis=1), found.shape[1] - 1)
    keep = np.ones_like(found, dtype=bool)
    keep[np.arange(n), drop] = False
    idx = found[keep].reshape(n, -1)[:, :k]
    sq = row_sq_norms(Xm)
    dots = np.column_stack([np.asarray(Xm.multiply(Xm[idx[:, j]]).sum(axis=1)).ravel()
                            for j in range(idx.shape[1])])
    d2 = sq_distances(dots, sq, sq[idx])
    order = _row_order(d2, idx)
    return (np.take_along_axis(d2, order, 1), np.take_along_axis(idx, order, 1), sq)


def _row_order(d2: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per row, the order by (distance, index)."""
    rows = np.repeat(np.arange(d2.shape[0]), d2.shape[1])
    o = np.lexsort((idx.ravel(), d2.ravel(), rows)).reshape(d2.shape)
    return o - (np.arange(d2.shape[0]) * d2.shape[1])[:, None]


def knn_recall(graph: KNNGraph, X: Any, sample: int = RECALL_SAMPLE, *, random_state: int = 0,
               client: Any = None, progress: bool = False) -> float:
    """Recall@K of ``graph`` against the exact search, on ``sample`` seeded documents.

    For each sampled document, the share of its K listed neighbours that are within its
    exact K-th nearest distance (ties at that distance count as found, so a graph that
    picks another of several equidistant documents is not penalised); averaged.
    The exact lists come from :func:`exact_neighbours` on the sample's rows only.
    """
    n, k = graph.n, graph.k
    rng = np.random.default_rng(random_state)
    rows = np.sort(rng.choice(n, size=min(int(sample), n), replace=False))
    d_exact, _, _ = exact_neighbours(X, k, rows, client=client, progress=progress)
    kth = d_exact[:, -1:]
    found = graph.sq_distances[rows] <= kth + 1e-9 * np.maximum(kth, 1e-300)
    found &= graph.indices[rows] >= 0
    return float(found.mean())


def knn_graph(X: Any, n_neighbors: int, *, client: Any = None, progress: bool = False,
              method: str = "auto", random_state: int = 0,
              recall_sample: int = RECALL_SAMPLE) -> KNNGraph:
    """K-NN graph of the rows of X (dask row blocks, sparse or dense in memory).

    ``method``: ``"exact"`` (blockwise on the cluster), ``"approximate"`` (NN-descent on
    the driver, needs ``dmlfe[ann]``; its recall measured on ``recall_sample``
    documents) or ``"auto"`` (exact up to :data:`EXACT_LIMIT` documents). See the
    module docstring.

    Raises
    ------
    InputError
        When K >= n (every document needs K other documents).
    MissingExtraError
        Approximate search without pynndescent installed (an ImportError).
    """
    n = int(X.shape[0])
    k = _check_k(n, n_neighbors)
    if resolve_method(method, n):
        d, i, sq = exact_neighbours(X, k, client=client, progress=progress)
        return KNNGraph(indices=i, sq_distances=d, sq_norms=sq, n_distances=n * n)
    d, i, sq = approximate_neighbours(X, k, random_state=random_state, client=client)
    g = KNNGraph(indices=i, sq_distances=d, sq_norms=sq, exact=False)
    m = min(int(recall_sample), n)
    recall = knn_recall(g, X, m, random_state=random_state, client=client, progress=progress)
    return replace(g, recall=recall, recall_sample=m, n_passes=3)


# --------------------------------------------------------------------------- cache
def graph_dir_for(store_path: str | os.PathLike[str]) -> Path:
    """Graph cache folder of a store: ``<store>.graph`` next to it."""
    p = Path(store_path).resolve()
    return p.with_name(p.name + ".graph")


def _load_graph(directory: Path, params: dict[str, Any]) -> KNNGraph | None:
    """The graph saved under ``params`` in ``directory``; None when absent or damaged."""
    key = stats_key(params)
    npz, rec = directory / f"{key}.npz", directory / f"{key}.json"
    if not (npz.exists() and rec.exists()):
        return None
    try:
        meta = json.loads(rec.read_text(encoding="utf-8"))
        with open(npz, "rb") as f, np.load(f, allow_pickle=False) as z:
            arrays = {name: np.array(z[name]) for name in z.files}
        if meta.get("sha256") == arrays_digest(arrays) and \
                meta.get("params") == json.loads(json.dumps(params, default=str)):
            return KNNGraph(arrays["indices"], arrays["sq_distances"], arrays["sq_norms"],
                            from_cache=True, exact=bool(params["exact"]),
                            recall=meta.get("recall"),
                            recall_sample=int(meta.get("recall_sample", 0)), n_passes=0,
                            n_distances=0 if params["exact"] else None)
    except (OSError, ValueError, KeyError):  # damaged entry: search again
        pass
    return None


def _extended_graph(store: Any, params: dict[str, Any], directory: Path, client: Any,
                    progress: bool) -> KNNGraph | None:
    """The graph of an earlier version of ``store`` (before an append), extended by the
    rows appended since (:func:`extend_graph`); None when no earlier version's is saved,
    when it is approximate (NN-descent is run again on all rows: the log says so), or
    when it does not cover the view's rows before the append (a RuntimeWarning)."""
    earlier = earlier_version(store, params, lambda p: _load_graph(directory, p),
                              "the K-NN graph", covers=lambda g: g.n)
    if earlier is None:
        return None
    entry, old, tail = earlier
    if not old.exact:
        log.info("the approximate K-NN graph of %s is searched again from all rows after an "
                 "append: NN-descent lists are not extended (knn_search='exact' extends an "
                 "exact graph by the appended rows only)", store.path)
        return None
    log.info("K-NN graph of %s: %d saved rows (as of row %d) extended by %d", store.path,
             old.n, int(entry["rows"][1]), tail.n_docs)
    return extend_graph(old, store.X, client=client, progress=progress)


def load_or_compute_graph(store: Any, n_neighbors: int, *, client: Any = None,
                          progress: bool = False, cache: bool = True, method: str = "auto",
                          random_state: int = 0) -> KNNGraph:
    """The K-NN graph of a store (view): from ``<store>.graph/`` or searched and saved.

    The key is the view's content fingerprint (unchanged by appends that add none of
    its documents), its selection (split, rows), K and whether the
    search is exact (``method`` resolved for this n; an approximate one also by its
    seed); the record (``<key>.json``) names the parameters, the sha256 of the arrays
    and, for an approximate graph, its measured recall. An entry that does not match
    them is searched again and replaced. After an append, the exact graph saved for an
    earlier version of the store (the newest one saved, found as the statistics cache
    finds its entries: :func:`dmlfe.stats.cache.earlier_version`) is extended by the
    appended rows (:func:`extend_graph`); an approximate one is searched again.
    """
    exact = resolve_method(method, int(store.X.shape[0]))
    params = {"graph_format": GRAPH_FORMAT, "data": store.content_fingerprint,
              "selection": store.selection or {}, "n_neighbors": int(n_neighbors),
              "metric": "sqeuclidean", "exact": exact}
    if not exact:
        params["search"] = {"library": "pynndescent", "random_state": int(random_state)}
    directory = graph_dir_for(store.path)
    key = stats_key(params)
    npz, rec = directory / f"{key}.npz", directory / f"{key}.json"
    if cache:
        found = _load_graph(directory, params)
        if found is not None:
            return found
    g = _extended_graph(store, params, directory, client, progress) if cache else None
    if g is None:
        g = knn_graph(store.X, n_neighbors, client=client, progress=progress,
                      method="exact" if exact else "approximate", random_state=random_state)
    if cache:
        directory.mkdir(parents=True, exist_ok=True)
        arrays = {"indices": g.indices, "sq_distances": g.sq_distances, "sq_norms": g.sq_norms}
        meta = {"params": json.loads(json.dumps(params, default=str)),
                "sha256": arrays_digest(arrays),
                "n": g.n, "n_neighbors": g.k, "recall": g.recall,
                "recall_sample": g.recall_sample, "dmlfe_version": __version__}
        rec.unlink(missing_ok=True)
        write_atomically(npz, lambda f: np.savez(f, **arrays))
        write_atomically(rec, lambda f: f.write(json.dumps(meta, indent=2).encode("utf-8")))
    return g
