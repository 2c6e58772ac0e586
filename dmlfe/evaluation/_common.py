"""Shared input handling for the multi-label classifiers: embeddings, label matrices,
row-chunk-wise application, and the one-pass moment statistics (ridge, Fisher LDA)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags

from dmlfe.compute import compute_one, tree_reduce
from dmlfe.evaluation import metrics
from dmlfe.labels import class_indicators, first_non_binary, first_non_binary_stored
from dmlfe.validation import checked_matrix


def as_embeddings(Z: Any) -> np.ndarray | da.Array:
    """Embeddings as float64: an ndarray, or a dask array chunked by rows only."""
    if isinstance(Z, da.Array):
        if Z.ndim != 2:
            raise ValueError(f"Z must be a 2-D documents x dimensions array; got shape {Z.shape}")
        if len(Z.chunks[1]) != 1:
            Z = Z.rechunk({1: -1})
        return Z.astype(np.float64) if Z.dtype != np.float64 else Z
    if sp.issparse(Z):
        Z = Z.toarray()
    Z = np.asarray(Z, dtype=np.float64)
    if Z.ndim != 2:
        raise ValueError(f"Z must be a 2-D documents x dimensions array; got shape {Z.shape}")
    check_finite(Z, 0)
    return Z


def from_store(X: Any, Y: Any, owner: str) -> tuple[Any, Any]:
    """(X, Y) of a store path or opened store (its X, and its Y unless Y is given);
    other inputs pass through. Raises when Y is still missing."""
    if isinstance(X, (str, os.PathLike)) or hasattr(X, "fingerprint"):
        from dmlfe.store import open_store  # the store layer only when a store is given

        store = open_store(X) if isinstance(X, (str, os.PathLike)) else X
        X, Y = store.X, (store.Y if Y is None else Y)
    if Y is None:
        raise ValueError(f"{owner}.fit needs Y (documents x labels, 0/1) unless X is a store")
    return X, Y


def as_features(X: Any) -> np.ndarray | sp.csr_matrix | da.Array:
    """Raw features or embeddings as float64, keeping sparsity.

    A scipy.sparse matrix stays CSR (raw term features are never densified), a dask
    array keeps its row blocks (CSR or dense) with whole rows per block, anything else
    goes through :func:`as_embeddings`.
    """
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D documents x features array; got shape {X.shape}")
        return X.rechunk({1: -1}) if len(X.chunks[1]) != 1 else X
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        bad = np.flatnonzero(~np.isfinite(X.data))
        if bad.size:
            r = int(np.searchsorted(X.indptr, bad[0], side="right") - 1)
            raise ValueError(f"X[row {r}, feature {X.indices[bad[0]]}] = {X.data[bad[0]]!r}: "
                             "features must be finite")
        return X
    return as_embeddings(X)


def check_finite(zb: np.ndarray, offset: int) -> None:
    """Raise naming the first non-finite embedding entry (global row ``offset + r``)."""
    bad = ~np.isfinite(zb)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"Z[row {offset + r}, dim {c}] = {zb[r, c].item()!r}: embeddings must be "
                         "finite; check the projection that produced them")


def check_labels(yb: np.ndarray, offset: int = 0) -> np.ndarray:
    """0/1 label block as int8; raise naming the first bad entry (global row)."""
    yb = np.asarray(yb)
    bad = first_non_binary(yb)
    if bad is not None:
        r, c = bad
        raise ValueError(
            f"Y[row {offset + r}, label {c}] = {yb[r, c].item()!r}: Y must be a 0/1 "
            "documents x labels indicator matrix"
        )
    return yb.astype(np.int8)


def dense_block(b: Any) -> np.ndarray:
    return b.toarray() if sp.issparse(b) else np.asarray(b)


def label_block(yb: Any, offset: int = 0) -> np.ndarray | sp.csr_matrix:
    """A 0/1 label block checked as :func:`check_labels` does: int8 if dense, CSR (its
    stored values 0/1) if sparse -- a store's many labels are not made dense."""
    if not sp.issparse(yb):
        return check_labels(yb, offset)
    yb = sp.csr_matrix(yb)
    bad = first_non_binary_stored(yb)
    if bad is not None:
        r, c, v = bad
        raise ValueError(f"Y[row {offset + r}, label {c}] = {v.item()!r}: Y must be a 0/1 "
                         "documents x labels indicator matrix")
    return yb


