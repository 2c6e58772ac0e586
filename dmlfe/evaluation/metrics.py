"""Multi-label evaluation measures of the MVMD, MDDM and GRROOR papers, one implementation each.

All values are fractions (not percentages). Inputs are document x label matrices
(numpy, scipy.sparse or dask; a dask array is computed, and one of sparse blocks stays
sparse). The label-set measures and the extreme classification measures never densify
sparse label matrices; the ranking measures (and :func:`metric_report` where it computes
them) work on dense n x q copies.

Label-set measures ``(Y_true, Y_pred)`` with 0/1 matrices (MVMD eq. 48-53, MDDM 4.2),
each computed from the sizes |T|, |P|, |T & P| of every document's true and predicted
label sets and the same three counts per label, in O(nnz + n + q) memory:

* ``hamming_loss`` = mean over documents of |T xor P| / q.
* ``example_accuracy`` = mean |T & P| / |T | P|; a document with T and P both empty
  counts 1.
* ``example_precision`` = mean |T & P| / |P|; an empty predicted set counts 1 when the
  true set is empty too, else 0.
* ``example_recall`` = mean |T & P| / |T|; the symmetric convention: an empty true set
  counts 1 when the predicted set is empty too, else 0.
* ``example_f1`` = mean 2 |T & P| / (|T| + |P|); both empty counts 1.
* ``subset_accuracy`` = fraction of documents with P == T exactly.
* ``micro_f1`` = 2 sum|T & P| / (sum|T| + sum|P|) over all document-label pairs;
  1 when there is no true and no predicted label at all.
* ``macro_f1`` = mean over **all** q labels of 2 TP / (2 TP + FP + FN); a label with no
  positives and no predictions counts 1 (nothing to find, nothing wrongly claimed),
  one with no positives but some predictions counts 0. This equals scikit-learn's
  ``f1_score(average="macro", zero_division=1.0)``.

Ranking measures ``(Y_true, scores)`` (MDDM 4.2), higher score = more relevant:

* Ties are ranked pessimistically: the rank of label j is the number of labels whose
  score is >= its score, so a tie never helps.
* ``ranking_loss``: fraction of (relevant, irrelevant) pairs with
  f(relevant) <= f(irrelevant).
* ``one_error``: fraction of documents whose top-ranked label is irrelevant; with ties
  at the top, an error whenever any label sharing the top score is irrelevant.
* ``coverage``: mean over documents of (worst rank of a relevant label) - 1, not
  divided by q; equals scikit-learn's ``coverage_error`` - 1.
* ``average_precision``: mean over relevant labels of
  |relevant labels ranked at or above| / rank (scikit-learn's
  ``label_ranking_average_precision_score`` on the evaluated documents).
* Documents with no relevant label or with every label relevant do not define a
  ranking and are skipped by all four measures (as in Zhang & Zhou's evaluation
  code); :func:`ranking_skipped` counts them and :func:`metric_report` reports the count.
  If every document is skipped the measures are NaN.
* ``macro_auc``: mean over labels of the area under the ROC curve (tied scores count
  1/2, the usual definition, identical to scikit-learn's ``roc_auc_score``). A label
  with no positive or no negative test document has no AUC and is skipped
  (:func:`auc_skipped` counts them); NaN if every label is skipped.

Extreme classification measures ``(Y_true, scores, k)`` (the Extreme Classification
Repository's, Bhatia et al. 2016; propensities of Jain, Prabhu & Varma, KDD 2016), for
label sets of thousands of labels and more: ``precision_at_k``, ``ndcg_at_k``,
``recall_at_k``, ``psprecision_at_k``, ``psndcg_at_k`` (normalised by the ideal
ranking, as the repository's pyxclib reports them), ``label_propensities`` and
``xmc_report``. They rank with :func:`top_k` (ties: the lower label index first), never
densify sparse inputs (O(n k + nnz) memory), and count documents without a relevant
label as 0 in the mean (pyxclib's rule). The formulas are in each function's docstring.

``redundancy(X, selected)`` is GRROOR eq. 38: the mean squared cosine similarity
between distinct selected feature columns, centred as in eq. 12-13 (``centered=False``
for the raw columns).

Why one module: every measure is defined once above, and the families share their
input checks (one 0/1 label rule, one shape rule) and the one ranking :func:`top_k`;
split by family, those would be imported back and forth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask import delayed
from scipy.stats import rankdata

from dmlfe.compute import compute_one, tree_reduce
from dmlfe.labels import first_non_binary, first_non_binary_stored

__all__ = [
    "LABEL_SET_METRICS",
    "RANKING_METRICS",
    "TOP_K_BLOCK_ENTRIES",
    "XMC_FAMILIES",
    "XMC_KS",
    "XMC_LABELS",
    "auc_skipped",
    "average_precision",
    "coverage",
    "example_accuracy",
    "example_f1",
    "example_precision",
    "example_recall",
    "hamming_loss",
    "label_propensities",
    "macro_auc",
    "macro_f1",
    "metric_report",
    "micro_f1",
    "ndcg_at_k",
    "one_error",
    "precision_at_k",
    "psndcg_at_k",
    "psprecision_at_k",
    "ranking_loss",
    "ranking_skipped",
    "recall_at_k",
    "redundancy",
    "subset_accuracy",
    "top_k",
    "xmc_report",
]


# ---------------------------------------------------------------------- inputs
def _dense(a: Any, name: str) -> np.ndarray:
    if isinstance(a, da.Array):
        a = a.compute()
    if sp.issparse(a):
        a = a.toarray()
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D documents x labels matrix; got shape {a.shape}")
    return a


def _not_binary(name: str, row: int, label: int, value: Any) -> NoReturn:
    raise ValueError(
        f"{name}[row {row}, label {label}] = {value.item()!r}: {name} must be a 0/1 "
        "indicator matrix (threshold scores with the classifier's predict first)"
    )


def _binary(a: Any, name: str) -> np.ndarray:
    a = _dense(a, name)
    bad = first_non_binary(a)
    if bad is not None:
        r, c = bad
        _not_binary(name, r, c, a[r, c])
    return a.astype(bool)


def _indicators(a: Any, name: str) -> sp.csr_matrix:
    """0/1 ``a`` as a canonical CSR matrix of its ones (int8 data, sorted indices).

    Parameters
    ----------
    a : ndarray, scipy.sparse matrix or dask array (of dense or sparse blocks), shape (n, q)
        A dask array is computed first. Sparse input is checked on its stored values and
        never densified: memory O(nnz + n).
    name : str
        How error messages name ``a``.

    Raises
    ------
    ValueError
        ``a`` not 2-D, or an entry neither 0 nor 1 (the message names the first one's row
        and label).
    """
    if isinstance(a, da.Array):
        a = a.compute()
    if not sp.issparse(a):
        return sp.csr_matrix(_binary(a, name), dtype=np.int8)
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D documents x labels matrix; got shape {a.shape}")
    Y = sp.csr_matrix(a, copy=True)
    # duplicate entries add up, as in a dense copy, so the value checked is the entry's
    Y.sum_duplicates()
    bad = first_non_binary_stored(Y)  # indices sorted: the first bad entry, row-major
    if bad is not None:
        _not_binary(name, *bad)
    Y.eliminate_zeros()
    Y.data = np.ones(Y.nnz, dtype=np.int8)
    return Y


def _pair(Y_true: Any, Y_pred: Any) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    T = _indicators(Y_true, "Y_true")
    P = _indicators(Y_pred, "Y_pred")
    if T.shape != P.shape:
        raise ValueError(f"Y_true has shape {T.shape} but Y_pred has shape {P.shape}")
    if T.shape[0] == 0:
        raise ValueError("no documents to evaluate (Y_true has 0 rows)")
    return T, P


def _scored(Y_true: Any, scores: Any) -> tuple[np.ndarray, np.ndarray]:
    T = _binary(Y_true, "Y_true")
    S = _dense(scores, "scores").astype(np.float64)
    if T.shape != S.shape:
        raise ValueError(f"Y_true has shape {T.shape} but scores has shape {S.shape}")
    if T.shape[0] == 0:
        raise ValueError("no documents to evaluate (Y_true has 0 rows)")
    nan = np.isnan(S)
    if nan.any():
        r, c = np.argwhere(nan)[0]
        raise ValueError(f"scores[row {r}, label {c}] is NaN: scores must be numbers "
                         "(+-inf are allowed and rank first/last)")
    return T, S


def _ratio(num: np.ndarray, den: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """num / den where den > 0, else the convention ``empty``."""
    out = np.asarray(empty, dtype=np.float64).copy()
    ok = den > 0
    out[ok] = num[ok] / den[ok]
    return out


# ------------------------------------------------------------- label-set measures
class _SetCounts(NamedTuple):
    """The counts every label-set measure is a function of (T true, P predicted sets)."""

    doc_true: np.ndarray  # |T| per document, int64, shape (n,)
    doc_pred: np.ndarray  # |P| per document
    doc_both: np.ndarray  # |T & P| per document
    label_true: np.ndarray  # documents with the label true, int64, shape (q,)
    label_pred: np.ndarray  # documents with the label predicted
    label_both: np.ndarray  # documents with the label true and predicted

    @property
    def n(self) -> int:
        return int(self.doc_true.size)

    @property
    def q(self) -> int:
        return int(self.label_true.size)


def _count(T: sp.csr_matrix, P: sp.csr_matrix) -> _SetCounts:
    """:class:`_SetCounts` of two canonical 0/1 CSR matrices of one shape (see
    :func:`_pair`), in O(nnz(T) + nnz(P) + n + q) memory."""
    both = T.multiply(P).tocsr()  # elementwise: the pairs in T & P, still sparse
    both.eliminate_zeros()
    q = T.shape[1]

    def per_doc(Y: sp.csr_matrix) -> np.ndarray:
        return np.diff(Y.indptr).astype(np.int64, copy=False)

    def per_label(Y: sp.csr_matrix) -> np.ndarray:
        return np.bincount(Y.indices, minlength=q).astype(np.int64, copy=False)

    return _SetCounts(per_doc(T), per_doc(P), per_doc(both),
                      per_label(T), per_label(P), per_label(both))


def _set_counts(Y_true: Any, Y_pred: Any) -> _SetCounts:
    return _count(*_pair(Y_true, Y_pred))


def _hamming_loss(c: _SetCounts) -> float:
    wrong = int(c.doc_true.sum()) + int(c.doc_pred.sum()) - 2 * int(c.doc_both.sum())
    # np.divide: no labels (q = 0) gives NaN, as the mean of an empty n x 0 array did
    return float(np.divide(np.float64(wrong), c.n * c.q))


def _example_accuracy(c: _SetCounts) -> float:
    union = c.doc_true + c.doc_pred - c.doc_both
    return float(np.mean(_ratio(c.doc_both, union, np.ones(c.n))))


def _example_precision(c: _SetCounts) -> float:
    return float(np.mean(_ratio(c.doc_both, c.doc_pred, c.doc_true == 0)))


def _example_recall(c: _SetCounts) -> float:
    return float(np.mean(_ratio(c.doc_both, c.doc_true, c.doc_pred == 0)))


def _example_f1(c: _SetCounts) -> float:
    return float(np.mean(_ratio(2.0 * c.doc_both, c.doc_true + c.doc_pred, np.ones(c.n))))


def _subset_accuracy(c: _SetCounts) -> float:
    # P == T exactly when T & P is as large as both
    return float(np.mean((c.doc_both == c.doc_true) & (c.doc_both == c.doc_pred)))


def _micro_f1(c: _SetCounts) -> float:
    den = float(c.doc_true.sum()) + float(c.doc_pred.sum())
    return 1.0 if den == 0 else float(2.0 * c.doc_both.sum() / den)


def _macro_f1(c: _SetCounts) -> float:
    den = c.label_true + c.label_pred
    return float(np.mean(_ratio(2.0 * c.label_both, den, np.ones(c.q))))


def hamming_loss(Y_true: Any, Y_pred: Any) -> float:
    """Fraction of document-label pairs predicted wrongly (MVMD eq. 48)."""
    return _hamming_loss(_set_counts(Y_true, Y_pred))


def example_accuracy(Y_true: Any, Y_pred: Any) -> float:
    """Mean Jaccard index ``|T & P| / |T | P|`` (MVMD eq. 49); both sets empty counts 1."""
    return _example_accuracy(_set_counts(Y_true, Y_pred))


def example_precision(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``|T & P| / |P|`` (MVMD eq. 50); empty P counts 1 if T is empty too, else 0."""
    return _example_precision(_set_counts(Y_true, Y_pred))


