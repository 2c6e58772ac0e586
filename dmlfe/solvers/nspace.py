"""The large-n route's eigensolver: a template's leading pairs in the documents' space,
with X in tiles on the workers and every vector of length n kept beside its rows.

A template in operator form (:class:`~dmlfe.methods.template.TraceTemplate`)

    A = c Xs^T Xs + F F^T,   Xs = H X (or X),   F = Xs^T G,   G = Yc K (the label factor)

is A = X^T L^2 X with L = M^{1/2} H, M = c I + G G^T (mvmd eq. 12 with the labels in
n-space; for PCA and LSI G is empty). Its non-zero eigenpairs are those of the n x n

    K = L X X^T L,      A p = theta p  <=>  K u = theta u,  p = X^T L u / sqrt(theta),

which the dual route forms whole (:mod:`dmlfe.solvers.dual`). Here K is only applied:
L = sqrt(c) I + Q_e diag(f) Q_e^T with Q_e = [Q, 1/sqrt(n)] orthonormal (Q spans G,
f from the eigenvalues of G^T G; the centring is the last column, f = -sqrt(c)), so
every L costs an n x (q + 1) product, and X X^T v is one pass over the tiles of
:class:`~dmlfe.shards.tiles.TiledMatrix`:

1. slot s: Z_s = X_s^T v = sum_r tile_{s,r} v_r (v's row ranges gathered from their
   slots: n x b numbers to every slot);
2. slot s, for each range r: the piece tile_{s,r}^T Z_s, sent to slot r;
3. slot r: P_r = sqrt(c) sum_s pieces + R_e,r diag(f) Q_e^T v, with R_e = X X^T Q_e
   made once: P = X X^T L v;
4. with the first projections, the sum Q_e^T P: w = K v = sqrt(c) P + Q_e diag(f) Q_e^T P
   on every range, and V^T w, ||w|| follow from V^T P, Q_e^T P and ||P||.

So a pass moves about 2 n b numbers per slot whatever W is, never a D x b block, and
the driver sees none of it. Every other vector operation of the thick-restart block
Lanczos method (:mod:`dmlfe.linalg.krylov`) runs on each row range where its rows
are; the small sums are made on slot 0 and sent back, and the driver only keeps the
projected matrix. n-space is the smaller one when n < D (100,000 documents at 2^20
features: ten times fewer numbers to orthogonalise than D-space, and a D x k block is
never formed before the end).

At the end the components come back in one more half pass, p = X^T L u / sqrt(theta)
on each slice (only the used columns: the others are zero), and the driver gathers
them slice by slice. The residuals reported are those of K; with r = K u - theta u
(orthogonal to the basis), the D-space residual is ||A p - theta p|| =
sqrt(r^T K r / theta), at most ||r|| once the basis holds the eigenvectors above theta.

Memory: the tiles take X's 12 bytes per stored value once over the workers, the basis
8 n (max basis + a few blocks) bytes (:func:`nspace_bytes`); a fit takes this route
when that is at most :data:`MEMORY_FRACTION` of the workers' memory.
"""

from __future__ import annotations

import hashlib
import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from dmlfe.linalg.krylov import (
    FLOOR,
    MAX_PASSES,
    TOL,
    KrylovResult,
    ThickRestartLanczos,
    block_width,
    default_basis,
    pair_scales,
    second_round,
    tsqr_mix,
)
from dmlfe.shards.slots import Group, Mailbox, Slots
from dmlfe.shards.tiles import Slice, TiledMatrix, tile_blocks
from dmlfe.solvers.dimension import n_genuine, threshold_cap, threshold_rounds
from dmlfe.solvers.result import flip_signs_inplace
from dmlfe.stats.gram import add_sparse_product

#: Columns of a block that one sparse product takes at a time (16 float64 columns of a
#: tile part's 32,768 documents are 4 MiB, which stay in the CPU's cache: see
#: :data:`dmlfe.shards.tiles.TILE_ROWS`; the components' d columns at once would not).
COLUMNS = 16
#: Components made per call (:meth:`ShardedSpace.components`): the Ritz vectors' rows,
#: their copies from the other slots and X_s^T U of 16 columns at a time (the width of
#: the sparse products, :data:`COLUMNS`), where all d at once would add three n x d
#: blocks to the tiles and the basis.
COMPONENT_COLUMNS = 16
#: Rows of the random start block drawn from one seed: the start does not depend on
#: how the rows are cut into ranges (so neither does the result, up to round-off).
DRAW_ROWS = 4096


