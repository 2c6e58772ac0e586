"""The sufficient statistics of X held in tiles (:class:`~dmlfe.shards.tiles.TiledMatrix`).

When the large-n route keeps X on the workers in column slices, the statistics need no
pass of their own and no reduction: slot s computes its columns' sums, sums of squares
and X_s^T Y (the labels' rows gathered from their slots, n x q numbers), slot r its
rows' label sums and Y_r^T Y_r, and the driver places each slice's rows where its
columns are. A D x q partial never exists twice, and nothing grows with the number of
row blocks. The numbers are those of :func:`dmlfe.stats.pass_.compute_stats` up to the
order of the sums.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlfe.shards.tiles import Slice, TiledMatrix
from dmlfe.stats.sufficient import SufficientStats


def _column_part(sl: Slice, labels: list[np.ndarray] | None) -> dict[str, np.ndarray]:
    """Slice s's column sums, sums of squares and X_s^T Y."""
    m = sl.columns.size
    sums, sumsq = np.zeros(m), np.zeros(m)
    q = 0 if labels is None else labels[0].shape[1]
    xty = np.zeros((m, q))
    for r, tile in enumerate(sl.tiles):
        for part, (a, b) in zip(tile.parts, tile.bounds, strict=True):
            sums += np.asarray(part.sum(axis=1)).ravel()
            sumsq += np.asarray(part.multiply(part).sum(axis=1)).ravel()
            if q and part.nnz:
                xty += part @ labels[r][a:b]
    return {"sum_x": sums, "sumsq_x": sumsq, "xty": xty}


def _row_part(y: np.ndarray) -> dict[str, Any]:
    return {"n": int(y.shape[0]), "sum_y": y.sum(axis=0), "yty": y.T @ y}


def tiled_stats(tiled: TiledMatrix) -> SufficientStats:
    """n, sums, sums of squares, X^T Y and Y^T Y of the tiles (one task per slot and
    the labels' rows once to every slot)."""
    slots, W = tiled.slots, tiled.n_slots
    if tiled.labels is None:
        raise ValueError("the tiles carry no labels: X^T Y cannot be computed from them")
    cols = slots.gather(slots.map(_column_part, [(s, (tiled.slices[s], tiled.labels))
                                                 for s in range(W)], name="dmlfe-tile-stats"))
    rows = slots.gather(slots.map(_row_part, [(r, (tiled.labels[r],)) for r in range(W)],
                                  name="dmlfe-tile-label-stats"))
    D = tiled.n_features
    q = rows[0]["sum_y"].size
    sum_x, sumsq_x, xty = np.zeros(D), np.zeros(D), np.zeros((D, q))
    for c, part in zip(tiled.columns, cols, strict=True):
        sum_x[c], sumsq_x[c], xty[c] = part["sum_x"], part["sumsq_x"], part["xty"]
    return SufficientStats(n=int(sum(r["n"] for r in rows)), sum_x=sum_x,
                           sum_y=sum(r["sum_y"] for r in rows).astype(np.float64),
                           xty=xty, yty=sum(r["yty"] for r in rows).astype(np.float64),
                           sumsq_x=sumsq_x)
