"""A_p = X^T A X for n x n proximity matrices A, as one distributed pass (mope eq. 30-31).

The graph methods' A (and B) are sums of a sparse part on the K-NN graph's pattern
and a few low-rank label terms (Y diag(1/n_c) Y^T, m m^T, ...)::

    A = S + sum_k coef_k U_k V_k^T        (:class:`PairOperator`)

so X^T A X = X^T S X + sum_k coef_k (X^T U_k)(X^T V_k)^T, and no n x n dense matrix is
ever formed. One pass over the row blocks of X computes

* X_b^T (S_bc X_c) for every pair of row blocks (b, c) where S has entries -- the graph
  couples documents of different blocks, so a pair task reads both blocks;
* X_b^T U_b for the stacked factors and the column sums, per block;

reduced on the workers in a tree (:func:`dmlfe.compute.tree_reduce`). On the relation
route each block is first mapped to its relation features R_b (``block_fn``), so the
same pass gives R^T A R (p x p). Sums are float64.

In memory, an operator named in ``implicit`` comes back as a :class:`ProjectedOperator`
instead: R (or X) is held anyway, and R^T A R applied to a block of k vectors costs
two n x p products and one with the sparse part, where forming it costs 2 n p^2 flops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import (
    BlockFn,
    compute_one,
    is_dask,
    row_block_list,
    to_float_block,
    tree_reduce,
)
from dmlfe.stats.outer import dense_crossprod


@dataclass
class PairOperator:
    """An n x n matrix A = sparse + sum_k coef_k U_k V_k^T (U_k, V_k of shape (n, r_k))."""

    sparse: sp.csr_matrix | None = None
    lowrank: list[tuple[float, np.ndarray, np.ndarray]] = field(default_factory=list)

    def __add__(self, other: PairOperator) -> PairOperator:
        if self.sparse is None:
            s = other.sparse
        elif other.sparse is None:
            s = self.sparse
        else:
            s = sp.csr_matrix(self.sparse + other.sparse)
        return PairOperator(s, self.lowrank + other.lowrank)

    def __mul__(self, c: float) -> PairOperator:
        return PairOperator(None if self.sparse is None else sp.csr_matrix(self.sparse * c),
                            [(coef * c, U, V) for coef, U, V in self.lowrank])

    __rmul__ = __mul__

    def __neg__(self) -> PairOperator:
        return self * -1.0

    def __sub__(self, other: PairOperator) -> PairOperator:
        return self + (-other)

    def row_sums(self) -> np.ndarray:
        n = self.n
        out = np.zeros(n) if self.sparse is None else \
            np.asarray(self.sparse.sum(axis=1), dtype=np.float64).ravel()
        for coef, U, V in self.lowrank:
            out += coef * (U @ V.sum(axis=0))
        return out

    @property
    def n(self) -> int:
        if self.sparse is not None:
            return int(self.sparse.shape[0])
        return int(self.lowrank[0][1].shape[0])

    def scaled(self, s: np.ndarray) -> PairOperator:
        """diag(s) A diag(s)."""
        Ds = sp.diags(s)
        return PairOperator(None if self.sparse is None else sp.csr_matrix(Ds @ self.sparse @ Ds),
                            [(c, s[:, None] * U, s[:, None] * V) for c, U, V in self.lowrank])

    def dense(self) -> np.ndarray:
        """The n x n matrix (small n only: checks and tests)."""
        A = np.zeros((self.n, self.n)) if self.sparse is None else self.sparse.toarray()
        for coef, U, V in self.lowrank:
            A += coef * (U @ V.T)
        return A


def diagonal(d: np.ndarray) -> PairOperator:
    return PairOperator(sp.csr_matrix(sp.diags(np.asarray(d, dtype=np.float64))))


def laplacian(W: PairOperator) -> PairOperator:
    """L = D(W) - W, D(W) = diag(W 1) (mope section 2.1)."""
    return diagonal(W.row_sums()) - W


def lowrank(U: np.ndarray, V: np.ndarray | None = None, coef: float = 1.0) -> PairOperator:
    U = np.asarray(U, dtype=np.float64)
    U = U[:, None] if U.ndim == 1 else U
    if V is None:
        V = U
    V = np.asarray(V, dtype=np.float64)
    V = V[:, None] if V.ndim == 1 else V
    return PairOperator(None, [(float(coef), U, V)])


class ProjectedOperator:
    """R^T A R (p x p, symmetric) applied on demand: A = S + sum_k coef_k U_k V_k^T as in
    :class:`PairOperator`, with R (n x p) and the products R^T U_k, R^T V_k at hand.

    Symmetrised as the dense form is (0.5 (M + M^T)): S by 0.5 (S + S^T) once, each
    low-rank term by its two orders. ``A @ V`` (p x b) returns float64 (p x b);
    :meth:`toarray` (or ``np.asarray``) forms the dense matrix for the solvers that need
    every entry (a threshold over an indefinite A, small problems).
    """

    def __init__(self, R: np.ndarray, sparse: sp.csr_matrix | None,
                 lowrank: list[tuple[float, np.ndarray, np.ndarray]]) -> None:
        self.R = R
        self.sparse = None if sparse is None or sparse.nnz == 0 else \
            sp.csr_matrix(0.5 * (sparse + sparse.T))
        self.lowrank = lowrank
        p = int(R.shape[1])
        self.shape = (p, p)
        self.dtype = np.dtype(np.float64)

    def __matmul__(self, V: np.ndarray) -> np.ndarray:
        V = np.asarray(V, dtype=np.float64)
        out = np.zeros((self.shape[0],) + V.shape[1:])
        if self.sparse is not None:
            out += self.R.T @ (self.sparse @ (self.R @ V))
        for coef, a, b in self.lowrank:
            out += (0.5 * coef) * (a @ (b.T @ V) + b @ (a.T @ V))
        return out

    def trace(self) -> float:
        """tr(R^T S R) + sum_k coef_k tr((R^T V_k)^T R^T U_k), without the p x p matrix."""
        total = sum(coef * float(np.einsum("ij,ij->", a, b)) for coef, a, b in self.lowrank)
        if self.sparse is not None:
            step = 1024
            for s in range(0, self.R.shape[0], step):
                total += float(np.einsum("ij,ij->", self.sparse[s:s + step] @ self.R,
                                         self.R[s:s + step]))
        return total

    def toarray(self) -> np.ndarray:
        M = np.zeros(self.shape)
        if self.sparse is not None:
            M += _dense(self.R.T @ _dense_or_sparse(self.sparse @ self.R))
        for coef, a, b in self.lowrank:
            M += coef * (a @ b.T)
        return 0.5 * (M + M.T)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        M = self.toarray()
        return M if dtype is None else M.astype(dtype)


# --------------------------------------------------------------------------- the pass
def _mapped(xb: Any, block_fn: BlockFn | None) -> Any:
    xb = to_float_block(xb)
    return xb if block_fn is None else to_float_block(block_fn(xb))


def _dense(M: Any) -> np.ndarray:
    return M.toarray() if sp.issparse(M) else np.asarray(M)


def _pair(xb: Any, xc: Any, parts: dict[str, sp.csr_matrix]) -> dict[str, np.ndarray]:
    out = {}
    for name, S in parts.items():
        w = _nonneg_diagonal(S) if xb is xc and isinstance(xb, np.ndarray) else None
        # X^T diag(w) X of dense relation features (B = R^T D R of LPP, MESD, HSL...):
        # one symmetric rank-k product of diag(sqrt w) X, half the flops of X^T (S X)
        out[name] = _dense(xb.T @ _dense_or_sparse(S @ xc)) if w is None else \
            dense_crossprod(np.sqrt(w)[:, None] * xb)
    return out


def _nonneg_diagonal(S: sp.csr_matrix) -> np.ndarray | None:
    """S's diagonal when S is a diagonal matrix with no negative entry, else None."""
    S = sp.coo_matrix(S)
    if S.shape[0] != S.shape[1] or np.any(S.row != S.col) or np.any(S.data < 0):
        return None
    return np.asarray(S.diagonal(), dtype=np.float64)


