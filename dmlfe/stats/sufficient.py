"""Sufficient statistics of (X, Y): the only thing a fitted method needs from the data.

A distributed pass (``dmlfe.stats.pass_``) produces the *raw* (uncentred) sums
below; every centred quantity is derived here from them, never by densifying X:

    Xc^T Yc = X^T Y - s_x s_y^T / n,   Xc^T Xc = X^T X - s_x s_x^T / n,   ...

with s_x, s_y the column sums and Xc = H X, H = I - 11^T / n the centring matrix.
Labels Y are stored 0/1. The +-1 coding used by MVMD is Y' = 2Y - 1, so
Xc^T Y'c = 2 Xc^T Yc and Y'c^T Y'c = 4 Yc^T Yc (centring removes the shift).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

#: Leave out the columns that are empty in the fit data (the solver's blocks and the
#: stored components) when at most this fraction of D is used: below it the D x k arrays
#: shrink enough to pay for renumbering the columns of every row block.
USED_COLUMNS_FRACTION = 0.9

#: Work on the used features' rows only (centring, in-place addition, the cache's saved
#: arrays) when they are at most this fraction of D: hashed text leaves most of 2^20 empty,
#: and every D-long array would otherwise be read and written whole.
SPARSE_ROWS_FRACTION = 0.5


def add_into(out: np.ndarray, m: Any) -> None:
    """out += m in place (m dense or sparse; out C-ordered)."""
    if not sp.issparse(m):
        out += m
        return
    m = sp.csr_matrix(m)
    if not m.has_canonical_format:  # unique coordinates make the indexed += exact
        m = m.copy()
        m.sum_duplicates()
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    out.reshape(-1)[rows * m.shape[1] + m.indices] += m.data


@dataclass
class SufficientStats:
    """Raw float64 sums over the n documents of a data set.

    Attributes
    ----------
    n : int
        Number of documents.
    sum_x : ndarray, shape (D,)
        Column sums of X.
    sum_y : ndarray, shape (q,)
        Column sums of Y (0/1 coding).
    xty : ndarray, shape (D, q)
        X^T Y (0/1 coding); shape (0, q) when the pass was asked not to compute it
        (``compute_stats(need_xty=False)``, the dual route's statistics).
    yty : ndarray, shape (q, q)
        Y^T Y (0/1 coding).
    xtx : ndarray of shape (D, D) or None
        X^T X, only when a method needs it and D is small enough.
    xtwx : ndarray of shape (D, D) or None
        X^T diag(w) X with w the row sums of the label matrix the statistics were
        computed on (MLDA / DMLDA, mvmd eq. 42); None when not requested.
    sumsq_x : ndarray of shape (D,) or None
        Column sums of squares of X (the diagonal of X^T X; zero exactly for the columns
        no document uses, which the matrix-free solver leaves out). None in statistics
        cached by an older dmlfe.
    from_cache : bool
        True when these statistics were read from the cache beside a store rather
        than computed by a pass.
    rows_read : int or None
        How many documents the pass that made them read: ``n`` for a full pass, 0 from
        the cache, the appended documents only when cached statistics of an earlier
        version of the store were extended; None where not counted.
    """

    n: int
    sum_x: np.ndarray
    sum_y: np.ndarray
    xty: np.ndarray
    yty: np.ndarray
    xtx: np.ndarray | None = None
    xtwx: np.ndarray | None = None
    sumsq_x: np.ndarray | None = None
    from_cache: bool = False
    rows_read: int | None = None

    @property
    def n_features(self) -> int:
        return int(self.sum_x.shape[0])

    @property
    def n_labels(self) -> int:
        return int(self.sum_y.shape[0])

    @property
    def mean_x(self) -> np.ndarray:
        return self.sum_x / self.n

    @property
    def mean_y(self) -> np.ndarray:
        return self.sum_y / self.n

    def centred_xty(self) -> np.ndarray:
        """Xc^T Yc = X^T H Y (D x q), 0/1 label coding."""
        if self.xty.shape[0] != self.n_features:
            raise ValueError(
                f"these statistics hold X^T Y for {self.xty.shape[0]} of their "
                f"{self.n_features} features (computed with need_xty=False); recompute "
                "them with need_xty=True")
        rows = self.used_columns(SPARSE_ROWS_FRACTION)
        if rows is None:
            return self.xty - np.outer(self.sum_x, self.sum_y) / self.n
        # an unused feature's row is 0 - 0 = 0: only the used rows are computed, the
        # same operations entry by entry, so the result is identical
        out = np.zeros(self.xty.shape)  # fresh pages, written only where used
        out[rows] = self.xty[rows] - np.outer(self.sum_x[rows], self.sum_y) / self.n
        return out

    def centred_yty(self) -> np.ndarray:
        """Yc^T Yc = Y^T H Y (q x q), 0/1 label coding."""
        return self.yty - np.outer(self.sum_y, self.sum_y) / self.n

    def centred_xtx(self) -> np.ndarray:
        """Xc^T Xc = X^T H X (D x D): the centred scatter."""
        if self.xtx is None:
            raise ValueError(
                "these statistics were computed without X^T X; recompute them with "
                "need_xtx=True (only possible when D is below the dense-scatter limit)"
            )
        # one new D x D array (the same operations as xtx - outer / n, in place): each
        # temporary would be D x D x 8 bytes of fresh pages
        out = np.outer(self.sum_x, self.sum_x)
        out /= self.n
        return np.subtract(self.xtx, out, out=out)

    def used_columns(self, max_fraction: float = USED_COLUMNS_FRACTION) -> np.ndarray | None:
        """Sorted indices of the columns some document uses (``sumsq_x > 0``), or None.

        None when that is more than ``max_fraction`` of D (leaving the rest out would
        not pay), when no column is used, or when ``sumsq_x`` is unknown (statistics
        cached by an older dmlfe). An empty column is a zero row and column of every
        scatter of X, centred or not (its mean is 0), and a zero row of X^T Y: every
        component of a non-zero eigenvalue vanishes there, exactly.
        """
        if self.sumsq_x is None or self.sumsq_x.shape[0] != self.n_features:
            return None
        used = self.sumsq_x > 0
        count = int(used.sum())
        if count == 0 or count > max_fraction * self.n_features:
            return None
        return np.flatnonzero(used)

    #: The additive fields (every one but ``n`` and ``from_cache``).
    _SUMS = ("sum_x", "sum_y", "xty", "yty", "xtx", "xtwx", "sumsq_x")

    def merge(self, other: SufficientStats) -> SufficientStats:
        """Statistics of the union of two disjoint document sets (new arrays).

        A matrix that either side lacks (``xtx``, ``xtwx``, ``sumsq_x`` None) is None in
        the union: it would not cover every document.
        """
        out = SufficientStats(n=self.n, sum_x=self.sum_x, sum_y=self.sum_y, xty=self.xty,
                              yty=self.yty, xtx=self.xtx, xtwx=self.xtwx,
                              sumsq_x=self.sumsq_x)
        return out._add(other, inplace=False)

    __add__ = merge

    def __iadd__(self, other: SufficientStats) -> SufficientStats:
        """Add ``other``'s documents into these arrays in place (no D x D temporary: an
        accumulated X^T X is updated where it lies)."""
        return self._add(other, inplace=True)

    def _add(self, other: SufficientStats, inplace: bool) -> SufficientStats:
        if (self.n_features, self.n_labels) != (other.n_features, other.n_labels):
            raise ValueError(
                f"cannot add statistics of {other.n_features} features and {other.n_labels} "
                f"labels to statistics of {self.n_features} features and {self.n_labels} "
                "labels: both must describe the same columns")
        rows = other.used_columns(SPARSE_ROWS_FRACTION) if inplace else None
        for key in self._SUMS:
            a, b = getattr(self, key), getattr(other, key)
            if a is None or b is None:
                setattr(self, key, None)
            elif a.shape != b.shape:  # e.g. X^T Y computed on one side only (need_xty)
                raise ValueError(f"cannot add statistics whose {key} shapes differ "
                                 f"({a.shape} and {b.shape}); compute both with the same "
                                 "options")
            elif sp.issparse(b):  # X^T Y of a few appended documents (dense_xty=False)
                if inplace:
                    add_into(a, b)
                else:
                    setattr(self, key, a + b.toarray())
            elif inplace and rows is not None and a.shape[0] == self.n_features:
                # other's unused features add exact zeros: only its used rows change
                if key in ("xtx", "xtwx"):
                    a[np.ix_(rows, rows)] += b[np.ix_(rows, rows)]
                else:
                    a[rows] += b[rows]
            elif inplace:
                a += b
            else:
                setattr(self, key, a + b)
        self.n += other.n
        self.from_cache = False
        return self
