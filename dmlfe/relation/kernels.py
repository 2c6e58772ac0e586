"""Similarities between documents and prototypes (mope section 2.1.1, eq. 7-9).

All of them start from the sparse x sparse Gram block G = X_b P^T (P the prototype
rows) and the squared row norms, through ||x - p||^2 = ||x||^2 + ||p||^2 - 2 x.p
(clipped at 0 against round-off), so no dense copy of a D-wide row is ever made.

* ``"linear"``: x.p (the linear kernel; with every training document as a
  prototype R = X X_train^T, mddm section 3.1.2's Q = X^T X in its notation).
* ``"cosine"``: x.p / (||x|| ||p||); 0 when either row is empty.
* ``"gaussian"`` (eq. 7): exp(-||x - p||^2 / tau), tau > 0.
* ``"local_scaling"`` (eq. 8, Zelnik-Manor & Perona): exp(-||x - p||^2 /
  (sigma_x sigma_p)), sigma_i = ||x_i - x_i^K||, the distance to the K-th nearest
  neighbour. Reading for the relation route: the neighbours are the prototypes, and
  a distance of 0 (the document itself, or an exact duplicate) is not a neighbour --
  so a prototype's sigma is its K-th nearest *other* prototype, and a training
  document that is also a prototype gets the same sigma either way. A row with fewer
  than K non-zero distances uses its largest one (1.0 when it has none).
* ``"inverse_normalized_distance"`` (eq. 9, alias ``"eq9"``): 1 / (tau + ||x - p||^2 /
  (||x||^2 + ||p||^2)); the ratio is 0 when both rows are empty. It is not a
  positive semi-definite kernel (mope section 3.5 allows any relation values as
  input features).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.stats.outer import dense_outer

SIMILARITIES = ("linear", "cosine", "gaussian", "local_scaling", "inverse_normalized_distance")
_ALIASES = {"eq9": "inverse_normalized_distance", "eq7": "gaussian", "eq8": "local_scaling",
            "rbf": "gaussian"}
#: Similarities whose prototype kernel matrix is positive semi-definite (kernel MDDM).
PSD_SIMILARITIES = ("linear", "cosine", "gaussian")
#: Similarities with a width parameter tau.
WITH_TAU = ("gaussian", "inverse_normalized_distance")
#: Default K of the local-scaling kernel (Zelnik-Manor & Perona use K = 7).
DEFAULT_NEIGHBORS = 7
#: Default tau of eq. 9 (the paper does not fix one).
DEFAULT_EQ9_TAU = 1.0


def canonical_similarity(name: str) -> str:
    """The similarity's canonical name (accepts the aliases eq7, eq8, eq9, rbf)."""
    key = str(name).lower().replace("-", "_")
    key = _ALIASES.get(key, key)
    if key not in SIMILARITIES:
        raise ValueError(f"similarity={name!r} is not one of {SIMILARITIES} (or the aliases "
                         f"{sorted(_ALIASES)})")
    return key


def row_sq_norms(X: Any) -> np.ndarray:
    """Squared Euclidean norm of every row (float64)."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float64)
        return np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    X = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X, X)


def sq_distances(G: np.ndarray, xsq: np.ndarray, psq: np.ndarray) -> np.ndarray:
    """||x - p||^2 from the Gram block and the squared norms, clipped at 0.

    ``psq`` holds the norms of G's columns (1-D), or of each entry's second row
    (G's shape: pairs (i, j_ik), as for a K-NN list).
    """
    norms = xsq[:, None] + (psq if psq.ndim == 2 else psq[None, :])
    d2 = norms - 2.0 * G
    # round-off of the expansion: anything below ~1e-12 of the norms is a zero distance
    d2[d2 <= 1e-12 * norms] = 0.0
    return d2


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
    kind: str,
    G: np.ndarray,
    xb: Any,
    psq: np.ndarray,
    *,
    tau: float | None = None,
    proto_scales: np.ndarray | None = None,
    n_neighbors: int = DEFAULT_NEIGHBORS,
) -> np.ndarray:
    """The m x p similarity block of ``kind`` from G = X_b P^T, the row block X_b itself
    and the prototypes' squared norms ``psq``. The rows' norms are computed only for the
    kinds that use them (not "linear", which is G itself)."""
    if kind == "linear":
        return G
    xsq = row_sq_norms(xb)
    if kind == "cosine":
        nx, npr = np.sqrt(xsq), np.sqrt(psq)
        den = nx[:, None] * npr[None, :]
        return np.divide(G, den, out=np.zeros_like(G), where=den > 0)
    d2 = sq_distances(G, xsq, psq)
    if kind == "gaussian":
        return np.exp(-d2 / float(tau))
    if kind == "local_scaling":
        sx = kth_neighbour_distance(d2, n_neighbors)
        return np.exp(-d2 / (sx[:, None] * proto_scales[None, :]))
    if kind == "inverse_normalized_distance":
        den = xsq[:, None] + psq[None, :]
        ratio = np.divide(d2, den, out=np.zeros_like(d2), where=den > 0)
        return 1.0 / (float(tau) + ratio)
    raise ValueError(f"unknown similarity {kind!r}")


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
