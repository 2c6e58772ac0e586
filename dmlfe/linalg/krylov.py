"""Thick-restart block Lanczos whose vectors live elsewhere; the driver holds small matrices.

The k leading eigenpairs of a symmetric positive semi-definite operator K of dimension
n, when every vector of dimension n is too big or too far away to hold on the driver:
the vectors (the Krylov basis V, the newest block v and a work block w) stay in a
:class:`KrylovSpace` -- sharded over dask workers (:mod:`dmlfe.solvers.nspace`) or on
the driver (:class:`ArraySpace`) -- and the driver only ever sees small matrices: the
projections of w on V ((basis + block) x block numbers) and the R factors of its
shards. One iteration (:meth:`KrylovSpace.step`) is, in the space:

1. w = K v -- one pass over the data -- and C = V^T w;
2. w = w - V C (classical Gram-Schmidt), and the R factor of a Householder QR of each
   shard of w; their stack is factorised with column pivoting (TSQR, Demmel et al.
   2012, :func:`tsqr_mix`), so that w = Q R with Q orthonormal to working precision
   whatever w's conditioning -- MVMD's label directions put 10^6-10^7 between the
   largest and the smallest scale of an early block, where a Cholesky of w^T w cannot
   resolve the small ones -- and directions at round-off level (an exhausted Krylov
   space) are dropped;
3. C2 = V^T Q: the second Gram-Schmidt round, on unit columns, so that what the first
   round's cancellation left along V is removed *relative to each direction's own size*
   (a column of Q from a small direction of w carries eps ||w|| / R_jj of V; times
   theta_1, that would be the floor of the small pairs' residuals);
4. the basis takes v, and v becomes (Q - V C2) X, X the inverse Cholesky factor of
   I - C2^T C2 (:func:`unit_factor`).

A step returns (C_total, R_total) with K v = V C_total + v_new R_total. A space on a
cluster may start later steps before the driver has taken one in (``ahead``: as many
as the basis has room for before its next restart, at most :data:`AHEAD`), so that
its workers never wait for the driver's Rayleigh-Ritz; a restart, and the end, take in
the steps still in flight first (``settle``).

The driver keeps the projected matrix H = V^T K V (as computed, not forced symmetric)
and the coupling B of the newest block, so that

    K V = V H + v B

holds to round-off; the Ritz pairs (theta, y) of sym(H) then have the exact residual

    ||K V y - theta V y||^2 = ||H y - theta y||^2 + ||B y||^2

without another pass. Iterations stop when every one of the k leading pairs has a
residual at most ``tol`` times its *own* eigenvalue
(:func:`pair_scales`), so that the
small pairs of a spectrum with a large head are as accurate, relatively, as the large
ones. When the basis reaches ``max_basis`` columns it is cut back to its
``k + (max_basis - k) / 2`` leading Ritz vectors (a thick restart: what was learnt is
kept, in fewer vectors, and the relation above still holds).

Wu & Simon, "Thick-restart Lanczos method for large symmetric eigenvalue problems"
(SIAM J. Matrix Anal. Appl. 22, 2000) is the single-vector method; Zhou & Saad (2008)
discuss its block form. A small block (:data:`BLOCK`) makes the fewest products in all
(the fewer vectors a block has, the closer the method is to single-vector Lanczos, the
most economical in products), and its products are the cheapest per column, as the
block fits the CPU's caches; a cluster whose passes cost a fixed overhead takes wider
blocks (:func:`block_width`). ``benchmarks/scaling.py`` measures both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import scipy.linalg as sla

#: Residuals of pairs below this fraction of |theta_1| are measured against
#: PAIR_FLOOR x |theta_1| (round-off bounds what a pair near zero can reach).
PAIR_FLOOR = 1e-8


def pair_scales(theta: np.ndarray, floor: float = PAIR_FLOOR) -> np.ndarray:
    """What each Ritz pair's residual is measured against: |theta_i|, at least
    ``floor`` x |theta_1| (a pair near zero is converged at that level; floor 1 measures
    every pair against theta_1)."""
    top = max(abs(float(theta[0])) if theta.size else 0.0, np.finfo(float).tiny)
    return np.maximum(np.abs(theta), floor * top)


#: Vectors of the block that each pass multiplies (on one or two workers; see
#: :func:`block_width`): of 8, 12 and 16, the fastest fit of ``benchmarks/scaling.py``.
BLOCK = 8
#: Relative residual of a pair (to its own eigenvalue) at which it is converged.
TOL = 1e-5
#: Residuals of pairs below this fraction of theta_1 are measured against FLOOR x theta_1
#: (an eigenvalue of round-off size has no relative accuracy).
FLOOR = 1e-10
#: Most passes (operator products) of one solve.
MAX_PASSES = 300
#: Most steps a space may have started beyond the one the driver takes in next.
AHEAD = 3
#: A direction of the new block whose pivoted-QR diagonal is at most this fraction of
#: the largest column of K v is round-off (the Krylov space is exhausted there): dropped.
DROP = 1e-13


class KrylovSpace(Protocol):
    """Where the vectors of :class:`ThickRestartLanczos` live (see the module docstring).

    ``V`` is the basis followed by the newest block v. ``start`` draws a random block
    and makes it v; ``step`` is one iteration, and may start ``ahead`` more before it
    returns; ``settle`` returns the result of the oldest step still in flight, or None;
    ``restart(Y)`` replaces the basis by basis @ Y (m x keep, m the width the driver's H
    has: no step may be in flight).
    """

    dim: int
    n_passes: int

    def start(self, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]: ...

    def step(self, ahead: int = 0) -> tuple[np.ndarray, np.ndarray]: ...

    def settle(self) -> tuple[np.ndarray, np.ndarray] | None: ...

    def restart(self, Y: np.ndarray) -> None: ...


def block_width(k: int, n_slots: int = 1) -> int:
    """The default block: :data:`BLOCK` vectors on one or two workers (the fewest
    products in all), twice that on more (a pass then has enough work per worker to
    cover its fixed cost: three round trips and two exchanges), never above k."""
    return int(max(1, min(k, BLOCK if n_slots <= 2 else 2 * BLOCK)))


def default_basis(k: int, block: int) -> int:
    """The default ``max_basis``: 2.4 k, at least k + 8 blocks."""
    return int(max(int(2.4 * k), k + 8 * block))


def tsqr_mix(factors: list[np.ndarray], scale: float, drop: float = DROP
             ) -> tuple[list[np.ndarray], np.ndarray]:
    """The second stage of TSQR: from the R factors of the shards of w (w_i = Q_i R_i),
    the matrices M_i with Q = [Q_i M_i] orthonormal, and R with w = Q R.

    The stack of the R_i is factorised with column pivoting, so that the directions of
    w at round-off level (diagonal of R at most ``drop`` x ``scale``) come last and are
    dropped with their rows of R; ``scale`` is the largest column norm the block had
    before its projections.
    """
    b = factors[0].shape[1] if factors else 0
    rows = [f.shape[0] for f in factors]
    S = np.vstack(factors) if factors else np.zeros((0, b))
    if S.shape[0] == 0 or b == 0:
        return [np.zeros((r, 0)) for r in rows], np.zeros((0, b))
    Qs, Rs, piv = sla.qr(S, mode="economic", pivoting=True)
    d = np.abs(np.diag(Rs))
    rank = int(np.count_nonzero(d > drop * max(scale, np.finfo(float).tiny)))
    R = np.zeros((rank, b))
    R[:, piv] = Rs[:rank]
    bounds = np.concatenate([[0], np.cumsum(rows)])
    return [Qs[bounds[i]:bounds[i + 1], :rank] for i in range(len(factors))], R


def unit_factor(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(X, R) with R^T R = G and X = R^{-1} for G close to I (the block after its second
    Gram-Schmidt round); directions that G shows to lie in V (round-off) are dropped."""
    G = 0.5 * (G + G.T)
    try:
        R = np.linalg.cholesky(G).T
        if np.min(np.diag(R), initial=1.0) > 1e-3:
            return np.linalg.inv(R), R
    except np.linalg.LinAlgError:
        pass
    w, U = np.linalg.eigh(G)
    keep = w > 1e-6
    root = np.sqrt(w[keep])
    return U[:, keep] / root, root[:, None] * U[:, keep].T