def example_recall(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``|T & P| / |T|`` (MVMD eq. 51); empty T counts 1 if P is empty too, else 0."""
    return _example_recall(_set_counts(Y_true, Y_pred))


def example_f1(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``2 |T & P| / (|T| + |P|)`` (MVMD eq. 52); both sets empty counts 1."""
    return _example_f1(_set_counts(Y_true, Y_pred))


def subset_accuracy(Y_true: Any, Y_pred: Any) -> float:
    """Fraction of documents whose predicted label set equals the true one (MVMD eq. 53)."""
    return _subset_accuracy(_set_counts(Y_true, Y_pred))


def micro_f1(Y_true: Any, Y_pred: Any) -> float:
    """F1 over all document-label pairs pooled (MDDM 4.2); 1 if no true and no predicted label."""
    return _micro_f1(_set_counts(Y_true, Y_pred))


def macro_f1(Y_true: Any, Y_pred: Any) -> float:
    """Mean over all labels of the per-label F1 (MDDM 4.2).

    A label with no positives and no predictions counts 1; see the module docstring.
    """
    return _macro_f1(_set_counts(Y_true, Y_pred))


#: Each label-set measure of :data:`LABEL_SET_METRICS` from the counts.
_FROM_COUNTS: dict[str, Callable[[_SetCounts], float]] = {
    "hamming_loss": _hamming_loss, "example_accuracy": _example_accuracy,
    "example_precision": _example_precision, "example_recall": _example_recall,
    "example_f1": _example_f1, "subset_accuracy": _subset_accuracy,
    "micro_f1": _micro_f1, "macro_f1": _macro_f1,
}


# --------------------------------------------------------------- ranking measures
def _evaluable(T: np.ndarray) -> np.ndarray:
    """Documents that define a ranking: at least one relevant and one irrelevant label."""
    k = T.sum(axis=1)
    return (k > 0) & (k < T.shape[1])


def ranking_skipped(Y_true: Any) -> int:
    """How many documents the ranking measures skip (no label, or every label, relevant)."""
    T = _binary(Y_true, "Y_true")
    return int((~_evaluable(T)).sum())


def _pessimistic(T: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per label (original positions): pessimistic rank, and relevant labels ranked at or
    above it; plus the same two at the top-scored position of each row."""
    n, q = S.shape
    order = np.argsort(-S, axis=1, kind="stable")
    s_sorted = np.take_along_axis(S, order, axis=1)
    t_sorted = np.take_along_axis(T, order, axis=1)
    # End (last position) of each tie group, so that a label is ranked below all its ties.
    last = np.ones((n, q), dtype=bool)
    last[:, :-1] = s_sorted[:, :-1] != s_sorted[:, 1:]
    pos = np.where(last, np.arange(q)[None, :], q)
    end = np.minimum.accumulate(pos[:, ::-1], axis=1)[:, ::-1]
    cum_rel = np.cumsum(t_sorted, axis=1)
    rank_sorted = end + 1
    rel_sorted = np.take_along_axis(cum_rel, end, axis=1)
    rank = np.empty((n, q), dtype=np.int64)
    rel = np.empty((n, q), dtype=np.int64)
    np.put_along_axis(rank, order, rank_sorted, axis=1)
    np.put_along_axis(rel, order, rel_sorted, axis=1)
    return rank, rel, np.stack([rank_sorted[:, 0], rel_sorted[:, 0]], axis=1)


def _ranking_parts(Y_true: Any, scores: Any):
    T, S = _scored(Y_true, scores)
    keep = _evaluable(T)
    T, S = T[keep], S[keep]
    if T.shape[0] == 0:
        return None
    rank, rel, top = _pessimistic(T, S)
    return T, rank, rel, top


def ranking_loss(Y_true: Any, scores: Any) -> float:
    """Fraction of (relevant, irrelevant) label pairs with f(relevant) <= f(irrelevant)."""
    parts = _ranking_parts(Y_true, scores)
    if parts is None:
        return float("nan")
    T, rank, rel, _ = parts
    # rank - rel = irrelevant labels scored >= this (relevant) label.
    wrong = np.where(T, rank - rel, 0).sum(axis=1)
    n_rel = T.sum(axis=1)
    return float(np.mean(wrong / (n_rel * (T.shape[1] - n_rel))))


def one_error(Y_true: Any, scores: Any) -> float:
    """Fraction of documents whose top-scored label is irrelevant (ties at the top: an error
    if any label sharing the top score is irrelevant)."""
    parts = _ranking_parts(Y_true, scores)
    if parts is None:
        return float("nan")
    _, _, _, top = parts
    return float(np.mean(top[:, 0] > top[:, 1]))


def coverage(Y_true: Any, scores: Any) -> float:
    """Mean over documents of the worst rank of a relevant label, minus 1 (MDDM 4.2)."""
    parts = _ranking_parts(Y_true, scores)
    if parts is None:
        return float("nan")
    T, rank, _, _ = parts
    return float(np.mean(np.where(T, rank, 0).max(axis=1) - 1))


def average_precision(Y_true: Any, scores: Any) -> float:
    """Mean over relevant labels of (relevant labels ranked at or above) / rank (MDDM 4.2)."""
    parts = _ranking_parts(Y_true, scores)
    if parts is None:
        return float("nan")
    T, rank, rel, _ = parts
    per_doc = np.where(T, rel / rank, 0.0).sum(axis=1) / T.sum(axis=1)
    return float(np.mean(per_doc))


def _auc_labels(T: np.ndarray) -> np.ndarray:
    pos = T.sum(axis=0)
    return (pos > 0) & (pos < T.shape[0])


def auc_skipped(Y_true: Any) -> int:
    """How many labels ``macro_auc`` skips (no positive or no negative document)."""
    T = _binary(Y_true, "Y_true")
    return int((~_auc_labels(T)).sum())


def macro_auc(Y_true: Any, scores: Any) -> float:
    """Mean over labels of the ROC AUC (Mann-Whitney; ties count 1/2); labels with no
    positive or no negative document are skipped."""
    T, S = _scored(Y_true, scores)
    keep = _auc_labels(T)
    if not keep.any():
        return float("nan")
    T, S = T[:, keep], S[:, keep]
    r = rankdata(S, method="average", axis=0)
    n1 = T.sum(axis=0).astype(np.float64)
    n0 = T.shape[0] - n1
    u = np.where(T, r, 0.0).sum(axis=0) - n1 * (n1 + 1) / 2.0
    return float(np.mean(u / (n1 * n0)))


# ------------------------------------------------------------------- redundancy
def _gram_block(xb: Any, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    xs = xb[:, cols]
    if sp.issparse(xs):
        g = (xs.T @ xs).toarray()
    else:
        xs = np.asarray(xs, dtype=np.float64)
        g = xs.T @ xs
    s = np.asarray(xs.sum(axis=0), dtype=np.float64).ravel()
    return np.asarray(g, dtype=np.float64), s, int(xs.shape[0])


def _sum(*parts: tuple[np.ndarray, np.ndarray, int]) -> tuple[np.ndarray, np.ndarray, int]:
    return (np.sum([p[0] for p in parts], axis=0), np.sum([p[1] for p in parts], axis=0),
            sum(p[2] for p in parts))


def squared_cosines(gram: np.ndarray) -> np.ndarray:
    """A = O o O with O_ij = g_ij / sqrt(g_ii g_jj) (GRROOR eq. 12 and 14).

    ``gram`` is F^T F for the feature columns F (centred for eq. 12-13). A feature of
    zero norm has cosine 0 with every feature, itself included.
    """
    norms = np.sqrt(np.clip(np.diag(gram), 0.0, None))
    outer = np.outer(norms, norms)
    cos = np.divide(gram, outer, out=np.zeros_like(gram, dtype=np.float64), where=outer > 0)
    return cos**2


def redundancy(X: Any, selected: Sequence[int] | np.ndarray, centered: bool = True) -> float:
    """Mean squared cosine similarity between distinct selected features (GRROOR eq. 38).

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix or dask array (row blocks, dense or sparse)
        Documents x features; features are the columns f_i.
    selected : sequence of int or boolean mask
        The feature subset G (column indices, no repeats).
    centered : bool, default True
        Take the cosines of the centred columns f_i = H x_i (eq. 12-13, the A of
        eq. 38); False uses the raw columns.

    Returns
    -------
    float
        ``sum_{i != j in G} A_ij / (m (m - 1))`` with A_ij = cos^2(f_i, f_j) (eq. 12,
        38). A constant column (zero after centring) has cosine 0 with every other
        column. A single selected feature has no pair: 0.0.
    """
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D documents x features matrix; got shape {X.shape}")
    D = X.shape[1]
    sel = np.asarray(selected)
    if sel.dtype == np.bool_:
        if sel.shape != (D,):
            raise ValueError(f"a boolean 'selected' mask must have X's {D} entries; "
                             f"got shape {sel.shape}")
        sel = np.flatnonzero(sel)
    sel = sel.astype(np.int64).ravel()
    if sel.size == 0:
        raise ValueError("redundancy: 'selected' is empty; select at least one feature")
    if sel.min() < 0 or sel.max() >= D:
        bad = sel[(sel < 0) | (sel >= D)][0]
        raise ValueError(f"redundancy: selected feature index {bad} is outside 0..{D - 1}")
    uniq, counts = np.unique(sel, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"redundancy: feature {uniq[counts > 1][0]} is selected twice")
    m = sel.size
    if m == 1:
        return 0.0
    if isinstance(X, da.Array):
        if len(X.chunks[1]) != 1:
            X = X.rechunk({1: -1})
        parts = [delayed(_gram_block, pure=True)(b, sel) for b in X.to_delayed().ravel()]
        G, s, n = compute_one(tree_reduce(parts, _sum))
    else:
        G, s, n = _gram_block(X if sp.issparse(X) else np.asarray(X), sel)
    if centered and n > 0:
        G = G - np.outer(s, s) / n
    A = squared_cosines(G)
    return float((A.sum() - np.trace(A)) / (m * (m - 1)))


# ------------------------------------------------------- extreme classification (XMC)
#: Documents per block when :func:`top_k` partitions dense scores: at most about this many
#: score entries (rows x labels) are copied at a time, whatever q.
TOP_K_BLOCK_ENTRIES = 1 << 22


def _check_k(k: Any, name: str = "k") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{name} must be a positive integer; got {k!r}")
    return int(k)


def _dense_top_k(S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` of one dense float64 block (no NaN), k <= q."""
    b, q = S.shape
    if k == q:
        idx = np.argsort(-S, axis=1, kind="stable")
        return idx.astype(np.int64), np.take_along_axis(S, idx, axis=1)
    idx = np.argpartition(-S, k - 1, axis=1)[:, :k]
    # the k-th largest value t of each row: where more than k entries are >= t, the ties
    # at t that argpartition picked are replaced by the first ones in label order
    t = np.take_along_axis(S, idx, axis=1).min(axis=1, keepdims=True)
    over = np.flatnonzero((S >= t).sum(axis=1) > k)
    if over.size:
        So, to = S[over], t[over]
        above, tied = So > to, So == to
        need = k - above.sum(axis=1, keepdims=True)
        keep = above | (tied & (np.cumsum(tied, axis=1) <= need))
        idx[over] = np.nonzero(keep)[1].reshape(over.size, k)
    vals = np.take_along_axis(S, idx, axis=1)
    order = np.lexsort((idx, -vals), axis=1)  # score down, then the lower label first
    idx = np.take_along_axis(idx, order, axis=1)
    return idx.astype(np.int64), np.take_along_axis(vals, order, axis=1)


def _sparse_top_k(S: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`top_k` of a CSR matrix: its stored entries only, O(nnz + n k) memory."""
    n = S.shape[0]
    lengths = np.diff(S.indptr)
    rows = np.repeat(np.arange(n, dtype=np.int64), lengths)
    order = np.lexsort((S.indices, -S.data, rows))  # row, then score down, then label
    pos = np.arange(S.nnz, dtype=np.int64) - np.repeat(S.indptr[:-1].astype(np.int64),
                                                       lengths)
    take = order[pos < k]  # order keeps rows contiguous, so pos indexes the sorted row
    r, c = rows[take], pos[pos < k]
    idx = np.full((n, k), -1, dtype=np.int64)
    vals = np.full((n, k), -np.inf, dtype=np.float64)
    idx[r, c] = S.indices[take]
    vals[r, c] = S.data[take]
    return idx, vals


def _score_matrix(scores: Any) -> Any:
    """``scores`` as a CSR matrix (canonical, float64) or a 2-D float64 ndarray/dask array."""
    if sp.issparse(scores):
        S = sp.csr_matrix(scores, dtype=np.float64, copy=True)
        S.sum_duplicates()
    elif isinstance(scores, da.Array):
        S = scores
    else:
        S = np.asarray(scores)  # converted to float64 block by block (top_k)
    if S.ndim != 2:
        raise ValueError(f"scores must be a 2-D documents x labels matrix; got shape "
                         f"{S.shape}")
    return S


def top_k(scores: Any, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best-scored labels of each document, best first.

    Parameters
    ----------
    scores : ndarray, scipy.sparse matrix or dask array, shape (n, q)
        Higher is more relevant. Dense scores are partitioned (``np.argpartition``) in
        row blocks of about :data:`TOP_K_BLOCK_ENTRIES` entries, a dask array block by
        block, so memory is O(n k) plus one block. A sparse matrix ranks its **stored**
        entries only (what ``dmlfe predict --top-k`` writes: each row's best scores); an
        entry not stored is never returned, in O(nnz + n k) memory.
    k : int >= 1
        How many labels per document.

    Returns
    -------
    indices : ndarray of int64, shape (n, k)
        Label indices in decreasing score; ties are broken deterministically, the lower
        label index first. Where a row has fewer than ``k`` candidates (k > q, or a sparse
        row with fewer stored entries) the row is padded with -1.
    values : ndarray of float64, shape (n, k)
        The scores of ``indices``; -inf at the padding.

    Raises
    ------
    ValueError
        ``k`` < 1, ``scores`` not 2-D, or a NaN score.
    """
    k = _check_k(k)
    S = _score_matrix(scores)
    if isinstance(S, da.Array):
        if len(S.chunks[1]) != 1:
            S = S.rechunk({1: -1})
        parts = compute_one([delayed(top_k, pure=True)(b, k) for b in S.to_delayed().ravel()])
        if not parts:
            return np.empty((0, k), dtype=np.int64), np.empty((0, k), dtype=np.float64)
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    n, q = S.shape
    if sp.issparse(S):
        nan = np.flatnonzero(np.isnan(S.data))
        if nan.size:
            j = int(nan[0])
            _nan_score(int(np.searchsorted(S.indptr, j, side="right") - 1), int(S.indices[j]))
        return _sparse_top_k(S, k)
    idx = np.full((n, k), -1, dtype=np.int64)
    vals = np.full((n, k), -np.inf, dtype=np.float64)
    kk = min(k, q)
    if kk == 0:
        return idx, vals
    step = max(1, TOP_K_BLOCK_ENTRIES // max(q, 1))
    for start in range(0, n, step):
        block = np.asarray(S[start:start + step], dtype=np.float64)
        nan = np.isnan(block)
        if nan.any():
            r, c = np.argwhere(nan)[0]
            _nan_score(start + int(r), int(c))
        i, v = _dense_top_k(block, kk)
        idx[start:start + step, :kk], vals[start:start + step, :kk] = i, v
    return idx, vals


def _nan_score(row: int, label: int) -> None:
    raise ValueError(f"scores[row {row}, label {label}] is NaN: scores must be numbers "
                     "(+-inf are allowed and rank first/last)")


def _true_csr(Y_true: Any) -> sp.csr_matrix:
    """0/1 ``Y_true`` as a canonical CSR matrix of its relevant labels (int8; dense input
    is checked and converted, sparse input never densified)."""
    return _indicators(Y_true, "Y_true")


def _check_pair(Y: sp.csr_matrix, S: Any) -> None:
    if Y.shape != S.shape:
        raise ValueError(f"Y_true has shape {Y.shape} but scores has shape {S.shape}")
    if Y.shape[0] == 0:
        raise ValueError("no documents to evaluate (Y_true has 0 rows)")


def _hits(Y: sp.csr_matrix, idx: np.ndarray) -> np.ndarray:
    """y[i, idx[i, j]] as a bool (n, k) array (False at the padding -1), O(nnz + n k)."""
    n, q = Y.shape
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(Y.indptr))
    true_keys = rows * q + Y.indices.astype(np.int64)  # sorted: canonical CSR
    if true_keys.size == 0:
        return np.zeros(idx.shape, dtype=bool)
    keys = np.arange(n, dtype=np.int64)[:, None] * q + idx
    pos = np.minimum(np.searchsorted(true_keys, keys), true_keys.size - 1)
    return (true_keys[pos] == keys) & (idx >= 0)


def _inverse_propensities(propensities: Any, q: int) -> np.ndarray:
    p = np.asarray(propensities, dtype=np.float64)
    if p.shape != (q,):
        raise ValueError(f"propensities must hold one value per label ({q}); got shape "
                         f"{p.shape}")
    bad = np.flatnonzero(~np.isfinite(p) | (p <= 0))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"propensities[{j}] = {float(p[j])!r}: propensities must be "
                         "finite and > 0 (see label_propensities)")
    return 1.0 / p


def _discounts(k: int) -> np.ndarray:
    """1 / log2(rank + 1) for rank = 1..k."""
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))


