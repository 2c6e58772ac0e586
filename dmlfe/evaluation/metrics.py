"""Multi-label evaluation measures of the MVMD, MDDM and GRROOR papers, one implementation each.

All values are fractions (not percentages). Inputs are document x label matrices
(numpy, scipy.sparse or dask; dask and sparse inputs are brought into memory, which is
fine because evaluation matrices are n_test x q).

Label-set measures ``(Y_true, Y_pred)`` with 0/1 matrices (MVMD eq. 48-53, MDDM 4.2):

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

``redundancy(X, selected)`` is GRROOR eq. 38: the mean squared cosine similarity
between distinct selected feature columns, centred as in eq. 12-13 (``centered=False``
for the raw columns).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask import delayed
from scipy.stats import rankdata

from dmlfe.compute import compute_one, tree_reduce
from dmlfe.labels import first_non_binary

__all__ = [
    "LABEL_SET_METRICS",
    "RANKING_METRICS",
    "auc_skipped",
    "average_precision",
    "coverage",
    "example_accuracy",
    "example_f1",
    "example_precision",
    "example_recall",
    "hamming_loss",
    "macro_auc",
    "macro_f1",
    "metric_report",
    "micro_f1",
    "one_error",
    "ranking_loss",
    "ranking_skipped",
    "redundancy",
    "subset_accuracy",
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


def _binary(a: Any, name: str) -> np.ndarray:
    a = _dense(a, name)
    bad = first_non_binary(a)
    if bad is not None:
        r, c = bad
        raise ValueError(
            f"{name}[row {r}, label {c}] = {a[r, c].item()!r}: {name} must be a 0/1 indicator "
            "matrix (threshold scores with the classifier's predict first)"
        )
    return a.astype(bool)


def _pair(Y_true: Any, Y_pred: Any) -> tuple[np.ndarray, np.ndarray]:
    T = _binary(Y_true, "Y_true")
    P = _binary(Y_pred, "Y_pred")
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
def hamming_loss(Y_true: Any, Y_pred: Any) -> float:
    """Fraction of document-label pairs predicted wrongly (MVMD eq. 48)."""
    T, P = _pair(Y_true, Y_pred)
    return float(np.mean(T != P))


def example_accuracy(Y_true: Any, Y_pred: Any) -> float:
    """Mean Jaccard index ``|T & P| / |T | P|`` (MVMD eq. 49); both sets empty counts 1."""
    T, P = _pair(Y_true, Y_pred)
    inter = (T & P).sum(axis=1)
    union = (T | P).sum(axis=1)
    return float(np.mean(_ratio(inter, union, np.ones(len(T)))))


def example_precision(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``|T & P| / |P|`` (MVMD eq. 50); empty P counts 1 if T is empty too, else 0."""
    T, P = _pair(Y_true, Y_pred)
    inter = (T & P).sum(axis=1)
    return float(np.mean(_ratio(inter, P.sum(axis=1), ~T.any(axis=1))))


def example_recall(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``|T & P| / |T|`` (MVMD eq. 51); empty T counts 1 if P is empty too, else 0."""
    T, P = _pair(Y_true, Y_pred)
    inter = (T & P).sum(axis=1)
    return float(np.mean(_ratio(inter, T.sum(axis=1), ~P.any(axis=1))))


def example_f1(Y_true: Any, Y_pred: Any) -> float:
    """Mean ``2 |T & P| / (|T| + |P|)`` (MVMD eq. 52); both sets empty counts 1."""
    T, P = _pair(Y_true, Y_pred)
    inter = (T & P).sum(axis=1)
    den = T.sum(axis=1) + P.sum(axis=1)
    return float(np.mean(_ratio(2.0 * inter, den, np.ones(len(T)))))


def subset_accuracy(Y_true: Any, Y_pred: Any) -> float:
    """Fraction of documents whose predicted label set equals the true one (MVMD eq. 53)."""
    T, P = _pair(Y_true, Y_pred)
    return float(np.mean((T == P).all(axis=1)))


def micro_f1(Y_true: Any, Y_pred: Any) -> float:
    """F1 over all document-label pairs pooled (MDDM 4.2); 1 if no true and no predicted label."""
    T, P = _pair(Y_true, Y_pred)
    den = float(T.sum()) + float(P.sum())
    return 1.0 if den == 0 else float(2.0 * (T & P).sum() / den)


def macro_f1(Y_true: Any, Y_pred: Any) -> float:
    """Mean over all labels of the per-label F1 (MDDM 4.2).

    A label with no positives and no predictions counts 1; see the module docstring.
    """
    T, P = _pair(Y_true, Y_pred)
    tp = (T & P).sum(axis=0)
    den = T.sum(axis=0) + P.sum(axis=0)
    return float(np.mean(_ratio(2.0 * tp, den, np.ones(T.shape[1]))))


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


# ---------------------------------------------------------------------- report
LABEL_SET_METRICS = (
    "hamming_loss", "example_accuracy", "example_precision", "example_recall",
    "example_f1", "subset_accuracy", "micro_f1", "macro_f1",
)
RANKING_METRICS = ("ranking_loss", "one_error", "coverage", "average_precision", "macro_auc")


def metric_report(Y_true: Any, Y_pred: Any, scores: Any = None) -> dict[str, float | int]:
    """Every measure in one dict (plain Python numbers, JSON-ready).

    Keys: the eight label-set measures, ``n_documents``, ``n_labels``; with ``scores``
    also the five ranking measures, ``n_ranking_skipped`` (documents with no or all labels
    relevant, left out of the ranking measures) and ``n_auc_labels_skipped``.
    """
    T, P = _pair(Y_true, Y_pred)
    fns = globals()
    out: dict[str, float | int] = {name: fns[name](T, P) for name in LABEL_SET_METRICS}
    out["n_documents"], out["n_labels"] = int(T.shape[0]), int(T.shape[1])
    if scores is not None:
        T, S = _scored(T, scores)
        out.update({name: fns[name](T, S) for name in RANKING_METRICS})
        out["n_ranking_skipped"] = int((~_evaluable(T)).sum())
        out["n_auc_labels_skipped"] = int((~_auc_labels(T)).sum())
    return out
