"""The label side of CCA, OPLS and MLSI when it is sparse (more than MAX_DENSE_LABELS
labels): Xc^T Yc made dense and the labels' leading principal directions, with no
q x q dense matrix (principal label space transformation, Tai & Lin 2012)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dmlfe.linalg.krylov import ArraySpace, ThickRestartLanczos
from dmlfe.methods.template import symmetrize
from dmlfe.stats.sufficient import SufficientStats

#: Largest dense D x q Xc^T Yc (bytes) that a method with a sparse label side forms: on
#: the relation route D = p prototypes (2,000 x 30,000 labels is 0.45 GiB).
MAX_LABEL_PRODUCT_BYTES = 2**30
#: Principal label directions kept by default (the methods' ``label_rank``) when the
#: label side is sparse.
LABEL_RANK = 256


def principal_label_side(stats: SufficientStats, method: str, label_rank: int
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T, Theta_r, V_r): T = Xc^T Yc (D x q, dense) and the r = min(q, label_rank)
    leading eigenpairs of Yc^T Yc (:func:`label_principal_directions`).

    Refused (ValueError naming ``method``) when T would pass MAX_LABEL_PRODUCT_BYTES.
    """
    D, q, n = stats.n_features, stats.n_labels, float(stats.n)
    if 8 * D * q > MAX_LABEL_PRODUCT_BYTES:
        raise ValueError(
            f"{method}: with q = {q:,} labels it forms the dense D x q Xc^T Yc, "
            f"{8 * D * q / 2**30:.2f} GiB for D = {D:,}, above MAX_LABEL_PRODUCT_BYTES = "
            f"{MAX_LABEL_PRODUCT_BYTES / 2**30:g} GiB; fit it on relation features "
            "(route='relation', fewer n_prototypes) or use MDDM (variant 'p'), PLS or "
            "MVMD, which need no such matrix")
    xty = stats.xty
    T = (xty.toarray() if sp.issparse(xty) else np.array(xty, dtype=np.float64))
    T -= np.outer(stats.sum_x, stats.sum_y) / n
    theta, V = label_principal_directions(stats, min(q, int(label_rank)))
    return T, theta, V


def label_principal_directions(stats: SufficientStats, r: int
                               ) -> tuple[np.ndarray, np.ndarray]:
    """The r leading eigenpairs of Yc^T Yc = Y^T Y - s s^T / n (s the label counts)
    from the sparse Y^T Y, eigenvalues descending: a dense eigensolver when r is every
    label, else thick-restart block Lanczos on the sparse product (each pair to
    ``TOL`` of its own eigenvalue)."""
    q, n = stats.n_labels, float(stats.n)
    s = np.asarray(stats.sum_y, dtype=np.float64)
    yty = sp.csr_matrix(stats.yty)
    if r >= q:
        w, V = np.linalg.eigh(symmetrize(yty.toarray() - np.outer(s, s) / n))
        return np.clip(w[::-1], 0.0, None), V[:, ::-1]

    def product(U: np.ndarray) -> np.ndarray:
        out = np.asarray(yty @ U)
        out -= np.outer(s, s @ U) / n
        return out

    space = ArraySpace(product, q)
    res = ThickRestartLanczos(space).solve(r)
    return np.clip(res.eigenvalues, 0.0, None), space.vectors(res.coefficients)
