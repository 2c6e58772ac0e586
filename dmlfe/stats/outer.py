"""Dense products of sparse row blocks, A B^T: the Gram tiles and the relation kernels.

Text rows share few columns, except for a few hundred frequent terms that most rows
contain. scipy's sparse x sparse product pays per multiply-add and writes a nearly
dense CSR result, so those frequent columns cost almost all of its time: in hashed
text the thousand most frequent used columns hold nearly all of the c_k^2
multiply-adds of X X^T (c_k: the column's count of documents).
:func:`dense_outer` therefore splits the columns:

* a column whose counts in the two blocks satisfy ``c_a c_b >= DENSE_RATIO r_a r_b``
  (r: rows) goes into small dense matrices multiplied by BLAS (multi-threaded,
  ~10^10 flop/s where the sparse product manages ~10^8 multiply-adds per second);
* the rest stays sparse and its (much sparser) product is added into the dense result
  in place, by the same BLAS call.

The split is a permutation of a sum over columns, so the result is the same product,
equal to round-off; it is exact for dense input too (one BLAS product).
:func:`dense_gram` is the symmetric case A A^T at half the work, exactly symmetric.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.linalg.blas import dgemm, dsyrk

from dmlfe.compute import driver_threads, in_threads

#: A column is multiplied densely when c_a c_b >= DENSE_RATIO r_a r_b: the break-even of
#: a dense column (r_a r_b flops at BLAS speed) against its c_a c_b sparse multiply-adds
#: (about 600 x slower each), measured on 2 cores.
DENSE_RATIO = 2e-3
#: Row blocks of :func:`dense_gram`'s sparse part: block i is multiplied only by the
#: rows from its own start on, so 4 blocks do 10/16 of the full product's work (more
#: blocks pay more for transposing the rows each one needs; 4 was the fastest of those
#: tried with ``benchmarks/scale.py``).
GRAM_ROW_BLOCKS = 4
#: Most bytes of the CSR product of one slab of rows in :func:`dense_outer`'s sparse part
#: (the slab is then written into the dense result), small enough for the allocator
#: to reuse.
SPARSE_SLAB_BYTES = 6 * 2**20
#: Square blocks in which :func:`dense_gram` mirrors its upper triangle (cache-sized).
MIRROR_STEP = 512


def _as_csr(m: Any) -> sp.csr_matrix:
    m = sp.csr_matrix(m, dtype=np.float64)
    m.sum_duplicates()
    return m


def _as_dense(m: Any) -> np.ndarray:
    return np.asarray(m.toarray() if sp.issparse(m) else m, dtype=np.float64)


def _column_counts(m: sp.csr_matrix) -> np.ndarray:
    return np.bincount(m.indices, minlength=m.shape[1])


def _index_dtype(*sizes: int) -> type:
    """int32 while every size fits (half the bytes of the split's per-value arrays)."""
    return np.int32 if max(sizes, default=0) < np.iinfo(np.int32).max else np.int64


def _column_codes(used: np.ndarray, heavy: np.ndarray) -> np.ndarray:
    """Each column's place in :func:`_split`'s output: heavy column i -> i, the other
    columns where ``used`` (a boolean mask) is true -> len(heavy) + their rank, the
    rest -> -1."""
    light = used.copy()
    light[heavy] = False
    code = np.full(used.size, -1, dtype=_index_dtype(used.size))
    code[heavy] = np.arange(heavy.size)
    light = np.flatnonzero(light)
    code[light] = heavy.size + np.arange(light.size)
    return code


def _split(m: sp.csr_matrix, code: np.ndarray, width: int) -> tuple[np.ndarray, Any]:
    """(F-ordered dense block of the heavy columns, CSR of the light ones) of ``m``.

    ``code`` from :func:`_column_codes` (``width`` heavy columns): the CSR keeps only
    the light columns, renumbered in their order. Dropping the columns the other block
    does not use changes no product term (those would multiply stored values by
    absent ones), and the narrower column space speeds scipy's sparse product (see
    ``benchmarks/relation.py``). The per-value temporaries are int32
    where the sizes allow: each is new memory for a fresh process to map.
    """
    idx = _index_dtype(m.nnz, m.shape[0], code.size)
    pos = code[m.indices]
    heavy = (pos >= 0) & (pos < width)
    rows = np.repeat(np.arange(m.shape[0], dtype=idx), np.diff(m.indptr))[heavy]
    dense = np.zeros((m.shape[0], width), order="F")
    dense[rows, pos[heavy]] = m.data[heavy]
    light = pos >= width
    # light values before each row's start: the CSR's indptr, with no row index per value
    before = np.concatenate((np.zeros(1, dtype=idx), np.cumsum(light, dtype=idx)))
    indptr = before[m.indptr]
    n_light = int(code.max(initial=width - 1)) + 1 - width
    pos = pos[light]
    pos -= width
    rest = sp.csr_matrix((m.data[light], pos, indptr), shape=(m.shape[0], max(n_light, 0)))
    return dense, rest


def _heavy_columns(counts_a: np.ndarray, counts_b: np.ndarray, ra: int, rb: int
                   ) -> np.ndarray:
    return np.flatnonzero(counts_a.astype(np.float64) * counts_b
                          >= DENSE_RATIO * max(ra * rb, 1))


def mirror_upper(G: np.ndarray, step: int = MIRROR_STEP) -> np.ndarray:
    """Copy the upper triangle of the square G onto its lower one, in place."""
    n = G.shape[0]
    for i in range(0, n, step):
        d = G[i:i + step, i:i + step]
        low = np.tril_indices(d.shape[0], -1)
        d[low] = d.T[low]
        for j in range(i + step, n, step):
            G[j:j + step, i:i + step] = G[i:i + step, j:j + step].T
    return G


def dense_crossprod(x: np.ndarray) -> np.ndarray:
    """X^T X of a dense block as an exactly symmetric C-ordered float64 ndarray.

    Scipy's ``dsyrk``, not numpy's ``x.T @ x`` (also a syrk): on the relation route the
    block comes from the relation map, whose last product is scipy's ``dgemm``, and the
    solver that follows is scipy's LAPACK. numpy's OpenBLAS is another library, whose
    threads and scipy's then spun against each other after each switch (see
    ``benchmarks/relation.py``).
    """
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:  # BLAS refuses a zero leading dimension
        return np.zeros((x.shape[1], x.shape[1]))
    # BLAS reads x in the order it is stored, never a copy: x.T of a C-ordered x is
    # F-ordered (an F-ordered x, e.g. the dual route's reduced data, is read as it is);
    # the upper triangle of the F-ordered result, mirrored; its transpose is C-ordered
    if x.flags.f_contiguous and not x.flags.c_contiguous:
        return mirror_upper(dsyrk(1.0, x, trans=1)).T
    return mirror_upper(dsyrk(1.0, x.T, trans=0)).T


def add_crossprod(c: np.ndarray, x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    """c += alpha X^T X in place for a symmetric C-ordered float64 c; returns c.

    One ``dsyrk`` into one triangle of c (c's transpose is F-ordered, so f2py writes
    into c itself), then mirrored onto the other: c comes back exactly symmetric (an
    asymmetry of c's own round-off is not kept, only that triangle is read). A
    template's A = a S + F F^T (MVMD) is then one p x p array instead of the four
    temporaries of ``a * S + F @ F.T`` and a symmetrising average (each p x p x 8
    bytes, paid again in page faults by every fresh process).
    """
    if c.dtype != np.float64 or not c.flags.c_contiguous or c.shape[0] != c.shape[1]:
        raise ValueError("add_crossprod updates a square C-ordered float64 array in place")
    x = np.asarray(x, dtype=np.float64)
    if x.size:
        dsyrk(alpha, x.T, beta=1.0, c=c.T, trans=0, overwrite_c=1)
        mirror_upper(c.T)
    return c


def weighted_crossprod(x: Any, w: np.ndarray) -> Any:
    """X^T diag(w) X of one row block (D x D): a CSR product for a sparse block (sparse),
    for a dense one float64 (C-ordered), by one ``dsyrk`` of sqrt(w) X when w >= 0
    (MLDA's weights: half the flops of a GEMM, exactly symmetric), else by a GEMM."""
    w = np.asarray(w, dtype=np.float64).ravel()
    if sp.issparse(x):
        x = _as_csr(x)
        return sp.csr_matrix(x.T @ (sp.diags(w) @ x))
    x = np.asarray(x, dtype=np.float64)
    if np.all(w >= 0):
        return dense_crossprod(x * np.sqrt(w)[:, None])
    return np.ascontiguousarray(x.T @ (x * w[:, None]))


def dense_crossprod_with(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """X^T Y of dense blocks by scipy's ``dgemm`` (as :func:`dense_crossprod`: the
    relation route's products stay in one BLAS library)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return np.zeros((x.shape[1], y.shape[1]))
    if x.flags.f_contiguous and not x.flags.c_contiguous:  # read as stored (no copy)
        return np.ascontiguousarray(dgemm(1.0, x, y, trans_a=True))
    return np.ascontiguousarray(dgemm(1.0, x.T, y.T, trans_b=True))


def dense_gram(a: Any, threads: int | None = None) -> np.ndarray:
    """A A^T as an exactly symmetric C-ordered float64 ndarray (r x r).

    The diagonal tile of :func:`dense_outer`, at half its work: the heavy columns go
    to one BLAS ``dsyrk`` (the upper triangle only), the sparse rest to products of row
    block i with the rows from i on (:data:`GRAM_ROW_BLOCKS`; a block's rows in slabs of
    :data:`SPARSE_SLAB_BYTES`), written straight into G's rows; the upper triangle is
    then copied onto the lower one, so no symmetrising average is needed. The row
    blocks of the sparse part run in ``threads`` threads (default
    :func:`dmlfe.compute.driver_threads`: the driver's CPUs, 1 inside a dask task).
    """
    if not sp.issparse(a):
        a = _as_dense(a)
        return mirror_upper(np.ascontiguousarray(a @ a.T))
    a = _as_csr(a)
    n = a.shape[0]
    G = np.empty((n, n))
    if n == 0:
        return G
    counts = _column_counts(a)
    heavy = _heavy_columns(counts, counts, n, n)
    code = _column_codes(counts > 0, heavy)
    ad, light = _split(a, code, heavy.size)
    step = -(-n // GRAM_ROW_BLOCKS)

    def light_rows(start: int) -> None:
        stop = min(start + step, n)
        right = light[start:].T.tocsr()  # once per block, for every slab of its rows
        slab = _slab_rows(n - start)
        for s in range(start, stop, slab):
            tile = (light[s:min(s + slab, stop)] @ right).tocsr()
            # the tile's columns are G's columns from ``start`` on: shifted, it is the
            # whole of G's rows s:s + slab (zeros left of ``start``), written in place
            rows = sp.csr_matrix((tile.data, tile.indices + start, tile.indptr),
                                 shape=(tile.shape[0], n))
            rows.toarray(out=G[s:s + tile.shape[0]])

    # scipy's sparse kernels release the GIL; each block writes its own rows of G
    in_threads(light_rows, range(0, n, step),
               threads=driver_threads() if threads is None else threads)
    if heavy.size:  # BLAS refuses an empty inner dimension
        # G^T is F-ordered: its lower triangle is G's upper one, += Ad Ad^T in place
        dsyrk(1.0, ad, beta=1.0, c=G.T, lower=True, overwrite_c=True)
    return mirror_upper(G)


def _slab_rows(width: int) -> int:
    """Rows of a slab whose sparse product with ``width`` columns (at most one stored
    value of 12 bytes each per row and column) stays within :data:`SPARSE_SLAB_BYTES`."""
    return max(1, SPARSE_SLAB_BYTES // (12 * max(width, 1)))


def _sparse_product(a: sp.csr_matrix, b: sp.csr_matrix, threads: int | None) -> np.ndarray:
    """(a @ b^T) as a dense C-ordered array; a's rows in up to ``threads`` threads.

    Slabs of a's rows whose sparse product (up to r_b stored values per row, 12 bytes
    each) stays within :data:`SPARSE_SLAB_BYTES`: one slab per thread made scipy's CSR
    product as large as a thread's share of the result, new memory each time, which
    the freshly started process of a command-line fit had to have mapped first.
    """
    out = np.empty((a.shape[0], b.shape[0]))
    bt = b.T.tocsr()  # once, not per thread
    threads = driver_threads() if threads is None else threads
    step = max(1, min(-(-a.shape[0] // max(1, threads)), _slab_rows(b.shape[0])))

    def rows(start: int) -> None:
        (a[start:start + step] @ bt).toarray(out=out[start:start + step])

    in_threads(rows, range(0, a.shape[0], step), threads=threads)
    return out


def dense_outer(a: Any, b: Any, threads: int | None = None) -> np.ndarray:
    """A B^T as a C-ordered float64 ndarray (r_a x r_b).

    Parameters
    ----------
    a, b : scipy.sparse matrix or array-like
        Row blocks with the same number of columns; pass the same object twice for a
        diagonal Gram tile (its split is then made once).
    threads : int, optional
        Threads for the sparse part (default :func:`dmlfe.compute.driver_threads`: the
        driver's CPUs, 1 inside a dask task).

    Returns
    -------
    ndarray
        The dense product, equal to ``(a @ b.T)`` up to round-off.
    """
    same = a is b
    if not (sp.issparse(a) and sp.issparse(b)):
        a = _as_dense(a)
        b = a if same else _as_dense(b)
        return np.ascontiguousarray(a @ b.T)
    a = _as_csr(a)
    b = a if same else _as_csr(b)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"row blocks of {a.shape[1]} and {b.shape[1]} columns")
    if a.shape[0] == 0 or b.shape[0] == 0:  # e.g. a pass probing a map's output width
        return np.zeros((a.shape[0], b.shape[0]))
    ca = _column_counts(a)
    cb = ca if same else _column_counts(b)
    ra, rb = a.shape[0], b.shape[0]
    heavy = _heavy_columns(ca, cb, ra, rb)
    code = _column_codes((ca > 0) & (cb > 0), heavy)
    ad, al = _split(a, code, heavy.size)
    bd, bl = (ad, al) if same else _split(b, code, heavy.size)
    out = _sparse_product(al, bl, threads)  # C-ordered: out.T is the F-ordered B A^T
    if heavy.size:  # BLAS refuses an empty inner dimension
        # out^T += Bd Ad^T, in place (F-ordered c and overwrite_c: no copy of the tile)
        dgemm(1.0, bd, ad, beta=1.0, c=out.T, trans_b=True, overwrite_c=True)
    return out
