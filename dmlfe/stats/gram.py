"""The two passes of the dual route: the document Gram G = X X^T and the map back X^T alpha.

When n is moderate every method's problem lives in the n-dimensional row space of X
(:mod:`dmlfe.solvers.dual`): one pass builds the n x n Gram from pairs of row blocks
(sparse x sparse on the workers, one dense n_i x n_j tile per pair, never all of X in
one place), the driver solves an n x n (or q x q) problem for coefficients alpha, and one
pass maps them back to D-space components P = X^T alpha (D x d, C order: the layout in
which the sparse product writes it, and the one projecting with X P reads), adding one
row block at a time into P on the driver.

After an append, :func:`gram_extended` makes the Gram of all rows from the Gram of the
rows before it with the appended rows' products only; :func:`extend_gram_into` does it in
an array that already holds the old Gram (read there from the cache beside the store:
:func:`dmlfe.stats.cache.load_or_compute_gram`); :func:`gram_strip` computes only the rows
an append adds, and :class:`GramStrips` applies a Gram kept as such strips (or as X's
rows on the driver) without assembling it.

Memory: the driver holds G, n^2 x 8 bytes, and
the solver one or two matrices of the same size; the map back returns D x d x 8 bytes
(0.8 GB per 100 components at D = 2^20) and holds one row block of X besides.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import (
    SelectColumns,
    check_row_blocks,
    driver_threads,
    in_threads,
    is_dask,
    run,
    to_float_block,
    used_columns,
)
from dmlfe.stats.outer import dense_gram, dense_outer

try:  # scipy's CSR x dense kernel, which adds into its output (Y += A X)
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a scipy that moved it: the public product
    _csr_matvecs = None


def _tile(xi: Any, xj: Any) -> np.ndarray:
    """X_i X_j^T as a dense float64 tile; a diagonal one (``xj`` None) exactly symmetric.

    :func:`dmlfe.stats.outer.dense_gram` and :func:`dmlfe.stats.outer.dense_outer`.
    """
    xi = to_float_block(xi)
    return dense_gram(xi) if xj is None else dense_outer(xi, to_float_block(xj))


def _row_slices(X: Any, rows: int) -> list[Any]:
    n = int(X.shape[0])
    return [X[i:i + rows] for i in range(0, n, rows)]


def gram_matrix(X: Any, *, client: Any = None, progress: bool = False,
                block_rows: int | None = None) -> np.ndarray:
    """G = X X^T (n x n, float64) from the tiles X_i X_j^T of pairs of row blocks (i <= j).

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
    client : distributed.Client, optional
    progress : bool
    block_rows : int, optional
        Rows per tile for in-memory X (default: one tile, so that the frequent columns
        make one large BLAS product); a dask X uses its own row blocks.
    """
    if is_dask(X):
        X = check_row_blocks(X)
        blocks = list(X.to_delayed().ravel())
        bounds = np.cumsum((0, *X.chunks[0]))
    else:
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        blocks = _row_slices(X, block_rows or max(int(X.shape[0]), 1))
        bounds = np.cumsum([0] + [b.shape[0] for b in blocks])
    n = int(bounds[-1])
    pairs = [(i, j) for i in range(len(blocks)) for j in range(i, len(blocks))]
    if len(blocks) == 1:  # the tile is G: no copy
        if is_dask(X):
            return run(delayed(_tile)(blocks[0], None), desc="Gram pass", progress=progress,
                       client=client)[0]
        return _tile(blocks[0], None)
    G = np.empty((n, n))
    placed = iter(pairs)

    def place(t: np.ndarray) -> None:
        i, j = next(placed)
        G[bounds[i]:bounds[i + 1], bounds[j]:bounds[j + 1]] = t
        if i != j:
            G[bounds[j]:bounds[j + 1], bounds[i]:bounds[i + 1]] = t.T

    if is_dask(X):
        # each tile is written into G as it arrives and released: the transfers overlap
        # the tiles still being computed, and the tiles are never all held beside G
        run(*[delayed(_tile)(blocks[i], None if i == j else blocks[j]) for i, j in pairs],
            desc="Gram pass", progress=progress, client=client, fold=place)
    else:  # one tile at a time
        for i, j in pairs:
            place(_tile(blocks[i], None if i == j else blocks[j]))
    return G


def _strip(n: int, new_block: Any, bounds: Any, tiles: Any) -> np.ndarray:
    """The rows of the Gram that the new block adds (m x (n + m)): the tiles
    X_i X_new^T (each with its rows ``bounds`` of the first ``n``), transposed, and the
    new block's own tile."""
    m = int(new_block.shape[0])
    strip = np.empty((m, n + m))
    for (start, stop), tile in zip(bounds, tiles, strict=True):
        strip[:, start:stop] = tile.T
    strip[:, n:] = _tile(new_block, None)
    return strip


