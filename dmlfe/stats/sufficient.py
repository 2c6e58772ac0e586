"""Sufficient statistics of (X, Y): the only thing a fitted method needs from the data.

A distributed pass (``dmlfe.stats.pass_``) produces the *raw* (uncentred) sums
below; every centred quantity is derived here from them, never by densifying X:

    Xc^T Yc = X^T Y - s_x s_y^T / n,   Xc^T Xc = X^T X - s_x s_x^T / n,   ...

with s_x, s_y the column sums and Xc = H X, H = I - 11^T / n the centring matrix.
Labels Y are stored 0/1. The +-1 coding used by MVMD is Y' = 2Y - 1, so
Xc^T Y'c = 2 Xc^T Yc and Y'c^T Y'c = 4 Yc^T Yc (centring removes the shift).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass
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


#: Above this many labels the statistics keep the label side sparse (``sparse_labels``):
#: X^T Y as a CSR D x q matrix and Y^T Y as a CSR q x q one, so that their memory is
#: O(their non-zeros) instead of D x q x 8 and q x q x 8 bytes (30,000 labels: 7.2 GB
#: for Y^T Y alone). At or below it they are dense, as every method's dense formulas
#: read them. Read at call time, so that tests can lower it.
MAX_DENSE_LABELS = 2048


#: Above this many bytes of a dense D x q X^T Y, the methods with a label-operator path
#: (MDDMp with the linear label kernel, PLS, MVMD) keep the label side sparse at any q:
#: 1,000 labels at 2^20 features would be an 8 GiB X^T Y. Read at call time.
MAX_DENSE_LABEL_BYTES = 2**31


def label_matrix_bytes(n_labels: int) -> int:
    """Bytes of one dense q x q float64 label matrix (Y^T Y, a label kernel)."""
    return 8 * int(n_labels) ** 2


#: A sparse m is added into a dense array slab by slab of dense rows when it holds more
#: than this fraction of the entries: a scattered addition costs an order of magnitude
#: more per non-zero than a dense one per entry (an append's X^T X at a few thousand
#: features is that dense).
DENSE_ADD_FRACTION = 1 / 16


def add_into(out: np.ndarray, m: Any) -> None:
    """out += m in place (m dense or sparse; out C-ordered)."""
    if not sp.issparse(m):
        out += m
        return
    m = sp.csr_matrix(m)
    if m.nnz > DENSE_ADD_FRACTION * m.shape[0] * m.shape[1]:
        # each entry gets m's (summed) value once, as below; the others + 0 exactly
        step = max(1, 2**20 // max(1, m.shape[1]))
        for r in range(0, m.shape[0], step):
            out[r:r + step] += m[r:r + step].toarray()
        return
    if not m.has_canonical_format:  # unique coordinates make the indexed += exact
        m = m.copy()
        m.sum_duplicates()
    rows = np.repeat(np.arange(m.shape[0], dtype=np.int64), np.diff(m.indptr))
    out.reshape(-1)[rows * m.shape[1] + m.indices] += m.data


def whole_rows(a: np.ndarray, rows: np.ndarray, d: int, square: bool = False) -> np.ndarray:
    """The D-row float64 array (D x D when ``square``) whose rows ``rows`` (and columns,
    when ``square``) are ``a``; zero elsewhere."""
    out = np.zeros((d, d) if square else (d, *a.shape[1:]), dtype=np.float64)
    if square:
        out[np.ix_(rows, rows)] = a
    else:
        out[rows] = a
    return out


class RowsField:
    """A dataclass field holding a D-row array, or only some of its rows: those that the
    owner's field ``rows_attr`` names (every other row -- and column, when ``square`` --
    is zero). Reading the attribute gives the whole array; the first read makes every
    such field of the owner whole and sets ``rows_attr`` to None, so the owner never
    holds a part and its whole copy at once. The stored form is read with
    :func:`held`.
    """

    def __init__(self, rows_attr: str, *, square: bool = False, default: Any = MISSING) -> None:
        self.rows_attr, self.square, self.default = rows_attr, square, default

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}_held"

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # the dataclass asks for the default: AttributeError means none
            if self.default is MISSING:
                raise AttributeError(self.name)
            return self.default
        if obj.__dict__.get(self.rows_attr) is not None:
            make_whole(obj, self.rows_attr)
        return obj.__dict__.get(self.slot)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


def _rows_fields(cls: type) -> dict[str, RowsField]:
    """The :class:`RowsField` descriptors of ``cls`` and of the classes it derives from."""
    return {name: f for klass in reversed(cls.__mro__) for name, f in vars(klass).items()
            if isinstance(f, RowsField)}


def held(obj: Any, name: str) -> Any:
    """The array a :class:`RowsField` ``name`` of ``obj`` stores, whole or not."""
    return obj.__dict__.get(_rows_fields(type(obj))[name].slot)


def make_whole(obj: Any, rows_attr: str) -> None:
    """Make every :class:`RowsField` of ``obj`` on ``rows_attr`` whole (D rows, from
    ``obj.n_features``); then ``rows_attr`` is None."""
    rows = obj.__dict__.get(rows_attr)
    if rows is None:
        return
    d = int(obj.n_features)
    for f in _rows_fields(type(obj)).values():
        if f.rows_attr != rows_attr:
            continue
        a = obj.__dict__.get(f.slot)
        # a part has a row per named feature; anything else (None, a sparse or whole
        # array, X^T Y's zero rows when it was not computed) is kept as it is
        if isinstance(a, np.ndarray) and a.ndim >= 1 and a.shape[0] == rows.size != d:
            obj.__dict__[f.slot] = whole_rows(a, rows, d, f.square)
    obj.__dict__[rows_attr] = None


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
    xty : ndarray or scipy.sparse CSR matrix, shape (D, q)
        X^T Y (0/1 coding); shape (0, q) when the pass was asked not to compute it
        (``compute_stats(need_xty=False)``, the dual route's statistics). CSR when the
        label side is sparse (:attr:`sparse_labels`) and X is sparse.
    yty : ndarray or scipy.sparse CSR matrix, shape (q, q)
        Y^T Y (0/1 coding); CSR above :data:`MAX_DENSE_LABELS` labels.
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
    compact_rows : ndarray of int or None
        None: ``xty``, ``xtx`` and ``xtwx`` are held whole. Otherwise the sorted features
        some document uses, and those three are held on these rows (and columns) only:
        statistics of hashed text read from the cache, where the rest of D is zero.
        Reading one of them as an attribute makes all three whole first (then this is
        None); :meth:`centred_xty_rows`, :meth:`rows_of` and in-place addition work on
        the held rows without doing so.
    label_correlation : scipy.sparse CSR matrix of shape (q, q) or None
        MLDA with a sparse label side only: C of mvmd eq. 43, when these are the
        statistics of the row-normalised labels R = diag(1 / ||y_i||_1) Y and the
        method's labels are Y' = R C (:class:`dmlfe.methods.mlda.RowNormalisedLabels`).
        Such statistics are one fit's own: C depends on every document, so they are
        neither cached nor added to others.
    """

    n: int
    sum_x: np.ndarray
    sum_y: np.ndarray
    xty: np.ndarray = RowsField("compact_rows")  # noqa: RUF009 - a descriptor field
    yty: np.ndarray
    xtx: np.ndarray | None = RowsField("compact_rows", square=True, default=None)  # noqa: RUF009
    xtwx: np.ndarray | None = RowsField("compact_rows", square=True, default=None)  # noqa: RUF009
    sumsq_x: np.ndarray | None = None
    from_cache: bool = False
    rows_read: int | None = None
    compact_rows: np.ndarray | None = None
    label_correlation: Any = None

    @property
    def n_features(self) -> int:
        return int(self.sum_x.shape[0])

    @property
    def n_labels(self) -> int:
        return int(self.sum_y.shape[0])

    @property
    def sparse_labels(self) -> bool:
        """True when the label side is held sparse (Y^T Y a CSR matrix; X^T Y too when
        X is sparse): statistics of more than :data:`MAX_DENSE_LABELS` labels."""
        return sp.issparse(self.yty)

    def _dense_label_error(self, what: str, shape: tuple[int, int]) -> ValueError:
        nbytes = 8 * shape[0] * shape[1]
        return ValueError(
            f"{what} was asked for densely, but these statistics hold the label side "
            f"sparse: q = {self.n_labels:,} labels > MAX_DENSE_LABELS = {MAX_DENSE_LABELS:,} "
            f"(a dense {shape[0]:,} x {shape[1]:,} float64 matrix is {nbytes / 2**30:.2f} "
            "GiB). Use a method with a sparse label path (MDDM variant 'p', MVMD, PLS, CCA, "
            "OPLS, MLSI, MLDA, DMLDA, PCA, LSI) or fewer labels")

    @property
    def mean_x(self) -> np.ndarray:
        return self.sum_x / self.n

    @property
    def mean_y(self) -> np.ndarray:
        return self.sum_y / self.n

    def centred_xty(self) -> np.ndarray:
        """Xc^T Yc = X^T H Y (D x q), 0/1 label coding."""
        part, rows = self.centred_xty_rows()
        if rows is None:
            return part
        # fresh pages, written only where used
        return whole_rows(part, rows, self.n_features)

    def centred_xty_rows(self) -> tuple[np.ndarray, np.ndarray | None]:
        """Xc^T Yc on the used features' rows only, and those rows (None: all D rows,
        when more than :data:`SPARSE_ROWS_FRACTION` of D are used).

        An unused feature's row is 0 - 0 = 0: the used rows are computed by the same
        operations, entry by entry, as the whole array's (:meth:`centred_xty`), so they
        are identical; held on those rows (``compact_rows``), no D x q array is made.
        """
        rows = self.compact_rows if self.compact_rows is not None else \
            self.used_columns(SPARSE_ROWS_FRACTION)
        xty = held(self, "xty")
        if self.sparse_labels and sp.issparse(xty):
            raise self._dense_label_error("Xc^T Yc", (self.n_features, self.n_labels))
        if xty.shape[0] != self.n_features and (rows is None or xty.shape[0] != rows.size):
            raise ValueError(
                f"these statistics hold X^T Y for {xty.shape[0]} of their "
                f"{self.n_features} features (computed with need_xty=False); recompute "
                "them with need_xty=True")
        if rows is None:
            return xty - np.outer(self.sum_x, self.sum_y) / self.n, None
        part = self.rows_of("xty", rows)
        return part - np.outer(self.sum_x[rows], self.sum_y) / self.n, rows

    def rows_of(self, name: str, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (sorted) of the D-row array ``name`` -- and the same columns of
        ``xtx`` and ``xtwx`` -- read from what is held, without making it whole.

        ``rows`` must include every used feature when the array is held on some rows:
        the others are zero there.
        """
        a = held(self, name) if name in _rows_fields(type(self)) else getattr(self, name)
        square = name in ("xtx", "xtwx")
        part = self.compact_rows
        if part is not None and a.shape[0] == part.size != self.n_features:
            if part.size == rows.size and np.array_equal(part, rows):
                return a
            pos = np.searchsorted(part, rows)
            inside = pos < part.size
            inside[inside] = part[pos[inside]] == rows[inside]
            out = np.zeros((rows.size, rows.size) if square else (rows.size, *a.shape[1:]))
            if square:
                out[np.ix_(inside, inside)] = a[np.ix_(pos[inside], pos[inside])]
            else:
                out[inside] = a[pos[inside]]
            return out
        if sp.issparse(a):
            a = sp.csr_matrix(a)[rows]
            return (a[:, rows] if square else a).toarray()
        return a[np.ix_(rows, rows)] if square else a[rows]

    def centred_yty(self) -> np.ndarray:
        """Yc^T Yc = Y^T H Y (q x q), 0/1 label coding."""
        if self.sparse_labels:
            raise self._dense_label_error("Yc^T Yc", (self.n_labels, self.n_labels))
        return self.yty - np.outer(self.sum_y, self.sum_y) / self.n

    def centred_xtx(self, overwrite: bool = False) -> np.ndarray:
        """Xc^T Xc = X^T H X (D x D): the centred scatter.

        ``overwrite``: X^T X is centred where it lies and handed over -- these statistics
        hold no X^T X afterwards (``xtx`` is None) -- so that no D x D array is made; for
        statistics that are the caller's own (a fit's, read from the cache or reduced
        for it). The entries are the same either way.
        """
        if self.xtx is None:
            raise ValueError(
                "these statistics were computed without X^T X; recompute them with "
                "need_xtx=True (only possible when D is below the dense-scatter limit)"
            )
        # the same operations as xtx - outer / n, a slab of rows at a time, so that the
        # three steps find it in the cache: a D x D temporary, or even the one new array,
        # would be D x D x 8 bytes of fresh pages, each faulted in as it is first written
        xtx, s = self.xtx, self.sum_x
        inplace = overwrite and isinstance(xtx, np.ndarray) and xtx.dtype == np.float64 \
            and xtx.flags.c_contiguous and xtx.flags.writeable
        out = xtx if inplace else np.empty(xtx.shape)
        step = max(1, 2**17 // max(1, s.size))
        buf = np.empty((min(step, s.size), s.size)) if inplace else None
        for r in range(0, s.size, step):
            slab = out[r:r + step]
            outer = slab if buf is None else buf[:slab.shape[0]]
            np.outer(s[r:r + step], s, out=outer)
            outer /= self.n
            np.subtract(xtx[r:r + step], outer, out=slab)
        if overwrite:
            self.xtx = None
        return out

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
        if self.label_correlation is not None or other.label_correlation is not None:
            raise ValueError("statistics of row-normalised labels (MLDA with a sparse label "
                             "side) cannot be added: their C depends on every document; "
                             "compute them from all the documents at once")
        if (self.n_features, self.n_labels) != (other.n_features, other.n_labels):
            raise ValueError(
                f"cannot add statistics of {other.n_features} features and {other.n_labels} "
                f"labels to statistics of {self.n_features} features and {self.n_labels} "
                "labels: both must describe the same columns")
        rows = other.used_columns(SPARSE_ROWS_FRACTION) if inplace else None
        if self.compact_rows is not None:
            if rows is None:  # other uses most features (or is not added in place)
                make_whole(self, "compact_rows")
            else:
                self._add_held(other, rows)
        for key in self._SUMS:
            if self.compact_rows is not None and key in ("xty", "xtx", "xtwx"):
                continue  # added on the held rows (_add_held)
            a, b = getattr(self, key), getattr(other, key)
            if a is None or b is None:
                setattr(self, key, None)
            elif a.shape != b.shape:  # e.g. X^T Y computed on one side only (need_xty)
                raise ValueError(f"cannot add statistics whose {key} shapes differ "
                                 f"({a.shape} and {b.shape}); compute both with the same "
                                 "options")
            elif sp.issparse(a) and sp.issparse(b):  # a sparse label side
                setattr(self, key, sp.csr_matrix(a + b))
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

    def _add_held(self, other: SufficientStats, used: np.ndarray) -> None:
        """Add ``other``'s X^T Y, X^T X and X^T W X (``used``: its used features) into
        these statistics' held rows, widened to the union of both sets of used features
        (made whole instead when that union is more than SPARSE_ROWS_FRACTION of D)."""
        rows = np.union1d(self.compact_rows, used)
        if rows.size > SPARSE_ROWS_FRACTION * self.n_features:
            make_whole(self, "compact_rows")
            return
        for key in ("xty", "xtx", "xtwx"):
            a, b = held(self, key), held(other, key)
            if a is None or b is None:
                setattr(self, key, None)
                continue
            if a.shape[0] == 0 == b.shape[0]:  # X^T Y computed on neither side
                continue
            if a.shape[0] != self.compact_rows.size or b.shape[0] != self.n_features:
                raise ValueError(f"cannot add statistics whose {key} shapes differ "
                                 f"({a.shape} and {b.shape}); compute both with the same "
                                 "options")
            # widened: the new rows start at zero, so each entry is a + b as on the
            # whole array, in the same order
            a = self.rows_of(key, rows)
            part = other.rows_of(key, rows) if not sp.issparse(b) else \
                (sp.csr_matrix(b)[rows][:, rows] if key != "xty" else sp.csr_matrix(b)[rows])
            add_into(a, part)
            setattr(self, key, a)
        self.compact_rows = rows
