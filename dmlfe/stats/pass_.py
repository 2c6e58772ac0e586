"""One distributed pass over (X, Y) computing the raw sufficient statistics.

Each row block of X (a scipy.sparse CSR matrix, or a dense ndarray) and the
matching rows of Y yield a small partial result (n, column sums, X^T Y, Y^T Y
and, on request, X^T X); partials are summed by a tree of ``split_every``-wide
combine tasks on the workers, so only the final sums reach the driver and the
whole pass is exactly one dask compute.

``X.T @ X`` on a dask array of sparse chunks is deliberately avoided: dask
would concatenate every block into a single task. The per-block products here
stay sparse while they are sparse enough and are only densified (float64) when
a dense accumulator is smaller.

In-memory inputs (scipy.sparse matrices, numpy arrays) are reduced on the
driver in row slices, without dask.

Only the statistics live here (:func:`compute_stats`, the per-block partials,
:func:`sum_partials`, :func:`dense_xtx_error`); the input handling (aligning X
and Y, row blocks, ``block_fn`` widths) and the pass machinery come from
:mod:`dmlfe.compute`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import (
    BlockFn,
    align_rows,
    block_width,
    compute_one,
    is_dask,
    to_float_block,
    tree_reduce,
)
from dmlfe.stats import sufficient
from dmlfe.stats.outer import dense_crossprod, dense_crossprod_with, weighted_crossprod
from dmlfe.stats.sufficient import SufficientStats, add_into

#: Rows per slice when an in-memory X is reduced on the driver.
IN_MEMORY_ROWS = 65_536
#: ... and fewer when ``block_fn`` makes dense rows: a slice's output stays about this
#: size (relation features at p = 20,000 would be 10 GB per 65,536 rows).
IN_MEMORY_BLOCK_BYTES = 2**27

#: A sparse partial is densified once its CSR storage (~12 bytes per stored
#: value) would exceed this fraction of the dense float64 array.
_DENSIFY_FRACTION = 0.5

_PART_KEYS = ("sum_x", "sumsq_x", "sum_y", "xty", "yty", "xtx", "xtwx")

LabelFn = Callable[[np.ndarray], np.ndarray]


class SparseLabelFn(Protocol):
    """A label map of CSR label blocks (a sparse label side): ``sparse_block`` returns
    the mapped CSR block, whose sums the statistics hold, and the row weights w of the
    weighted scatter X^T diag(w) X; ``describe()`` names it."""

    def sparse_block(self, y: sp.csr_matrix) -> tuple[sp.csr_matrix, np.ndarray]: ...

    def describe(self) -> dict: ...


# --------------------------------------------------------------------------- #
# Dense-size guard
# --------------------------------------------------------------------------- #
def dense_xtx_error(n_features: int, max_dense_features: int) -> ValueError:
    """The error raised when X^T X would be too large to hold densely."""
    nbytes = n_features * n_features * 8
    return ValueError(
        f"X^T X for D = {n_features:,} features needs a dense D x D float64 matrix of "
        f"{nbytes / 2**30:.2f} GiB (D*D*8 = {nbytes:,} bytes) on the driver and on the "
        "workers, above the limit "
        f"max_dense_features = {max_dense_features:,}. Raise max_dense_features if that much "
        "memory is available, or use a method/route that does not need X^T X (the matrix-free "
        "solver dmlfe.solvers.matrix_free for PCA/MVMD, the thin SVD route for MDDMp with a "
        "linear label kernel)"
    )


# --------------------------------------------------------------------------- #
# Per-block partials and their combination (run on the workers)
# --------------------------------------------------------------------------- #
def _maybe_dense(m: Any) -> Any:
    """Densify a sparse partial once a dense float64 array is the smaller form."""
    if sp.issparse(m):
        rows, cols = m.shape
        if m.nnz * 12 > _DENSIFY_FRACTION * rows * cols * 8:
            return m.toarray()
        return m
    return np.asarray(m)


def _column_sumsq(xb: Any) -> np.ndarray:
    """Column sums of squares of one float64 block.

    A dense block (relation features) is reduced without an n_b x D temporary: the
    squares of the whole block would raise the pass's peak memory by the block's size,
    and fresh pages are slow the first time in a process.
    """
    if sp.issparse(xb):
        return np.asarray(xb.multiply(xb).sum(axis=0), dtype=np.float64).ravel()
    return np.einsum("ij,ij->j", xb, xb)


def _block_xty(xb: Any, y: np.ndarray) -> Any:
    """X_b^T Y of one block: sparse while that is smaller, for a sparse block of huge D."""
    if not sp.issparse(xb):
        return dense_crossprod_with(xb, y)
    # A sparse Y keeps X^T Y sparse for huge D (the product of one block is usually far
    # from dense); small D gets the dense product directly.
    if xb.shape[1] * y.shape[1] > 2**20:
        return _maybe_dense(sp.csr_matrix(xb.T @ sp.csr_matrix(y)))
    return np.asarray(xb.T @ y)


def _block_partial(
    xb: Any,
    yb: Any,
    mask: Any,
    need_xtx: bool,
    block_fn: BlockFn | None,
    max_dense_features: int,
    label_fn: LabelFn | None = None,
    need_xtwx: bool = False,
    need_xty: bool = True,
    sparse_labels: bool = False,
) -> dict[str, Any]:
    """Raw sums of one row block; sparse products stay sparse while that is smaller.

    ``sparse_labels``: the label block is used as CSR and Y^T Y (and X^T Y, for a sparse
    X block) stay CSR (:data:`dmlfe.stats.sufficient.MAX_DENSE_LABELS`)."""
    if mask is not None:
        keep = np.asarray(mask, dtype=bool).ravel()
        xb = xb[keep]
        yb = yb[keep]
    if block_fn is not None:
        xb = block_fn(xb)
    xb = to_float_block(xb)
    if sparse_labels:
        return _sparse_label_partial(xb, yb, need_xtx, max_dense_features, label_fn,
                                     need_xtwx, need_xty)
    y = yb.toarray() if sp.issparse(yb) else np.asarray(yb)
    if y.ndim == 1:
        y = y.reshape(-1, 1)
    if label_fn is not None:
        y = np.asarray(label_fn(y))
    y = y.astype(np.float64, copy=False)
    n_b, d = xb.shape
    part: dict[str, Any] = {
        "n": int(n_b),
        "sum_x": np.asarray(xb.sum(axis=0), dtype=np.float64).ravel(),
        "sumsq_x": _column_sumsq(xb),
        "sum_y": y.sum(axis=0),
        "yty": dense_crossprod(y),
    }
    if need_xty:
        part["xty"] = _block_xty(xb, y)
    if (need_xtx or need_xtwx) and d > max_dense_features:
        raise dense_xtx_error(d, max_dense_features)
    if need_xtx:
        if sp.issparse(xb):
            # CSR times CSR gives the CSR product itself; xb.T (CSC) times xb gave a CSC
            # product, converted again at the size of X^T X's non-zeros
            part["xtx"] = _maybe_dense(xb.T.tocsr() @ xb)
        else:
            part["xtx"] = dense_crossprod(xb)
    if need_xtwx:
        # row weights w = Y 1 of the (mapped) labels
        part["xtwx"] = _maybe_dense(weighted_crossprod(xb, y.sum(axis=1)))
    return part


def _sparse_label_partial(xb: Any, yb: Any, need_xtx: bool, max_dense_features: int,
                          label_fn: LabelFn | None, need_xtwx: bool, need_xty: bool
                          ) -> dict[str, Any]:
    """:func:`_block_partial` with a CSR label block: no n_b x q, D x q or q x q dense
    array (a dense X block -- relation features, D = p -- gives a dense p x q X^T Y).

    ``label_fn`` must then map CSR blocks: its ``sparse_block(y)`` gives the mapped CSR
    block and the row weights of X^T diag(w) X (:class:`SparseLabelFn`); without one the
    weights are the label counts, Y 1."""
    y = sp.csr_matrix(yb, dtype=np.float64)
    if y.ndim == 1 or y.shape[0] != xb.shape[0]:  # pragma: no cover - align_rows checks
        raise ValueError(f"a label block of shape {y.shape} for {xb.shape[0]} rows")
    if label_fn is not None:
        if not hasattr(label_fn, "sparse_block"):
            raise ValueError(f"the label map {type(label_fn).__name__} maps dense label "
                             "blocks only; a sparse label side needs one with sparse_block")
        y, weights = label_fn.sparse_block(y)
    else:
        weights = np.asarray(y.sum(axis=1), dtype=np.float64).ravel()
    n_b, d = xb.shape
    part: dict[str, Any] = {
        "n": int(n_b),
        "sum_x": np.asarray(xb.sum(axis=0), dtype=np.float64).ravel(),
        "sumsq_x": _column_sumsq(xb),
        "sum_y": np.asarray(y.sum(axis=0), dtype=np.float64).ravel(),
        "yty": sp.csr_matrix(y.T @ y),
    }
    if need_xty:
        # CSR x CSR: the product of the block's (feature, label) pairs only
        part["xty"] = sp.csr_matrix(xb.T.tocsr() @ y) if sp.issparse(xb) else \
            np.asarray((y.T @ xb).T)
    if (need_xtx or need_xtwx) and d > max_dense_features:
        raise dense_xtx_error(d, max_dense_features)
    if need_xtx:
        part["xtx"] = _maybe_dense(xb.T.tocsr() @ xb) if sp.issparse(xb) else \
            dense_crossprod(xb)
    if need_xtwx:
        part["xtwx"] = _maybe_dense(weighted_crossprod(xb, weights))
    return part


def sum_partials(items: list[Any]) -> Any:
    """items[0] + items[1] + ... in that order (each entry's sum is the pairwise one,
    bit for bit), sparse while the sum can stay sparse, else into ONE dense accumulator
    (a combine task of 8 sparse partials of D x q added them pairwise, densified the
    sum and copied it for every later item). The items are untouched; a single item is
    returned as it is."""
    if len(items) == 1:
        return items[0]
    shape = items[0].shape
    nnz = sum(m.nnz if sp.issparse(m) else int(np.prod(shape)) for m in items)
    if nnz * 12 <= _DENSIFY_FRACTION * int(np.prod(shape)) * 8:
        acc = items[0]
        for m in items[1:]:
            acc = _maybe_dense(sp.csr_matrix(acc + m))
        return acc
    # 0 + a == a exactly: starting from zeros keeps every entry's order of additions
    acc = np.zeros(shape, dtype=np.float64)
    for m in items:
        add_into(acc, m)
    return acc


def _combine(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"n": sum(p["n"] for p in parts)}
    for key in _PART_KEYS:
        if key not in parts[0]:
            continue
        out[key] = sum_partials([p[key] for p in parts])
    return out


def _finalise(part: dict[str, Any], dense_xty: bool = True,
              sparse_labels: bool = False) -> SufficientStats:
    def dense(m: Any) -> np.ndarray:
        m = m.toarray() if sp.issparse(m) else m
        return np.ascontiguousarray(m, dtype=np.float64)

    def xty(m: Any) -> Any:
        keep = sp.issparse(m) and (sparse_labels or not dense_xty)
        return sp.csr_matrix(m, dtype=np.float64) if keep else dense(m)

    def yty(m: Any) -> Any:
        return sp.csr_matrix(m, dtype=np.float64) if sparse_labels else dense(m)

    def matrix(m: Any) -> Any:  # X^T X, X^T W X: a few appended documents leave them sparse
        return sp.csr_matrix(m, dtype=np.float64) if sp.issparse(m) and not dense_xty \
            else dense(m)

    stats = SufficientStats(
        n=int(part["n"]),
        sum_x=dense(part["sum_x"]).ravel(),
        sum_y=dense(part["sum_y"]).ravel(),
        # not computed: zero rows (SufficientStats.centred_xty refuses them)
        xty=xty(part["xty"]) if "xty" in part else np.zeros((0, len(part["sum_y"]))),
        yty=yty(part["yty"]),
        xtx=matrix(part["xtx"]) if "xtx" in part else None,
        xtwx=matrix(part["xtwx"]) if "xtwx" in part else None,
        sumsq_x=dense(part["sumsq_x"]).ravel(),
    )
    return stats


def _default_split_every(n_features: int, need_dense: bool) -> int:
    # Dense D x D partials are large: a narrower tree keeps fewer of them in a
    # combine task's memory at once.
    if need_dense and n_features * n_features * 8 > 2**28:
        return 2
    return 8


# --------------------------------------------------------------------------- #
# Public entry point
# --------------------------------------------------------------------------- #
def compute_stats(
    X: Any,
    Y: Any,
    *,
    need_xtx: bool = False,
    max_dense_features: int = 20_000,
    client: Any = None,
    block_fn: BlockFn | None = None,
    label_fn: LabelFn | None = None,
    need_xtwx: bool = False,
    row_mask: Any = None,
    split_every: int | None = None,
    progress: bool = False,
    need_xty: bool = True,
    dense_xty: bool = True,
    sparse_labels: bool | None = None,
) -> SufficientStats:
    """Raw sufficient statistics of (X, Y) in one pass.

    Parameters
    ----------
    X : dask array of scipy.sparse CSR row blocks, scipy.sparse matrix or ndarray
        Documents x features. A dask array is reduced on the cluster (exactly one
        compute); in-memory inputs are reduced on the driver in row slices.
    Y : dask array or array-like, shape (n, q)
        0/1 label indicator matrix, same rows as X (rechunked to X's row chunks).
    need_xtx : bool
        Also compute X^T X (dense D x D float64).
    max_dense_features : int
        Largest D for which X^T X may be formed; above it a ValueError gives the
        memory figure.
    client : distributed.Client, optional
        Compute on this client; otherwise dask's current scheduler (a default
        distributed client when one exists).
    block_fn : callable, optional
        Applied to each X row block before the reduction (e.g. a feature map);
        may return a sparse or dense block of any width. D then means its width.
    label_fn : callable, optional
        Applied to each Y row block (dense, as stored) before the reduction, e.g.
        MLDA's label-correlation weighting (mvmd eq. 44); its float64 output
        takes the place of Y in every statistic.
    need_xtwx : bool
        Also compute X^T diag(w) X with w = Y 1, the row sums of the (mapped)
        labels (MLDA/DMLDA's weighted scatter), under the same D limit as X^T X;
        it is returned as the attribute ``stats.xtwx`` (None otherwise).
    row_mask : bool array-like or dask array, shape (n,), optional
        Keep only the rows where it is True (e.g. a split), applied per block.
    split_every : int, optional
        Width of the combine tree (default 8; 2 when dense X^T X partials are big).
    progress : bool
        Show a progress bar (``distributed.progress`` with a client).
    need_xty : bool
        Compute X^T Y. False leaves ``stats.xty`` with zero rows: the dual route
        reaches the labels through the n x n Gram, and a dense D x q X^T Y is D x q x 8
        bytes of fresh memory, a visible part of a dual fit at D = 2^20 in a fresh
        process.
    dense_xty : bool
        False leaves ``stats.xty`` -- and ``stats.xtx``, ``stats.xtwx`` -- a scipy CSR
        matrix when the pass left it sparse (a few appended documents at huge D; their
        X^T X at any D), to be added into dense statistics in place (``stats += part``)
        without a D x q (D x D) array of its own.
    sparse_labels : bool, optional
        Keep the label side sparse: Y^T Y a CSR q x q matrix and, for sparse X, X^T Y a
        CSR D x q one, both O(their non-zeros); the label blocks are read as CSR
        (never a dense n_b x q block). Default: when q exceeds
        :data:`dmlfe.stats.sufficient.MAX_DENSE_LABELS`. ``label_fn`` must then
        be a :class:`SparseLabelFn`; ``need_xtwx`` weighs the rows by its weights (by
        the label counts Y 1 without one).

    Returns
    -------
    SufficientStats
        Raw (uncentred) float64 sums; centred forms are derived from them.
    """
    X, Y = align_rows(X, Y)
    if sparse_labels is None:
        sparse_labels = label_count(Y) > sufficient.MAX_DENSE_LABELS
    n_in_features = int(X.shape[1])
    n_out = block_width(block_fn, n_in_features, getattr(X, "dtype", np.float64))
    need_dense = need_xtx or need_xtwx
    if need_dense and n_out is not None and n_out > max_dense_features:
        raise dense_xtx_error(n_out, max_dense_features)

    if row_mask is not None:
        if row_mask.shape[0] != X.shape[0]:
            raise ValueError(
                f"row_mask has {row_mask.shape[0]} entries but X has {X.shape[0]} rows"
            )

    if not is_dask(X):
        rows = IN_MEMORY_ROWS
        if block_fn is not None:
            rows = slice_rows(n_out, IN_MEMORY_BLOCK_BYTES)
        return _compute_in_memory(
            X, Y, row_mask, rows, need_xtx, block_fn, max_dense_features, label_fn,
            need_xtwx, need_xty, sparse_labels, dense_xty=dense_xty
        )

    x_blocks = X.to_delayed().ravel()
    y_blocks = Y.to_delayed().ravel()
    if row_mask is None:
        m_blocks: list[Any] = [None] * len(x_blocks)
    else:
        if is_dask(row_mask):
            mask = row_mask.rechunk((X.chunks[0],))
        else:
            mask = da.from_array(np.asarray(row_mask, dtype=bool), chunks=(X.chunks[0],))
        m_blocks = list(mask.to_delayed().ravel())
    parts = [
        delayed(_block_partial)(
            xb, yb, mb, need_xtx, block_fn, max_dense_features, label_fn, need_xtwx, need_xty,
            sparse_labels
        )
        for xb, yb, mb in zip(x_blocks, y_blocks, m_blocks, strict=True)
    ]
    if split_every is None:
        split_every = _default_split_every(n_out or n_in_features, need_dense)
    total = tree_reduce(parts, _combine, split_every)
    # the sums travel as the tree left them (X^T Y sparse while it is sparse) and are
    # made dense on the driver: a dense D x q X^T Y is D x q x 8 bytes, and sending it
    # was a large part of a hashed-text statistics pass (benchmarks/scale.py)
    return _finalise(compute_one(total, client=client, progress=progress,
                                 desc="statistics pass"), dense_xty, sparse_labels)


def label_count(Y: Any) -> int:
    """q of a label matrix (1 for a 1-D one)."""
    return int(Y.shape[1]) if len(Y.shape) == 2 else 1


def slice_rows(width: int | None, max_bytes: int) -> int:
    """Rows of an in-memory slice whose dense float64 output of ``width`` columns stays
    within ``max_bytes`` (at least 64, at most :data:`IN_MEMORY_ROWS`; 4,096 when the
    width is unknown, a map that could not be probed on an empty block)."""
    if width is None:
        return 4096
    return max(64, min(IN_MEMORY_ROWS, max_bytes // (8 * max(int(width), 1))))


def _compute_in_memory(
    X: Any,
    Y: Any,
    row_mask: Any,
    slice_size: int,
    *block_args: Any,
    dense_xty: bool = True,
) -> SufficientStats:
    sparse_labels = bool(block_args[-1])
    if sp.issparse(X):
        X = sp.csr_matrix(X)
    else:
        X = np.asarray(X)
    Y = Y.tocsr() if sp.issparse(Y) else np.asarray(Y)
    mask = None if row_mask is None else np.asarray(row_mask, dtype=bool).ravel()
    acc: dict[str, Any] | None = None
    n = X.shape[0]
    # Row slices bound the memory of block_fn's output and of dense Y blocks.
    for start in range(0, max(n, 1), slice_size):
        stop = min(start + slice_size, n)
        mb = None if mask is None else mask[start:stop]
        part = _block_partial(X[start:stop], Y[start:stop], mb, *block_args)
        acc = part if acc is None else _combine(acc, part)
    assert acc is not None
    return _finalise(acc, dense_xty, sparse_labels)
