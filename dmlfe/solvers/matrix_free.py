"""Leading eigenpairs of a scatter-type matrix without forming it (PCA, MVMD at large D).

The matrix is

    A = xx_coef * Xc^T Xc + L L^T,        Xc = H X (or X itself when uncentred),

with ``L`` (D x r, optional) a low-rank term already on the driver (for MVMD,
L = sqrt(beta) Xc^T Yc'). A product A V with a block of vectors V (D x k) is one
distributed pass over X: every row block contributes X_b^T (X_b V), the
partials are summed by a tree reduction on the workers, and centring is applied
afterwards from the column sums of the same pass,

    Xc^T Xc V = X^T X V - s_x (s_x^T V) / n,

so X is never densified or centred and the driver holds O(D k) numbers.

Two solvers, both seeded and both returning components with the dense solvers'
sign convention (the largest-magnitude entry of each component is positive):

* :func:`randomized_eigsh` -- randomized block subspace iteration with a
  Rayleigh-Ritz step after every product (Halko, Martinsson & Tropp 2011,
  Alg. 4.4 with the Rayleigh-Ritz extraction of Alg. 5.3). Each iteration is
  exactly ONE pass (A times a D x (k + oversampling) block); iterations stop
  when every wanted Ritz pair has relative residual ||A u - theta u|| <= tol *
  theta_1 (the residual is free: it comes from the same pass), after ``n_iter``
  passes when that is fixed, or after ``max_passes``. The driver's work per pass
  is a few D x w x w matrix products (CholeskyQR2, no Householder QR of the tall
  block). Typical counts: 3-10 passes for a decaying spectrum.
* :func:`lanczos_eigsh` -- implicitly restarted Lanczos (ARPACK via
  ``scipy.sparse.linalg.eigsh``) on a LinearOperator whose matvec is a pass.
  ARPACK asks for one vector at a time, so it makes one pass per matvec: at
  least ncv (default 2k + 1) and usually several times that. It is for
  checking or when passes are cheap (in-memory X).

Every pass is counted and recorded on the result (``n_passes``). Both return the
:class:`~dmlfe.solvers.result.EigenResult` of every solver, with components
sign-fixed by :func:`~dmlfe.solvers.result.flip_signs`.

:func:`solve_matrix_free` solves a method's trace template this way and picks d
by the one dimension rule (:func:`dmlfe.solvers.dimension.choose_dimension`,
with tr(A) from the passes as the denominator of a threshold).

Why one module: the scatter operator and the randomized, Lanczos and block-Krylov
solvers that apply it share its pass (one dask compute per product), its warm starts
and its stopping rule; they are chosen by one ``solver`` name.
"""

from __future__ import annotations

import numbers
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed
from scipy.sparse.linalg import LinearOperator, eigsh

from dmlfe.compute import (
    BlockFn,
    SelectColumns,
    add_column_parts,
    block_width,
    check_row_blocks,
    compute_one,
    is_dask,
    run,
    to_float_block,
    tree_reduce,
    used_columns,
)
from dmlfe.methods.template import TraceTemplate
from dmlfe.solvers import nspace
from dmlfe.solvers.dimension import (
    DEFAULT_THRESHOLD,
    check_n_components,
    choose_dimension,
    n_genuine,
    threshold_cap,
    threshold_rounds,
)
from dmlfe.solvers.leading import block_krylov_eigh, orthonormalize
from dmlfe.solvers.result import EigenResult, expand_rows, flip_signs, flip_signs_inplace
from dmlfe.stats.gram import add_sparse_product
from dmlfe.stats.sufficient import SufficientStats


# --------------------------------------------------------------------------- #
# Per-block products (run on the workers)
# --------------------------------------------------------------------------- #
def _prepared_block(xb: Any, block_fn: BlockFn | None
                    ) -> tuple[dict[str, Any], np.ndarray, Any]:
    """(n, column sums and sum of squares of the block, its used columns, the block on
    them): what a pass needs of one row block besides the product."""
    if block_fn is not None:
        xb = block_fn(xb)
    xb = to_float_block(xb)
    if sp.issparse(xb):
        sumsq = float(xb.multiply(xb).sum())
    else:
        sumsq = float(np.einsum("ij,ij->", xb, xb))
    sums = {"n": int(xb.shape[0]), "sum_x": np.asarray(xb.sum(axis=0), dtype=np.float64).ravel(),
            "sumsq": sumsq}
    cols, xb = used_columns(xb)
    return sums, cols, xb


def _xtxv_block(xb: Any, V: np.ndarray, block_fn: BlockFn | None) -> dict[str, Any]:
    """One block's share of X^T X V, on the columns the block uses (see ``used_columns``).

    X_b V is taken with the block's own column numbers, not from a copy V[cols] (as
    large as the partial itself at 2^20 used columns).
    """
    sums, cols, xb = _prepared_block(xb, block_fn)
    if sp.issparse(xb):
        wide = sp.csr_matrix((xb.data, cols[xb.indices], xb.indptr),
                             shape=(xb.shape[0], V.shape[0]))
        u = np.zeros((xb.shape[0], V.shape[1]))
        add_sparse_product(u, wide, V)
    else:  # a dense block keeps every column (used_columns): V itself, no copy
        u = np.asarray(xb @ V)
    return {**sums, "xtxv": (cols, np.asarray(xb.T @ u, dtype=np.float64))}


#: A pass on a client whose D x k product is above this many bytes adds the blocks'
#: partials into the result on the driver (:meth:`ScatterOperator._folded_pass`) instead
#: of summing them by a tree on the workers.
FOLD_BYTES = 2**28
#: Partials per worker thread submitted and not yet added on the driver in such a pass.
FOLD_WINDOW = 1

#: Rows of a D x k block updated at a time by :func:`_add_rows_product` (a temporary of
#: 8,192 x k x 8 bytes, small enough for the allocator to reuse).
UPDATE_ROWS = 8192


def _add_rows_product(out: np.ndarray, left: np.ndarray, right: np.ndarray) -> None:
    """out += left @ right in place, a slab of rows at a time (no D x k temporary)."""
    for r in range(0, out.shape[0], UPDATE_ROWS):
        out[r:r + UPDATE_ROWS] += left[r:r + UPDATE_ROWS] @ right