def _new_tiles(out: np.ndarray, n: int, new_block: Any, bounds: Any, tiles: Any) -> np.ndarray:
    """Place the tiles X_i X_new^T (each with its rows ``bounds``) and the new block's
    own tile into ``out``, whose first ``n`` x ``n`` block already holds the old Gram."""
    return _place_strip(out, n, _strip(n, new_block, bounds, tiles))


def _place_strip(out: np.ndarray, n: int, strip: np.ndarray) -> np.ndarray:
    """Rows ``n`` onwards of ``out`` from ``strip``, and their mirror above them."""
    out[n:] = strip
    out[:n, n:] = strip[:, :n].T
    return out


def _bounds(blocks: list[Any]) -> list[tuple[int, int]]:
    """The [start, stop) rows of each block of a list, in order."""
    edges = np.cumsum([0, *(int(b.shape[0]) for b in blocks)])
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def extend_gram(G: np.ndarray | None, old_blocks: list[Any], new_block: Any) -> np.ndarray:
    """The Gram of the old rows followed by ``new_block``'s, from the old rows' Gram ``G``.

    Only the new products are computed: the new block's own tile and its tiles with each
    old block (O(n m) products for m new rows), never the old x old block again, which
    is copied from ``G``. The tiles are :func:`gram_matrix`'s, so the result equals the
    Gram of all rows up to round-off.

    Parameters
    ----------
    G : ndarray (n, n) or None
        The Gram of the rows of ``old_blocks`` in their order; None when there are none.
    old_blocks : list of scipy.sparse matrices or ndarrays
        The rows ``G`` covers, in order (read once each).
    new_block : scipy.sparse matrix or ndarray (m, D)
    """
    n = 0 if G is None else int(G.shape[0])
    held = sum(int(b.shape[0]) for b in old_blocks)
    if held != n:
        raise ValueError(f"the old blocks hold {held} rows but their Gram is {n} x {n}")
    m = int(new_block.shape[0])
    out = np.empty((n + m, n + m))
    if G is not None:
        out[:n, :n] = G
    return _new_tiles(out, n, new_block, _bounds(old_blocks),
                      (_tile(block, new_block) for block in old_blocks))


def gram_extended(G: np.ndarray, X: Any, *, client: Any = None,
                  progress: bool = False) -> np.ndarray:
    """G = X X^T from ``G``, the Gram of the first ``len(G)`` rows of ``X`` (a store's
    rows before an append): the rows after them are multiplied with every row, the old
    x old block is copied, never computed again (O(n m) products for m new rows).

    ``G`` may be a read-only memory map; the result is a new array, filled by
    :func:`extend_gram_into`.

    Parameters
    ----------
    G : ndarray (n, n)
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray (N >= n rows)
    client : distributed.Client, optional
    progress : bool
    """
    n, total = int(G.shape[0]), int(X.shape[0])
    if n > total:
        raise ValueError(f"the Gram covers {n} rows but X has only {total}")
    out = np.empty((total, total))
    out[:n, :n] = G
    return extend_gram_into(out, n, X, client=client, progress=progress)


