"""Combining feature proximity W and label proximity G into MOPE's A (mope section 3.3.2).

Both are on the same sparsity pattern (the K-NN graph; see
:func:`dmlfe.graph.label_similarity.label_proximity`), so the combination is entry by
entry on their stored values:

* ``"priority"`` (eq. 43 and its general form): psi = gamma g^a / (1 + beta (1 - w^b)) +
  (1 - gamma) w^b, with a, b > 0, beta >= 0, 0 <= gamma <= 1 (gamma = 1 is eq. 43);
* ``"hadamard"``: G o W (LFDA-style);
* ``"weighted_sum"``: beta G + (1 - beta) W (SLVM-style, beta in [0, 1]).

Eq. 43 reads w and g as similarities in [0, 1] (constant, Gaussian, local-scaling and
cosine weights of non-negative data are, and so are the scheme 1 and 3 label
similarities). The cosine and Tanimoto similarities of scheme 2 can be negative, where
g^a is not defined for fractional a: ``"priority"`` clips negative w and g to 0 first
(no proximity), the other two combinations use them as they are.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

COMBINATIONS = ("priority", "hadamard", "weighted_sum")


def combine(W: sp.csr_matrix, G: sp.csr_matrix, combination: str = "priority", *,
            a: float = 1.0, b: float = 1.0, beta: float = 1.0,
            gamma: float = 1.0) -> sp.csr_matrix:
    """A = Psi(W, G) on their common pattern (module docstring)."""
    if W.shape != G.shape or not (np.array_equal(W.indptr, G.indptr)
                                  and np.array_equal(W.indices, G.indices)):
        raise ValueError("W and G must share one sparsity pattern (build G with "
                         "label_proximity(Y, W))")
    w, g = W.data, G.data
    if combination == "priority":
        wb = np.power(np.maximum(w, 0.0), b)
        v = gamma * np.power(np.maximum(g, 0.0), a) / (1.0 + beta * (1.0 - wb)) + (1.0 - gamma) * wb
    elif combination == "hadamard":
        v = g * w
    elif combination == "weighted_sum":
        v = beta * g + (1.0 - beta) * w
    else:
        raise ValueError(f"combination={combination!r} is not one of {COMBINATIONS}")
    A = sp.csr_matrix((v, W.indices.copy(), W.indptr.copy()), shape=W.shape)
    A.eliminate_zeros()
    return A