def labels_in_memory(Y: Any, n: int, keep_sparse: bool = False
                     ) -> np.ndarray | sp.csr_matrix:
    """Whole label matrix in memory, validated: int8, or CSR when ``keep_sparse`` and Y
    is sparse (a store's labels are CSR blocks)."""
    if isinstance(Y, da.Array):
        Y = Y.compute()
    if keep_sparse and sp.issparse(Y):
        if Y.shape[0] != n:
            raise ValueError(f"Y has shape {Y.shape} but Z has {n} rows; they must match")
        return label_block(Y)
    Y = dense_block(Y)
    if Y.ndim == 1:
        raise ValueError("Y must be a 2-D documents x labels 0/1 matrix; got a 1-D array "
                         "(reshape a single label to (n, 1))")
    if Y.ndim != 2 or Y.shape[0] != n:
        raise ValueError(f"Y has shape {Y.shape} but Z has {n} rows; they must match")
    return check_labels(Y)


def labels_like(Y: Any, Z: da.Array) -> da.Array:
    """Y as a dask array with Z's row chunks (for chunk-wise fitting); sparse Y stays
    sparse (CSR blocks)."""
    if not isinstance(Y, da.Array):
        sparse = sp.issparse(Y)
        Y = sp.csr_matrix(Y) if sparse else dense_block(Y)
        if Y.ndim != 2:
            raise ValueError(f"Y must be a 2-D documents x labels 0/1 matrix; got {Y.shape}")
        Y = da.from_array(Y, chunks=(Z.chunks[0], Y.shape[1]), asarray=not sparse)
    if Y.ndim != 2 or Y.shape[0] != Z.shape[0]:
        raise ValueError(f"Y has shape {Y.shape} but Z has {Z.shape[0]} rows; they must match")
    if Y.chunks[0] != Z.chunks[0] or len(Y.chunks[1]) != 1:
        Y = Y.rechunk((Z.chunks[0], -1))
    return Y


def map_rows(Z: np.ndarray | da.Array, fn: Callable[..., np.ndarray], n_out: int,
             dtype: Any, state: Any) -> np.ndarray | da.Array:
    """``fn(block, state)`` on the whole array, or lazily per row chunk of a dask array.

    ``state`` (the fitted arrays) enters the graph once, as a delayed object.
    """
    if not isinstance(Z, da.Array):
        return fn(Z, state)
    st = dask.delayed(state, pure=True)
    return Z.map_blocks(fn, state=st, chunks=(Z.chunks[0], (n_out,)), dtype=dtype,
                        meta=np.empty((0, n_out), dtype=dtype))


