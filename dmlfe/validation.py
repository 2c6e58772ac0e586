"""scikit-learn's input checks on the in-memory path, as dmlfe errors.

The estimators and classifiers take a store path, a dask array (lazy: checked chunk
by chunk where it is read) or an in-memory matrix. In-memory matrices go through
scikit-learn's own :func:`~sklearn.utils.validation.validate_data` here, so that they
are refused as scikit-learn refuses them (no documents, no features, NaN or infinity,
complex numbers, ...) and ``n_features_in_`` / ``feature_names_in_`` follow
scikit-learn's rules; the error becomes an :class:`~dmlfe.errors.InputError` that
names the estimator.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import validate_data

from dmlfe.errors import InputError


def checked_matrix(estimator: Any, X: Any, *, reset: bool) -> Any:
    """``X`` as a finite float64 ndarray or CSR matrix with at least one row and column.

    Parameters
    ----------
    estimator : the estimator being fitted (``reset=True``) or applied (``reset=False``)
    X : array-like or scipy.sparse matrix
    reset : bool
        True in ``fit``: record ``n_features_in_`` (and ``feature_names_in_`` for a
        data frame); False afterwards: check them.

    Raises
    ------
    InputError
        With scikit-learn's message (which the estimator checks look for), prefixed by
        the estimator's name.
    """
    try:
        return validate_data(estimator, X, reset=reset, accept_sparse=("csr", "csc", "coo"),
                             dtype=np.float64)
    except ValueError as exc:
        raise InputError(f"{type(estimator).__name__}: {exc}") from exc


def expected_failed_checks(estimator: Any) -> dict[str, str]:
    """scikit-learn estimator checks that ``estimator`` fails on purpose, with the reason.

    For ``parametrize_with_checks(..., expected_failed_checks=expected_failed_checks)``
    and ``check_estimator(est, expected_failed_checks=expected_failed_checks(est))``.
    Each class declares them in its ``_xfail_checks`` class attribute.
    """
    return dict(getattr(type(estimator), "_xfail_checks", {}))
