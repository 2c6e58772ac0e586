"""Label proximity G between documents, on the sparsity pattern of the K-NN graph
(mope section 3.3.1, eq. 34-42).

G is never formed dense: its values are evaluated only on the edges of a given n x n
sparsity pattern (the feature graph W), in slices of edges, from the n x c 0/1 label
matrix Y. Rows of Y that are all zero (unlabelled documents, SSMOPE) get g = 0.

Scheme 1 (binary label vectors): ``"sorensen"`` (eq. 34), ``"scaled_sorensen"`` (eq. 35,
shared classes weighted by 1 / class size), ``"jaccard"`` (eq. 36), ``"hamming"``
(eq. 38: 1 - |y_i xor y_j| / c) and ``"hamming_exp"`` (eq. 37: exp(-|y_i xor y_j| / tau)).

Scheme 2 (PCA of the label space, eq. 39: phi(y) = P_y^T y with P_y the top
``label_components`` right singular vectors of the centred labelled rows of Y):
``"minkowski"`` (eq. 40: exp(-||phi_i - phi_j||_P^P / tau)), ``"tanimoto"`` (eq. 41) or
``"cosine"``.

Scheme 3 (eq. 42): g_ij = y_i^T Sigma y_j / (m_i m_j), m_i = |y_i|, with Sigma a
similarity between the columns of Y: ``"sorensen"`` (eq. 34 applied to Y^T, as in the
paper's experiments) or ``"yty"`` (Sigma = Y^T Y).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

#: Label similarities of each scheme; the first is the scheme's default.
SCHEME_SIMILARITIES: dict[int, tuple[str, ...]] = {
    1: ("sorensen", "scaled_sorensen", "jaccard", "hamming", "hamming_exp"),
    2: ("cosine", "minkowski", "tanimoto"),
    3: ("sorensen", "yty"),
}
#: Edges per evaluation slice (bounds the slice x c temporaries).
EDGE_SLICE = 1 << 16


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def check_label_similarity(scheme: int, similarity: str | None) -> str:
    """The similarity name (the scheme's default for None); raises for a wrong pair."""
    if scheme not in SCHEME_SIMILARITIES:
        raise ValueError(f"scheme={scheme!r} must be 1, 2 or 3 (mope section 3.3.1)")
    allowed = SCHEME_SIMILARITIES[scheme]
    if similarity is None:
        return allowed[0]
    if similarity not in allowed:
        raise ValueError(f"label_similarity={similarity!r} is not available with scheme="
                         f"{scheme}; choose one of {allowed}")
    return similarity


def label_pca(Y: np.ndarray, n_components: int | None = None) -> np.ndarray:
    """phi(Y) = Y P_y (eq. 39), P_y from the centred labelled rows; (n, k_c)."""
    labelled = Y.sum(axis=1) > 0
    Yl = Y[labelled]
    if Yl.shape[0] == 0:
        return np.zeros((Y.shape[0], 1))
    _, s, Vt = np.linalg.svd(Yl - Yl.mean(axis=0), full_matrices=False)
    rank = int(np.sum(s > 1e-12 * max(float(s.max(initial=0.0)), 1e-300)))
    k = max(rank, 1) if n_components is None else min(int(n_components), Vt.shape[0])
    return Y @ Vt[:k].T


def class_similarity(Y: np.ndarray, kind: str) -> np.ndarray:
    """Sigma (c x c) of scheme 3: Sorensen between the columns of Y, or Y^T Y."""
    YtY = Y.T @ Y
    if kind == "yty":
        return YtY
    sizes = np.diag(YtY)
    return _ratio(2.0 * YtY, sizes[:, None] + sizes[None, :])


def edge_values(Y: np.ndarray, rows: np.ndarray, cols: np.ndarray, scheme: int,
                similarity: str, *, tau: float = 1.0, minkowski_p: float = 2.0,
                label_components: int | None = None) -> np.ndarray:
    """g_ij for the edges (rows[e], cols[e]) (module docstring)."""
    Y = np.asarray(Y, dtype=np.float64)
    similarity = check_label_similarity(scheme, similarity)
    m = Y.sum(axis=1)
    sizes = Y.sum(axis=0)
    if scheme == 2:
        F = label_pca(Y, label_components)
    elif scheme == 3:
        F = Y @ class_similarity(Y, similarity)
    else:
        F = Y
    out = np.empty(rows.size)
    for s in range(0, rows.size, EDGE_SLICE):
        r, c = rows[s:s + EDGE_SLICE], cols[s:s + EDGE_SLICE]
        yi, yj = Y[r], Y[c]
        if scheme == 1:
            both = (yi * yj).sum(axis=1)
            if similarity == "sorensen":
                v = _ratio(2.0 * both, m[r] + m[c])
            elif similarity == "scaled_sorensen":
                v = _ratio(2.0 * (yi * yj / np.where(sizes > 0, sizes, 1.0)).sum(axis=1),
                           m[r] + m[c])
            elif similarity == "jaccard":
                v = _ratio(both, m[r] + m[c] - both)
            else:
                xor = m[r] + m[c] - 2.0 * both
                v = np.exp(-xor / tau) if similarity == "hamming_exp" \
                    else 1.0 - xor / Y.shape[1]
        elif scheme == 2:
            fi, fj = F[r], F[c]
            if similarity == "minkowski":
                v = np.exp(-(np.abs(fi - fj) ** minkowski_p).sum(axis=1) / tau)
            else:
                dot = (fi * fj).sum(axis=1)
                ni, nj = (fi * fi).sum(axis=1), (fj * fj).sum(axis=1)
                v = _ratio(dot, ni + nj - dot) if similarity == "tanimoto" \
                    else _ratio(dot, np.sqrt(ni * nj))
        else:
            v = _ratio((F[r] * yj).sum(axis=1), m[r] * m[c])
        # unlabelled documents carry no label proximity (eq. 44 uses labelled ones only)
        out[s:s + EDGE_SLICE] = np.where((m[r] > 0) & (m[c] > 0), v, 0.0)
    return out


def label_proximity(Y: np.ndarray, pattern: sp.csr_matrix, scheme: int = 3,
                    similarity: str | None = None, **kw: float | int | None) -> sp.csr_matrix:
    """G on the sparsity pattern of ``pattern`` (same indices and indptr, explicit zeros
    kept so that G and W can be combined entry by entry)."""
    P = sp.csr_matrix(pattern)
    rows = np.repeat(np.arange(P.shape[0]), np.diff(P.indptr))
    vals = edge_values(Y, rows, P.indices.astype(np.int64), scheme,
                       check_label_similarity(scheme, similarity), **kw)
    return sp.csr_matrix((vals, P.indices.copy(), P.indptr.copy()), shape=P.shape)
