"""Projection Z = (X - mean) P, chunk-wise and in parallel.

The centring is folded into a constant row: (X - 1 mean) P = X P - 1 (mean P),
so every row block is multiplied as it is (sparse stays sparse) and never
densified. The same :func:`project` serves the training documents and new ones
(a fitted model's ``components_`` and ``mean_``).

The embeddings files (zarr AnnData or parquet) are :mod:`dmlfe.io.embeddings`;
:func:`write_embeddings`, :func:`read_embeddings` and their helpers are still read from
here (their old path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import (
    BlockFn,
    check_row_blocks,
    graph_operand,
    is_dask,
    kept_float_dtype,
    to_float_block,
)

# the embeddings files' names, read from here before they had a module of their own
from dmlfe.io.embeddings import (  # noqa: F401
    LABEL_PREFIX,
    embedding_key,
    embedding_obs,
    embedding_uns,
    read_embeddings,
    write_embeddings,
)

#: Rows of float32 components cast to float64 at a time for the mean offset.
_OFFSET_ROWS = 1 << 13
#: Rows of a block of another dtype than the components cast to theirs at a time.
_CAST_ROWS = 1 << 14
#: Columns of P that one sparse product takes (:class:`ColumnBlocks`).
PRODUCT_COLUMNS = 32


@dataclass(frozen=True)
class ColumnBlocks:
    """P (D x d) as C-ordered blocks of :data:`PRODUCT_COLUMNS` columns, made once.

    A sparse row block times P is then taken block by block through the row block's
    CSC form: each used row of a block of P is read once, in order, and the output's
    columns of that block stay in the CPU's cache, where the CSR product reads a row of
    all d columns of P for every stored value, from anywhere in P
    (``benchmarks/scale.py --parts synthetic`` times the embeddings). The entries are
    the same bit for bit (each output entry adds its row's products in the same column
    order).
    """

    blocks: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, P: np.ndarray) -> ColumnBlocks:
        return cls(tuple(np.ascontiguousarray(P[:, c:c + PRODUCT_COLUMNS])
                         for c in range(0, P.shape[1], PRODUCT_COLUMNS)))

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.blocks[0].shape[0]), int(sum(b.shape[1] for b in self.blocks)))

    @property
    def dtype(self) -> np.dtype:
        return self.blocks[0].dtype


def _times(xb: Any, P: np.ndarray | ColumnBlocks) -> np.ndarray:
    """xb P for a block already in P's dtype (sparse CSR or dense)."""
    if not isinstance(P, ColumnBlocks):
        return np.asarray(xb @ P, dtype=P.dtype)
    xt = xb.tocsc() if sp.issparse(xb) else xb
    z = np.empty((xb.shape[0], P.shape[1]), dtype=P.dtype)
    at = 0
    for blk in P.blocks:
        z[:, at:at + blk.shape[1]] = xt @ blk
        at += blk.shape[1]
    return z