def _dense_or_sparse(M: Any) -> Any:
    return sp.csr_matrix(M) if sp.issparse(M) else np.asarray(M)


def _own(xb: Any, F: np.ndarray) -> dict[str, np.ndarray]:
    return {"n": np.asarray(xb.shape[0], dtype=np.float64),
            "sum_x": np.asarray(xb.sum(axis=0), dtype=np.float64).ravel(),
            "xtf": _dense(xb.T @ F)}


def _add(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = dict(parts[0])
    for p in parts[1:]:
        for k, v in p.items():
            out[k] = out[k] + v if k in out else v
    return out


def graph_products(X: Any, operators: dict[str, PairOperator | None], *,
                   block_fn: BlockFn | None = None, client: Any = None,
                   progress: bool = False,
                   extra_factors: dict[str, np.ndarray] | None = None,
                   implicit: frozenset[str] = frozenset()) -> dict[str, Any]:
    """X^T A X for every named operator, in one pass over X (module docstring).

    ``implicit``: names of operators returned as a :class:`ProjectedOperator` when X is
    in memory (a dask X gives dense products whatever it says).

    Returns
    -------
    dict
        ``name -> X^T A X`` (dense, D x D or p x p) for each operator that is not None;
        ``"n"``, ``"sum_x"``; ``"xt:" + key -> X^T F`` for each of ``extra_factors``.
    """
    ops = {k: v for k, v in operators.items() if v is not None}
    n = int(X.shape[0])
    # stack every factor once: one X_b^T F_b product per block
    factors: list[np.ndarray] = []
    slots: dict[int, tuple[int, int]] = {}

    def slot(U: np.ndarray) -> tuple[int, int]:
        if id(U) not in slots:
            start = sum(f.shape[1] for f in factors)
            factors.append(U)
            slots[id(U)] = (start, start + U.shape[1])
        return slots[id(U)]

    extra = {k: slot(np.asarray(v, dtype=np.float64).reshape(n, -1))
             for k, v in (extra_factors or {}).items()}
    for op in ops.values():
        for _, U, V in op.lowrank:
            slot(U)
            slot(V)
    F = np.hstack(factors) if factors else np.zeros((n, 0))
    if not is_dask(X):
        # in memory X is one block: the block functions run here, without a dask graph
        xb = _mapped(X, block_fn)
        sparse = _sparse_parts(ops)
        parts = {k: S for k, S in sparse.items() if S.nnz and k not in implicit}
        total = _own(xb, F)
        if parts:
            total = _add(total, _pair(xb, xb, parts))
        out = _assemble(total, {k: v for k, v in ops.items() if k not in implicit}, slots,
                        extra)
        xtf = total["xtf"]
        for k in implicit & ops.keys():
            terms = [(coef, xtf[:, slice(*slots[id(U)])], xtf[:, slice(*slots[id(V)])])
                     for coef, U, V in ops[k].lowrank]
            out[k] = ProjectedOperator(xb, sparse.get(k), terms)
        return out
    raw, starts = row_block_list(X)
    blocks = [delayed(_mapped, pure=True)(xb, block_fn) for xb in raw]
    sparse = _sparse_parts(ops)
    tasks = []
    for b, xb in enumerate(blocks):
        lo, hi = starts[b], starts[b + 1]
        tasks.append(delayed(_own, pure=True)(xb, F[lo:hi]))
        rows = {k: S[lo:hi] for k, S in sparse.items()}
        for c, xc in enumerate(blocks):
            clo, chi = starts[c], starts[c + 1]
            parts = {k: R[:, clo:chi] for k, R in rows.items()}
            parts = {k: P for k, P in parts.items() if P.nnz}
            if parts:
                tasks.append(delayed(_pair, pure=True)(xb, xc, parts))
    total = compute_one(tree_reduce(tasks, _add), client=client, progress=progress,
                        desc="graph products")
    return _assemble(total, ops, slots, extra)


def _sparse_parts(ops: dict[str, PairOperator]) -> dict[str, sp.csr_matrix]:
    """The sparse part of each operator (CSR), for the pair products."""
    return {k: sp.csr_matrix(op.sparse) for k, op in ops.items() if op.sparse is not None}


def _assemble(total: dict[str, Any], ops: dict[str, PairOperator],
              slots: dict[int, tuple[int, int]], extra: dict[str, tuple[int, int]]
              ) -> dict[str, Any]:
    """The reduced partials -> X^T A X per operator (adding the low-rank parts), n, sum_x."""
    xtf = total["xtf"]
    out: dict[str, Any] = {"n": int(total["n"]), "sum_x": total["sum_x"]}
    for name, op in ops.items():
        M = total.get(name)
        if M is None:
            M = np.zeros((xtf.shape[0], xtf.shape[0]))
        for coef, U, V in op.lowrank:
            a, b_ = slots[id(U)]
            c_, d = slots[id(V)]
            M = M + coef * (xtf[:, a:b_] @ xtf[:, c_:d].T)
        out[name] = 0.5 * (M + M.T)
    for k, (a, b_) in extra.items():
        out["xt:" + k] = xtf[:, a:b_]
    return out