def extend_gram_into(out: np.ndarray, n: int, X: Any, *, client: Any = None,
                     progress: bool = False) -> np.ndarray:
    """Fill ``out`` (N x N) with X X^T, its first ``n`` x ``n`` block holding the Gram of
    the first ``n`` rows of ``X`` already (read there by the caller: no second copy of
    it); returns ``out``.

    Only the rows after the first ``n`` are multiplied, with every row (O(n m) products
    for m = N - n). In memory this is :func:`extend_gram`'s tiles; for a dask X the new
    rows are read to the driver (they are few) and each tile of an old row block with
    them is computed where the block is, in one pass (each row block of X read once)
    whose tiles are placed as they arrive.
    """
    total = int(X.shape[0])
    if out.shape != (total, total) or not 0 <= n <= total:
        raise ValueError(f"a {' x '.join(map(str, out.shape))} Gram with {n} rows known "
                         f"cannot hold the Gram of {total} rows")
    if n == total:  # no row of the view was appended
        return out
    return _place_strip(out, n, gram_strip(n, X, client=client, progress=progress))


def gram_strip(n: int, X: Any, *, client: Any = None, progress: bool = False) -> np.ndarray:
    """Rows ``n`` onwards of X X^T (m x N for the m = N - n rows after the first ``n``):
    the appended rows' products with every row, the Gram's rows that an append adds
    (:func:`extend_gram_into` places them; :class:`GramStrips` uses them as they are).

    In memory these are :func:`extend_gram`'s tiles; for a dask X the new rows are read
    to the driver (they are few) and each tile of an old row block with them is computed
    where the block is, in one pass (each row block of X read once) whose tiles are
    placed as they arrive.
    """
    if not is_dask(X):
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        new = X[n:]
        return _strip(n, new, [(0, n)] if n else [], [_tile(X[:n], new)] if n else [])
    X = check_row_blocks(X)
    new = to_float_block(run(X[n:], desc="reading the appended rows", progress=progress,
                             client=client)[0])
    if n == 0:
        return _strip(0, new, [], [])
    old = check_row_blocks(X[:n])
    edges = np.cumsum((0, *old.chunks[0]))
    tiles: list[np.ndarray] = []
    shared = delayed(new, pure=True)  # one copy in the graph, not one per tile
    # the tiles come back one at a time, in order; n x m floats in all
    run(*[delayed(_tile)(b, shared) for b in old.to_delayed().ravel()], desc="Gram extension",
        progress=progress, client=client, fold=tiles.append)
    return _strip(n, new, list(zip(edges[:-1], edges[1:], strict=True)), tiles)


