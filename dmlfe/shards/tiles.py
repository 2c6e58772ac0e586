"""X held on the workers as tiles, for the passes of the large-n route.

A :class:`TiledMatrix` keeps X (n documents x D features) in the slots of a
:class:`~dmlfe.shards.slots.Slots` (W of them) as W x W tiles:

* the documents are cut into W *row ranges* of about n / W rows (range r lives in slot
  r with whatever row-side vectors go with it: labels, Krylov vectors);
* the features are dealt into W *column slices*, feature j to slice j mod W (so that
  frequent and rare terms, hashed or ranked, spread evenly), and slice s keeps only the
  features some document uses;
* slot s holds the W tiles of its slice, tile r being X[rows of r, columns of s]^T as
  CSR (features x documents): a product X_s^T U reads U's rows of range r in order,
  and X_s Z streams Z's rows while it adds into the small row-range block.

Made from a store's row blocks by one read (:func:`tile_blocks`: each block read on the
slot that owns its rows, cut into its W column pieces, and each piece sent to its
slice's slot -- X crosses the network once) or from an in-memory matrix
(:func:`tile_matrix`). The tiles stay until :meth:`TiledMatrix.release`; every pass of
:mod:`dmlfe.solvers.nspace` then reads them in memory, where the store would be read
and decompressed again for each.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.compute import is_dask, to_float_block
from dmlfe.shards.slots import Slots

#: Documents per part of a tile: a product X^T U then reads U's rows of one part
#: (32,768 x 16 float64 is 4 MiB) while they stay in the CPU's cache, where a whole
#: range of documents would not fit it and every stored value would fetch its row of U
#: from memory.
TILE_ROWS = 32_768


@dataclass
class Tile:
    """X[rows of one range, columns of one slice]^T, in parts of at most TILE_ROWS
    documents: ``parts[i]`` (CSR, columns x documents) covers rows ``bounds[i]`` of the
    range."""

    parts: list[sp.csr_matrix]
    bounds: list[tuple[int, int]]
    n_rows: int

    @property
    def nnz(self) -> int:
        return int(sum(p.nnz for p in self.parts))


@dataclass
class Slice:
    """One column slice in its slot: its global columns and its tiles (one per row range)."""

    columns: np.ndarray
    tiles: list[Tile]

    @property
    def nnz(self) -> int:
        return int(sum(t.nnz for t in self.tiles))


def row_ranges(n: int, n_slots: int) -> np.ndarray:
    """The W + 1 boundaries of W row ranges of (nearly) equal size."""
    return np.linspace(0, n, n_slots + 1).round().astype(np.int64)


def _cut_block(xb: Any, r0: int, bounds: np.ndarray, n_slots: int) -> list[list[Any]]:
    """A row block (first row ``r0``) cut by column slice, then by row range.

    Returns ``pieces[s]``: for each row range the block meets (in order), its rows in
    slice s as CSR on the slice's local columns j // W.
    """
    xb = to_float_block(xb)
    if not sp.issparse(xb):
        xb = sp.csr_matrix(xb)
    xb = sp.csr_matrix(xb)
    xb.sort_indices()
    n_b, D = xb.shape
    W = int(n_slots)
    width = -(-D // W)
    r1 = r0 + n_b
    meets = [r for r in range(W) if bounds[r] < r1 and bounds[r + 1] > r0 and
             bounds[r + 1] > bounds[r]]
    indices = xb.indices.astype(np.int64)
    owner = (indices % W).astype(np.uint16 if W < 65536 else np.int64)
    order = np.argsort(owner, kind="stable")  # within a slice, entries stay in row order
    row_of = np.repeat(np.arange(n_b), np.diff(xb.indptr))[order]
    cuts = np.searchsorted(owner[order], np.arange(W + 1))
    local_cols = (indices // W)[order]
    data = xb.data[order]
    pieces: list[list[Any]] = []
    for s in range(W):
        lo, hi = cuts[s], cuts[s + 1]
        rows = row_of[lo:hi]
        indptr = np.zeros(n_b + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_b), out=indptr[1:])
        block = sp.csr_matrix((data[lo:hi], local_cols[lo:hi], indptr), shape=(n_b, width))
        pieces.append([block[max(bounds[r], r0) - r0:min(bounds[r + 1], r1) - r0]
                       for r in meets])
    return pieces


def _assemble(s: int, n_slots: int, n_features: int, bounds: np.ndarray,
              parts: list[list[Any]], range_of_part: list[list[int]]) -> Slice:
    """Slot s's slice from its pieces of every block (in row order)."""
    W = int(n_slots)
    width = -(-n_features // W)
    by_range: list[list[Any]] = [[] for _ in range(W)]
    for pieces, ranges in zip(parts, range_of_part, strict=True):
        for piece, r in zip(pieces, ranges, strict=True):
            by_range[r].append(piece)
    stacked = [sp.vstack(p, format="csr") if p else
               sp.csr_matrix((int(bounds[r + 1] - bounds[r]), width))
               for r, p in enumerate(by_range)]
    used = np.zeros(width, dtype=bool)
    for m in stacked:
        used[m.indices] = True
    local = np.flatnonzero(used)
    renumber = np.cumsum(used, dtype=np.int64) - 1
    tiles = []
    for m in stacked:
        narrow = sp.csr_matrix((m.data, renumber[m.indices], m.indptr),
                               shape=(m.shape[0], local.size))
        rows = m.shape[0]
        bounds = [(a, min(a + TILE_ROWS, rows)) for a in range(0, rows, TILE_ROWS)]
        tiles.append(Tile(parts=[narrow[a:b].T.tocsr() for a, b in bounds],  # features x docs
                          bounds=bounds, n_rows=rows))
    columns = local * W + s
    return Slice(columns=columns.astype(np.int64), tiles=tiles)


def _slice_summary(sl: Slice) -> dict[str, Any]:
    return {"columns": sl.columns, "nnz": sl.nnz}


def _slice_sums(sl: Slice) -> tuple[np.ndarray, float]:
    """(column sums of X on the slice's columns, sum of squares of its values)."""
    sums = np.zeros(sl.columns.size)
    sumsq = 0.0
    for tile in sl.tiles:
        for part in tile.parts:
            sums += np.asarray(part.sum(axis=1)).ravel()
            sumsq += float(np.dot(part.data, part.data))
    return sums, sumsq


def _rows(y: Any) -> np.ndarray:
    y = y.toarray() if sp.issparse(y) else np.asarray(y)
    return y.reshape(len(y), -1).astype(np.float64, copy=False)


def _cut_rows(yb: Any, r0: int, bounds: np.ndarray) -> list[np.ndarray]:
    """A block of row-side values (labels) cut by row range (the ranges it meets)."""
    y = _rows(yb)
    r1 = r0 + y.shape[0]
    return [y[max(bounds[r], r0) - r0:min(bounds[r + 1], r1) - r0]
            for r in range(len(bounds) - 1)
            if bounds[r] < r1 and bounds[r + 1] > r0 and bounds[r + 1] > bounds[r]]


def _join_rows(parts: list[list[np.ndarray]], width: int) -> np.ndarray:
    flat = [p for ps in parts for p in ps]
    return np.vstack(flat) if flat else np.zeros((0, width))


class TiledMatrix:
    """X in tiles on ``slots`` (see the module docstring), and optionally row-side labels.

    Attributes
    ----------
    slots : Slots
    n, n_features : int
    bounds : ndarray (W + 1,)
        Row-range boundaries.
    slices : list of handles
        :class:`Slice` of each slot.
    columns : list of ndarray
        The global columns of each slice (on the driver; D integers in all).
    labels : list of handles or None
        The labels' rows of each range (float64 n_r x q).
    nnz : int
    """

    def __init__(self, slots: Slots, n: int, n_features: int, bounds: np.ndarray,
                 slices: list[Any], labels: list[Any] | None) -> None:
        self.slots, self.n, self.n_features = slots, int(n), int(n_features)
        self.bounds = bounds
        self.slices = slices
        self.labels = labels
        summaries = slots.gather(slots.map(_slice_summary, [(s, (h,)) for s, h in
                                                             enumerate(slices)],
                                           name="dmlfe-tile-summary"))
        self.columns = [np.asarray(m["columns"], dtype=np.int64) for m in summaries]
        self.nnz = int(sum(m["nnz"] for m in summaries))

    @property
    def n_slots(self) -> int:
        return self.slots.n

    def used_columns(self) -> tuple[np.ndarray, np.ndarray]:
        """(the sorted used columns, for each slice's rows the position in that order)."""
        allcols = np.concatenate(self.columns) if self.columns else np.zeros(0, np.int64)
        order = np.argsort(allcols, kind="stable")
        position = np.empty_like(order)
        position[order] = np.arange(order.size)
        return allcols[order], position

    def sums(self) -> tuple[np.ndarray, float]:
        """(X's column sums, D of them, and the sum of squares of all its values)."""
        parts = self.slots.gather(self.slots.map(_slice_sums, [(s, (h,)) for s, h in
                                                               enumerate(self.slices)],
                                                 name="dmlfe-tile-sums"))
        sums = np.zeros(self.n_features)
        for cols, (colsum, _) in zip(self.columns, parts, strict=True):
            sums[cols] = colsum
        return sums, float(sum(q for _, q in parts))

    def release(self) -> None:
        self.slots.release(self.slices, self.labels or [])
        self.slices, self.labels = [], None


def tile_matrix(X: Any, Y: Any, slots: Slots) -> TiledMatrix:
    """Tiles of an in-memory X (scipy.sparse or ndarray) and its labels Y (or None)."""
    n, D = int(X.shape[0]), int(X.shape[1])
    W = slots.n
    bounds = row_ranges(n, W)
    cut = _cut_block(X, 0, bounds, W)
    ranges = [[r for r in range(W) if bounds[r + 1] > bounds[r]]]
    if slots.distributed:  # the pieces go to their slots as task arguments, once each
        parts = [[slots.client.scatter(p, workers=[slots.addresses[s]], hash=False)
                  for p in cut[s]] for s in range(W)]
    else:
        parts = cut
    slices = slots.map(_assemble, [(s, (s, W, D, bounds, [parts[s]], ranges))
                                   for s in range(W)], name="dmlfe-tile-assemble")
    labels = None
    if Y is not None:
        y = _rows(Y)
        rows = [y[bounds[r]:bounds[r + 1]] for r in range(W)]
        if slots.distributed:
            labels = [slots.client.scatter(rows[r], workers=[slots.addresses[r]], hash=False)
                      for r in range(W)]
        else:
            labels = slots.map(np.asarray, [(r, (rows[r],)) for r in range(W)],
                               name="dmlfe-tile-labels")
    return TiledMatrix(slots, n, D, bounds, slices, labels)


def _meets(bounds: np.ndarray, r0: int, r1: int) -> list[int]:
    """The (non-empty) row ranges that rows r0..r1-1 meet, in order."""
    return [r for r in range(len(bounds) - 1)
            if bounds[r] < r1 and bounds[r + 1] > r0 and bounds[r + 1] > bounds[r]]


def tile_blocks(X: Any, Y: Any, slots: Slots) -> TiledMatrix:
    """Tiles of a dask X of row blocks (a store's), read once on the slots' workers.

    Each row block is computed (read from the store) on the slot that owns most of its
    rows, cut there by column slice (:func:`_cut_block`), and its W pieces go to their
    slices' slots, which assemble the tiles (:func:`_assemble`). Y's blocks, when
    given, are read beside them and go by row range. Without a client, X is computed in
    this process and tiled as an in-memory matrix.
    """
    if not is_dask(X) or not slots.distributed:
        Xm = X.compute(scheduler="threads") if is_dask(X) else X
        Ym = Y.compute(scheduler="threads") if is_dask(Y) else Y
        return tile_matrix(Xm, Ym, slots)
    client = slots.client
    W = slots.n
    n, D = int(X.shape[0]), int(X.shape[1])
    bounds = row_ranges(n, W)
    sizes = [int(c) for c in X.chunks[0]]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    x_blocks = X.to_delayed().ravel()
    y_blocks = None if Y is None else Y.to_delayed().ravel()
    pieces, meets, y_pieces = [], [], []
    for b, xb in enumerate(x_blocks):
        r0, r1 = int(starts[b]), int(starts[b + 1])
        home = [slots.addresses[int(min(np.searchsorted(bounds, (r0 + r1) // 2,
                                                        side="right") - 1, W - 1))]]
        # a block's read prefers its home, but may run elsewhere: its key is X's own, and
        # a reading that a lost worker cut short left that worker's name on it
        block = client.compute(xb, workers=home, allow_other_workers=True)
        cut = client.submit(_cut_block, block, r0, bounds, W, workers=home,
                            allow_other_workers=False, pure=False)
        # getitem runs where `cut` is: the pieces leave that worker only for their slot
        pieces.append([client.submit(operator.getitem, cut, s, pure=False) for s in range(W)])
        meets.append(_meets(bounds, r0, r1))
        if y_blocks is not None:
            yb = client.compute(y_blocks[b], workers=home, allow_other_workers=True)
            ycut = client.submit(_cut_rows, yb, r0, bounds, workers=home,
                                 allow_other_workers=False, pure=False)
            y_pieces.append([client.submit(operator.getitem, ycut, i, pure=False)
                             for i in range(len(meets[-1]))])
    slices = slots.map(_assemble, [(s, (s, W, D, bounds, [p[s] for p in pieces], meets))
                                   for s in range(W)], name="dmlfe-tile-assemble")
    labels = None
    if y_blocks is not None:
        width = int(Y.shape[1]) if Y.ndim == 2 else 1
        calls = []
        for r in range(W):
            mine = [[y_pieces[b][meets[b].index(r)]] for b in range(len(meets))
                    if r in meets[b]]
            calls.append((r, (mine, width)))
        labels = slots.map(_join_rows, calls, name="dmlfe-tile-labels")
    tiled = TiledMatrix(slots, n, D, bounds, slices, labels)
    slots.release(pieces, y_pieces)
    return tiled
