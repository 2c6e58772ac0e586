"""The 0/1 label rule, shared by the fit path, the classifiers and the metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.compute import compute_one, is_dask
from dmlfe.errors import InputError


def first_non_binary(a: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first entry of a 2-D array that is neither 0 nor 1; None if all are."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return None
    bad = ~((a == 0) | (a == 1))
    if not bad.any():
        return None
    r, c = np.argwhere(bad)[0]
    return int(r), int(c)


def first_non_binary_stored(Y: sp.csr_matrix) -> tuple[int, int, Any] | None:
    """(row, column, value) of the first stored value of a CSR matrix that is neither 0
    nor 1 (storage order: row-major when the indices are sorted); None if all are. The
    sparse form of :func:`first_non_binary`: no dense copy."""
    bad = np.flatnonzero((Y.data != 0) & (Y.data != 1))
    if not bad.size:
        return None
    j = int(bad[0])
    return int(np.searchsorted(Y.indptr, j, side="right") - 1), int(Y.indices[j]), Y.data[j]


def class_indicators(y: Any, owner: str, every_class: bool = False
                     ) -> tuple[np.ndarray, np.ndarray, str]:
    """1-D class labels as a 0/1 documents x labels matrix (scikit-learn's target types).

    A multi-class target is the multi-label case with exactly one label per document:
    one column per class. A ``"binary"`` target gives one column, 1 for the greater
    class (:class:`sklearn.preprocessing.LabelBinarizer`'s encoding, what a classifier
    scores), or with ``every_class`` a column for each of the two classes (what a
    projection needs: a single label column has no between-label structure).

    Returns
    -------
    Y : ndarray (n, q) of int8
    classes : ndarray
        The sorted class values (column j of Y is ``classes[j]`` for "multiclass").
    kind : {"binary", "multiclass"}

    Raises
    ------
    InputError
        ``y`` is not 1-D, or is continuous (scikit-learn's "Unknown label type").
    """
    # imported here: the CSR helpers below run in ingest tasks, which need no scikit-learn
    from sklearn.preprocessing import LabelBinarizer
    from sklearn.utils.multiclass import type_of_target

    y = np.asarray(y)
    if y.ndim != 1:
        raise InputError(f"{owner}: class labels y must be 1-D; got shape {y.shape}")
    kind = type_of_target(y, input_name="y")
    if kind not in ("binary", "multiclass"):
        raise InputError(f"{owner}: Unknown label type: {kind!r}. Give 1-D class labels or a "
                         "0/1 documents x labels indicator matrix")
    binarizer = LabelBinarizer().fit(y)
    if every_class:
        Y = y[:, None] == binarizer.classes_[None, :]
    else:
        Y = binarizer.transform(y)
    return Y.astype(np.int8), binarizer.classes_, kind


def dense_labels(Y: Any, client: Any = None) -> np.ndarray:
    """The label matrix whole on the driver as dense float64, n x q (a 1-D Y is one column).

    For the fit paths that need Y itself (the dual route, the graph methods): it is
    small beside X (n x q).
    """
    if is_dask(Y):
        Y = compute_one(Y, client=client)
    Y = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    Y = np.asarray(Y, dtype=np.float64)
    return Y[:, None] if Y.ndim == 1 else Y


def sparse_labels(Y: Any, client: Any = None) -> sp.csr_matrix:
    """The label matrix whole on the driver as a uint8 CSR matrix, n x q (a 1-D Y is
    one column), never dense on the way when it is sparse.

    Parameters
    ----------
    Y : dask array (of CSR or dense blocks), numpy array or scipy.sparse matrix
    client : distributed.Client, optional
        Computes a dask ``Y`` on this cluster (the current scheduler otherwise).

    Returns
    -------
    scipy.sparse.csr_matrix of uint8
        With sorted indices; memory O(nnz(Y)).
    """
    if is_dask(Y):
        Y = compute_one(Y, client=client)
    if sp.issparse(Y):
        out = sp.csr_matrix(Y, dtype=np.uint8)
    else:
        a = np.asarray(Y)
        out = sp.csr_matrix(a[:, None] if a.ndim == 1 else a, dtype=np.uint8)
    out.sort_indices()
    return out


def classifier_labels(Y: Any) -> Any:
    """Labels for a classifier's ``fit``: a dask array of a store's CSR label blocks made
    of dense uint8 blocks up to :data:`~dmlfe.stats.sufficient.MAX_DENSE_LABELS` labels
    (the form classifiers have always been given: a registered classifier may read it
    with ``np.asarray``), and left CSR above it, where a dense n x q matrix is what many
    labels cannot afford."""
    from dmlfe.stats import sufficient

    if not is_dask(Y) or Y.ndim != 2 or Y.shape[1] > sufficient.MAX_DENSE_LABELS:
        return Y
    return Y.map_blocks(lambda b: b.toarray() if sp.issparse(b) else np.asarray(b),
                        dtype=Y.dtype, meta=np.empty((0, 0), dtype=Y.dtype))


def label_rows(labels: Sequence[Sequence[int]], n_labels: int) -> sp.csr_matrix:
    """A uint8 CSR 0/1 matrix of ``len(labels)`` rows from each row's label columns.

    Memory is O(number of document-label pairs), never rows x ``n_labels``; a label
    given twice for a row counts once.
    """
    lengths = np.fromiter((len(labs) for labs in labels), dtype=np.int64, count=len(labels))
    indptr = np.zeros(len(labels) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.fromiter((j for labs in labels for j in labs), dtype=np.int64,
                          count=int(indptr[-1]))
    Y = sp.csr_matrix((np.ones(indices.size, dtype=np.uint8), indices, indptr),
                      shape=(len(labels), n_labels))
    Y.sum_duplicates()
    Y.data[:] = 1
    return Y


def relabel_columns(Y: sp.spmatrix, columns: np.ndarray, n_labels: int) -> sp.csr_matrix:
    """``Y``'s column ``j`` moved to column ``columns[j]`` of an ``n_labels``-column CSR
    matrix (e.g. a source's labels in a store's order), without densifying."""
    Y = sp.csr_matrix(Y)
    cols = np.asarray(columns, dtype=np.int64)[Y.indices]
    out = sp.csr_matrix((Y.data.astype(np.uint8), cols, Y.indptr.copy()),
                        shape=(Y.shape[0], n_labels))
    out.sort_indices()
    return out