# --------------------------------------------------------------------------- one slot
def _draw(r0: int, r1: int, width: int, seed: int) -> np.ndarray:
    """Rows r0..r1-1 of the random start block, the same whatever the ranges."""
    out = np.empty((r1 - r0, width))
    for c in range(r0 // DRAW_ROWS, -(-r1 // DRAW_ROWS)):
        rows = np.random.default_rng([seed, c]).standard_normal((DRAW_ROWS, width))
        a, b = max(c * DRAW_ROWS, r0), min((c + 1) * DRAW_ROWS, r1)
        out[a - r0:b - r0] = rows[a - c * DRAW_ROWS:b - c * DRAW_ROWS]
    return out


#: Rows of the basis a fused projection takes at a time (:meth:`NSpaceSlot._project_out`):
#: 1,024 rows of a basis of 240 columns are 2 MiB, which stay in the CPU's cache for
#: the second product and the slab's QR.
FUSED_ROWS = 1024
#: Largest condition number of a block's R factor for which the second Gram-Schmidt
#: round takes its projections from the first sweep (:meth:`NSpaceSlot._next_block`).
FUSED_COND = 1e3
#: Rows of the basis updated at a time by a restart (basis Y written over basis in place).
RESTART_ROWS = 8192


class ColumnStore:
    """One range's rows of the basis and of the newest block v, side by side in one
    C-ordered buffer: [basis | v] is a view (no copy for a projection), the block joins
    the basis by moving a column boundary, and a restart writes basis Y over the basis
    a slab of rows at a time (no second basis-sized array)."""

    def __init__(self, rows: int) -> None:
        self.buf = np.empty((int(rows), 0))
        self.m = 0   # basis columns
        self.bn = 0  # columns of v

    @property
    def V(self) -> np.ndarray:
        return self.buf[:, :self.m + self.bn]

    @property
    def basis(self) -> np.ndarray:
        return self.buf[:, :self.m]

    def _room(self, cols: int) -> None:
        if self.buf.shape[1] < cols:
            grown = np.empty((self.buf.shape[0], max(int(cols), 2 * self.buf.shape[1])))
            grown[:, :self.m + self.bn] = self.V
            self.buf = grown

    def push(self, v: np.ndarray) -> None:
        """The basis takes v; ``v`` becomes the newest block."""
        m = self.m + self.bn
        self._room(m + v.shape[1])
        self.buf[:, m:m + v.shape[1]] = v
        self.m, self.bn = m, v.shape[1]

    def restart(self, Y: np.ndarray) -> None:
        """basis <- basis Y (m x keep), v kept after it."""
        keep, m, bn = Y.shape[1], self.m, self.bn
        for r0 in range(0, self.buf.shape[0], RESTART_ROWS):
            slab = self.buf[r0:r0 + RESTART_ROWS]
            new = slab[:, :m] @ Y
            v = slab[:, m:m + bn].copy()
            slab[:, :keep] = new
            slab[:, keep:keep + bn] = v
        self.m = keep

    def minus(self, x: np.ndarray, C: np.ndarray) -> np.ndarray:
        """x - [basis | v] C, in x's memory."""
        if C.shape[0]:
            x -= self.V @ C
        return x


def _sum_in_order(parts: list[Any]) -> Any:
    """parts[0] + parts[1] + ... (elementwise for tuples), always in that order."""
    if isinstance(parts[0], tuple):
        return tuple(_sum_in_order([p[i] for p in parts]) for i in range(len(parts[0])))
    total = parts[0].copy()
    for p in parts[1:]:
        total += p
    return total


class NSpaceSlot(Mailbox):
    """Slot i of the solve: column slice i of X (its tiles) and the vectors' rows of range
    i. On a cluster it is a dask actor on the slot's worker (:meth:`Slots.spawn`); the
    driver calls its methods on all slots together, and the slots hand each other the
    pieces of a pass directly (:class:`~dmlfe.shards.slots.Mailbox`)."""

    def __init__(self, index: int, n_slots: int, sl: Slice, labels: np.ndarray | None,
                 r0: int, r1: int, n: int) -> None:
        super().__init__(index, n_slots)
        self.sl, self.labels = sl, labels
        self.r0, self.r1, self.n = int(r0), int(r1), int(n)
        self.g_rows: np.ndarray | None = None
        self.qe = np.zeros((self.r1 - self.r0, 0))
        self.e = np.zeros((sl.columns.size, 0))
        self.root_c, self.f = 1.0, np.zeros(0)
        self.re = np.zeros((self.r1 - self.r0, 0))  # X X^T Q_e on this range
        self.cols = ColumnStore(self.r1 - self.r0)
        # Q_e^T of the basis and of v (the same on every slot: made from sums)
        self.qv: tuple[np.ndarray, np.ndarray] = (np.zeros((0, 0)), np.zeros((0, 0)))
        self.q: np.ndarray | None = None
        self._tags = 0
        self._steps = 0
        #: steps whose second round took its projections from the first sweep, or not
        self.second_rounds = {"fused": 0, "product": 0}

    def _tag(self, name: str) -> str:
        self._tags += 1
        return f"{name}-{self._tags}"

    def _allgather(self, name: str, value: np.ndarray) -> list[np.ndarray]:
        tag = self._tag(name)
        self.post(tag, {d: value for d in range(self.n_members)})
        return self.collect(tag)

    def _xt(self, rows: list[np.ndarray]) -> np.ndarray:
        """X_s^T U = sum_r tile_r U_r from every range's rows of U, :data:`COLUMNS` columns
        of U at a time (a tile part's rows of them stay in the CPU's cache)."""
        width = rows[0].shape[1]
        out = np.zeros((self.sl.columns.size, width))
        for c0 in range(0, width, COLUMNS):
            c1 = min(c0 + COLUMNS, width)
            part = out if (c0, c1) == (0, width) else np.zeros((out.shape[0], c1 - c0))
            for tile, u in zip(self.sl.tiles, rows, strict=True):
                for sub, (a, b) in zip(tile.parts, tile.bounds, strict=True):
                    if sub.nnz:
                        add_sparse_product(part, sub, np.ascontiguousarray(u[a:b, c0:c1]),
                                           threads=1)
            if part is not out:
                out[:, c0:c1] = part
        return out

    def _x(self, tile_index: int, z: np.ndarray) -> np.ndarray:
        """tile_r^T Z: this slice's share of X Z on range r."""
        tile = self.sl.tiles[tile_index]
        out = np.empty((tile.n_rows, z.shape[1]))
        for sub, (a, b) in zip(tile.parts, tile.bounds, strict=True):
            out[a:b] = sub.T @ z if sub.nnz else 0.0
        return out

    def _proj(self, x: np.ndarray) -> np.ndarray:
        """[V, Q_e]^T x."""
        return np.vstack([self.cols.V.T @ x, self.qe.T @ x])

    # ---- the sandwich form
    def label_gram(self, mean: np.ndarray, factor: np.ndarray) -> np.ndarray:
        """G_r = (Y_r - mean) K is kept; its G_r^T G_r returned."""
        self.g_rows = (self.labels - mean) @ factor
        return self.g_rows.T @ self.g_rows

    def set_form(self, mix: np.ndarray | None, root_c: float, f: np.ndarray,
                 centred: bool) -> bool:
        """Q_e,r = [G_r mix, 1/sqrt(n)], then E_s = X_s^T Q_e (Q_e's rows from every slot)."""
        cols = [] if mix is None else [self.g_rows @ mix]
        if centred:
            cols.append(np.full((self.r1 - self.r0, 1), 1.0 / np.sqrt(self.n)))
        self.qe = np.hstack(cols) if cols else np.zeros((self.r1 - self.r0, 0))
        self.g_rows = None
        self.root_c, self.f = float(root_c), np.asarray(f, dtype=np.float64)
        g = self.qe.shape[1]
        self.e = self._xt(self._allgather("qe", self.qe)) if g else \
            np.zeros((self.sl.columns.size, 0))
        # R_e = X X^T Q_e on this range (a pass of width g, once): the passes then apply
        # X X^T to v alone, and the label part costs n_r x g x b, not D_s x g x b
        tag = self._tag("re")
        for r in range(self.n_members):
            self.post(tag, {r: self._x(r, self.e) if g else None})
        got = self.collect(tag)
        self.re = _sum_in_order(got) if g else np.zeros((self.r1 - self.r0, 0))
        return True

    # ---- the Krylov steps (see ShardedSpace)
    def _allsum(self, name: str, value: Any) -> Any:
        """The sum of every slot's ``value`` (arrays, or tuples of them), on every slot."""
        return self.reduce(self._tag(name), value, _sum_in_order)

    def _expand(self) -> np.ndarray:
        """P = X X^T L v on this range, one pass (see the module docstring): v's rows from
        every slot, then each range r gets from slot s the piece tile_r^T X_s^T v, and
        P_r = sqrt(c) sum_s pieces + R_e,r diag(f) Q_e^T v. (w = K v = L P needs the
        sum Q_e^T P: :meth:`step` makes it with the projections.)"""
        rows = self._allgather("v", np.ascontiguousarray(self.cols.V[:, self.cols.m:]))
        with self.timed("pass_xt"):
            z = self._xt(rows)  # X_s^T v
        del rows
        tag = self._tag("piece")
        with self.timed("pass_x"):
            for r in range(self.n_members):  # each piece leaves as soon as it is made
                self.post(tag, {r: self._x(r, z)})
        del z
        got = self.collect(tag)
        with self.timed("pass_sum"):
            p = _sum_in_order(got)  # (X X^T v)_r
            if self.root_c != 1.0:
                p *= self.root_c
            if self.f.size:  # + R_e diag(f) Q_e^T v: X X^T L v
                p += self.re @ (self.f[:, None] * self.qv[1])
        return p

    def _project_out(self, w: np.ndarray, C1: np.ndarray
                     ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, list[np.ndarray]]:
        """One sweep of V over w's rows, a slab at a time while the slab is in the CPU's
        cache: w - V C1 (in w's memory), [V, Q_e]^T of it (S), and the Householder QR of
        each slab, whose R factors are factorised again (the first level of TSQR within
        this range). Returns (S, the slabs' Q factors, this range's R, and the pieces of
        the second QR's Q that go with each slab): w - V C1 = [Q_c M_c] R.

        The basis is the largest array a step reads, and reading it (three sweeps a
        step, not four) is most of a step's own time."""
        V, qe = self.cols.V, self.qe
        S = np.zeros((V.shape[1] + qe.shape[1], w.shape[1]))
        m = V.shape[1]
        qs, rs = [], []
        for r0 in range(0, w.shape[0], FUSED_ROWS):
            r1 = min(r0 + FUSED_ROWS, w.shape[0])
            ws = w[r0:r1]
            if C1.size:
                ws -= V[r0:r1] @ C1
            S[:m] += V[r0:r1].T @ ws
            S[m:] += qe[r0:r1].T @ ws
            q, r = np.linalg.qr(ws)
            qs.append(q)
            rs.append(r)
        if not rs:
            return S, [], np.zeros((0, w.shape[1])), []
        M, R = np.linalg.qr(np.vstack(rs))
        cuts = np.cumsum([r.shape[0] for r in rs])[:-1]
        return S, qs, R, np.split(M, cuts)

    def _next_block(self, w: np.ndarray, C1: np.ndarray, scale: float
                    ) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2-4 of :mod:`dmlfe.linalg.krylov` on w (V^T w = C1): TSQR of w - V C1
        from every slot's R factor, the second round on unit columns, and the advance;
        (C_total, R_total).

        The second round's projections [V, Q_e]^T Q come from those of w - V C1 = Q R,
        made in the same sweep (:meth:`_project_out`): [V, Q_e]^T Q = S R^+, whose error
        is eps cond(R), where a product with Q is eps. When R's condition number is at
        most :data:`FUSED_COND` (the second round then leaves Q orthogonal to V to about
        1e-13) the step saves that sweep and an exchange; MVMD's early blocks, whose
        directions differ in scale by 10^6, take the product with Q."""
        with self.timed("orthogonalise"):
            S, slab_q, r, slab_m = self._project_out(w, C1)
        del w
        g = self.f.size
        qV = np.hstack(self.qv)

        def advance(C2: np.ndarray, qw: np.ndarray, R1: np.ndarray) -> tuple[np.ndarray, ...]:
            X, Ct, Rt = second_round(C1, R1, C2)
            return C2, X, Ct, Rt, (qw - qV @ C2) @ X

        def mix_and_advance(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[Any, ...]:
            mix, R1 = tsqr_mix([f for f, _ in parts], scale)
            if R1.shape[0] and np.linalg.cond(R1) > FUSED_COND:
                return mix, R1, None
            Z = np.linalg.lstsq(R1.T, _sum_in_order([s for _, s in parts]).T,
                                rcond=None)[0].T  # Z R1 = S
            return mix, R1, advance(Z[:Z.shape[0] - g], Z[Z.shape[0] - g:], R1)

        mix, R1, fused = self.reduce(self._tag("r"), (r, S), mix_and_advance)
        with self.timed("orthogonalise"):
            mine = mix[self.index]
            q = np.empty((self.r1 - self.r0, mine.shape[1]))
            at = 0
            for qc, mc in zip(slab_q, slab_m, strict=True):
                q[at:at + qc.shape[0]] = qc @ (mc @ mine)
                at += qc.shape[0]
            del slab_q
        self.second_rounds["fused" if fused is not None else "product"] += 1
        if fused is None:
            with self.timed("orthogonalise"):
                local = self._proj(q)

            def finish(parts: list[np.ndarray]) -> tuple[np.ndarray, ...]:
                P = _sum_in_order(parts)
                return advance(P[:P.shape[0] - g], P[P.shape[0] - g:], R1)

            fused = self.reduce(self._tag("c2"), local, finish)
        C2, X, Ct, Rt, qv = fused
        with self.timed("orthogonalise"):
            self.cols.push(self.cols.minus(q, C2) @ X)
        self.qv = (qV, qv)
        return Ct, Rt

    def start(self, width: int, seed: int) -> tuple[int, np.ndarray, np.ndarray, str]:
        """A random block (rows by global position) made the newest block v."""
        self._steps = 0
        g = self.f.size
        self.qv = (np.zeros((g, 0)), np.zeros((g, 0)))
        w = _draw(self.r0, self.r1, width, seed)
        C1 = np.zeros((self.cols.m + self.cols.bn, width))
        return self._stamped(*self._next_block(w, C1, 1.0))

    def step(self) -> tuple[int, np.ndarray, np.ndarray, str]:
        """One iteration: w = K v, and w made the new block. Returns (the step's number,
        C_total, R_total, a digest of them: every slot must have the same).

        Calls made one after another can reach a worker in another order; every call is
        "the next step" and says which it was.
        """
        self._steps += 1
        p = self._expand()
        with self.timed("orthogonalise"):
            local = (self._proj(p), np.square(p).sum(axis=0))
        S, pp = self._allsum("c1", local)
        # w = L P = sqrt(c) P + Q_e diag(f) Q_e^T P: its projections and norms from P's
        g, rc = self.f.size, self.root_c
        VtP, QP = S[:S.shape[0] - g], S[S.shape[0] - g:]
        fq = self.f[:, None] * QP
        C1 = rc * VtP + np.hstack(self.qv).T @ fq
        norms = rc * rc * pp + np.sum(fq * (2.0 * rc * QP + fq), axis=0)
        with self.timed("orthogonalise"):
            w = p if rc == 1.0 else p * rc
            if g:
                w += self.qe @ fq
        del p
        return self._stamped(*self._next_block(w, C1, float(np.sqrt(np.max(norms,
                                                                           initial=0.0)))))

    def restart(self, Y: np.ndarray) -> bool:
        """The basis becomes basis Y (m x keep); v stays."""
        with self.timed("restart"):
            self.cols.restart(Y)
        self.qv = (self.qv[0] @ Y, self.qv[1])
        return True

    def second_round_counts(self) -> dict[str, int]:
        return dict(self.second_rounds)

    def _stamped(self, Ct: np.ndarray, Rt: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, str]:
        digest = hashlib.sha1(np.ascontiguousarray(Ct).tobytes()
                              + np.ascontiguousarray(Rt).tobytes()).hexdigest()
        return self._steps, Ct, Rt, digest

    def components(self, Y: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """This slice's rows of X^T L (basis Y) diag(scale)."""
        qy = self.qv[0][:, :Y.shape[0]] @ Y
        with self.timed("components"):
            U = self.cols.basis @ Y
        rows = self._allgather("ritz", U)
        with self.timed("components"):
            z = self._xt(rows)
            z *= self.root_c
            if self.f.size:
                z += self.e @ (self.f[:, None] * qy)
            z *= scale
        return z


# --------------------------------------------------------------------------- the space
@dataclass
class SandwichForm:
    """A = X^T L^2 X with L = sqrt(c) I + Q_e diag(f) Q_e^T (see the module docstring);
    Q_e and E_s are held by the slots."""

    root_c: float
    f: np.ndarray

    @property
    def g(self) -> int:
        return int(self.f.size)


def sandwich_form(group: Group, *, n: int, xx_coef: float, centred: bool,
                  label_factor: np.ndarray | None, label_mean: np.ndarray | None,
                  drop: float = 1e-12) -> SandwichForm:
    """L for a template, set up on the slots: Q from the labels' rows (G_r = (Y_r - mean)
    K, G^T G summed on the driver, Q = G E lambda^{-1/2}), then E_s = X_s^T Q_e (a half
    pass). ``label_factor`` None: no low-rank part (PCA, LSI)."""
    c = float(xx_coef)
    root_c = float(np.sqrt(max(c, 0.0)))
    W = len(group.members)
    mix = None
    f = np.zeros(0)
    if label_factor is not None and np.size(label_factor):
        K = np.asarray(label_factor, dtype=np.float64)
        mean = np.asarray(label_mean, dtype=np.float64)
        GtG = sum(group.call("label_gram", [(mean, K)] * W))
        lam, E = np.linalg.eigh(0.5 * (GtG + GtG.T))
        keep = lam > drop * max(float(lam.max(initial=0.0)), np.finfo(float).tiny)
        lam, E = lam[keep], E[:, keep]
        mix = E / np.sqrt(lam)
        f = np.sqrt(c + lam) - root_c
    if centred:
        f = np.concatenate([f, [-root_c]])
    group.call("set_form", [(mix, root_c, f, centred)] * W)
    return SandwichForm(root_c=root_c, f=f)


class ShardedSpace:
    """The :class:`~dmlfe.linalg.krylov.KrylovSpace` of K = L X X^T L on the slots.

    A step is one call on all slots (:meth:`NSpaceSlot.step`): the pass, then the
    orthonormalisation, whose three sums (the projections, the shards' R factors, the
    second projections) slot 0 gathers, adds and turns into the small factors, which it
    sends back (:meth:`~dmlfe.shards.slots.Mailbox.reduce`): no round trip through the
    driver, which only takes in (C_total, R_total), after checking that every slot has
    the same. Later steps are
    started before the driver takes one in (``ahead``): their calls wait on each slot
    behind the running one, so the slots go on while the driver does its Rayleigh-Ritz;
    a restart waits for the steps in flight (``settle``) and is a call of its own.
    """

    def __init__(self, group: Group, form: SandwichForm, n: int) -> None:
        self.group, self.form = group, form
        self.dim = int(n)
        self.n_passes = 0
        self.W = len(group.members)
        # step calls fired and not yet harvested, per slot; their results by step number
        self._pending: list[deque[Any]] = [deque() for _ in range(self.W)]
        self._results: list[dict[int, Any]] = [{} for _ in range(self.W)]
        self._fired = 0
        self._taken = 0

    def _result(self, out: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        digests = {o[-1] for o in out}
        if len(digests) > 1:
            seen = [(o[-3].shape, o[-2].shape, o[-1][:8]) for o in out]
            raise RuntimeError(
                f"the slots hold different small factors of one step ({seen}): a slot "
                "missed a step or took another's; run the fit again")
        return out[0][-3], out[0][-2]

    def _fire(self) -> None:
        for s, f in enumerate(self.group.fire("step")):
            self._pending[s].append(f)
        self._fired += 1
        self.n_passes += 1

    def _take_next(self) -> tuple[np.ndarray, np.ndarray]:
        """The next step's result from every slot (whichever of its calls ran it):
        the oldest call of every slot that lacks it, waited for together."""
        k = self._taken + 1
        while True:
            short = [s for s in range(self.W) if k not in self._results[s]]
            if not short:
                break
            got = self.group.wait([self._pending[s].popleft() for s in short])
            for s, g in zip(short, got, strict=True):
                self._results[s][g[0]] = g
        self._taken = k
        return self._result([self._results[s].pop(k) for s in range(self.W)])

    def start(self, width: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        self._fired = self._taken = 0
        return self._result(self.group.call("start", [(width, seed)] * self.W))

    def step(self, ahead: int = 0) -> tuple[np.ndarray, np.ndarray]:
        while self._fired - self._taken < 1 + ahead:  # queued behind the running step
            self._fire()
        return self._take_next()

    def settle(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The oldest step in flight, finished (None when there is none)."""
        return None if self._fired == self._taken else self._take_next()

    def restart(self, Y: np.ndarray) -> None:
        """basis <- basis Y on every slot, now (no step may be in flight: a call made
        after it could otherwise run first)."""
        if self._fired != self._taken:
            raise RuntimeError("a restart needs the steps in flight settled first")
        self.group.call("restart", [(Y,)] * self.W)

    def components(self, Y: np.ndarray, theta: np.ndarray, tiled: TiledMatrix
                   ) -> tuple[np.ndarray, np.ndarray]:
        """(columns, P): the D-space components X^T L U diag(theta^{-1/2}) on the used
        columns (sorted), U = basis Y; zero columns for theta <= 0. One half pass, made
        :data:`COMPONENT_COLUMNS` components at a time."""
        if self._fired != self._taken:
            raise RuntimeError("components need a settled basis")
        self.n_passes += 1
        scale = np.zeros(theta.size)
        np.divide(1.0, np.sqrt(theta), out=scale, where=theta > 0)
        columns, position = tiled.used_columns()
        P = np.empty((columns.size, theta.size))
        chunks = [(c0, min(c0 + COMPONENT_COLUMNS, theta.size))
                  for c0 in range(0, theta.size, COMPONENT_COLUMNS)]

        def fire(c0: int, c1: int) -> list[Any]:
            return self.group.fire("components", [(Y[:, c0:c1], scale[c0:c1])] * self.W)

        fired = fire(*chunks[0]) if chunks else []
        for i, (c0, c1) in enumerate(chunks):
            parts = self.group.wait(fired)
            # the next chunk is made while this one is put in place (a chunk starts once
            # the last has ended on every slot: the slots take the calls in order)
            fired = fire(*chunks[i + 1]) if i + 1 < len(chunks) else []
            at = 0
            for part in parts:
                P[position[at:at + part.shape[0]], c0:c1] = part
                at += part.shape[0]
            del parts
        return columns, flip_signs_inplace(P)


@dataclass
class NSpaceResult:
    """What :func:`nspace_eigh` found: the D-space components on ``columns``."""

    eigenvalues: np.ndarray
    components: np.ndarray
    columns: np.ndarray
    residuals: np.ndarray
    converged: bool
    n_passes: int
    info: dict[str, Any]


def nspace_eigh(tiled: TiledMatrix, k: int, *, xx_coef: float, centred: bool,
                label_factor: np.ndarray | None = None, label_mean: np.ndarray | None = None,
                tol: float, block: int | None = None, max_basis: int | None = None,
                max_passes: int = 300, seed: int = 0, rounds: Any = None) -> NSpaceResult:
    """The k leading eigenpairs of A = X^T L^2 X by thick-restart block Lanczos on K.

    ``rounds``: a threshold's rounds (:func:`dmlfe.solvers.dimension.threshold_rounds`)
    call ``rounds(solve)`` with ``solve(k)`` continuing from the basis it has; None
    solves for k once.
    """
    slots, W = tiled.slots, tiled.n_slots
    b = block or block_width(k, W)
    clock0 = slots.clock.snapshot()
    group = slots.spawn(NSpaceSlot, [
        (i, W, tiled.slices[i], None if tiled.labels is None else tiled.labels[i],
         int(tiled.bounds[i]), int(tiled.bounds[i + 1]), tiled.n) for i in range(W)])
    # the driver's algebra is on small matrices: its BLAS threads would only compete
    # with the slots (the workers on this machine, or the slot threads of this process)
    limits = threadpool_limits(limits=1)
    try:
        form = sandwich_form(group, n=tiled.n, xx_coef=xx_coef, centred=centred,
                             label_factor=label_factor, label_mean=label_mean)
        space = ShardedSpace(group, form, tiled.n)
        solver = ThickRestartLanczos(space, block=b, max_basis=max_basis, tol=tol,
                                     max_passes=max_passes, seed=seed)
        if rounds is None:
            res: KrylovResult = solver.solve(min(int(k), tiled.n))
        else:
            res = rounds(lambda kk: solver.solve(min(int(kk), tiled.n)))
        columns, P = space.components(res.coefficients, res.eigenvalues, tiled)
        timings = group.call("timings")
        rounds2 = group.call("second_round_counts")[0]
    finally:
        limits.restore_original_limits()
        group.close()
    clock1 = slots.clock.snapshot()
    return NSpaceResult(eigenvalues=res.eigenvalues, components=P, columns=columns,
                        residuals=res.residuals, converged=res.converged,
                        n_passes=space.n_passes,
                        info={**res.info, "restarts": res.restarts,
                              "krylov_passes": res.n_passes, "block": b,
                              "default_basis": default_basis(k, b), "slots": W,
                              "slot_seconds": timings, "second_rounds": rounds2,
                              "driver": {key: clock1[key] - clock0[key] for key in clock1}})


# --------------------------------------------------------------------------- the route
#: Fraction of the workers' memory the tiles and the Krylov vectors may take; above it
#: the fit keeps reading X from the store on every pass
#: (:class:`~dmlfe.solvers.matrix_free.ScatterOperator`).
MEMORY_FRACTION = 0.6


def nspace_bytes(nnz: int, n: int, k: int, block: int) -> int:
    """Worker memory the route needs in all: the tiles (12 bytes per stored value, held
    once), the basis and a few blocks (8 n (max basis + 4 blocks) bytes)."""
    return int(12 * nnz + 8 * n * (default_basis(k, block) + 4 * block))


def capacity(slots: Slots) -> int:
    """Bytes the slots' workers may hold: their memory limits (the machine's memory for a
    worker without one), or this process's available memory without a cluster."""
    import psutil

    if slots.client is None:
        return int(psutil.virtual_memory().available)
    workers = slots.client.scheduler_info()["workers"]
    total = int(psutil.virtual_memory().total)
    return int(sum(int(w.get("memory_limit") or total) for w in workers.values()))


def unavailable(template: Any, X: Any, Y: Any, *, block_fn: Any, solver: str,
                n_components: int | float, max_components: int | None) -> str | None:
    """Why the n-space route cannot solve this template on X (None when it can)."""
    n, D = int(X.shape[0]), int(X.shape[1])
    if solver != "randomized":
        return f"solver={solver!r} applies its own products"
    if block_fn is not None:
        return "the passes map every row block first (relation features)"
    if template.lowrank is not None and template.label_factor is None:
        return "its low-rank part has no form in the documents' space"
    if template.lowrank is not None and Y is None:
        return "the labels were not given"
    k = int(n_components) if isinstance(n_components, numbers.Integral) else \
        threshold_cap(max(n - 1, 1), max_components)[0]
    if n >= D:
        return f"n = {n} >= D = {D}: the features' space is the smaller one"
    if k >= n:
        return f"{k} components from n = {n} documents"
    return None


def template_trace(template: Any, stats: Any, tiled: TiledMatrix) -> float:
    """tr(A) = c tr(Xs^T Xs) + ||F||_F^2, from the statistics (or the tiles' sums)."""
    if stats is not None and stats.sumsq_x is not None:
        sums, sumsq, n = stats.sum_x, float(np.sum(stats.sumsq_x)), stats.n
    else:
        (sums, sumsq), n = tiled.sums(), tiled.n
    scatter = sumsq - (float(sums @ sums) / n if template.centred and n else 0.0)
    tr = float(template.xx_coef) * scatter
    if template.lowrank is not None:
        tr += float(np.sum(np.square(template.lowrank)))
    return tr


def solve_nspace(template: Any, X: Any, Y: Any, n_components: int | float, *,
                 stats: Any = None, client: Any = None, tiled: TiledMatrix | None = None,
                 max_components: int | None = None,
                 threshold_memory: int = 2**32, random_state: int = 0, tol: float = TOL,
                 max_passes: int = MAX_PASSES, n_iter: int | None = None,
                 block: int | None = None) -> Any:
    """A trace template's leading pairs on the n-space route; an
    :class:`~dmlfe.solvers.result.EigenResult` with the components on the used columns
    (``columns``) and all k computed pairs (d is chosen by the caller).

    X is tiled on ``client``'s workers (or, without one, in this process) by one read
    (:func:`dmlfe.shards.tiles.tile_blocks`), solved (:func:`nspace_eigh`) and let go --
    unless the caller holds its tiles already (``tiled``, with the labels when the
    template has a label part), which are used and kept.
    ``n_iter``, scikit-learn's fixed count, makes exactly that many passes (``converged``
    then says whether ``tol`` was met anyway). A threshold ``n_components`` grows k in
    rounds (:func:`~dmlfe.solvers.dimension.threshold_rounds`) on one Krylov basis, at
    most ``max_components`` pairs (None: n - 1) and as many as ``threshold_memory``
    bytes of components hold on the driver.
    """
    from dmlfe.compute import computing_client, driver_threads
    from dmlfe.solvers.result import EigenResult

    labels = Y if template.lowrank is not None else None
    own = tiled is None
    if own:
        slots = Slots(computing_client(client), n_local=driver_threads())
        tiled = tile_blocks(X, labels, slots)
    try:
        trace = template_trace(template, stats, tiled)
        D_used = int(sum(c.size for c in tiled.columns))
        mean = None
        if labels is not None:
            mean = stats.mean_y if stats is not None else \
                np.asarray(Y.mean(axis=0).compute() if hasattr(Y, "compute") else
                           np.mean(Y, axis=0), dtype=np.float64)
        kw = dict(xx_coef=template.xx_coef, centred=template.centred,
                  label_factor=template.label_factor if labels is not None else None,
                  label_mean=mean, block=block, seed=random_state,
                  tol=tol if n_iter is None else min(tol, 1e-300),
                  max_passes=max_passes if n_iter is None else int(n_iter))
        if isinstance(n_components, numbers.Integral):
            res = nspace_eigh(tiled, int(n_components), **kw)
            rounds = None
        else:
            cap, note = threshold_cap(tiled.n - 1, max_components,
                                      threshold_memory // (8 * max(D_used, 1)),
                                      threshold_memory)
            got: dict[str, Any] = {}

            def rounds_of(solve: Any) -> KrylovResult:
                def one(k: int) -> tuple[np.ndarray, float, KrylovResult]:
                    r = solve(k)
                    return r.eigenvalues, trace, r
                r, got["rounds"] = threshold_rounds(one, float(n_components), cap)
                return r

            res = nspace_eigh(tiled, cap, rounds=rounds_of, **kw)
            rounds = got.get("rounds")
    finally:
        if own:
            tiled.release()
            tiled.slots.close()
    converged = res.converged
    if n_iter is not None:  # the fixed count ran; did it meet tol anyway?
        converged = bool(np.all(res.residuals <= tol * pair_scales(res.eigenvalues, FLOOR)))
    info = {**res.info, "route": "n-space", "tol": tol, "n_iter": n_iter}
    if rounds is not None:
        info["rounds"] = rounds
        info["cap_note"] = note
    return EigenResult(components=res.components, columns=res.columns,
                       eigenvalues=res.eigenvalues, n_components=res.eigenvalues.size,
                       n_genuine=n_genuine(res.eigenvalues), solver="thick-restart-lanczos",
                       n_passes=res.n_passes, converged=converged,
                       residuals=res.residuals, trace=trace, info=info)