def mean_offset(mean: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``mean @ P`` (the centring's constant row), accumulated in float64, in P's dtype.

    For float32 P the product is taken a slab of rows at a time: ``mean @ P`` as one
    expression would cast the whole of P to a D x d float64 temporary (0.8 GB per 100
    components at D = 2^20), the memory float32 components are there to save.
    """
    if P.dtype == np.float64:
        return mean @ P
    out = np.zeros(P.shape[1], dtype=np.float64)
    for s in range(0, P.shape[0], _OFFSET_ROWS):
        out += mean[s : s + _OFFSET_ROWS] @ P[s : s + _OFFSET_ROWS].astype(np.float64)
    return out.astype(P.dtype)


def project_block(
    xb: Any, P: np.ndarray | ColumnBlocks, offset: np.ndarray | None = None,
    block_fn: BlockFn | None = None
) -> np.ndarray:
    """One row block's embeddings ``xb P - offset``, in P's dtype (see :func:`project`).

    ``offset`` is :func:`mean_offset` of the training mean (None: uncentred); the
    estimators' in-memory ``transform`` and every task of :func:`project` call this.
    P may come in :class:`ColumnBlocks` (as :func:`project` sends a wide P); a wide P
    times a sparse block is taken in them.
    """
    if block_fn is not None:
        xb = block_fn(xb)
    if isinstance(P, np.ndarray) and sp.issparse(xb) and P.shape[1] > PRODUCT_COLUMNS:
        P = ColumnBlocks.of(P)
    # the block takes P's dtype: a float64 block times float32 P would upcast P (a
    # D x d float64 copy in scipy's and numpy's products), not the block -- a slab of
    # rows at a time, so that a large in-memory X is not copied whole into float32
    xb = sp.csr_matrix(xb) if sp.issparse(xb) else np.asarray(xb)  # rows can be sliced
    n = int(xb.shape[0])
    if n <= _CAST_ROWS or xb.dtype == P.dtype:
        z = _times(to_float_block(xb, P.dtype), P)
    else:
        z = np.empty((n, P.shape[1]), dtype=P.dtype)
        for r in range(0, n, _CAST_ROWS):
            z[r:r + _CAST_ROWS] = _times(to_float_block(xb[r:r + _CAST_ROWS], P.dtype), P)
    if offset is not None:
        z = z - offset
    return np.ascontiguousarray(z)


def projection_operands(components: Any, mean: Any = None
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """(P, offset) for :func:`project_block`: P = ``components`` (D x d) C-ordered in
    its kept dtype (float32 stays, anything else float64), offset = :func:`mean_offset`
    of ``mean`` (None when ``mean`` is None).

    One layout for the product whatever the model's: the same embedding, bit for bit,
    from a fitted model (``components_`` is a transposed view) and a loaded one.
    """
    components = np.asarray(components)
    P = np.ascontiguousarray(components, dtype=kept_float_dtype(components))
    if P.ndim != 2:
        raise ValueError(f"components must be a 2-D (D, d) array; got shape {P.shape}")
    if mean is None:
        return P, None
    mean = np.asarray(mean, dtype=np.float64).ravel()
    if mean.shape[0] != P.shape[0]:
        raise ValueError(f"mean has {mean.shape[0]} entries but components have {P.shape[0]} "
                         "rows")
    return P, mean_offset(mean, P)


def project(
    X: Any,
    components: np.ndarray,
    mean: np.ndarray | None = None,
    *,
    block_fn: BlockFn | None = None,
    client: Any = None,
) -> da.Array:
    """Lazy embeddings Z = (X - mean) P, shape (n, d), chunked like X's rows.

    float64, or float32 when ``components`` is float32 (a model fitted with
    ``components_dtype="float32"``): the row blocks are then cast to float32 and
    multiplied in float32, so P is never copied to float64.

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        Documents x D features (training or new documents).
    components : ndarray, shape (D, d)
        Projection P (a fitted model's ``components_.T``); float32 is kept, any other
        dtype is taken as float64.
    mean : ndarray of shape (D,), optional
        Feature means for centred methods; None for uncentred ones (LSI, MLDA, ...).
    block_fn : callable, optional
        Applied to each row block first, as in ``compute_stats``.
    client : distributed.Client, optional
        The client the result will be computed on (default: the default client, when
        ``dask.compute`` would use it). Components over
        :data:`dmlfe.compute.SCATTER_BYTES` (8 MB; 0.8 GB at D = 2^20, d = 100) are
        scattered to its workers once, and the graph refers to them, instead of carrying
        them through the scheduler; that graph must then be computed on that client.

    Returns
    -------
    dask.array.Array
        In-memory X is projected at once (no graph overhead) and wrapped as a
        single-chunk dask array.
    """
    P, offset = projection_operands(components, mean)
    dtype = P.dtype
    n_cols = X.shape[1] if block_fn is None else None
    if n_cols is not None and n_cols != P.shape[0]:
        raise ValueError(
            f"X has {n_cols} features but components have {P.shape[0]} rows: project with the "
            "model fitted on the same feature space (same vocabulary / hashing parameters)"
        )
    d = P.shape[1]
    if not is_dask(X):
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        Z = project_block(X, P, offset, block_fn)
        return da.from_array(Z, chunks=(max(Z.shape[0], 1), d))
    X = check_row_blocks(X)
    # One graph key each for P and the offset, shared by every block task. A wide P goes
    # in column blocks, each cut, scattered and let go before the next (the driver holds
    # one block beside P, not a second P), and joined into ColumnBlocks by one task.
    if d > PRODUCT_COLUMNS:
        P_ref = delayed(ColumnBlocks)(tuple(
            graph_operand(np.ascontiguousarray(P[:, c:c + PRODUCT_COLUMNS]), client,
                          nbytes=P.nbytes)
            for c in range(0, d, PRODUCT_COLUMNS)))
    else:
        P_ref = graph_operand(P, client)
    off_ref = None if offset is None else delayed(offset)
    blocks = [
        da.from_delayed(
            delayed(project_block)(xb, P_ref, off_ref, block_fn),
            shape=(rows, d),
            dtype=dtype,
            meta=np.empty((0, 0), dtype=dtype),
        )
        for xb, rows in zip(X.to_delayed().ravel(), X.chunks[0], strict=True)
    ]
    return da.concatenate(blocks, axis=0)