def second_round(C1: np.ndarray, R1: np.ndarray, C2: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, C_total, R_total) of step 4: v_new = (Q - V C2) X, and
    K v = V (C1 + C2 R1) + v_new (R2 R1)."""
    X, R2 = unit_factor(np.eye(C2.shape[1]) - C2.T @ C2)
    return X, C1 + C2 @ R1, R2 @ R1


@dataclass
class KrylovResult:
    """Ritz pairs of the final basis: ``coefficients`` (basis x k) give the vectors."""

    eigenvalues: np.ndarray
    coefficients: np.ndarray
    residuals: np.ndarray
    converged: bool
    n_passes: int
    restarts: int
    info: dict[str, Any] = field(default_factory=dict)


class ThickRestartLanczos:
    """The driver's side of the method; :meth:`solve` may be called again with a larger
    k (a threshold's next round), continuing from the basis it has.

    Parameters
    ----------
    space : KrylovSpace
    block : int
        Width of the random start block (the later blocks keep it unless directions
        run out).
    max_basis : int, optional
        Columns of the basis that trigger a restart (default :func:`default_basis`).
    tol, floor, max_passes, seed
        See the module docstring.
    """

    def __init__(self, space: KrylovSpace, *, block: int = BLOCK, max_basis: int | None = None,
                 tol: float = TOL, floor: float = FLOOR, max_passes: int = MAX_PASSES,
                 seed: int = 0) -> None:
        if tol <= 0:
            raise ValueError(f"tol must be positive; got {tol}")
        self.space = space
        self.block = max(1, min(int(block), space.dim))
        self.max_basis = max_basis
        self.tol, self.floor, self.max_passes, self.seed = float(tol), float(floor), \
            int(max_passes), int(seed)
        self.H = np.zeros((0, 0))
        self.B = np.zeros((0, 0))
        self.restarts = 0
        self.passes = 0
        self._started = False

    @property
    def basis_size(self) -> int:
        return self.H.shape[0]

    def _start(self) -> None:
        _, R = self.space.start(self.block, self.seed)
        self.B = np.zeros((R.shape[0], 0))
        self._started = True

    def _take(self, step: tuple[np.ndarray, np.ndarray]) -> None:
        """Add a finished step (C_total, R_total) to H and B."""
        Ct, R = step
        m, bn = self.H.shape[0], self.B.shape[0]
        H = np.zeros((m + bn, m + bn))
        H[:m, :m] = self.H
        H[m:, :m] = self.B
        H[:, m:] = Ct
        self.H = H
        self.B = np.hstack([np.zeros((R.shape[0], m)), R])
        self.passes += 1

    def _ritz(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        theta, Y = np.linalg.eigh(0.5 * (self.H + self.H.T))
        theta, Y = theta[::-1], Y[:, ::-1]
        res = np.sqrt(np.square(self.H @ Y - Y * theta).sum(axis=0)
                      + np.square(self.B @ Y).sum(axis=0))
        return theta, Y, res

    def solve(self, k: int) -> KrylovResult:
        """The k leading Ritz pairs, iterated until converged or ``max_passes`` (but at
        least until the basis holds k vectors).

        A step whose pass was in flight when the pairs converged is taken in too, so the
        result is on the basis as it is when this returns.
        """
        n = self.space.dim
        k = int(k)
        if not 1 <= k <= n:
            raise ValueError(f"k = {k} must be between 1 and the dimension {n}")
        max_basis = min(n, self.max_basis or default_basis(k, self.block))
        max_basis = max(max_basis, min(n, k + self.block))
        if not self._started:
            self._start()
        while True:
            m, bn = self.basis_size, self.B.shape[0]
            if bn == 0 and m < k:
                # an invariant subspace before k pairs (K's rank is below k): the pairs
                # still missing are K's null space, reached from a fresh random block
                _, R = self.space.start(min(self.block, n - m), self.seed + m + 1)
                self.B = np.zeros((R.shape[0], m))
                continue
            if m >= k or bn == 0:
                theta, Y, res = self._ritz()
                rel = res[:k] / pair_scales(theta, self.floor)[:k]
                converged = bool(np.all(rel <= self.tol)) or bn == 0
                if converged or self.passes >= self.max_passes:
                    break
                if m + bn > max_basis:
                    last = self.space.settle()
                    if last is not None:  # a restart needs H to hold every step made
                        self._take(last)
                        continue
                    keep = min(m, k + max(self.block, (max_basis - k) // 2))
                    Yk = Y[:, :keep]
                    self.space.restart(Yk)
                    self.H = Yk.T @ self.H @ Yk
                    self.B = self.B @ Yk
                    self.restarts += 1
                    continue
            room = (max_basis - m - bn) // max(bn, 1) - 1  # steps before the restart
            ahead = max(0, min(AHEAD, room, self.max_passes - self.passes - 1))
            self._take(self.space.step(ahead=ahead))
        settled = False
        while (last := self.space.settle()) is not None:  # passes done or under way
            self._take(last)
            settled = True
        if settled:
            theta, Y, res = self._ritz()
            rel = res[:k] / pair_scales(theta, self.floor)[:k]
            converged = bool(np.all(rel <= self.tol)) or self.B.shape[0] == 0
        kk = min(k, theta.size)
        return KrylovResult(eigenvalues=theta[:kk].copy(), coefficients=Y[:, :kk].copy(),
                            residuals=res[:kk].copy(), converged=converged,
                            n_passes=self.passes, restarts=self.restarts,
                            info={"block": self.block, "max_basis": max_basis,
                                  "tol": self.tol, "basis": self.basis_size})


class ArraySpace:
    """A :class:`KrylovSpace` whose vectors are arrays in this process (one shard), for
    an operator given by its products ``matmat(V)`` (an n x b block in, K V out): the
    method on its own, as the tests check it against numpy's eigh, and the driver's
    solves of the label-operator route (:mod:`dmlfe.solvers.label_operator`). (The
    n-space fits use the sharded space of :mod:`dmlfe.solvers.nspace`.)

    The basis and the newest block share one buffer, grown by doubling, so that a step
    writes only the new block: at hundreds of thousands of rows, stacking the basis anew
    at every step would copy it whole each time.
    """

    def __init__(self, matmat: Any, dim: int) -> None:
        self.matmat = matmat
        self.dim = int(dim)
        self.n_passes = 0
        self._buf = np.zeros((self.dim, 0))
        self._m = 0  # basis columns
        self._b = 0  # newest block's columns, after the basis

    @property
    def basis(self) -> np.ndarray:
        return self._buf[:, :self._m]

    @property
    def v(self) -> np.ndarray:
        return self._buf[:, self._m:self._m + self._b]

    def _room(self, cols: int) -> None:
        if cols <= self._buf.shape[1]:
            return
        grown = np.zeros((self.dim, max(cols, 2 * self._buf.shape[1], 16)))
        grown[:, :self._m + self._b] = self._buf[:, :self._m + self._b]
        self._buf = grown

    def _orthonormalise(self, w: np.ndarray, C1: np.ndarray, scale: float
                        ) -> tuple[np.ndarray, np.ndarray]:
        V = self._buf[:, :self._m + self._b]
        q, r = np.linalg.qr(w - V @ C1)
        mix, R1 = tsqr_mix([r], scale)
        q = q @ mix[0]
        C2 = V.T @ q
        X, Ct, Rt = second_round(C1, R1, C2)
        new = (q - V @ C2) @ X
        self._m, self._b = self._m + self._b, 0  # the basis takes v
        self._room(self._m + new.shape[1])
        self._buf[:, self._m:self._m + new.shape[1]] = new
        self._b = new.shape[1]
        return Ct, Rt

    def start(self, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        w = np.random.default_rng(seed).standard_normal((self.dim, width))
        return self._orthonormalise(w, np.zeros((self._m + self._b, width)), 1.0)

    def step(self, ahead: int = 0) -> tuple[np.ndarray, np.ndarray]:
        self.n_passes += 1
        # a contiguous block: sparse products read a strided view column by column
        w = np.asarray(self.matmat(np.ascontiguousarray(self.v)), dtype=np.float64)
        C1 = self._buf[:, :self._m + self._b].T @ w
        return self._orthonormalise(w, C1, float(np.sqrt(np.square(w).sum(axis=0).max(
            initial=0.0))))

    def settle(self) -> None:
        return None

    def restart(self, Y: np.ndarray) -> None:
        kept = self.basis @ Y
        v = self.v.copy()
        keep = kept.shape[1]
        self._buf[:, :keep] = kept
        self._buf[:, keep:keep + self._b] = v
        self._m = keep

    def vectors(self, Y: np.ndarray) -> np.ndarray:
        """The Ritz vectors basis @ Y."""
        return self.basis @ Y
