"""Which eigenvalues are genuine, and how many components to keep.

The one dimension rule of every solver: :func:`check_n_components` validates
``n_components``, :func:`choose_dimension` turns it into d (over the whole
spectrum, or over the leading eigenvalues and the trace), :func:`n_genuine`
counts the eigenvalues above round-off.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

#: Eigenvalues below this fraction of the largest one are round-off, not signal.
ROUNDOFF_RTOL = 1e-10

#: Default eigenvalue-sum threshold t (mvmd eq. 15, mddm eq. 9).
DEFAULT_THRESHOLD = 0.999
#: A threshold first computes this many leading pairs; each later round asks for at
#: least THRESHOLD_GROWTH times as many (:func:`threshold_rounds`).
THRESHOLD_FIRST = 32
THRESHOLD_GROWTH = 4

R = TypeVar("R")


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


def warn_null_components(method: str, d: int, eigenvalues: np.ndarray,
                         stacklevel: int = 3) -> None:
    """Warn when some of the d leading components carry no information (only then).

    A maximised objective (some eigenvalue above round-off): components past its
    genuine eigenvalues (:func:`n_genuine`) span an arbitrary part of the null space. A
    minimised one written as the maximum of -M (OLPP: -X^T L X, whose spectrum is
    non-positive by construction): the leading eigenvalues are the smallest of M, and
    only those at zero up to round-off -- where every document projects to the same
    value, within each connected part of the graph -- carry no information; the
    others are OLPP's components and are not warned about.
    """
    w = np.asarray(eigenvalues, dtype=np.float64)
    scale = float(np.abs(w).max()) if w.size else 0.0
    if scale > 0.0 and not w[0] > ROUNDOFF_RTOL * scale:
        z = min(int(np.count_nonzero(w[:d] > -ROUNDOFF_RTOL * scale)), d)
        if z:
            warnings.warn(
                f"{method}: components 1..{z} of the {d} have eigenvalue 0 up to round-off "
                f"({ROUNDOFF_RTOL:g} x the largest magnitude): they span an arbitrary part "
                "of the objective's null space, where every document projects to the same "
                "value (with more features than documents, X p = 0), and carry no "
                "information",
                RuntimeWarning,
                stacklevel=stacklevel,
            )
        return
    k = n_genuine(w)
    if d > k:
        warnings.warn(
            f"{method}: n_components={d} but only {k} eigenvalues are above round-off "
            f"({ROUNDOFF_RTOL:g} x the largest); components {k + 1}..{d} span an arbitrary "
            "part of the null space and carry no information",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


def check_n_components(value: Any) -> int | float:
    """The n_components rule: an int d >= 1, or a float threshold t in (0, 1].

    Every place that accepts ``n_components`` validates it here, so there is one
    rule and one message.

    Parameters
    ----------
    value : int or float
        An int (numpy integers included): the number of components d. A float
        (numpy floats included): the eigenvalue-sum threshold t.

    Returns
    -------
    int or float
        ``value`` as a Python int (d) or float (t).

    Raises
    ------
    TypeError
        If ``value`` is a bool or not a real number.
    ValueError
        If an int is below 1 or a float lies outside (0, 1].
    """
    message = (
        "n_components must be an int (the number of components d) or a float threshold t "
        f"in (0, 1]; got {value!r}"
    )
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(message)
    if isinstance(value, numbers.Integral):
        if value < 1:
            raise ValueError(message)
        return int(value)
    t = float(value)
    if not 0.0 < t <= 1.0:  # NaN fails too
        raise ValueError(message)
    return t


def choose_dimension(
    eigenvalues: np.ndarray,
    n_components: int | float = DEFAULT_THRESHOLD,
    *,
    total: float | None = None,
    rtol: float = ROUNDOFF_RTOL,
    cap_note: str | None = None,
) -> int:
    """Number of components d: the one dimension rule of every solver.

    Parameters
    ----------
    eigenvalues : ndarray
        The computed eigenvalues, descending: the whole spectrum, or only the
        leading ones (then pass ``total``).
    n_components : int or float
        Validated by :func:`check_n_components`. An int: d itself
        (1 <= d <= number of computed eigenvalues). A float t in (0, 1]: the
        smallest d with sum_{i<=d} lambda_i >= t * denominator (mvmd eq. 15,
        mddm eq. 9).
    total : float, optional
        The denominator of a threshold when only the leading eigenpairs were
        computed: the sum of all eigenvalues, tr(A) of a positive semi-definite
        A -- the same quantity as the sum of the positive eigenvalues, known
        without the full spectrum. None (the whole spectrum was computed): the
        denominator is the sum of the genuine positive eigenvalues.
    rtol : float
        Eigenvalues at or below ``rtol`` times the largest are round-off
        (:func:`n_genuine`).
    cap_note : str, optional
        Why no more pairs were computed, for the warning of a threshold they do not
        reach (default: the advice to raise ``max_components``).

    Returns
    -------
    int
        d. For a threshold it never exceeds the number of genuine eigenvalues;
        a fixed d is returned as asked (the solver warns when it reaches into
        round-off eigenvalues).

    Raises
    ------
    TypeError, ValueError
        From :func:`check_n_components`; a ValueError also when an int d exceeds
        the number of computed eigenvalues, when a threshold meets no genuine
        positive eigenvalue, or when ``total`` is not a positive number.

    Warns
    -----
    RuntimeWarning
        When ``total`` is given and the computed eigenvalues do not reach
        t * total: d is then the number computed (genuine ones only).
    """
    w = np.asarray(eigenvalues, dtype=np.float64)
    nc = check_n_components(n_components)
    if isinstance(nc, int):
        if nc > w.size:
            raise ValueError(
                f"n_components={nc} must lie between 1 and the number of computed "
                f"eigenvalues ({w.size})"
            )
        return nc
    t = nc
    k = n_genuine(w, rtol)
    if k == 0:
        raise ValueError(
            "no genuine positive eigenvalue: the objective matrix is zero up to round-off "
            "(e.g. labels constant over all documents); nothing to extract"
        )
    c = np.cumsum(w[:k])
    if total is None:
        return int(min(np.searchsorted(c, t * c[-1], side="left") + 1, k))
    total = float(total)
    if not (np.isfinite(total) and total > 0.0):
        raise ValueError(
            f"total={total!r} must be the positive sum of all eigenvalues (tr(A)) of a "
            "positive semi-definite A"
        )
    target = t * total
    if c[-1] >= target:
        return int(min(np.searchsorted(c, target, side="left") + 1, k))
    if c[-1] < target - rtol * total:  # not merely round-off short of the target
        warnings.warn(
            f"the top {w.size} computed eigenvalues hold {c[-1] / total:.4f} of the total, "
            f"below the threshold t={t:g}; keeping {k} components ("
            f"{cap_note or 'raise max_components or pass an int n_components'})",
            RuntimeWarning,
            stacklevel=3,
        )
    return k


def threshold_cap(size: int, max_components: int | None = None, fits: int | None = None,
                  memory: int | None = None) -> tuple[int, str | None]:
    """Most leading pairs a threshold may compute (at least 1), and why no more.

    All ``size`` pairs of the problem, unless the user's ``max_components`` (None: no
    count cap) or ``fits``, the pairs whose components hold in ``memory`` bytes (the
    estimators' ``threshold_memory``), allow fewer. A dense problem passes no ``fits``:
    its m x m matrix already takes what m pairs do. The note (None unless memory caps
    the pairs) is :func:`choose_dimension`'s ``cap_note``.
    """
    cap = int(size) if max_components is None else min(int(size), int(max_components))
    note = None
    if fits is not None and fits < cap:
        cap = int(fits)
        note = (f"more pairs would take over threshold_memory = {int(memory or 0) / 2**30:g} "
                "GiB of driver memory; raise threshold_memory, or pass an int n_components")
    return max(1, cap), note


def threshold_rounds(solve: Callable[[int], tuple[np.ndarray, float, R]], t: float,
                     max_k: int) -> tuple[R, list[int]]:
    """Only as many leading eigenpairs as the threshold ``t`` needs, at most ``max_k``.

    ``solve(k)`` computes the k leading pairs and returns (their eigenvalues,
    descending; the sum of all eigenvalues, tr(A); its result). Rounds of
    :data:`THRESHOLD_FIRST` pairs first: once the computed eigenvalues reach
    t x tr(A), d is fixed by them (:func:`choose_dimension` with ``total``). Otherwise
    every pair still missing is at most the last one computed, w_k, so at least
    (t tr(A) - S) / w_k more are needed (S the sum so far): the next round asks for that
    many or THRESHOLD_GROWTH x k, whichever is more, and ``max_k`` itself once that is
    past half of it (a t that ``max_k`` pairs cannot reach shows it after the first
    round and goes there at once). A solver that returns more eigenvalues than asked
    (the whole spectrum) or whose rest is round-off ends the rounds too.

    Returns
    -------
    (the last round's result, the k of every round)
    """
    k = min(int(max_k), THRESHOLD_FIRST)
    rounds: list[int] = []
    while True:
        rounds.append(k)
        w, total, result = solve(k)
        w = np.asarray(w, dtype=np.float64)
        genuine = w[:n_genuine(w)]
        target = t * float(total) - ROUNDOFF_RTOL * abs(float(total))
        if float(genuine.sum()) >= target or k >= max_k or w.size > k \
                or genuine.size < w.size:
            return result, rounds
        need = int(np.ceil((target - float(genuine.sum())) / float(genuine[-1])))
        k = max(THRESHOLD_GROWTH * k, k + need)
        if 2 * k > max_k:  # a round past half the cap would rarely be the last
            k = int(max_k)
