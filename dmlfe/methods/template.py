"""The trace template every method reduces to, and small helpers shared by the methods.

All methods of dmlfe are instances of one optimisation problem (mope eq. 31)::

    max_P tr(P^T A P)   s.t.   P^T B P = I,

solved by the generalised symmetric eigenproblem A p = lambda B p (B = I: the
ordinary one). A method is a pure function from :class:`SufficientStats` to a
:class:`TraceTemplate`; solving it is the solvers' job.

At large D no D x D matrix may be formed, so the template also carries A in an
*operator form* that the matrix-free solver can apply with passes over the data::

    A = xx_coef * Xs^T Xs + lowrank @ lowrank.T

where Xs = H X (the centred data) when ``centred`` is true and X otherwise, and
``lowrank`` is a small D x r matrix computed from the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg as sla

from dmlfe.stats.outer import dense_crossprod, mirror_upper
from dmlfe.stats.sufficient import RowsField, SufficientStats, held


@dataclass
class TraceTemplate:
    """max tr(P^T A P) s.t. P^T B P = I, in dense and/or operator form.

    Attributes
    ----------
    method : str
        Registry name of the method that built the template.
    params : dict
        The method's parameters (for the model record).
    centred : bool
        Whether the projection subtracts the training mean (Z = (X - mean) P)
        and whether ``Xs`` in the operator form is the centred data.
    n_features : int
        D.
    A : ndarray of shape (D, D) or None
        Dense objective matrix; None when only the operator form was requested.
    B : ndarray of shape (D, D) or None
        Dense constraint matrix; None means the identity (orthonormal directions).
    xx_coef : float
        Operator form: coefficient of the (centred when ``centred``) scatter Xs^T Xs.
    lowrank : ndarray of shape (D, r) or None
        Operator form: low-rank part F of A, A = xx_coef Xs^T Xs + F F^T.
    operator_form : bool
        Whether ``xx_coef`` and ``lowrank`` describe A exactly. False for methods
        whose A cannot be written that way (MLSI, MLDA, DMLDA) or whose label
        kernel is not positive semi-definite.
    label_factor : ndarray of shape (q, r) or None
        K with ``lowrank`` = Xc^T Yc K, Yc the centred 0/1 labels: the n-space form of
        the low-rank part, used by the dual route (:mod:`dmlfe.solvers.dual`).
    constraint : (b, c) or None
        B = b Xs^T Xs + c I when B has that form (CCA, OPLS, MDDMf); the dual route
        then solves through the n x n Gram instead of forming B.
    inverse_constraint : (a, b, g, c) or None
        B = Xc^T (a Gc + b Yc Yc^T + g I_n)^{-1} Xc + c I (MLSI, mvmd eq. 39; Gc = Xc Xc^T,
        Yc the centred 0/1 labels) when B has that form: the dual route's form 4.
    label_scale : (c, g) or None
        A = c Xs^T Xs + g Xc^T Yc Yc^T Xc with the label side kept sparse (statistics of
        more than :data:`~dmlfe.stats.sufficient.MAX_DENSE_LABELS` labels): the
        label-operator route applies it by products with X and Y
        (:mod:`dmlfe.solvers.label_operator`); ``A``, ``lowrank`` and ``label_factor``
        are None then.
    lowrank_rows : ndarray of int or None
        None: ``lowrank`` is held whole. Otherwise the sorted features (rows of F) it is
        held on, F being zero on the others (MDDMp's Xc^T Yc of hashed text): reading
        ``lowrank`` makes it whole (and this None); :meth:`lowrank_part` reads it as held.
    """

    method: str
    params: dict[str, Any]
    centred: bool
    n_features: int
    A: np.ndarray | None = None
    B: np.ndarray | None = None
    xx_coef: float = 0.0
    lowrank: np.ndarray | None = RowsField("lowrank_rows", default=None)  # noqa: RUF009
    operator_form: bool = False
    notes: list[str] = field(default_factory=list)
    label_factor: np.ndarray | None = None
    constraint: tuple[float, float] | None = None
    inverse_constraint: tuple[float, float, float, float] | None = None
    lowrank_rows: np.ndarray | None = None
    label_scale: tuple[float, float] | None = None

    def lowrank_part(self) -> tuple[np.ndarray | None, np.ndarray | None]:
        """(F as held, the rows it is held on or None when whole): no D x r array made."""
        return held(self, "lowrank"), self.lowrank_rows

    @property
    def generalized(self) -> bool:
        """True when the constraint matrix is not the identity."""
        return self.B is not None

    @property
    def is_pure_lowrank(self) -> bool:
        """A = F F^T with B = I: the thin SVD of F solves it without any D x D matrix."""
        return (
            self.operator_form
            and self.xx_coef == 0.0
            and held(self, "lowrank") is not None
            and self.B is None
        )

    def operator_matrix(self, stats: SufficientStats) -> np.ndarray:
        """Materialise A (D x D) from the operator form; for small D and for checks.

        Raises
        ------
        ValueError
            If the template has no operator form, or it needs X^T X and the
            statistics were computed without it.
        """
        if not self.operator_form:
            raise ValueError(
                f"the {self.method} template has no operator form (A = c Xs^T Xs + F F^T); "
                "use its dense A instead"
            )
        D = self.n_features
        A = np.zeros((D, D))
        if self.xx_coef != 0.0:
            scatter = stats.centred_xtx() if self.centred else _raw_xtx(stats)
            A += self.xx_coef * scatter
        if self.lowrank is not None:
            A += self.lowrank @ self.lowrank.T
        return A


def _raw_xtx(stats: SufficientStats) -> np.ndarray:
    if stats.xtx is None:
        raise ValueError(
            "these statistics were computed without X^T X; recompute them with need_xtx=True "
            "(only possible when D is below the dense-scatter limit) or use the operator form"
        )
    return stats.xtx


def raw_xtx(stats: SufficientStats) -> np.ndarray:
    """The uncentred X^T X, with an error that says how to get it when it is missing."""
    return _raw_xtx(stats)


def symmetrize(M: np.ndarray) -> np.ndarray:
    """(M + M^T) / 2: removes the round-off asymmetry of products such as F G F^T."""
    return 0.5 * (M + M.T)


def factor_product(F: np.ndarray) -> np.ndarray:
    """F F^T (D x D from D x r), exactly symmetric, in one array (no symmetrising average:
    :func:`~dmlfe.stats.outer.dense_crossprod`'s ``dsyrk``, mirrored)."""
    return dense_crossprod(np.asarray(F, dtype=np.float64).T)


def spd_inverse(M: np.ndarray) -> np.ndarray:
    """The inverse of a symmetric positive definite M, in M's memory (M is overwritten).

    LAPACK's Cholesky factorisation and inverse (``dpotrf``, ``dpotri``) on M's
    F-ordered transpose: about half the flops of a general inverse, no copy, exactly
    symmetric (one triangle, mirrored), which matters for MLSI's n x n middle matrix on
    the dual route (``benchmarks/scale.py``). M is C-ordered float64, and only its upper
    triangle is read.

    Raises
    ------
    numpy.linalg.LinAlgError
        When M is not numerically positive definite (M is then partly overwritten).
    """
    if M.dtype != np.float64 or not M.flags.c_contiguous or M.shape[0] != M.shape[1]:
        raise ValueError("spd_inverse inverts a square C-ordered float64 array in place")
    if M.size == 0:
        return M
    _, info = sla.lapack.dpotrf(M.T, lower=1, overwrite_a=1, clean=0)
    if info == 0:
        _, info = sla.lapack.dpotri(M.T, lower=1, overwrite_c=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"the matrix is not positive definite (LAPACK info {info})")
    return mirror_upper(M)


def cancellation_to_zero(M: np.ndarray, *terms: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """M, or zeros when M is only the round-off of a difference of the much larger ``terms``.

    Scatter matrices such as S_b = T_1 - T_2 are exactly zero when the labels carry no
    information (e.g. every document has every label), but in floating point they come
    out as noise of size eps * ||T||, whose eigenvalues would look genuine; zeroing them
    lets the solver's round-off rule see that nothing is left to extract.
    """
    scale = max((float(np.abs(t).max()) for t in terms if np.size(t)), default=0.0)
    if np.size(M) and float(np.abs(M).max()) <= rtol * scale:
        return np.zeros_like(M)
    return M


def check_fraction(name: str, value: float, method: str) -> float:
    """Validate a balance parameter in [0, 1]."""
    v = float(value)
    if not 0.0 <= v <= 1.0 or not np.isfinite(v):
        raise ValueError(f"{method}: parameter {name}={value!r} must lie in [0, 1]")
    return v


def check_nonneg(name: str, value: float, method: str, strict: bool = False) -> float:
    """Validate a regularisation constant (>= 0, or > 0 when ``strict``)."""
    v = float(value)
    bad = (v <= 0.0) if strict else (v < 0.0)
    if bad or not np.isfinite(v):
        bound = "> 0" if strict else ">= 0"
        raise ValueError(f"{method}: parameter {name}={value!r} must be {bound}")
    return v


def psd_sqrt(M: np.ndarray, rtol: float = 1e-10) -> np.ndarray | None:
    """Symmetric square root of a PSD matrix, or None when M is not PSD.

    Eigenvalues above -rtol * max|eig| count as round-off and are clipped to 0.
    """
    w, V = np.linalg.eigh(symmetrize(np.asarray(M, dtype=np.float64)))
    scale = max(float(np.max(np.abs(w))), np.finfo(float).tiny) if w.size else 1.0
    if w.size and w.min() < -rtol * scale:
        return None
    w = np.clip(w, 0.0, None)
    return (V * np.sqrt(w)) @ V.T


def inv_sqrt_pd(M: np.ndarray, what: str, hint: str, rtol: float = 1e-12) -> np.ndarray:
    """M^{-1/2} of a positive definite q x q matrix; raise naming ``what`` if singular."""
    w, V = np.linalg.eigh(symmetrize(np.asarray(M, dtype=np.float64)))
    if w.size and w.min() <= rtol * max(float(w.max()), 0.0):
        raise ValueError(
            f"{what} is singular (smallest eigenvalue {w.min():.3e}, largest {w.max():.3e}); {hint}"
        )
    return (V / np.sqrt(w)) @ V.T