class GramStrips:
    """The symmetric Gram G = X X^T held as row strips, applied without assembling it.

    Strip i holds rows [a_i, b_i) of G with their first b_i columns (the columns after
    them are the later strips' transposes): the layout of the Gram cache beside a store
    after appends (:func:`dmlfe.stats.cache.gram_strips`), whose strips may be read-only
    memory maps, read from the page cache at each product instead of copied into a new
    n x n array.

    With ``rows``, the rows of X themselves held by the driver, the products are
    X (X^T W) instead: for sparse text far fewer operations than the n x n Gram's (2 nnz
    against 2 n^2 per column), equal up to round-off; :meth:`dense` still reads the
    strips.

    Parameters
    ----------
    strips : list of ndarray
        Consecutive strips from row 0, each (b_i - a_i) x b_i, float64.
    rows : scipy.sparse matrix or ndarray (n, D'), optional
        X, or X restricted to the columns its non-zeros use, in the Gram's row order.
    """

    def __init__(self, strips: list[np.ndarray], rows: Any = None) -> None:
        self.strips = list(strips)
        self.rows = None if rows is None else to_float_block(rows)
        self._rows_t = None if rows is None else self.rows.T.tocsr() \
            if sp.issparse(self.rows) else self.rows.T
        self.starts = []
        n = 0
        for strip in self.strips:
            if strip.ndim != 2 or strip.shape[1] != n + strip.shape[0]:
                raise ValueError(f"a {' x '.join(map(str, strip.shape))} strip cannot hold "
                                 f"the rows after row {n} of a Gram")
            self.starts.append(n)
            n = int(strip.shape[1])
        self.shape = (n, n)
        if self.rows is not None and self.rows.shape[0] != n:
            raise ValueError(f"{self.rows.shape[0]} rows of X for a {n} x {n} Gram")

    def with_rows(self, X: Any, columns: np.ndarray | None = None) -> GramStrips:
        """These strips with ``rows`` from X (in memory, its columns ``columns``: those
        that hold every non-zero, None: all) when X is sparse with fewer than n^2 / 4
        stored values -- its products then cost less than the Gram's --; else self."""
        n = self.shape[0]
        if not sp.issparse(X) or int(X.shape[0]) != n or X.nnz * 4 >= n * n:
            return self
        X = to_float_block(X)
        rows = X if columns is None else SelectColumns(columns, int(X.shape[1]))(X)
        return GramStrips(self.strips, rows)

    def __matmul__(self, W: np.ndarray) -> np.ndarray:
        """G W for an n x c block: X (X^T W) with ``rows``, else one pass over the strips,
        each read once (its rows times W, and the transpose of its part left of the
        diagonal block)."""
        if self.rows is not None:
            return np.asarray(self.rows @ np.asarray(self._rows_t @ W))
        out = np.zeros((self.shape[0], W.shape[1]))
        for a, strip in zip(self.starts, self.strips, strict=True):
            b = a + strip.shape[0]
            out[a:b] += strip @ W[:b]
            if a:
                out[:a] += strip[:, :a].T @ W[a:b]
        return out

    def diagonal(self) -> np.ndarray:
        """The diagonal of G (n,)."""
        if self.rows is not None:
            x = self.rows
            return np.asarray(x.multiply(x).sum(axis=1)).ravel() if sp.issparse(x) else \
                np.einsum("ij,ij->i", x, x)
        return np.concatenate([np.diagonal(s[:, a:]) for a, s in
                               zip(self.starts, self.strips, strict=True)])

    def columns_from(self, c: int) -> np.ndarray:
        """G[:, c:] (n x (n - c)) as a new array, from the strips that hold rows c onwards
        (and their transposes), or the products of those rows of X with all: no pass
        over the rows before c."""
        n = self.shape[0]
        if self.rows is not None:
            tile = self.rows @ self._rows_t[:, c:]
            return tile.toarray() if sp.issparse(tile) else np.asarray(tile)
        out = np.empty((n, n - c))
        for a, strip in zip(self.starts, self.strips, strict=True):
            b = a + strip.shape[0]
            if b <= c:
                continue
            lo = max(a, c)
            rows = strip[lo - a:]  # G[lo:b, :b]
            out[:b, lo - c:b - c] = rows.T
            out[lo:b, :lo - c] = rows[:, c:lo]
        return out

    def dense(self) -> np.ndarray:
        """G as a new n x n array."""
        out = np.empty(self.shape)
        for a, strip in zip(self.starts, self.strips, strict=True):
            b = a + strip.shape[0]
            out[a:b, :b] = strip
            if a:
                out[:a, a:b] = strip[:, :a].T
        return out


def _threaded_matvecs(out: np.ndarray, xt: sp.csc_matrix, ab: np.ndarray, threads: int
                      ) -> None:
    """out += xt^T-as-CSR @ ab with scipy's kernel, in ``threads`` ranges of out's rows.

    The CSC arrays of X_b are the CSR arrays of X_b^T, whose row r is out's row r. The
    rows are cut where the non-zeros are shared evenly; each range is a slice of the
    same index arrays (the kernel reads indptr's absolute offsets) and writes only its
    own rows of out, and the kernel releases the GIL, so the ranges run in parallel
    (measured by ``benchmarks/scale.py``'s dual-route fits).
    """
    D, d = out.shape
    vec = ab.ravel()
    cuts = np.searchsorted(xt.indptr, np.linspace(0, xt.indptr[-1], threads + 1)[1:-1])
    bounds = [0, *sorted({int(c) for c in cuts if 0 < c < D}), D]

    def rows(r0: int, r1: int) -> None:
        _csr_matvecs(r1 - r0, xt.shape[0], d, xt.indptr[r0:r1 + 1], xt.indices, xt.data,
                     vec, out[r0:r1].ravel())

    in_threads(rows, bounds[:-1], bounds[1:], threads=threads)


