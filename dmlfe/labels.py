"""The 0/1 label rule, shared by the fit path, the classifiers and the metrics."""

from __future__ import annotations

import numpy as np


def first_non_binary(a: np.ndarray) -> tuple[int, int] | None:
    """(row, column) of the first entry of a 2-D array that is neither 0 nor 1; None if all are."""
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return None
    bad = ~((a == 0) | (a == 1))
    if not bad.any():
        return None
    r, c = np.argwhere(bad)[0]
    return int(r), int(c)
