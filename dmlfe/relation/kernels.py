"""Similarities between documents and prototypes (mope section 2.1.1, eq. 7-9).

All of them start from the sparse x sparse Gram block G = X_b P^T (P the prototype
rows) and the squared row norms, through ||x - p||^2 = ||x||^2 + ||p||^2 - 2 x.p
(clipped at 0 against round-off), so no dense copy of a D-wide row is ever made. The
similarities themselves are declared in :mod:`dmlfe.relation.similarities` (the same
functions weight the graph methods' K-NN graph); this module resolves their inputs
for a relation block.

``"local_scaling"`` (eq. 8, Zelnik-Manor & Perona): sigma_i = ||x_i - x_i^K||, the
distance to the K-th nearest neighbour. Reading for the relation route: the neighbours
are the prototypes, and a distance of 0 (the document itself, or an exact duplicate) is
not a neighbour -- so a prototype's sigma is its K-th nearest *other* prototype, and a
training document that is also a prototype gets the same sigma either way. A row with
fewer than K non-zero distances uses its largest one (1.0 when it has none).
``"inverse_normalized_distance"`` (eq. 9) is not a positive semi-definite kernel (mope
section 3.5 allows any relation values as input features).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.relation.similarities import (
    Pairs,
    SimilaritySpec,
    get_similarity,
    similarity_names,
    sq_distances,
)
from dmlfe.stats.outer import dense_outer

__all__ = ["DEFAULT_EQ9_TAU", "DEFAULT_NEIGHBORS", "PSD_SIMILARITIES", "SIMILARITIES",
           "WITH_TAU", "canonical_similarity", "kth_neighbour_distance", "median_tau",
           "prototype_scales", "row_sq_norms", "similarity", "sq_distances"]

#: dmlfe's own relation similarities (the registry, :func:`dmlfe.relation.similarities.
#: similarity_names`, also lists later registrations).
SIMILARITIES = similarity_names("relation")
#: Those whose prototype kernel matrix is positive semi-definite (kernel MDDM).
PSD_SIMILARITIES = tuple(n for n in SIMILARITIES if get_similarity(n).psd)
#: Those with a width parameter tau.
WITH_TAU = tuple(n for n in SIMILARITIES if get_similarity(n).needs_tau)
#: Default K of the local-scaling kernel (Zelnik-Manor & Perona use K = 7).
DEFAULT_NEIGHBORS = 7
#: Default tau of eq. 9 (the paper does not fix one).
DEFAULT_EQ9_TAU = get_similarity("inverse_normalized_distance").default_tau


def canonical_similarity(name: str) -> str:
    """The relation similarity's canonical name (accepts aliases such as eq7, eq8, eq9, rbf)."""
    return get_similarity(name, "relation").name


def row_sq_norms(X: Any) -> np.ndarray:
    """Squared Euclidean norm of every row (float64)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def kth_neighbour_distance(d2: np.ndarray, k: int) -> np.ndarray:
    """sigma per row: the K-th smallest non-zero distance (see the module docstring)."""
    m, p = d2.shape
    if p == 0:
        return np.ones(m)
    pos = np.where(d2 > 0.0, d2, np.inf)
    kk = min(k, p)
    kth = np.partition(pos, kk - 1, axis=1)[:, kk - 1]
    short = ~np.isfinite(kth)
    if short.any():
        finite = np.where(np.isfinite(pos[short]), pos[short], -np.inf).max(axis=1)
        kth[short] = np.where(np.isfinite(finite), finite, 1.0)
    return np.sqrt(kth)


def similarity(
    kind: str | SimilaritySpec,
    G: np.ndarray,
    xb: Any,
    psq: np.ndarray,
    *,
    tau: float | None = None,
    proto_scales: np.ndarray | None = None,
    n_neighbors: int = DEFAULT_NEIGHBORS,
) -> np.ndarray:
    """The m x p similarity block of ``kind`` (a name or a declaration) from G = X_b P^T,
    the row block X_b itself and the prototypes' squared norms ``psq``. The rows' norms
    are computed only for the similarities that read them (not "linear": G itself)."""
    spec = kind if isinstance(kind, SimilaritySpec) else get_similarity(kind, "relation")
    pairs = Pairs(inner=G, x_sq=lambda: row_sq_norms(xb)[:, None], p_sq=psq[None, :], tau=tau)
    if spec.needs_scale:
        pairs.x_scale = kth_neighbour_distance(pairs.sq_dist, n_neighbors)[:, None]
        pairs.p_scale = np.asarray(proto_scales)[None, :]
    return spec.weights(pairs)


def prototype_scales(P: sp.csr_matrix, psq: np.ndarray, n_neighbors: int,
                     rows: int = 2048) -> np.ndarray:
    """sigma of every prototype: its K-th nearest other prototype (eq. 8), in row blocks."""
    out = np.empty(P.shape[0])
    for s in range(0, P.shape[0], rows):
        G = dense_outer(P[s:s + rows], P)
        out[s:s + rows] = kth_neighbour_distance(sq_distances(G, psq[s:s + rows], psq),
                                                 n_neighbors)
    return out


def median_tau(P: sp.csr_matrix, psq: np.ndarray, random_state: int,
               sample: int = 1000) -> float:
    """Median heuristic for the Gaussian tau: the median squared distance between distinct
    pairs of a seeded sample of at most ``sample`` prototypes (1.0 when it is 0)."""
    p = P.shape[0]
    rng = np.random.default_rng(int(random_state))
    pick = np.sort(rng.choice(p, size=min(sample, p), replace=False)) if p > sample \
        else np.arange(p)
    S = P[pick]
    d2 = sq_distances(dense_outer(S, S), psq[pick], psq[pick])
    iu = np.triu_indices(len(pick), k=1)
    vals = d2[iu]
    med = float(np.median(vals)) if vals.size else 0.0
    return med if med > 0.0 else 1.0
