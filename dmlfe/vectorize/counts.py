"""Per-part document-frequency counting and its tree merge (run on the workers)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dmlfe.vectorize.params import VectorizerParams


@dataclass
class TermCounts:
    """Document frequency and corpus frequency of terms over a set of documents.

    ``terms`` is sorted (so two tables merge by a sorted union). For hashing,
    ``terms`` is None and ``df``/``tf`` are indexed by hashed column, stored sparsely
    as ``cols``.
    """

    n_docs: int
    df: np.ndarray
    tf: np.ndarray
    terms: np.ndarray | None = None
    cols: np.ndarray | None = None


def count_terms(texts: list[str], params: VectorizerParams) -> TermCounts:
    """Document and term frequencies of one part of the corpus."""
    if not texts:  # e.g. a part without any document of the fit split
        empty_i, empty_f = np.zeros(0, np.int64), np.zeros(0, np.float64)
        if params.kind == "hashing":
            return TermCounts(0, empty_i, empty_f, cols=np.zeros(0, np.int64))
        return TermCounts(0, empty_i, empty_f, terms=np.array([], dtype=object))
    if params.kind == "hashing":
        counts = params.hashing_vectorizer().transform(texts).tocsc()
        df = np.diff(counts.indptr)
        tf = np.asarray(counts.sum(axis=0)).ravel()
        cols = np.flatnonzero(df)
        return TermCounts(len(texts), df[cols].astype(np.int64), tf[cols].astype(np.float64),
                          cols=cols.astype(np.int64))
    cv = params.count_vectorizer()
    try:
        counts = cv.fit_transform(texts)
    except ValueError:
        # every document of the part is empty (or only stop words): no terms
        return TermCounts(len(texts), np.zeros(0, np.int64), np.zeros(0, np.float64),
                          terms=np.array([], dtype=object))
    terms = np.array(cv.get_feature_names_out(), dtype=object)  # already sorted
    counts = counts.tocsc()
    return TermCounts(
        len(texts),
        np.diff(counts.indptr).astype(np.int64),
        np.asarray(counts.sum(axis=0)).ravel().astype(np.float64),
        terms=terms,
    )


def _union_add(keys_a, keys_b, a_vals: list, b_vals: list):
    keys = np.union1d(keys_a, keys_b)
    ia = np.searchsorted(keys, keys_a)
    ib = np.searchsorted(keys, keys_b)
    out = []
    for va, vb in zip(a_vals, b_vals, strict=True):
        acc = np.zeros(len(keys), dtype=va.dtype)
        acc[ia] += va
        acc[ib] += vb
        out.append(acc)
    return keys, out


def merge_counts(*parts: TermCounts) -> TermCounts:
    """Sum of term tables over disjoint document sets (associative: used in a tree)."""
    acc = parts[0]
    for nxt in parts[1:]:
        hashing = acc.cols is not None
        keys_a = acc.cols if hashing else acc.terms.astype(str)
        keys_b = nxt.cols if hashing else nxt.terms.astype(str)
        keys, (df, tf) = _union_add(keys_a, keys_b, [acc.df, acc.tf], [nxt.df, nxt.tf])
        acc = TermCounts(
            acc.n_docs + nxt.n_docs,
            df,
            tf,
            terms=None if hashing else keys.astype(object),
            cols=keys if hashing else None,
        )
    return acc


def dense_df(counts: TermCounts, n_features: int) -> np.ndarray:
    """Hashing document frequencies as a dense vector over all hashed columns."""
    df = np.zeros(n_features, dtype=np.int64)
    df[counts.cols] = counts.df
    return df


def tfidf_block(counts: sp.csr_matrix, idf: np.ndarray, params: VectorizerParams) -> sp.csr_matrix:
    """Raw term counts -> (sublinear) tf * idf -> row-normalised float64 CSR."""
    from sklearn.preprocessing import normalize

    X = sp.csr_matrix(counts, dtype=np.float64)
    X.sum_duplicates()
    X.eliminate_zeros()
    if params.sublinear_tf:
        np.log(X.data, out=X.data)
        X.data += 1.0
    X = sp.csr_matrix(X @ sp.diags(idf, format="csr"))
    if params.norm is not None:
        X = normalize(X, norm=params.norm, copy=False)
    X.sort_indices()
    return X