def add_sparse_product(out: np.ndarray, a: sp.csr_matrix, b: np.ndarray,
                       threads: int | None = None) -> None:
    """out += a @ b in place: CSR ``a`` (r x m), dense ``b`` (m x k), ``out`` (r x k).

    scipy's CSR x dense kernel adds into a C-ordered float64 ``out`` directly, in
    ``threads`` ranges of its rows (default :func:`dmlfe.compute.driver_threads`); any
    other ``out`` or dtype takes the public product (one r x k temporary).
    """
    if _csr_matvecs is not None and out.flags.c_contiguous and out.dtype == np.float64 \
            and a.dtype == np.float64:
        # a^T is the CSC matrix with a's CSR arrays, the form _threaded_matvecs reads
        _threaded_matvecs(out, a.T, np.ascontiguousarray(b, dtype=np.float64),
                          driver_threads() if threads is None else threads)
    else:
        out += a @ b


def _add_xt_alpha(out: np.ndarray, xb: Any, ab: np.ndarray) -> None:
    """out += X_b^T alpha_b in place (out: D x d float64, C order).

    A sparse block is turned into CSC, which is X_b^T row-compressed: each row of out
    is then updated once, from rows of the small alpha_b (n_b x d, in cache), instead
    of scattering every non-zero's d values across D x d, which touched far more memory
    (and a d x D layout more still; see ``benchmarks/scale.py``). scipy's own kernel
    adds into ``out`` directly; a public product would make a D x d result per block.
    """
    xb = to_float_block(xb)
    if not sp.issparse(xb):
        out += xb.T @ ab
        return
    if _csr_matvecs is not None and out.flags.c_contiguous:
        add_sparse_product(out, xb.tocsc().T, ab)  # X_b^T as CSR: its CSC arrays
        return
    cols, narrow = used_columns(xb)  # without the kernel: the block's columns only
    out[cols] += narrow.tocsc().T @ ab


def transpose_product(X: Any, alpha: np.ndarray, *, columns: np.ndarray | None = None,
                      client: Any = None, progress: bool = False) -> np.ndarray:
    """P = X^T alpha, shape (D, d), C order: one pass over the row blocks of X.

    The row blocks come to the driver one at a time, in order (:func:`dmlfe.compute.run`
    with ``fold``), and each is added into P there. A block of sparse text is about
    12 bytes per stored value; its share of P is 8 d bytes per column it uses, far more
    than the block itself for hashed text at d = 100, and summing those partials on the
    workers made one more array of the union of their columns at each level of the tree.
    Only one block is held at a time.

    ``columns``: the sorted columns of X that hold every non-zero
    (:meth:`~dmlfe.stats.sufficient.SufficientStats.used_columns`); P then has only
    their rows, (len(columns), d), the others being zero: less memory to write and to
    page in for hashed text, which uses a fraction of its columns (``benchmarks/scale.py``).
    """
    alpha = np.asarray(alpha, dtype=np.float64)
    select = None if columns is None else SelectColumns(columns, int(X.shape[1]))
    rows = int(X.shape[1]) if select is None else int(select.columns.size)
    out = np.zeros((rows, alpha.shape[1]))
    if not is_dask(X):
        _add_xt_alpha(out, X if select is None else select(to_float_block(X)), alpha)
        return out
    X = check_row_blocks(X)
    bounds = np.cumsum((0, *X.chunks[0]))
    index = iter(range(len(bounds) - 1))

    def add(xb: Any) -> None:
        i = next(index)
        if select is not None:
            xb = select(to_float_block(xb))
        _add_xt_alpha(out, xb, alpha[bounds[i]:bounds[i + 1]])

    run(*X.to_delayed().ravel(), desc="map-back pass", progress=progress, client=client,
        fold=add)
    return out
