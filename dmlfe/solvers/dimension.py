"""Which eigenvalues are genuine, and how many components to keep."""

from __future__ import annotations

import numbers

import numpy as np

#: Eigenvalues below this fraction of the largest one are round-off, not signal.
ROUNDOFF_RTOL = 1e-10

#: Default eigenvalue-sum threshold t (mvmd eq. 15, mddm eq. 9).
DEFAULT_THRESHOLD = 0.999


def n_genuine(eigenvalues: np.ndarray, rtol: float = ROUNDOFF_RTOL) -> int:
    """How many of the (descending) eigenvalues are genuine.

    Only round-off is dropped: negative values and values at or below
    ``rtol`` times the largest. Small positive eigenvalues above that stay.
    """
    w = np.asarray(eigenvalues, dtype=np.float64)
    if w.size == 0 or not w[0] > 0:
        return 0
    if np.any(np.diff(w) > 0):
        raise ValueError("eigenvalues must be sorted in descending order")
    return int(np.count_nonzero(w > rtol * w[0]))


def choose_dimension(
    eigenvalues: np.ndarray,
    n_components: int | float = DEFAULT_THRESHOLD,
    rtol: float = ROUNDOFF_RTOL,
) -> int:
    """Number of components d.

    Parameters
    ----------
    eigenvalues : ndarray
        All computed eigenvalues, descending.
    n_components : int or float
        An int: d itself (1 <= d <= number of computed eigenvalues). A float t in
        (0, 1]: the smallest d with sum_{i<=d} lambda_i >= t * sum of the genuine
        positive lambda_i (mvmd eq. 15, mddm eq. 9).

    Returns
    -------
    int
        d. For a threshold it never exceeds the number of genuine eigenvalues;
        a fixed d is returned as asked (the solver warns when it reaches into
        round-off eigenvalues).
    """
    w = np.asarray(eigenvalues, dtype=np.float64)
    if isinstance(n_components, bool):
        raise TypeError("n_components must be an int or a float threshold, not a bool")
    if isinstance(n_components, numbers.Integral):
        d = int(n_components)
        if not 1 <= d <= w.size:
            raise ValueError(
                f"n_components={d} must lie between 1 and the number of computed "
                f"eigenvalues ({w.size})"
            )
        return d
    t = float(n_components)
    if not 0.0 < t <= 1.0:
        raise ValueError(
            f"n_components={n_components!r}: a float is the eigenvalue-sum threshold t and "
            "must lie in (0, 1]; pass an int for a fixed number of components"
        )
    k = n_genuine(w, rtol)
    if k == 0:
        raise ValueError(
            "no genuine positive eigenvalue: the objective matrix is zero up to round-off "
            "(e.g. labels constant over all documents); nothing to extract"
        )
    c = np.cumsum(w[:k])
    return int(min(np.searchsorted(c, t * c[-1], side="left") + 1, k))
