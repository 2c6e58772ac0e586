"""Per-part document-frequency counting and its tree merge (run on the workers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import normalize

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


def part_counts(texts: list[str], params: VectorizerParams) -> tuple[sp.csr_matrix, np.ndarray]:
    """Tokenise a part once: raw term counts and their column terms.

    For tf-idf the columns are the part's own sorted terms (``terms``); for hashing
    they are the hashed columns and ``terms`` is empty. Both passes of an ingest use
    this one tokenisation (the counts are kept between them).
    """
    if params.kind == "hashing":
        if not texts:
            return sp.csr_matrix((0, params.n_features)), np.array([], dtype=str)
        counts = params.hashing_vectorizer().transform(texts)
        return sp.csr_matrix(counts, dtype=np.float64), np.array([], dtype=str)
    try:
        cv = params.count_vectorizer()
        counts = cv.fit_transform(texts)
    except (ValueError, StopIteration):
        # no text, or every document of the part is empty: no terms
        return sp.csr_matrix((len(texts), 0)), np.array([], dtype=str)
    terms = np.asarray(cv.get_feature_names_out()).astype(str)  # already sorted
    return sp.csr_matrix(counts, dtype=np.float64), terms


def term_counts(counts: sp.csr_matrix, terms: np.ndarray, params: VectorizerParams,
                rows: np.ndarray | None = None) -> TermCounts:
    """Document and term frequencies over ``rows`` (a boolean mask; default all rows).

    Terms that occur in none of those rows are left out, as a vectoriser fitted on
    those documents alone would never have seen them.
    """
    if rows is not None:
        counts = counts[np.flatnonzero(rows)]
    csc = counts.tocsc()
    df = np.diff(csc.indptr).astype(np.int64)
    tf = np.asarray(csc.sum(axis=0)).ravel().astype(np.float64)
    seen = np.flatnonzero(df)
    if params.kind == "hashing":
        return TermCounts(counts.shape[0], df[seen], tf[seen], cols=seen.astype(np.int64))
    return TermCounts(counts.shape[0], df[seen], tf[seen], terms=terms[seen].astype(object))


def count_terms(texts: list[str], params: VectorizerParams) -> TermCounts:
    """Document and term frequencies of a list of documents."""
    return term_counts(*part_counts(texts, params), params)


def remap_counts(counts: sp.csr_matrix, terms: np.ndarray, vocab: dict[str, int],
                 n_features: int) -> sp.csr_matrix:
    """Part-local term columns -> the corpus vocabulary's columns (pruned terms dropped).

    Equal to ``CountVectorizer(vocabulary=vocab).transform`` of the same texts.
    """
    target = np.fromiter((vocab.get(t, -1) for t in terms), dtype=np.int64, count=len(terms))
    keep = np.flatnonzero(target >= 0)
    sub = counts[:, keep].tocsr()
    out = sp.csr_matrix((sub.data, target[keep][sub.indices], sub.indptr),
                        shape=(counts.shape[0], n_features))
    out.sort_indices()
    return out


def save_counts(path: str, counts: sp.csr_matrix, terms: np.ndarray) -> None:
    """Keep a part's counts between the two passes (npz, no pickle)."""
    np.savez(path, data=counts.data, indices=counts.indices, indptr=counts.indptr,
             shape=np.array(counts.shape), terms=terms)


def load_counts(path: str) -> tuple[sp.csr_matrix, np.ndarray]:
    with np.load(path, allow_pickle=False) as z:
        counts = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"]))
        return counts, z["terms"]


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


def _merge_hashed(parts: Sequence[TermCounts]) -> TermCounts:
    """:func:`merge_counts` of hashed tables: added into dense vectors over the hashed
    columns (a few MB), where sorted unions of up to 2^20 columns cost a sort each."""
    size = 1 + max((int(p.cols.max()) for p in parts if p.cols.size), default=-1)
    df = np.zeros(size, dtype=parts[0].df.dtype)
    tf = np.zeros(size, dtype=parts[0].tf.dtype)
    for p in parts:  # a table's columns are distinct: plain indexed adds
        df[p.cols] += p.df
        tf[p.cols] += p.tf
    seen = np.flatnonzero(df)
    return TermCounts(sum(p.n_docs for p in parts), df[seen], tf[seen],
                      cols=seen.astype(np.int64))


def merge_counts(*parts: TermCounts) -> TermCounts:
    """Sum of term tables over disjoint document sets (associative: used in a tree)."""
    if parts[0].cols is not None:
        return _merge_hashed(parts)
    acc = parts[0]
    for nxt in parts[1:]:
        keys, (df, tf) = _union_add(acc.terms.astype(str), nxt.terms.astype(str),
                                    [acc.df, acc.tf], [nxt.df, nxt.tf])
        acc = TermCounts(acc.n_docs + nxt.n_docs, df, tf, terms=keys.astype(object))
    return acc


def dense_df(counts: TermCounts, n_features: int) -> np.ndarray:
    """Hashing document frequencies as a dense vector over all hashed columns."""
    df = np.zeros(n_features, dtype=np.int64)
    df[counts.cols] = counts.df
    return df


def tfidf_block(counts: sp.csr_matrix, idf: np.ndarray, params: VectorizerParams) -> sp.csr_matrix:
    """Raw term counts -> (sublinear) tf * idf -> row-normalised float64 CSR."""
    X = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    X.sum_duplicates()
    X.eliminate_zeros()
    if params.sublinear_tf:
        np.log(X.data, out=X.data)
        X.data += 1.0
    # X diag(idf) entry by entry: the product's own arithmetic (one multiplication per
    # stored value), without a sparse matrix product over the diagonal
    X.data *= np.asarray(idf, dtype=np.float64)[X.indices]
    X.eliminate_zeros()  # as the product would: a zero weight stores nothing
    if params.norm is not None:
        X = normalize(X, norm=params.norm, copy=False)
    X.sort_indices()
    return X
