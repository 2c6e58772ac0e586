"""New raw text -> the rows a store's documents got at ingest, and -> embeddings.

:class:`TextVectorizer` is a store's vectoriser, rebuilt from what the store keeps
(the vectoriser parameters, the vocabulary or hashing parameters, the idf): its
``transform(list of str)`` equals the stored rows of the same texts.
:func:`text_pipeline` puts it in front of a fitted model (and optionally a
classifier) as a scikit-learn :class:`~sklearn.pipeline.Pipeline` that takes strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from dmlfe.errors import InputError, StoreError
from dmlfe.vectorize.counts import tfidf_block
from dmlfe.vectorize.params import VECTORIZER_VERSION, VectorizerParams


class TextVectorizer(TransformerMixin, BaseEstimator):
    """A store's text vectoriser: raw documents -> tf-idf rows (CSR, float64).

    Made by :meth:`dmlfe.store.Store.text_vectorizer`; it is already fitted (the
    vocabulary and idf are the store's), so ``fit`` does nothing.

    Parameters
    ----------
    params : dict
        The store's ``vectorizer`` record (:class:`~dmlfe.vectorize.params.VectorizerParams`
        fields and its ``version``).
    idf : ndarray (n_features,)
    vocabulary : list of str or None
        Column terms for ``kind="tfidf"``; None for hashing.
    """

    def __init__(self, params: dict, idf: np.ndarray, vocabulary: list[str] | None = None):
        self.params = params
        self.idf = idf
        self.vocabulary = vocabulary

    def fit(self, X: Any = None, y: Any = None) -> TextVectorizer:
        self.n_features_out_ = len(self.idf)
        return self

    def transform(self, X: Iterable[str]) -> sp.csr_matrix:
        """tf-idf rows of the documents ``X`` (an iterable of strings)."""
        if isinstance(X, str):
            raise InputError("TextVectorizer.transform takes a list of documents, not one "
                             "string; wrap it in a list")
        texts = list(X)
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise InputError(f"document {bad} is a {type(texts[bad]).__name__}, not a string")
        p = VectorizerParams.from_dict(self.params)
        if p.kind == "hashing":
            counts = p.hashing_vectorizer().transform(texts)
        else:
            vocab = {t: j for j, t in enumerate(self.vocabulary)}
            counts = p.count_vectorizer(vocab).transform(texts)
        return tfidf_block(counts, np.asarray(self.idf, dtype=np.float64), p)

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        if self.vocabulary is not None:
            return np.asarray(self.vocabulary, dtype=object)
        return np.array([f"hash{j}" for j in range(len(self.idf))], dtype=object)


def store_vectorizer(provenance: dict, idf: np.ndarray | None, vocabulary: list[str] | None,
                     where: str) -> TextVectorizer:
    """The vectoriser of a store from its provenance, idf and vocabulary.

    Raises
    ------
    StoreError
        The store was not ingested from text, or by a dmlfe that did not keep the idf
        (re-ingest it).
    """
    rec = provenance.get("vectorizer")
    if rec is None:
        raise StoreError(f"{where} was not ingested from raw text (no vectoriser): there is "
                         "no way to vectorise new text for it")
    version = rec.get("version", 0)
    if idf is None or version < 1:
        raise StoreError(f"{where} was written without its idf weights (vectoriser record "
                         f"version {version}); re-ingest the corpus with this dmlfe to embed "
                         "new text")
    if version > VECTORIZER_VERSION:
        raise StoreError(f"{where} has vectoriser record version {version}, newer than this "
                         f"dmlfe reads ({VECTORIZER_VERSION}); upgrade dmlfe")
    return TextVectorizer(rec, np.asarray(idf, dtype=np.float64), vocabulary).fit()