def _ideal_dcg(n_true: np.ndarray, k: int) -> np.ndarray:
    """sum_{i=1}^{min(k, ||y||_0)} 1 / log2(i + 1) per document (0 without labels)."""
    cum = np.concatenate([[0.0], np.cumsum(_discounts(k))])
    return cum[np.minimum(n_true, k)]


class _Ranked:
    """The top-k of ``scores`` and its hits against ``Y_true``, computed once for every
    XMC measure and every k up to ``k`` (the ranking is a total order, so the top-k' is the
    top-k's prefix for k' <= k)."""

    def __init__(self, Y_true: Any, scores: Any, k: int) -> None:
        self.k = _check_k(k)
        self.Y = _true_csr(Y_true)
        S = _score_matrix(scores)
        _check_pair(self.Y, S)
        self.idx, _ = top_k(S, self.k)
        self.hits = _hits(self.Y, self.idx)
        self.n_true = np.diff(self.Y.indptr)
        self._ideal: tuple[np.ndarray, np.ndarray] | None = None

    def precision(self, k: int) -> float:
        return float(np.mean(self.hits[:, :k].sum(axis=1) / k))

    def recall(self, k: int) -> float:
        found = self.hits[:, :k].sum(axis=1)
        return float(np.mean(np.divide(found, self.n_true, out=np.zeros(len(found)),
                                       where=self.n_true > 0)))

    def ndcg(self, k: int) -> float:
        dcg = (self.hits[:, :k] * _discounts(k)).sum(axis=1)
        return float(np.mean(np.divide(dcg, _ideal_dcg(self.n_true, k),
                                       out=np.zeros(len(dcg)), where=self.n_true > 0)))

    def _gains(self, w: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Inverse-propensity gains of the ranking and of the ideal ranking (the true
        labels by decreasing 1/p_l), first k places."""
        gain = np.where(self.hits[:, :k], w[np.maximum(self.idx[:, :k], 0)], 0.0)
        if self._ideal is None or self._ideal[0].shape[1] < k or self._ideal[1] is not w:
            W = self.Y.astype(np.float64).multiply(w[None, :]).tocsr()
            _, best = top_k(W, self.k)
            self._ideal = (np.where(np.isfinite(best), best, 0.0), w)
        return gain, self._ideal[0][:, :k]

    def psprecision(self, w: np.ndarray, k: int, normalize: bool) -> float:
        gain, ideal = self._gains(w, k)
        num = float(np.mean(gain.sum(axis=1) / k))
        if not normalize:
            return num
        den = float(np.mean(ideal.sum(axis=1) / k))
        return num / den if den > 0 else float("nan")

    def psndcg(self, w: np.ndarray, k: int, normalize: bool) -> float:
        gain, ideal = self._gains(w, k)
        z = _ideal_dcg(self.n_true, k)
        ok = self.n_true > 0

        def mean_ndcg(g: np.ndarray) -> float:
            dcg = (g * _discounts(k)).sum(axis=1)
            return float(np.mean(np.divide(dcg, z, out=np.zeros(len(dcg)), where=ok)))

        num = mean_ndcg(gain)
        if not normalize:
            return num
        den = mean_ndcg(ideal)
        return num / den if den > 0 else float("nan")


def precision_at_k(Y_true: Any, scores: Any, k: int) -> float:
    r"""Precision at k (Extreme Classification Repository).

    ``P@k = (1/k) sum_{l in rank_k(y_hat)} y_l``, averaged over documents: the fraction
    of the k best-scored labels that are relevant, always divided by k (also where a
    document has fewer than k relevant labels, or k > q).

    Parameters
    ----------
    Y_true : ndarray, scipy.sparse matrix or dask array, shape (n, q)
        0/1 relevance. Sparse input is never densified.
    scores : ndarray, scipy.sparse CSR or dask array, shape (n, q)
        Higher is more relevant. A sparse matrix ranks its stored entries only (e.g.
        the top-k scores ``dmlfe predict --top-k`` writes); see :func:`top_k`, which also
        gives the tie rule (the lower label index first).
    k : int >= 1

    Returns
    -------
    float
        In [0, 1]. Documents without a relevant label count 0 in the mean (as in the
        repository's pyxclib).
    """
    return _Ranked(Y_true, scores, k).precision(int(k))


def recall_at_k(Y_true: Any, scores: Any, k: int) -> float:
    """Recall at k: the mean over documents of ``|relevant labels in the top k| / ||y||_0``.

    Documents without a relevant label count 0 in the mean (pyxclib's ``recall``).
    Inputs, ties and memory as :func:`precision_at_k`.
    """
    return _Ranked(Y_true, scores, k).recall(int(k))


def ndcg_at_k(Y_true: Any, scores: Any, k: int) -> float:
    r"""Normalised discounted cumulative gain at k (Extreme Classification Repository).

    ``DCG@k = sum_{l in rank_k(y_hat)} y_l / log(rank(l) + 1)`` and
    ``nDCG@k = DCG@k / sum_{i=1}^{min(k, ||y||_0)} 1 / log(i + 1)``, averaged over
    documents (log base 2; the ratio does not depend on the base). In [0, 1]: 1 when the
    relevant labels fill the first min(k, ||y||_0) places. Documents without a relevant
    label count 0 in the mean (as in pyxclib). Inputs, ties and memory as
    :func:`precision_at_k`.
    """
    return _Ranked(Y_true, scores, k).ndcg(int(k))


def psprecision_at_k(Y_true: Any, scores: Any, k: int, propensities: Any,
                     normalize: bool = True) -> float:
    r"""Propensity-scored precision at k (Jain, Prabhu & Varma, KDD 2016).

    ``PSP@k = (1/k) sum_{l in rank_k(y_hat)} y_l / p_l``, averaged over documents
    (documents without a relevant label count 0).

    With ``normalize=True`` (the default, the convention of the repository's pyxclib
    ``psprecision``, in which the repository's tables are reported) the mean is divided
    by the mean of the same sum for the best achievable ranking: each document's
    relevant labels by decreasing 1/p_l. The result is then in [0, 1] (1 for a perfect
    ranking); it is a ratio of means, not a mean of per-document ratios. NaN when no
    document has a relevant label. ``normalize=False`` gives the unnormalised
    ``PSP@k`` above (with every p_l = 1 it is :func:`precision_at_k`).

    Parameters
    ----------
    Y_true, scores, k
        As :func:`precision_at_k`.
    propensities : array of shape (q,)
        p_l > 0 per label, usually :func:`label_propensities` of the training labels.
    normalize : bool, default True
        Divide by the ideal ranking's value (see above).
    """
    r = _Ranked(Y_true, scores, k)
    return r.psprecision(_inverse_propensities(propensities, r.Y.shape[1]), int(k),
                         normalize)


def psndcg_at_k(Y_true: Any, scores: Any, k: int, propensities: Any,
                normalize: bool = True) -> float:
    r"""Propensity-scored nDCG at k (Jain, Prabhu & Varma, KDD 2016).

    ``PSDCG@k = sum_{l in rank_k(y_hat)} y_l / (p_l log(rank(l) + 1))`` and
    ``PSnDCG@k = PSDCG@k / sum_{i=1}^{min(k, ||y||_0)} 1 / log(i + 1)``, averaged over
    documents (documents without a relevant label count 0; log base 2).

    With ``normalize=True`` (the default, pyxclib's ``psndcg``) the mean is divided by
    the mean PSnDCG@k of the best achievable ranking (each document's relevant labels
    by decreasing 1/p_l): in [0, 1], a ratio of means; NaN when no document has a
    relevant label. ``normalize=False`` gives the formula above (with every p_l = 1 it
    is :func:`ndcg_at_k`). Parameters as :func:`psprecision_at_k`.
    """
    r = _Ranked(Y_true, scores, k)
    return r.psndcg(_inverse_propensities(propensities, r.Y.shape[1]), int(k), normalize)


def label_propensities(label_counts: Any, n_docs: int, A: float = 0.55,
                       B: float = 1.5) -> np.ndarray:
    r"""Label propensities of Jain, Prabhu & Varma (KDD 2016).

    ``p_l = 1 / (1 + C e^{-A log(N_l + B)})`` with ``C = (log N - 1)(B + 1)^A`` (natural
    logarithms), N the number of training documents and N_l the number of them with
    label l. The paper's defaults A = 0.55, B = 1.5; it uses A = 0.5, B = 0.4 for
    Wikipedia and A = 0.6, B = 2.6 for Amazon corpora. Rare labels get small
    propensities, so the propensity-scored measures reward finding them.

    Parameters
    ----------
    label_counts : array of shape (q,)
        N_l, the training documents with each label (0 <= N_l <= N).
    n_docs : int
        N, the training documents.
    A, B : float
        The model's parameters, A > 0 and B > 0.

    Returns
    -------
    ndarray of float64, shape (q,)
        The propensities p_l (their inverses 1/p_l are pyxclib's
        ``compute_inv_propesity``).

    Raises
    ------
    ValueError
        A bad count, N < 1, A or B not > 0, or an N so small that a propensity would not
        be positive (for N <= e, C <= 0).
    """
    if isinstance(n_docs, bool) or not isinstance(n_docs, (int, np.integer)) or n_docs < 1:
        raise ValueError(f"n_docs must be a positive integer; got {n_docs!r}")
    for name, v in (("A", A), ("B", B)):
        if not np.isfinite(v) or v <= 0:
            raise ValueError(f"label_propensities: {name} must be a finite number > 0; "
                             f"got {v!r}")
    counts = np.asarray(label_counts, dtype=np.float64)
    if counts.ndim != 1:
        raise ValueError(f"label_counts must be 1-D (one count per label); got shape "
                         f"{counts.shape}")
    bad = np.flatnonzero(~np.isfinite(counts) | (counts < 0) | (counts > n_docs))
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"label_counts[{j}] = {float(counts[j])!r} is not a count between 0 and "
                         f"n_docs = {n_docs}")
    C = (np.log(n_docs) - 1.0) * (B + 1.0) ** A
    inv = 1.0 + C * np.exp(-A * np.log(counts + B))
    if (inv <= 0).any():
        raise ValueError(f"label_propensities: with n_docs = {n_docs} the propensity model "
                         "gives non-positive values (C = (log N - 1)(B + 1)^A < 0); "
                         "use more training documents or other propensities")
    return 1.0 / inv


#: The XMC measure families as :func:`xmc_report` names them.
XMC_FAMILIES = ("P", "nDCG", "PSP", "PSnDCG")


def xmc_report(Y_true: Any, scores: Any, ks: Sequence[int] = (1, 3, 5),
               propensities: Any = None, recall_k: int | None = None
               ) -> dict[str, float]:
    """P@k, nDCG@k, PSP@k, PSnDCG@k for every k of ``ks`` and recall@``recall_k``, from one
    :func:`top_k`.

    Keys ``"P@1"``, ``"nDCG@1"``, ``"PSP@1"``, ``"PSnDCG@1"``, ... and ``"recall@5"``;
    the PS measures (normalised, as :func:`psprecision_at_k`) only with
    ``propensities``. ``recall_k`` defaults to the largest k.
    """
    ks = sorted({_check_k(k, "each k") for k in ks})
    if not ks:
        raise ValueError("ks is empty: give at least one k")
    recall_k = ks[-1] if recall_k is None else _check_k(recall_k, "recall_k")
    r = _Ranked(Y_true, scores, max(ks[-1], recall_k))
    w = (None if propensities is None
         else _inverse_propensities(propensities, r.Y.shape[1]))
    out: dict[str, float] = {}
    for k in ks:
        out[f"P@{k}"] = r.precision(k)
        out[f"nDCG@{k}"] = r.ndcg(k)
        if w is not None:
            out[f"PSP@{k}"] = r.psprecision(w, k, True)
            out[f"PSnDCG@{k}"] = r.psndcg(w, k, True)
    out[f"recall@{recall_k}"] = r.recall(recall_k)
    return out


# ---------------------------------------------------------------------- report
LABEL_SET_METRICS = (
    "hamming_loss", "example_accuracy", "example_precision", "example_recall",
    "example_f1", "subset_accuracy", "micro_f1", "macro_f1",
)
RANKING_METRICS = ("ranking_loss", "one_error", "coverage", "average_precision", "macro_auc")


#: From this many labels on, :func:`metric_report` (and ``dmlfe evaluate``) reports the
#: extreme classification measures (:func:`xmc_report`) by default and leaves out the five
#: ranking measures (:data:`RANKING_METRICS`), which sort every document's q scores and
#: hold several n x q work arrays of 8-byte numbers (about 5 GB for 10^5 documents and
#: 1000 labels). Below it the 13 measures are the multi-label papers' standard (MULAN's
#: sets up to delicious' 983 labels, the RCV1 subsets' 101) and cheap; from it on the
#: label sets are the Extreme Classification Repository's (EURLex-4K and larger), whose
#: measures are P@k, nDCG@k and their propensity-scored forms.
XMC_LABELS = 1000

#: The k of the XMC measures by default.
XMC_KS = (1, 3, 5)


def metric_report(Y_true: Any, Y_pred: Any, scores: Any = None, *,
                  xmc: bool | None = None, ks: Sequence[int] = XMC_KS,
                  propensities: Any = None, ranking: bool | None = None
                  ) -> dict[str, Any]:
    """Every measure in one dict (plain Python numbers and strings, JSON-ready).

    The label-set measures are computed once from shared counts and never densify
    sparse ``Y_true`` / ``Y_pred``; the ranking measures, where computed, take a dense
    copy of ``Y_true``.

    Keys: the eight label-set measures, ``n_documents``, ``n_labels``; with ``scores``
    also the five ranking measures, ``n_ranking_skipped`` (documents with no or all labels
    relevant, left out of the ranking measures) and ``n_auc_labels_skipped``; with
    ``scores`` and ``xmc`` the keys of :func:`xmc_report` (``"P@1"``, ``"nDCG@1"``, ...,
    ``"recall@5"``; the PS ones with ``propensities``).

    Parameters
    ----------
    Y_true, Y_pred : ndarray, scipy.sparse matrix or dask array, shape (n, q)
        0/1 true and predicted label sets.
    scores : ndarray, scipy.sparse matrix or dask array, shape (n, q), optional
        Higher is more relevant; needed by the ranking and XMC measures.
    xmc : bool or None
        Report the XMC measures; None (default): when q >= :data:`XMC_LABELS`.
    ks : sequence of int
        Their k's (recall at the largest).
    propensities : array of shape (q,), optional
        Label propensities for PSP@k and PSnDCG@k (:func:`label_propensities`).
    ranking : bool or None
        Compute the five ranking measures; None (default): when q < :data:`XMC_LABELS`.
        Measures left out are listed under ``"skipped_measures"``.
    """
    # T stays the checked CSR matrix: a dask Y_true is computed once for every part
    T, P = _pair(Y_true, Y_pred)
    counts = _count(T, P)
    q = counts.q
    out: dict[str, Any] = {name: _FROM_COUNTS[name](counts) for name in LABEL_SET_METRICS}
    out["n_documents"], out["n_labels"] = counts.n, q
    if scores is not None:
        large = q >= XMC_LABELS
        if (not large) if ranking is None else ranking:
            fns = globals()
            Td, S = _scored(T, scores)
            out.update({name: fns[name](Td, S) for name in RANKING_METRICS})
            out["n_ranking_skipped"] = int((~_evaluable(Td)).sum())
            out["n_auc_labels_skipped"] = int((~_auc_labels(Td)).sum())
        else:
            out["skipped_measures"] = list(RANKING_METRICS)
        if large if xmc is None else xmc:
            out.update(xmc_report(T, scores, ks, propensities))
    return out
