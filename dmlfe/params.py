"""Declared parameters: name, default, constraint, documentation and command-line flag.

Every parameter of a dmlfe estimator is declared once as a :class:`Param` (the
common ones in :mod:`dmlfe.fit.params`, each method's own in its registry entry,
:mod:`dmlfe.methods.registry`). The estimator classes, their docstrings, the
``dmlfe fit`` flags and the pipeline configuration are all read from these
declarations, and :func:`validate` checks every value before any pass over the data
(in the manner of scikit-learn's ``_parameter_constraints``).

A constraint is a callable ``check(name, value) -> value`` that returns the
(possibly normalised) value or raises ValueError / TypeError naming the parameter.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Check = Callable[[str, Any], Any]


@dataclass(frozen=True)
class Param:
    """One estimator parameter.

    Attributes
    ----------
    name : str
        Keyword of the estimator (and of the method's builder).
    default : Any
        Default value. For a method parameter, the builder's own default is used
        when this is :data:`FROM_BUILDER`.
    check : callable
        ``check(name, value) -> value``; raises ValueError or TypeError naming the
        parameter.
    doc : str
        numpy-docstring entry: first line the type, the rest the description.
    flag : dict or None
        ``argparse`` options of its ``dmlfe fit --NAME`` flag (``type``, ``choices``,
        ``help``...); None for parameters the command line does not offer.
    """

    name: str
    default: Any
    check: Check
    doc: str
    flag: dict[str, Any] | None = field(default=None, hash=False, compare=False)

    @property
    def option(self) -> str:
        """The command-line flag, ``--gamma-x`` for ``gamma_x``."""
        return "--" + self.name.replace("_", "-")

    def with_default(self, default: Any) -> Param:
        """The same declaration with another default (its docstring line says so too)."""
        kind, sep, rest = self.doc.partition("\n")
        kind = kind.replace(f"default {self.default!r}", f"default {default!r}").replace(
            f"default {self.default}", f"default {default}")
        return Param(self.name, default, self.check, kind + sep + rest, self.flag)


#: Marks a method parameter whose default is the builder's keyword default.
FROM_BUILDER = object()


def validate(params: Mapping[str, Any], declared: Iterable[Param], owner: str) -> dict[str, Any]:
    """Check ``params`` against their declarations; returns the normalised values.

    Raises ValueError / TypeError that name ``owner`` (the estimator) and the parameter.
    """
    out = {}
    for p in declared:
        try:
            out[p.name] = p.check(p.name, params[p.name])
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{owner} {exc}") from None
    return out


# --------------------------------------------------------------------------- constraints
def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def interval(lo: float | None, hi: float | None, *, closed: str = "both",
             integer: bool = False) -> Check:
    """A number in [lo, hi] (``closed`` "both", "left", "right" or "neither"; None = unbounded)."""
    left = "[" if closed in ("both", "left") else "("
    right = "]" if closed in ("both", "right") else ")"
    text = f"{left}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{right}"
    kind = "an int" if integer else "a number"

    def check(name: str, value: Any) -> Any:
        ok_type = isinstance(value, numbers.Integral) if integer else _is_real(value)
        if not ok_type or isinstance(value, bool):
            raise TypeError(f"parameter {name}={value!r} must be {kind} in {text}")
        v = int(value) if integer else float(value)
        if not math.isfinite(v):
            raise ValueError(f"parameter {name}={value!r} must be {kind} in {text}")
        below = lo is not None and (v < lo if left == "[" else v <= lo)
        above = hi is not None and (v > hi if right == "]" else v >= hi)
        if below or above:
            raise ValueError(f"parameter {name}={value!r} must be {kind} in {text}")
        return v

    return check


def one_of(*values: Any) -> Check:
    """One of the listed values (compared with ==)."""

    def check(name: str, value: Any) -> Any:
        if isinstance(value, str | int | float | bool | type(None)) and value in values:
            return value
        raise ValueError(f"parameter {name}={value!r} is not one of {values}")

    return check


def optional(inner: Check) -> Check:
    """None, or a value ``inner`` accepts."""

    def check(name: str, value: Any) -> Any:
        return None if value is None else inner(name, value)

    return check


def split_names(name: str, value: Any) -> str | list[str]:
    """A store split name or a non-empty list of them (a tuple becomes a list)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list | tuple) and value and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"parameter {name}={value!r} must be a split name or a list of them")


def split_arg(text: str) -> str | list[str]:
    """A command-line split value: ``train`` or a comma-separated list ``train,unlabelled``."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise ValueError(f"no split name in {text!r}")
    return names[0] if len(names) == 1 else names


def boolean(name: str, value: Any) -> bool:
    """True or False (numpy booleans accepted)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise TypeError(f"parameter {name}={value!r} must be True or False")


def anything(name: str, value: Any) -> Any:
    """No constraint (e.g. a client object)."""
    return value


def labels_of(*choices: str, matrix: bool = False) -> Check:
    """One of the strings ``choices`` or, with ``matrix``, a finite symmetric 2-D array."""

    def check(name: str, value: Any) -> Any:
        if isinstance(value, str):
            if value in choices:
                return value
            raise ValueError(f"parameter {name}={value!r} is not one of {choices}"
                             + (" or a square matrix" if matrix else ""))
        if not matrix:
            raise TypeError(f"parameter {name}={value!r} must be one of {choices}")
        a = np.asarray(value)
        if a.dtype.kind not in "biuf" or a.ndim != 2 or a.shape[0] != a.shape[1]:
            raise ValueError(f"parameter {name} must be one of {choices} or a square numeric "
                             f"matrix; got an array of shape {a.shape} and dtype {a.dtype}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"parameter {name}: the matrix has non-finite entries")
        if not np.allclose(a, a.T, rtol=1e-12, atol=1e-12 * max(1.0, float(np.abs(a).max()))):
            raise ValueError(f"parameter {name}: the matrix must be symmetric")
        return value

    return check


class LiveChoices(Sequence[Any]):
    """The values ``names()`` returns, read at each access: command-line ``choices``
    and messages that follow a registry's later registrations."""

    def __init__(self, names: Callable[[], Sequence[Any]]) -> None:
        self._names = names

    def __getitem__(self, i: Any) -> Any:
        return tuple(self._names())[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[Any]:
        return iter(tuple(self._names()))

    def __contains__(self, value: object) -> bool:
        return value in tuple(self._names())

    def __repr__(self) -> str:
        return repr(tuple(self._names()))