class _HeldX:
    """An in-memory X made ready once for every pass of :class:`ScatterOperator`.

    ``block_fn`` is applied once (its output is what each pass would make and drop
    again), the matrix is narrowed to the columns it uses, and its transpose is
    row-compressed once, so a pass is two threaded sparse x dense products
    (:func:`dmlfe.stats.gram.add_sparse_product`): redoing the column renumbering, the
    transpose and the gather/scatter of D x w blocks at every pass was a large part of
    each pass-and-step (``benchmarks/scale.py``). The copy is X's size
    (or block_fn's output's), held while the operator lives.
    """

    def __init__(self, X: Any, block_fn: BlockFn | None, n_features: int) -> None:
        self.sums, cols, xb = _prepared_block(X, block_fn)
        self.n = self.sums["n"]
        self.cols = None if cols.size == n_features else cols
        self.x = xb
        self.xt = xb.tocsc().T if sp.issparse(xb) else None  # X^T as CSR

    def product(self, V: np.ndarray, out: np.ndarray | None) -> dict[str, Any]:
        """The pass's dict, as ``_xtxv_block`` makes it for one block, without X's work;
        X^T X V is written into ``out`` when given and X uses every column."""
        Vs = V if self.cols is None else V[self.cols]
        if self.xt is None:
            vals = np.asarray(self.x.T @ (self.x @ Vs), dtype=np.float64)
        else:
            u = np.zeros((self.n, V.shape[1]))
            add_sparse_product(u, self.x, Vs)
            if out is None or self.cols is not None:
                vals = np.zeros((self.x.shape[1], V.shape[1]))
            else:
                vals = out
                vals.fill(0.0)
            add_sparse_product(vals, self.xt, u)
        return {**self.sums, "xtxv": (self.cols, vals)}


def _add_sums(total: dict[str, Any] | None, part: dict[str, Any]) -> dict[str, Any]:
    """``total`` plus a block's n, sum of squares and column sums (a fresh total for None)."""
    if total is None:
        return {"n": part["n"], "sumsq": part["sumsq"], "sum_x": part["sum_x"].copy()}
    total["n"] += part["n"]
    total["sumsq"] += part["sumsq"]
    total["sum_x"] += part["sum_x"]
    return total


def _combine_xtxv(*parts: dict[str, Any]) -> dict[str, Any]:
    total = None
    for p in parts:
        total = _add_sums(total, p)
    return {**total, "xtxv": add_column_parts(*(p["xtxv"] for p in parts))}


