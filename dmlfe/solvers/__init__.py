"""Eigensolvers for the trace template, and the rules every solver shares.

* :func:`solve_dense` -- driver-side dense solvers (``eigh``, generalised
  ``eigh``, thin SVD) for D small enough for a D x D matrix;
* :func:`solve_matrix_free` / :func:`matrix_free_eigh` -- leading eigenpairs of
  a scatter-type A by distributed passes over X (:class:`ScatterOperator`);
* :class:`EigenResult` and :func:`flip_signs` -- the one result type and the one
  sign rule;
* :func:`check_n_components`, :func:`choose_dimension`, :func:`n_genuine` and
  :data:`DEFAULT_THRESHOLD` -- the one rule for ``n_components`` and d.
"""

from dmlfe.solvers.dense import solve_dense
from dmlfe.solvers.dimension import (
    DEFAULT_THRESHOLD,
    check_n_components,
    choose_dimension,
    n_genuine,
)
from dmlfe.solvers.matrix_free import ScatterOperator, matrix_free_eigh, solve_matrix_free
from dmlfe.solvers.result import EigenResult, flip_signs, flip_signs_inplace

__all__ = [
    "DEFAULT_THRESHOLD",
    "EigenResult",
    "ScatterOperator",
    "check_n_components",
    "choose_dimension",
    "flip_signs",
    "flip_signs_inplace",
    "matrix_free_eigh",
    "n_genuine",
    "solve_dense",
    "solve_matrix_free",
]