def label_top_k(zb: np.ndarray, state: Any, relevant: Callable[..., np.ndarray],
                probabilities: Callable[..., np.ndarray], k: int, q: int
                ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """(each row's relevant label indices, its ``k`` most probable labels, their
    probabilities) of one block of embeddings for ``q`` labels, a slice of about
    :data:`~dmlfe.evaluation.metrics.TOP_K_BLOCK_ENTRIES` scores at a time: with many
    labels a block x q array of probabilities (or of decisions) is never whole."""
    zb = np.asarray(zb)
    step = max(1, metrics.TOP_K_BLOCK_ENTRIES // max(int(q), 1))  # read now: tests lower it
    found: list[np.ndarray] = []
    idx = [np.empty((0, k), dtype=np.int64)]
    vals = [np.empty((0, k), dtype=np.float64)]
    for r in range(0, zb.shape[0], step):
        z = zb[r:r + step]
        found.extend(np.flatnonzero(row) for row in np.asarray(relevant(z, state)))
        i, v = metrics.top_k(np.asarray(probabilities(z, state)), k)
        idx.append(i)
        vals.append(v)
    return found, np.concatenate(idx), np.concatenate(vals)


class MultiLabelBase(ClassifierMixin, BaseEstimator):
    """Common fit/predict-side handling of the multi-label classifiers.

    Targets: a 0/1 documents x labels matrix (multi-label; ``classes_`` is
    ``arange(q)``, as for scikit-learn's ``OneVsRestClassifier``), or 1-D class labels
    (binary or multi-class, one 0/1 label per class as
    :func:`dmlfe.labels.class_indicators` encodes them; ``classes_`` are the class
    values, and ``predict`` returns them). Subclasses fit on the 0/1 matrix
    (:meth:`_fit_input`) and provide per-label ``_scores`` (relevant where > 0),
    ``_relevant`` (0/1) and ``_probabilities`` (P(label relevant)); this class turns
    them into ``decision_function``, ``predict`` and ``predict_proba`` of the target's
    type. Subclasses set ``n_features_in_`` and ``n_labels_``.
    """

    _xfail_checks: ClassVar[dict[str, str]] = {
        "check_supervised_y_2d": "a 2-D y is a documents x labels 0/1 matrix here, so a "
                                 "column of class labels is refused (give 1-D class labels), "
                                 "not ravelled with a DataConversionWarning",
    }

    #: False: inputs are densified (embeddings have few dimensions); True: a sparse X
    #: stays CSR (a classifier on raw term features, e.g. PPML).
    _keeps_sparse: ClassVar[bool] = False

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.sparse = True
        return tags

    def _features(self, Z: Any) -> Any:
        return as_features(Z) if self._keeps_sparse else as_embeddings(Z)

    def _fit_input(self, Z: Any, Y: Any) -> tuple[np.ndarray | da.Array, Any]:
        """Embeddings (checked) and the 0/1 label matrix; records ``target_type_``."""
        name = type(self).__name__
        if Y is None:
            raise ValueError(f"{name} requires y to be passed, but the target y is None: "
                             "fit(Z, Y) needs the labels")
        self._classes = None
        self.target_type_ = "multilabel-indicator"
        if isinstance(Z, da.Array):
            return self._features(Z), Y
        Z = self._features(checked_matrix(self, Z, reset=True))
        if not (isinstance(Y, da.Array) or sp.issparse(Y)):
            Y = np.asarray(Y)
            if Y.ndim == 1:
                if len(Y) != Z.shape[0]:
                    raise ValueError(f"y has {len(Y)} entries but Z has {Z.shape[0]} rows; "
                                     "they must match")
                Y, self._classes, self.target_type_ = class_indicators(Y, name)
        return Z, Y

    @property
    def classes_(self) -> np.ndarray:
        """The class values (1-D targets) or ``arange(n_labels_)`` (a label matrix)."""
        self._check_fitted()
        return np.arange(self.n_labels_) if self._classes is None else self._classes

    def _check_fitted(self) -> None:
        if not hasattr(self, "n_labels_"):
            raise NotFittedError(f"{type(self).__name__} is not fitted; call fit(Z, Y) first")

    def _check_query(self, Z: Any) -> np.ndarray | da.Array:
        self._check_fitted()
        if isinstance(Z, da.Array):
            if Z.ndim == 2 and Z.shape[1] != self.n_features_in_:
                raise ValueError(f"Z has {Z.shape[1]} features, but {type(self).__name__} is "
                                 f"expecting {self.n_features_in_} features as input; project "
                                 "with the same model")
            return self._features(Z)
        return self._features(checked_matrix(self, Z, reset=False))

    def _label_map(self, Z: Any, fn: Callable[..., np.ndarray], dtype: Any) -> Any:
        """``fn(block, state)`` -> (rows, q) per row block (see :func:`map_rows`)."""
        return map_rows(self._check_query(Z), fn, self.n_labels_, dtype, self._state())

    def decision_function(self, Z: Any) -> np.ndarray | da.Array:
        """Scores: a label (or, for 1-D targets, the greater class) is relevant where > 0.

        Parameters
        ----------
        Z : ndarray, scipy.sparse or dask array, shape (n, d)

        Returns
        -------
        ndarray or dask array (lazy, chunked like Z's rows) of float64: shape (n, q) for a
        label matrix or a multi-class target, (n,) for a binary one.
        """
        self._check_fitted()
        S = self._label_map(Z, type(self)._scores, np.float64)
        return S[:, 0] if self.target_type_ == "binary" else S

    def predict(self, Z: Any) -> np.ndarray | da.Array:
        """0/1 label matrix (int8, (n, q)), or for 1-D targets the predicted classes (n,).

        A multi-class target predicts the class of the largest score.
        """
        self._check_fitted()
        if self.target_type_ == "multiclass":
            best = self._label_map(Z, type(self)._scores, np.float64).argmax(axis=1)
            return _take(self.classes_, best)
        R = self._label_map(Z, type(self)._relevant, np.int8)
        return R if self.target_type_ == "multilabel-indicator" else _take(self.classes_,
                                                                        R[:, 0])

    def predict_proba(self, Z: Any) -> np.ndarray | da.Array:
        """P(label relevant), (n, q); for 1-D targets the class probabilities (n, classes).

        Each label's probability comes from the classifier's own model (see its
        ``_probabilities``). A binary target gives the columns (1 - p, p); a multi-class
        one the labels' probabilities normalised to sum to 1 over the classes (as
        scikit-learn's ``OneVsRestClassifier``).
        """
        self._check_fitted()
        P = self._label_map(Z, type(self)._probabilities, np.float64)
        if self.target_type_ == "binary":
            return _stack_binary(P)
        if self.target_type_ == "multiclass":
            total = P.sum(axis=1, keepdims=True)
            return P / total
        return P

    def top_k_blocks(self, Z: da.Array, k: int) -> list[Any]:
        """Per row block of the dask array Z, a delayed (each row's relevant label indices,
        its ``k`` most probable labels, their probabilities) (:func:`label_top_k`): what
        ``dmlfe predict --top-k`` writes, with no block x q array of scores whole. For a
        label-matrix target."""
        self._check_fitted()
        if self.target_type_ != "multilabel-indicator":
            raise ValueError(f"top_k_blocks needs a label-matrix target; this "
                             f"{type(self).__name__} was fitted on a {self.target_type_} one")
        Z = self._check_query(Z)
        st = dask.delayed(self._state(), pure=True)
        return [dask.delayed(label_top_k, pure=True)(zb, st, type(self)._relevant,
                                                     type(self)._probabilities, int(k),
                                                     int(self.n_labels_))
                for zb in Z.to_delayed().ravel()]

    # per-label outputs on one block of embeddings: state -> (rows, q)
    def _state(self) -> Any:
        raise NotImplementedError

    @staticmethod
    def _scores(zb: np.ndarray, state: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def _relevant(zb: np.ndarray, state: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def _probabilities(zb: np.ndarray, state: Any) -> np.ndarray:
        raise NotImplementedError


def _take(classes: np.ndarray, index: Any) -> Any:
    if isinstance(index, da.Array):
        return index.map_blocks(classes.take, dtype=classes.dtype)
    return classes.take(np.asarray(index, dtype=np.intp))


def _stack_binary(P: Any) -> Any:
    return da.stack([1.0 - P[:, 0], P[:, 0]], axis=1) if isinstance(P, da.Array) \
        else np.column_stack([1.0 - P[:, 0], P[:, 0]])


# ------------------------------------------------------------ moment statistics
@dataclass
class Moments:
    """n, means of Z and Y, centred Z scatter (d x d) and centred Z-Y cross products (d x q)."""

    n: int
    mean_z: np.ndarray
    mean_y: np.ndarray
    scatter: np.ndarray
    cross: np.ndarray


def _block_moments(zb: Any, yb: Any, offset: int) -> Moments:
    zb = np.asarray(dense_block(zb), dtype=np.float64)
    check_finite(zb, offset)
    yb = label_block(yb, offset).astype(np.float64)
    n = zb.shape[0]
    if n == 0:
        return Moments(0, np.zeros(zb.shape[1]), np.zeros(yb.shape[1]),
                       np.zeros((zb.shape[1],) * 2), np.zeros((zb.shape[1], yb.shape[1])))
    mz = zb.mean(axis=0)
    zc = zb - mz
    if sp.issparse(yb):
        # zc's columns sum to zero, so zc^T (Y - 1 m^T) = zc^T Y: the labels stay sparse
        my = np.asarray(yb.sum(axis=0)).ravel() / n
        return Moments(n, mz, my, zc.T @ zc, np.ascontiguousarray((yb.T @ zc).T))
    my = yb.mean(axis=0)
    return Moments(n, mz, my, zc.T @ zc, zc.T @ (yb - my))


def merge_moments(*parts: Moments) -> Moments:
    """Chan et al.'s pairwise update: exact, and free of the cancellation of raw sums."""
    acc = parts[0]
    for b in parts[1:]:
        if b.n == 0:
            continue
        if acc.n == 0:
            acc = b
            continue
        n = acc.n + b.n
        dz, dy = b.mean_z - acc.mean_z, b.mean_y - acc.mean_y
        w = acc.n * b.n / n
        acc = Moments(
            n,
            acc.mean_z + dz * (b.n / n),
            acc.mean_y + dy * (b.n / n),
            acc.scatter + b.scatter + w * np.outer(dz, dz),
            acc.cross + b.cross + w * np.outer(dz, dy),
        )
    return acc


def moments(Z: np.ndarray | da.Array, Y: Any) -> Moments:
    """The moments of (Z, Y) in one pass: one dask compute when Z is a dask array."""
    if not isinstance(Z, da.Array):
        return _block_moments(Z, labels_in_memory(Y, Z.shape[0], keep_sparse=True), 0)
    Yd = labels_like(Y, Z)
    offsets = np.concatenate([[0], np.cumsum(Z.chunks[0])[:-1]])
    zs, ys = Z.to_delayed().ravel(), Yd.to_delayed().ravel()
    parts = [dask.delayed(_block_moments, pure=True)(zb, yb, int(o))
             for zb, yb, o in zip(zs, ys, offsets, strict=True)]
    return compute_one(tree_reduce(parts, merge_moments))