# --------------------------------------------------------------------------- #
# The operator
# --------------------------------------------------------------------------- #
class ScatterOperator:
    """A = xx_coef * Xc^T Xc + lowrank lowrank^T, applied by passes over X.

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        Documents x features.
    xx_coef : float
        Non-negative weight of the scatter term.
    lowrank : ndarray of shape (D, r), optional
        Low-rank term L (A gains L L^T).
    centre : bool
        Use the centred scatter Xc^T Xc (PCA, MVMD) or X^T X (LSI).
    stats : SufficientStats, optional
        Not needed: n and the column sums come with every pass. When given,
        they are cross-checked against the first pass.
    client : distributed.Client, optional
        Compute on this client (V is scattered to the workers once per pass).
    block_fn : callable, optional
        Applied to each X row block first (as in ``compute_stats``).
    n_features : int, optional
        Width of block_fn's output when it cannot be probed on an empty block.
    split_every : int, optional
        Width of the combine tree (default: 8, fewer for big D x k partials).
    """

    def __init__(
        self,
        X: Any,
        *,
        xx_coef: float = 1.0,
        lowrank: np.ndarray | None = None,
        centre: bool = True,
        stats: SufficientStats | None = None,
        client: Any = None,
        block_fn: BlockFn | None = None,
        n_features: int | None = None,
        split_every: int | None = None,
    ) -> None:
        if xx_coef < 0:
            raise ValueError(
                f"xx_coef = {xx_coef} is negative: A would not be positive semi-definite and "
                "subspace iteration would find the largest-magnitude, not the largest, "
                "eigenvalues; use the dense solver for indefinite problems"
            )
        if is_dask(X):
            X = check_row_blocks(X)
        elif sp.issparse(X):
            X = sp.csr_matrix(X)
        else:
            X = np.asarray(X)
        self.X = X
        d = n_features or block_width(block_fn, int(X.shape[1]), X.dtype)
        if d is None:
            raise ValueError(
                "the width of block_fn's output could not be probed on an empty block; pass "
                "n_features="
            )
        self.n_features = int(d)
        if lowrank is not None:
            lowrank = np.asarray(lowrank, dtype=np.float64)
            if lowrank.ndim == 1:
                lowrank = lowrank.reshape(-1, 1)
            if lowrank.shape[0] != self.n_features:
                raise ValueError(
                    f"lowrank has {lowrank.shape[0]} rows but X has {self.n_features} features"
                )
        self.lowrank = lowrank
        self.xx_coef = float(xx_coef)
        self.centre = bool(centre)
        self.stats = stats
        self.client = client
        self.block_fn = block_fn
        self.split_every = split_every
        self.n_passes = 0
        self.n: int | None = None
        self.sum_x: np.ndarray | None = None
        self.sumsq: float | None = None
        self._known_sums = False
        self._x_blocks = X.to_delayed().ravel() if is_dask(X) else None
        self._held = None if is_dask(X) else _HeldX(X, block_fn, self.n_features)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_features, self.n_features)

    def _pass(self, V: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """X^T (X V) in one pass (also recording n, column sums, sum of squares), in
        ``out`` when given."""
        self.n_passes += 1
        if self._held is not None:
            res = self._held.product(V, out)
        else:
            if self.client is not None:
                v_ref: Any = self.client.scatter(V, broadcast=True, hash=False)
            else:
                v_ref = delayed(V)
            parts = [delayed(_xtxv_block)(xb, v_ref, self.block_fn) for xb in self._x_blocks]
            nbytes = V.shape[0] * V.shape[1] * 8
            desc = f"matrix-free pass {self.n_passes}"
            if self.client is not None and nbytes > FOLD_BYTES:
                return self._folded_pass(parts, V.shape[1], out, desc)
            split_every = self.split_every
            if split_every is None:
                split_every = 8 if nbytes <= 2**26 else (4 if nbytes <= 2**28 else 2)
            res = compute_one(tree_reduce(parts, _combine_xtxv, split_every), self.client,
                              desc=desc)
        self._record_sums(res)
        cols, vals = res["xtxv"]
        if cols is None or cols.size == self.n_features:  # sorted and unique: every column
            if out is None or vals is out:
                return vals
            out[...] = vals
            return out
        if out is None:
            out = np.zeros((self.n_features, V.shape[1]))
        else:
            out.fill(0.0)
        out[cols] = vals
        return out

    def _folded_pass(self, parts: list, k: int, out: np.ndarray | None, desc: str
                     ) -> np.ndarray:
        """The pass with each block's partial added into ``out`` on the driver.

        A tree reduction sums the partials (up to D x k each) on the workers, each
        combine holding its inputs and their union beside the scattered V: at 2^20
        used columns and k = 110 (D x k x 8 bytes each) that passed a 3 GiB worker's
        limit. Here
        a worker holds V, its block and its one partial; at most :data:`FOLD_WINDOW`
        partials per worker thread wait for the driver, which adds each into ``out``
        in place as it arrives.
        """
        if out is None:
            out = np.zeros((self.n_features, k))
        else:
            out.fill(0.0)
        sums: dict[str, Any] = {"n": 0, "sumsq": 0.0, "sum_x": np.zeros(self.n_features)}

        def add(part: dict[str, Any]) -> None:
            _add_sums(sums, part)
            cols, vals = part["xtxv"]
            if cols is None:
                np.add(out, vals, out=out)
                return
            for r in range(0, cols.size, UPDATE_ROWS):  # slabs: no partial-sized temporary
                out[cols[r:r + UPDATE_ROWS]] += vals[r:r + UPDATE_ROWS]

        threads = sum(self.client.nthreads().values()) or 1
        run(*parts, desc=desc, client=self.client, fold=add, window=FOLD_WINDOW * threads)
        self._record_sums(sums)
        return out

    def _record_sums(self, res: dict[str, Any]) -> None:
        """n, column sums and sum of squares from the first pass (checked against stats,
        or against those :meth:`known_sums` took)."""
        if self._known_sums:
            self._known_sums = False
            if self.n != int(res["n"]) or not np.allclose(self.sum_x, res["sum_x"],
                                                          rtol=1e-10, atol=1e-12):
                raise ValueError(
                    f"the column sums given (n = {self.n}) do not describe this X (n = "
                    f"{int(res['n'])}): pass the statistics of the same documents and features")
        if self.n is None:
            self.n, self.sum_x, self.sumsq = int(res["n"]), res["sum_x"], float(res["sumsq"])
            if self.stats is not None and (
                self.stats.n != self.n
                or not np.allclose(self.stats.sum_x, self.sum_x, rtol=1e-10, atol=0)
            ):
                raise ValueError(
                    f"the statistics given (n = {self.stats.n}) do not describe this X "
                    f"(n = {self.n}): pass the statistics of the same documents and features"
                )

    def matmat(self, V: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """A V for a D x k block V: one pass over X.

        ``out``, a C-ordered float64 D x k array not overlapping V, receives the result
        (a solver reusing its blocks: a fresh D x k array costs its page faults again,
        more than the product's own writes).
        """
        V = np.asarray(V, dtype=np.float64)
        if V.ndim == 1:
            V = V.reshape(-1, 1)
        if V.shape[0] != self.n_features:
            raise ValueError(f"V has {V.shape[0]} rows; A is {self.n_features} x {self.n_features}")
        if out is not None and (out.shape != V.shape or out.dtype != np.float64
                                or not out.flags.c_contiguous or np.shares_memory(out, V)):
            out = None
        return self.finish(V, self._pass(V, out))

    def finish(self, V: np.ndarray, raw: np.ndarray) -> np.ndarray:
        """A V from the scatter product ``raw`` = X^T X V (overwritten: it is returned):
        the centring from the column sums, the weight and the low-rank term."""
        if self.centre and self.n:
            assert self.sum_x is not None
            _add_rows_product(raw, self.sum_x[:, None], (self.sum_x @ V)[None, :] / -self.n)
        raw *= self.xx_coef
        if self.lowrank is not None:
            _add_rows_product(raw, self.lowrank, self.lowrank.T @ V)
        return raw

    def scatter_part(self, V: np.ndarray, AV: np.ndarray) -> np.ndarray | None:
        """X^T X V from A V (:meth:`finish` undone, in ``AV``'s memory when it is a
        float64 array: it is returned): what a later solve on more documents adds the new
        rows' part to. None when the weight is 0 (A V then holds nothing of X^T X V) or
        no pass has recorded the column sums yet."""
        if self.xx_coef == 0 or self.n is None:
            return None
        raw = np.asarray(AV, dtype=np.float64)
        if self.lowrank is not None:
            _add_rows_product(raw, self.lowrank, -(self.lowrank.T @ V))
        raw /= self.xx_coef
        if self.centre and self.n:
            assert self.sum_x is not None
            _add_rows_product(raw, self.sum_x[:, None], (self.sum_x @ V)[None, :] / self.n)
        return raw

    def scatter_product(self, V: np.ndarray) -> np.ndarray:
        """X^T X V by one pass over this operator's X (its rows only: no centring, weight
        or low-rank term), counted in ``n_passes``."""
        V = np.asarray(V, dtype=np.float64)
        return self._pass(V.reshape(V.shape[0], -1))

    def known_sums(self, n: int, sum_x: np.ndarray, sumsq: float) -> None:
        """Take n, the column sums and the sum of squares of X from its statistics, so
        that :meth:`finish` and :meth:`trace` work before the first pass (the first pass
        checks them against its own)."""
        if self.n is None:
            self._known_sums = True
            self.n, self.sum_x, self.sumsq = int(n), np.asarray(sum_x, dtype=np.float64), \
                float(sumsq)

    def trace(self) -> float | None:
        """tr(A), known once a pass has been made (None before)."""
        if self.sumsq is None or self.n is None or self.sum_x is None:
            return None
        scatter = self.sumsq
        if self.centre and self.n:
            scatter -= float(self.sum_x @ self.sum_x) / self.n
        tr = self.xx_coef * scatter
        if self.lowrank is not None:
            tr += float(np.sum(self.lowrank * self.lowrank))
        return tr


# --------------------------------------------------------------------------- #
# Solvers
# --------------------------------------------------------------------------- #
def _orthonormal_basis(M: np.ndarray, rng: np.random.Generator,
                       gram: np.ndarray | None = None, overwrite: bool = False,
                       work: np.ndarray | None = None) -> np.ndarray:
    """Orthonormal basis of span(M) (D x w), topped up with random directions to w columns.

    :func:`dmlfe.solvers.partial.orthonormalize` (CholeskyQR2: O(D w^2) BLAS-3 work on
    the driver, never a Householder QR of the tall block); a rank-deficient M loses its
    dependent directions there, and random ones orthogonal to the rest replace them.
    ``gram`` is M^T M when the caller has it; ``overwrite`` lets the basis take M's
    memory, and ``work`` is a spare block for the intermediate step.
    """
    Q = orthonormalize(M, gram=gram, overwrite=overwrite, work=work)
    missing = M.shape[1] - Q.shape[1]
    if missing:
        extra = rng.standard_normal((M.shape[0], missing))
        for _ in range(2):  # twice is enough for orthogonality to round-off
            extra -= Q @ (Q.T @ extra)
        Q = np.hstack([Q, orthonormalize(extra)])
    return Q


#: Driver memory for a block Krylov space (its basis and image, 16 D w depth bytes);
#: below one block of depth 2 the solver falls back to subspace iteration.
KRYLOV_MEMORY = 2**30
#: Blocks per Krylov space (passes per restart; IMDB, d = 100: converged in one space
#: of 8, where 6 needed a restart).
KRYLOV_DEPTH = 8

#: Default extra columns of the randomized solver's block (``n_oversamples``).
N_OVERSAMPLES = 10
#: Relative residual below which the cheap estimate is replaced by a measured one.
_ESTIMATE_FLOOR = 1e-6


def start_block(v0: np.ndarray, width: int, rng: np.random.Generator) -> np.ndarray:
    """A D x ``width`` starting block: the columns of ``v0`` (at most ``width``, the
    leading ones), then random Gaussian columns.

    Random columns fill the block because ``v0`` spans at best the leading directions of
    a nearby matrix: the oversampling columns are what lets the iteration pick up the
    directions ``v0`` lacks (a pair that moved up past the k-th), as from a random start.
    """
    v0 = np.asarray(v0, dtype=np.float64)
    if v0.ndim == 1:
        v0 = v0.reshape(-1, 1)
    if v0.ndim != 2 or not np.all(np.isfinite(v0)):
        raise ValueError(f"v0 must be a finite D x c array; got shape {v0.shape}")
    c = min(int(v0.shape[1]), width)
    block = np.empty((v0.shape[0], width))
    block[:, :c] = v0[:, :c]
    block[:, c:] = rng.standard_normal((v0.shape[0], width - c))
    return block


def _with_image(v0: np.ndarray, av0: np.ndarray, width: int
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """(Q, A Q): the first ``width`` columns of ``v0`` made orthonormal (CholeskyQR2) and
    their image ``av0`` carried along by the same factors; None when ``v0`` has fewer
    columns or they are not clearly independent (the start is then :func:`start_block`'s,
    without its image)."""
    v0, av0 = np.asarray(v0, dtype=np.float64), np.asarray(av0, dtype=np.float64)
    if v0.ndim != 2 or v0.shape[1] < width or av0.shape[0] != v0.shape[0] \
            or av0.shape[1] < width or not np.all(np.isfinite(av0)):
        return None
    Q, AQ = v0[:, :width], av0[:, :width]
    for _ in range(2):  # the second round leaves Q orthonormal to round-off
        try:
            L = np.linalg.cholesky(Q.T @ Q)
        except np.linalg.LinAlgError:
            return None
        d = np.abs(np.diag(L))
        if d.min() <= 1e-7 * d.max():
            return None
        factor = np.linalg.inv(L.T)
        Q, AQ = Q @ factor, AQ @ factor
    return Q, AQ


def randomized_eigsh(
    op: ScatterOperator,
    k: int,
    *,
    n_oversamples: int = N_OVERSAMPLES,
    n_iter: int | None = None,
    max_passes: int = 30,
    tol: float = 1e-5,
    random_state: int = 0,
    v0: np.ndarray | None = None,
    keep_ritz: bool = False,
    av0: np.ndarray | None = None,
) -> EigenResult:
    """Top-k eigenpairs of ``op`` by a randomized block method, one pass per block product.

    When a Krylov space of two or more blocks fits in :data:`KRYLOV_MEMORY` (D w
    depth x 16 bytes; e.g. D = 1,001) and ``n_iter`` is not fixed, restarted block
    Krylov (:func:`dmlfe.solvers.partial.block_krylov_eigh`) extracts far more per
    pass. Otherwise (D = 2^20) block subspace iteration: each iteration is one pass
    (A Q for the D x (k + n_oversamples) block Q), a Rayleigh-Ritz step on the small
    matrix Q^T A Q and a CholeskyQR2 of A Q; the driver
    does O(D w^2) BLAS-3 work per pass, never a Householder QR of the tall block.
    The residual of every Ritz pair comes from the same pass without forming the
    Ritz vectors: ||A u - theta u||^2 = w^T (AQ^T AQ) w - theta^2.

    Parameters
    ----------
    op : ScatterOperator
    k : int
        Number of eigenpairs.
    n_oversamples : int
        Extra block columns; the convergence rate of pair i is about
        (lambda_{k+p+1} / lambda_i) per pass.
    n_iter : int, optional
        A fixed number of passes (scikit-learn's ``n_iter``); ``converged`` then says
        whether the residuals met ``tol`` anyway. None: iterate until they do, at most
        ``max_passes``.
    max_passes : int
        Most passes over X when ``n_iter`` is None.
    tol : float
        Converged when ||A u_i - theta_i u_i|| <= tol * theta_1 for every i < k; the
        eigenvalue error is then about (tol * theta_1)^2 / gap. Relative to theta_1, not
        to each pair as the dense solvers measure (every pass costs one over X): pairs
        far below theta_1 (MVMD's tail under its label part) are looser than ``tol``.
    random_state : int
        Seed of the starting block.
    v0 : ndarray (D, c), optional
        A warm start: these columns (e.g. the components of an earlier fit on fewer
        documents) begin the starting block, random ones fill it up to k +
        ``n_oversamples`` (:func:`start_block`). Only the start changes: the stopping
        rule, and so the accuracy, are those of a random start. On the block Krylov
        path a warm start checks its pairs after every pass (those of span(v0) first;
        restarts of depth 2) rather than after a whole Krylov space of passes.
    keep_ritz : bool
        Also return every Ritz vector of the last block (``ritz``, D x (k +
        ``n_oversamples``)): the best ``v0`` for a later solve on more documents (the
        oversampling columns start near the pairs after the k-th); ``ritz_image`` of the
        result is A ritz.
    av0 : ndarray (D, c), optional
        A v0 under ``op``, for a ``v0`` of at least k + ``n_oversamples`` columns (e.g.
        the scatter product saved with an earlier fit's Ritz vectors plus the new rows'
        part, :meth:`ScatterOperator.finish`): the Rayleigh-Ritz step on span(v0) then
        makes no pass, and the count starts with the first product after it.
    """
    D = op.n_features
    if not 1 <= k <= D:
        raise ValueError(f"k = {k} must be between 1 and D = {D}")
    if max_passes < 1:
        raise ValueError(f"max_passes must be at least 1; got {max_passes}")
    if n_iter is not None and n_iter < 1:
        raise ValueError(f"n_iter must be at least 1 (or None); got {n_iter}")
    if v0 is not None and np.shape(v0)[0] != D:
        raise ValueError(f"v0 has {np.shape(v0)[0]} rows but the operator is {D} x {D}")
    width = min(D, k + max(int(n_oversamples), 0))
    start = op.n_passes
    rng = np.random.default_rng(random_state)
    depth = 1 if n_iter is not None else int(min(KRYLOV_DEPTH, max_passes,
                                                 KRYLOV_MEMORY // (16 * D * width)))
    known = None if v0 is None or av0 is None else _with_image(v0, av0, width)
    if depth > 1:
        # the Krylov space of `depth` blocks fits in memory: far fewer passes than
        # subspace iteration for the same accuracy (IMDB, d = 100: 30+ -> a handful)
        first = None
        if v0 is not None:
            # a warm start is a few passes from converged: check after every pass (the
            # start block's own pairs first), not after `depth` of them. A restart of
            # depth 2 makes one product, as the thick restart knows A U already
            depth, first = 2, 1
        if known is None:
            start_v, start_av = None if v0 is None else start_block(v0, width, rng), None
        else:
            start_v, start_av = known
        w, U, info = block_krylov_eigh(op.matmat, D, k, block=width, depth=depth, tol=tol,
                                       max_restarts=max(1, (max_passes - 1) // (depth - 1))
                                       + (known is not None),
                                       random_state=random_state, floor=1.0,
                                       v0=start_v, av0=start_av, first_depth=first)
        ritz, image = info.pop("ritz"), info.pop("ritz_image")
        return EigenResult(
            components=flip_signs(U), eigenvalues=w, n_components=k,
            n_genuine=n_genuine(w), solver="block-krylov", n_passes=op.n_passes - start,
            converged=bool(info["converged"]), trace=op.trace(),
            residuals=np.asarray(info.pop("residuals"))[:k], ritz=ritz if keep_ritz else None,
            ritz_image=image if keep_ritz else None,
            info={**info, "random_state": random_state, "warm_start": v0 is not None,
                  "start_image": known is not None,
                  "max_residual_over_theta1": info["max_residual"]})
    AQ_known = None  # the start block's image, when it came with it: no pass for it
    if known is not None:
        Q, AQ_known = known
    else:
        Q = _orthonormal_basis(rng.standard_normal((D, width)) if v0 is None
                               else start_block(v0, width, rng), rng)
    converged = False
    limit = max_passes if n_iter is None else n_iter
    # two D x w blocks take turns as Q and A Q: the next basis is written over A Q (by
    # way of the old basis, free once Q^T A Q is made), and the next product over the
    # old basis -- no fresh D x w arrays after the first pass
    spare: np.ndarray | None = None
    while True:
        if AQ_known is None:
            AQ = op.matmat(Q, out=spare)
        else:
            AQ, AQ_known = AQ_known, None
        T = Q.T @ AQ
        theta, W = np.linalg.eigh(0.5 * (T + T.T))
        order = np.argsort(theta)[::-1]
        theta, W = theta[order], W[:, order]
        S = AQ.T @ AQ
        sq = np.einsum("ij,ij->j", W, S @ W) - theta * theta
        residuals = np.sqrt(np.clip(sq, 0.0, None))
        scale = max(abs(float(theta[0])), np.finfo(float).tiny)
        if np.all(residuals[:k] <= max(tol, _ESTIMATE_FLOOR) * scale):
            # the difference of squares cannot resolve residuals below ~1e-7 theta_1:
            # measure them directly (two D x w x k products, near the end only)
            residuals = np.linalg.norm(AQ @ W[:, :k] - (Q @ W[:, :k]) * theta[:k], axis=0)
        converged = bool(np.all(residuals[:k] <= tol * scale) or width == D)
        if converged and n_iter is None or op.n_passes - start >= limit:
            break
        spare, Q = Q, _orthonormal_basis(AQ, rng, gram=S, overwrite=True, work=Q)
    image = None
    if keep_ritz:  # every Ritz vector, in A Q's memory (A Q is not needed any more)
        image = AQ @ W
        ritz = np.matmul(Q, W, out=AQ) if AQ.flags.c_contiguous else Q @ W
        U = ritz[:, :k].copy()
    else:
        ritz, U = None, Q @ W[:, :k]
    eigenvalues = theta[:k].copy()
    return EigenResult(
        components=flip_signs_inplace(U),  # U is this function's own array
        eigenvalues=eigenvalues,
        n_components=k,
        n_genuine=n_genuine(eigenvalues),
        solver="randomized-subspace",
        n_passes=op.n_passes - start,
        converged=converged,
        residuals=residuals[:k].copy(),
        trace=op.trace(),
        info={"block_width": width, "tol": tol, "n_iter": n_iter,
              "random_state": random_state, "warm_start": v0 is not None,
              "start_image": known is not None,
              "max_residual_over_theta1": float(residuals[:k].max() / scale)},
        ritz=ritz,
        ritz_image=image,
    )


def lanczos_eigsh(
    op: ScatterOperator,
    k: int,
    *,
    tol: float = 0.0,
    maxiter: int | None = None,
    ncv: int | None = None,
    random_state: int = 0,
) -> EigenResult:
    """Top-k eigenpairs of ``op`` by ARPACK Lanczos; one pass per matrix-vector product.

    ``tol = 0`` asks ARPACK for machine precision. The pass count (usually a few
    times ncv = 2k + 1) is recorded on the result.
    """
    D = op.n_features
    if not 1 <= k < D:
        raise ValueError(f"Lanczos needs 1 <= k < D; got k = {k}, D = {D}")
    rng = np.random.default_rng(random_state)
    v0 = rng.standard_normal(D)
    lin = LinearOperator(
        (D, D), matvec=lambda v: op.matmat(np.reshape(v, (-1, 1))).ravel(), dtype=np.float64
    )
    start = op.n_passes
    vals, vecs = eigsh(lin, k=k, which="LA", v0=v0, tol=tol, maxiter=maxiter, ncv=ncv)
    order = np.argsort(vals)[::-1]
    eigenvalues = vals[order].copy()
    return EigenResult(
        components=flip_signs(vecs[:, order]),
        eigenvalues=eigenvalues,
        n_components=k,
        n_genuine=n_genuine(eigenvalues),
        solver="lanczos-arpack",
        n_passes=op.n_passes - start,
        converged=True,  # eigsh raises ArpackNoConvergence otherwise
        residuals=None,
        trace=op.trace(),
        info={"tol": tol, "ncv": ncv, "random_state": random_state},
    )


def matrix_free_eigh(
    X: Any,
    k: int,
    *,
    solver: str = "randomized",
    xx_coef: float = 1.0,
    lowrank: np.ndarray | None = None,
    centre: bool = True,
    stats: SufficientStats | None = None,
    client: Any = None,
    block_fn: BlockFn | None = None,
    random_state: int = 0,
    n_features: int | None = None,
    sums: tuple[int, np.ndarray, float] | None = None,
    v0_scatter: np.ndarray | None = None,
    **solver_options: Any,
) -> EigenResult:
    """Top-k eigenpairs of xx_coef * Xc^T Xc + lowrank lowrank^T by passes over X.

    ``solver`` is "randomized" (default; one pass per iteration, see
    :func:`randomized_eigsh`) or "lanczos" (one pass per matvec, see
    :func:`lanczos_eigsh`); ``solver_options`` go to that function.

    ``sums``: (n, column sums, sum of squares) of X, known before the first pass
    (:meth:`ScatterOperator.known_sums`). ``v0_scatter``: X^T X v0 for the randomized
    solver's ``v0``, so that its start makes no pass (its ``av0``). A ``ritz_image`` of the
    result is the scatter part X^T X ritz (:meth:`ScatterOperator.scatter_part`).
    """
    op = ScatterOperator(
        X,
        xx_coef=xx_coef,
        lowrank=lowrank,
        centre=centre,
        stats=stats,
        client=client,
        block_fn=block_fn,
        n_features=n_features,
    )
    if sums is not None:
        op.known_sums(*sums)
    if solver == "randomized":
        v0 = solver_options.get("v0")
        if v0_scatter is not None and v0 is not None and op.n is not None:
            v0 = np.asarray(v0, dtype=np.float64)
            solver_options["av0"] = op.finish(v0, np.array(v0_scatter, dtype=np.float64))
        res = randomized_eigsh(op, k, random_state=random_state, **solver_options)
        if res.ritz_image is not None:
            res.ritz_image = op.scatter_part(res.ritz, res.ritz_image)
        return res
    if solver == "lanczos":
        return lanczos_eigsh(op, k, random_state=random_state, **solver_options)
    raise ValueError(f"solver = {solver!r} is not one of 'randomized', 'lanczos'")


#: Default driver memory (bytes) a threshold n_components may take on this route (the
#: estimators' ``threshold_memory``): its rounds ask for at most as many pairs k as fit
#: three D' x (k + n_oversamples) float64 blocks and the D x k components in it (D' the
#: used columns).
THRESHOLD_MEMORY = 2**32


def threshold_memory_cap(n_used: int, n_features: int, n_oversamples: int,
                         memory: int = THRESHOLD_MEMORY) -> int:
    """The most pairs a threshold's rounds may ask for within ``memory`` bytes (at least 1)."""
    room = int(memory) // 8 - 3 * n_used * n_oversamples
    return max(1, int(room // (3 * n_used + n_features)))


#: A matrix-free fit that met ``tol`` (relative to theta_1: every pass costs one over X)
#: but whose kept pairs have a residual above this fraction of their own eigenvalue
#: warns: ``converged_`` alone would hide that those components are approximate (MVMD on
#: hashed text, route="feature", can converge in a few passes with kept pairs far off).
LOOSE_RESIDUAL = 1e-2


def _used_columns(stats: SufficientStats | None, block_fn: BlockFn | None,
                  lowrank: np.ndarray | None, D: int) -> np.ndarray | None:
    """The columns of X some document uses, when leaving the others out is exact and pays
    (:meth:`~dmlfe.stats.sufficient.SufficientStats.used_columns`; L = Xc^T Yc' has zero
    rows there too, which is checked, as ``lowrank`` may come from elsewhere)."""
    if stats is None or block_fn is not None or stats.n_features != D:
        return None
    cols = stats.used_columns()
    if cols is None or lowrank is None:
        return cols
    used = np.zeros(lowrank.shape[0], dtype=bool)
    used[cols] = True
    return None if np.any(lowrank[~used]) else cols


def solve_matrix_free(
    template: TraceTemplate,
    X: Any,
    n_components: int | float = DEFAULT_THRESHOLD,
    *,
    max_components: int | None = None,
    threshold_memory: int = THRESHOLD_MEMORY,
    solver: str = "randomized",
    client: Any = None,
    block_fn: BlockFn | None = None,
    random_state: int = 0,
    stats: SufficientStats | None = None,
    compact: bool = False,
    Y: Any = None,
    tiled: Any = None,
    v0: np.ndarray | None = None,
    keep_ritz: bool = False,
    v0_image: np.ndarray | None = None,
    added: Any = None,
    **solver_options: Any,
) -> EigenResult:
    """Solve a trace template in operator form by passes over X, and choose d.

    The matrix-free counterpart of :func:`dmlfe.solvers.dense.solve_dense`: A =
    ``xx_coef`` Xs^T Xs + ``lowrank`` ``lowrank``^T (B = I) is applied by
    :class:`ScatterOperator`, its leading eigenpairs come from
    :func:`matrix_free_eigh`, and d from the one dimension rule
    (:func:`dmlfe.solvers.dimension.choose_dimension`) with tr(A) as the
    denominator of a threshold.

    Parameters
    ----------
    template : TraceTemplate
        A template with an operator form (``operator_form``) and B = I.
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        The documents the template's statistics describe.
    n_components : int or float
        An int: d, and exactly d eigenpairs are computed. A float t in (0, 1]: d is
        the smallest number whose eigenvalues hold t * tr(A), found by rounds of
        growing k, at most ``min(max_components, D)`` and at most what
        ``threshold_memory`` holds
        (:func:`~dmlfe.solvers.dimension.threshold_rounds`; ``info["rounds"]``, and
        ``n_passes`` counts them all); a RuntimeWarning says when the computed ones
        fall short (d is then all genuine computed).
    max_components : int, optional
        Most eigenpairs computed for a threshold (None: as many as it needs).
    threshold_memory : int
        Bytes of driver memory a threshold's rounds may take (:func:`threshold_memory_cap`;
        default :data:`THRESHOLD_MEMORY`, 4 GiB).
    solver : {"randomized", "lanczos"}
        See :func:`matrix_free_eigh`.
    client : distributed.Client, optional
        Where the passes run.
    block_fn : callable, optional
        Applied to each X row block first (as in the statistics pass).
    random_state : int
        Seed of the solver's starting vectors.
    stats : SufficientStats, optional
        The statistics of X; when given, the first pass is cross-checked
        against them, and the columns they find empty are left out of the solve
        (:meth:`~dmlfe.stats.sufficient.SufficientStats.used_columns`).
    compact : bool
        Return the components on the used columns only (``columns`` of the result says
        which; the other rows are exactly zero) instead of all D rows.
    v0 : ndarray (D, c), optional
        A warm start for the randomized solver on X in the store (:func:`randomized_eigsh`):
        e.g. the components of an earlier fit of the same method on fewer documents.
        Not used by the n-space route nor by Lanczos; ``info["warm_start"]`` says
        whether it was.
    keep_ritz : bool
        Return the randomized solver's last block of Ritz vectors too (``ritz`` of the
        result, on the rows ``columns`` names when ``compact``): the ``v0`` of a later
        solve; ``ritz_image`` with it is X^T X ritz (the scatter part of A ritz,
        uncentred and unscaled), its ``v0_image``.
    v0_image : ndarray (D, c), optional
        With ``v0``, X_b^T X_b v0 for the rows X_b of X before ``added`` (the
        ``ritz_image`` of the fit that saved ``v0``, on fewer documents); ``added``: the
        rest of X's rows, its last ones (the documents appended since). A v0 is then that
        plus the added rows' part, by a pass over them only, centred and weighted from
        ``stats``: the solver's Rayleigh-Ritz step on span(v0) makes no pass over X
        (``info["start_image"]`` says whether it did so: not when v0 has fewer columns
        than the block). Used with the randomized solver on X, ``stats``
        (with their sums of squares) and no ``block_fn``; ignored otherwise.
    **solver_options
        Passed to the solver (:func:`randomized_eigsh`: n_oversamples, n_iter, tol,
        max_passes).

    Returns
    -------
    EigenResult
        ``components`` (D, d), the k computed ``eigenvalues``, ``n_passes`` made
        by the solver (the statistics pass not included), ``converged``,
        ``residuals`` and ``trace``.

    Raises
    ------
    ValueError
        If the template has no operator form or a constraint matrix B, or from
        :func:`dmlfe.solvers.dimension.choose_dimension`.

    Warns
    -----
    RuntimeWarning
        When the solver stopped before converging (the leading components are
        approximate), when it converged but a kept pair's residual is above
        :data:`LOOSE_RESIDUAL` of its own eigenvalue, or when a threshold is not reached
        by the computed eigenvalues.
    """
    n_components = check_n_components(n_components)
    if not template.operator_form or template.B is not None:
        raise ValueError(
            f"the {template.method} template has no operator form A = c Xs^T Xs + F F^T with "
            "B = I, which the matrix-free solver needs; solve it with the dense solver"
        )
    D = int(template.n_features)
    why_not = nspace.unavailable(template, X, Y, block_fn=block_fn, solver=solver,
                                 n_components=n_components, max_components=max_components)
    if why_not is None:
        res = nspace.solve_nspace(
            template, X, Y, n_components, stats=stats, client=client, tiled=tiled,
            max_components=max_components, threshold_memory=threshold_memory,
            random_state=random_state, **{k: v for k, v in solver_options.items()
                                          if k in ("tol", "max_passes", "n_iter", "block")})
        return finish_leading(template, res, n_components, D, compact, solver_options)
    lowrank = template.lowrank
    cols = _used_columns(stats, block_fn, lowrank, D)
    if cols is not None and isinstance(n_components, numbers.Integral) \
            and cols.size <= n_components:
        cols = None  # d reaches into the zero eigenvalues: keep the whole space
    if v0 is not None and np.shape(v0)[0] != D:
        raise ValueError(f"v0 has {np.shape(v0)[0]} rows but the {template.method} template "
                         f"has D = {D} features")
    start: dict[str, Any] = {}
    if solver == "randomized":
        start = {"keep_ritz": True} if keep_ritz else {}
        if v0 is not None:
            start["v0"] = v0 if cols is None else np.asarray(v0)[cols]
    if "v0" in start and v0_image is not None and added is not None and \
            block_fn is None and stats is not None and stats.sumsq_x is not None:
        start.update(_start_scatter(start["v0"], v0_image, added, stats, cols, D, client))
    if cols is not None:  # the solver works on the used columns only
        block_fn, stats = SelectColumns(cols, D), None
        lowrank = None if lowrank is None else lowrank[cols]
    Da = D if cols is None else int(cols.size)
    passes = 0

    def leading(k: int) -> EigenResult:
        nonlocal passes
        r = matrix_free_eigh(X, k, solver=solver, xx_coef=template.xx_coef, lowrank=lowrank,
                             centre=template.centred, stats=stats, client=client,
                             block_fn=block_fn, random_state=random_state, n_features=Da,
                             **start, **solver_options)
        passes += r.n_passes
        return r

    if isinstance(n_components, numbers.Integral):
        res = leading(int(n_components))
    else:
        # only the pairs the threshold needs: each round is passes of its own, and
        # hundreds of pairs at 2^20 would be blocks of 4 GB on the driver
        def solve(k: int) -> tuple[np.ndarray, float, EigenResult]:
            r = leading(k)
            return r.eigenvalues, float(r.trace), r

        extra = int(solver_options.get("n_oversamples", N_OVERSAMPLES))
        cap, note = threshold_cap(Da, max_components,
                                  threshold_memory_cap(Da, D, extra, threshold_memory),
                                  threshold_memory)
        res, rounds = threshold_rounds(solve, float(n_components), cap)
        res.info = {**(res.info or {}), "rounds": rounds, "cap_note": note}
        res.n_passes = passes
    res.info = {**(res.info or {}), "warm_start": "v0" in start}
    if cols is not None:
        res.columns = cols
    return finish_leading(template, res, n_components, D, compact, solver_options)


def _start_scatter(v0: np.ndarray, v0_image: np.ndarray, added: Any, stats: SufficientStats,
                   cols: np.ndarray | None, D: int, client: Any) -> dict[str, Any]:
    """The ``sums`` and ``v0_scatter`` of :func:`matrix_free_eigh` for a start ``v0``
    (already on the used columns ``cols``): X^T X v0 = ``v0_image`` (of the rows before
    ``added``) + added^T added v0, by a pass over the added rows only.

    Exact on the used columns: X has no entry outside them, so neither has X^T X v0 and
    (X^T X)[cols, cols] v0[cols] is its part there.
    """
    image = np.asarray(v0_image, dtype=np.float64)
    if image.shape != (D, np.shape(v0)[1]):
        raise ValueError(f"v0_image is {' x '.join(map(str, image.shape))} but v0 needs "
                         f"{D} x {np.shape(v0)[1]}")
    scatter = np.array(image if cols is None else image[cols])
    if added is not None and int(added.shape[0]):
        part = ScatterOperator(added, centre=False, client=client,
                               block_fn=None if cols is None else SelectColumns(cols, D),
                               n_features=scatter.shape[0])
        scatter += part.scatter_product(v0)
    sum_x = stats.sum_x if cols is None else stats.sum_x[cols]
    return {"v0_scatter": scatter,
            "sums": (int(stats.n), np.asarray(sum_x, dtype=np.float64),
                     float(np.sum(stats.sumsq_x)))}


def finish_leading(template: TraceTemplate, res: EigenResult, n_components: int | float,
                   D: int, compact: bool, solver_options: dict[str, Any]) -> EigenResult:
    """d from the one rule, the components cut to d (on all D rows unless ``compact``),
    and the warnings for approximate components."""
    if not res.converged:
        warnings.warn(
            f"{template.method}: the {res.solver} solver stopped after {res.n_passes} passes "
            "before its residuals met the tolerance; the leading components are approximate "
            "(see converged_)",
            RuntimeWarning,
            stacklevel=2,
        )
    d = choose_dimension(res.eigenvalues, n_components, total=res.trace,
                         cap_note=(res.info or {}).get("cap_note"))
    res.components = np.ascontiguousarray(res.components[:, :d])
    if res.columns is not None and not compact:
        res.components = expand_rows(res.components, res.columns, D)
        if res.ritz is not None:
            res.ritz = expand_rows(res.ritz, res.columns, D)
        if res.ritz_image is not None:
            res.ritz_image = expand_rows(res.ritz_image, res.columns, D)
        res.columns = None
    res.n_components = d
    res.n_genuine = n_genuine(res.eigenvalues)
    loose = res.max_own_residual()
    if res.converged and loose is not None and loose > LOOSE_RESIDUAL:
        tol = solver_options.get("tol", (res.info or {}).get("tol"))
        warnings.warn(
            f"{template.method}: the {res.solver} solver met its tolerance"
            f"{'' if tol is None else f' (tol = {tol:g})'} relative to the largest "
            f"eigenvalue after {res.n_passes} passes, but the residuals of smaller kept pairs "
            f"reach {loose:.2g} of their own eigenvalues (max_residual_): those components "
            "are approximate. Lower tol, raise n_iter or max_passes, or use route='dual' "
            "(exact) when the number of documents allows",
            RuntimeWarning,
            stacklevel=2,
        )
    return res
