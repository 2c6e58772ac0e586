"""Vocabulary and idf from merged document frequencies (on the driver)."""

from __future__ import annotations

from numbers import Integral

import numpy as np

from dmlfe.vectorize.counts import TermCounts
from dmlfe.vectorize.params import VectorizerParams


def smooth_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """idf = ln((1 + n) / (1 + df)) + 1 (scikit-learn's smooth_idf=True)."""
    return np.log((1.0 + n_docs) / (1.0 + df.astype(np.float64))) + 1.0


def build_vocabulary(counts: TermCounts, params: VectorizerParams) -> tuple[list[str], np.ndarray]:
    """Prune terms by min_df / max_df / max_features; return (sorted terms, their df).

    Reproduces scikit-learn's CountVectorizer pruning exactly: document-count
    thresholds first, then the ``max_features`` terms of largest corpus frequency
    among the survivors, the result in alphabetical order.
    """
    n = counts.n_docs
    max_doc = params.max_df if isinstance(params.max_df, Integral) else params.max_df * n
    min_doc = params.min_df if isinstance(params.min_df, Integral) else params.min_df * n
    if max_doc < min_doc:
        raise ValueError(
            f"max_df={params.max_df!r} allows fewer documents ({max_doc}) than "
            f"min_df={params.min_df!r} requires ({min_doc}) for {n} documents"
        )
    terms = counts.terms.astype(str)
    order = np.argsort(terms, kind="stable")
    terms, df, tf = terms[order], counts.df[order], counts.tf[order]
    mask = (df <= max_doc) & (df >= min_doc)
    if params.max_features is not None and mask.sum() > params.max_features:
        # the same argsort call as scikit-learn, so ties resolve identically
        keep = (-tf[mask]).argsort()[: params.max_features]
        new_mask = np.zeros(len(df), dtype=bool)
        new_mask[np.where(mask)[0][keep]] = True
        mask = new_mask
    if not mask.any():
        raise ValueError(
            f"after pruning with min_df={params.min_df!r}, max_df={params.max_df!r} no terms "
            f"remain of {len(terms)}; lower min_df or raise max_df"
        )
    return terms[mask].tolist(), df[mask]
