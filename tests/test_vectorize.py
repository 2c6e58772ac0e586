"""Vectoriser building blocks against scikit-learn's in-memory vectorisers."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer, TfidfVectorizer

from dmlfe.vectorize.counts import (
    count_terms,
    dense_df,
    merge_counts,
    part_counts,
    remap_counts,
    term_counts,
    tfidf_block,
)
from dmlfe.vectorize.params import VectorizerParams
from dmlfe.vectorize.vocabulary import build_vocabulary, smooth_idf

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "eps",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lam",
    "mu",
    "nu",
    "xi",
    "omicron",
    "pi",
    "rho",
    "sigma",
    "tau",
    "ups",
]


def _docs(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    p /= p.sum()
    docs = []
    for _ in range(n):
        k = rng.integers(0, 15)
        docs.append(
            " ".join(rng.choice(WORDS, size=k, p=p)).upper()
            if k % 7 == 3
            else " ".join(rng.choice(WORDS, size=k, p=p))
        )
    docs[5] = ""  # an empty document
    return docs


def _ours(docs, params, part_size):
    """The library's path: tokenise each part once, merge frequencies, remap, weight."""
    parts = [docs[i : i + part_size] for i in range(0, len(docs), part_size)]
    counted = [part_counts(p, params) for p in parts]
    total = merge_counts(*[term_counts(c, t, params) for c, t in counted])
    if params.kind == "hashing":
        idf = smooth_idf(dense_df(total, params.n_features), total.n_docs)
        return None, sp.vstack([tfidf_block(c, idf, params) for c, _ in counted]).tocsr()
    names, df = build_vocabulary(total, params)
    idf = smooth_idf(df, total.n_docs)
    vocab = {t: j for j, t in enumerate(names)}
    blocks = [tfidf_block(remap_counts(c, t, vocab, len(names)), idf, params)
              for c, t in counted]
    return names, sp.vstack(blocks).tocsr()


def test_remap_equals_count_vectorizer_with_fixed_vocabulary():
    docs = _docs(60, seed=9)
    params = VectorizerParams(ngram_range=(1, 2))
    vocab = {t: j for j, t in enumerate(sorted({"alpha", "beta gamma", "zeta", "nope", "mu"}))}
    ref = params.count_vectorizer(vocab).transform(docs[20:40])
    got = remap_counts(*part_counts(docs[20:40], params), vocab, len(vocab))
    assert (got != ref).nnz == 0 and got.shape == ref.shape


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"ngram_range": (1, 2), "min_df": 2, "max_df": 0.9},
        {"ngram_range": (1, 3), "max_features": 25, "sublinear_tf": True},
        {"min_df": 0.05, "max_df": 30, "norm": "l1"},
        {"norm": None, "sublinear_tf": True, "max_features": 7},
    ],
)
@pytest.mark.parametrize("part_size", [1, 17, 1000])
def test_tfidf_equals_sklearn(kw, part_size):
    docs = _docs(120, seed=1)
    params = VectorizerParams(kind="tfidf", **kw)
    names, X = _ours(docs, params, part_size)
    ref = TfidfVectorizer(**kw)
    R = ref.fit_transform(docs)
    assert names == list(ref.get_feature_names_out())
    assert X.shape == R.shape
    np.testing.assert_allclose(X.toarray(), R.toarray(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("kw", [{}, {"ngram_range": (1, 3), "sublinear_tf": True}])
def test_hashing_equals_sklearn(kw):
    docs = _docs(90, seed=2)
    params = VectorizerParams(kind="hashing", n_features=2**10, **kw)
    _, X = _ours(docs, params, 13)
    hv = HashingVectorizer(
        n_features=2**10, alternate_sign=False, norm=None, ngram_range=kw.get("ngram_range", (1, 1))
    )
    tt = TfidfTransformer(sublinear_tf=kw.get("sublinear_tf", False))
    R = tt.fit_transform(hv.transform(docs))
    np.testing.assert_allclose(X.toarray(), R.toarray(), rtol=1e-12, atol=1e-15)
    assert X.shape[1] == 2**10


def test_empty_document_is_a_zero_row():
    docs = _docs(30, seed=3)
    _, X = _ours(docs, VectorizerParams(), 7)
    assert X[5].nnz == 0


def test_pruning_everything_is_a_clear_error():
    docs = ["aa bb", "cc dd"]
    params = VectorizerParams(min_df=2)
    with pytest.raises(ValueError, match="no terms remain"):
        build_vocabulary(count_terms(docs, params), params)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"kind": "bag"}, "vectorizer must be"),
        ({"ngram_range": (2, 1)}, "ngram_range"),
        ({"min_df": 1.5}, "fraction"),
        ({"norm": "l3"}, "norm"),
        ({"kind": "hashing", "max_features": 10}, "max_features"),
    ],
)
def test_bad_parameters(kw, match):
    with pytest.raises(ValueError, match=match):
        VectorizerParams(**kw)


def test_max_df_below_min_df():
    params = VectorizerParams(min_df=5, max_df=2)
    with pytest.raises(ValueError, match="fewer documents"):
        build_vocabulary(count_terms(_docs(20, 4), params), params)


@pytest.mark.parametrize("kind", ["tfidf", "hashing"])
def test_part_without_documents_merges_as_nothing(kind):
    params = VectorizerParams(kind=kind, n_features=2**8)
    docs = _docs(40, seed=5)
    full = merge_counts(count_terms(docs, params), count_terms([], params))
    ref = count_terms(docs, params)
    assert full.n_docs == ref.n_docs == 40
    np.testing.assert_array_equal(full.df, ref.df)
    np.testing.assert_array_equal(full.tf, ref.tf)
