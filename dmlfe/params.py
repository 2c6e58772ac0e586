"""Declared parameters: name, default, constraint, documentation and command-line flag.

Every parameter of a dmlfe estimator is declared once as a :class:`Param` (the
common ones in :mod:`dmlfe.fit.params`, each method's own in its registry entry,
:mod:`dmlfe.methods.registry`). The estimator classes, their docstrings, the
``dmlfe fit`` flags and the pipeline configuration are all read from these
declarations, and :func:`validate` checks every value before any pass over the data
(in the manner of scikit-learn's ``_parameter_constraints``).

A constraint is a callable ``check(name, value) -> value`` that returns the
(possibly normalised) value or raises ValueError / TypeError naming the parameter; the
built-in ones are small :class:`Constraint` objects whose ``choices`` and ``bounds``
the command line and the tests read. Cluster profiles and pipeline files check their
fields with the same objects (:class:`Predicate`, :class:`Worded`), worded as their
messages are.
"""

from __future__ import annotations

import argparse
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
        ``argparse`` options of its ``dmlfe fit --NAME`` flag (``type``, ``help``...;
        ``choices`` come from ``check``, see :func:`flag_options`); None for parameters
        the command line does not offer.
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


class Constraint:
    """Base of the constraint objects: ``check(name, value) -> value``.

    A constraint returns the (possibly normalised) value or raises ValueError /
    TypeError. Its ``choices`` (the accepted values, when they are a list) and
    ``bounds`` (``(lo, hi)`` of a number, None for unbounded) are what the command line
    and the tests read instead of repeating them; None when the constraint has none.
    """

    __slots__ = ()

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return None

    @property
    def bounds(self) -> tuple[float | None, float | None] | None:
        return None

    def __call__(self, name: str, value: Any) -> Any:
        raise NotImplementedError

    def accepts(self, value: Any) -> bool:
        """Whether the constraint takes ``value`` as it is."""
        try:
            self("value", value)
        except (TypeError, ValueError):
            return False
        return True


@dataclass(frozen=True)
class Interval(Constraint):
    """A number in [lo, hi] (``closed`` "both", "left", "right" or "neither"; None =
    unbounded); ``integer``: an int."""

    lo: float | None
    hi: float | None
    closed: str = "both"
    integer: bool = False

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        return (self.lo, self.hi)

    @property
    def text(self) -> str:
        """The interval as written in messages, e.g. ``[1, inf)``."""
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        lo = "-inf" if self.lo is None else self.lo
        return f"{left}{lo}, {'inf' if self.hi is None else self.hi}{right}"

    def __call__(self, name: str, value: Any) -> Any:
        kind = "an int" if self.integer else "a number"
        bad = f"parameter {name}={value!r} must be {kind} in {self.text}"
        ok_type = isinstance(value, numbers.Integral) if self.integer else _is_real(value)
        if not ok_type or isinstance(value, bool):
            raise TypeError(bad)
        v = int(value) if self.integer else float(value)
        if not math.isfinite(v):
            raise ValueError(bad)
        left_closed = self.closed in ("both", "left")
        right_closed = self.closed in ("both", "right")
        below = self.lo is not None and (v < self.lo if left_closed else v <= self.lo)
        above = self.hi is not None and (v > self.hi if right_closed else v >= self.hi)
        if below or above:
            raise ValueError(bad)
        return v


@dataclass(frozen=True)
class OneOf(Constraint):
    """One of the listed values (compared with ==)."""

    values: tuple[Any, ...]

    @property
    def choices(self) -> tuple[Any, ...]:
        return self.values

    def __call__(self, name: str, value: Any) -> Any:
        if isinstance(value, str | int | float | bool | type(None)) and value in self.values:
            return value
        raise ValueError(f"parameter {name}={value!r} is not one of {self.values}")


@dataclass(frozen=True)
class _Wrapping(Constraint):
    """A constraint over another, ``inner``, whose choices and bounds it keeps."""

    inner: Check

    @property
    def choices(self) -> tuple[Any, ...] | None:
        return getattr(self.inner, "choices", None)

    @property
    def bounds(self) -> tuple[float | None, float | None] | None:
        return getattr(self.inner, "bounds", None)


@dataclass(frozen=True)
class OrNone(_Wrapping):
    """None, or a value ``inner`` accepts (its choices and bounds are this one's)."""

    def __call__(self, name: str, value: Any) -> Any:
        return None if value is None else self.inner(name, value)


@dataclass(frozen=True)
class Predicate(Constraint):
    """A value ``test`` holds for; else ValueError ``message`` (a format string of
    ``value`` and ``type``, its type's name), e.g. ``"must be a mapping, got {value!r}"``.

    For files whose messages name the field themselves (cluster profiles, pipeline
    files): the message says what is wrong, the caller says where.
    """

    test: Callable[[Any], bool]
    message: str

    def __call__(self, name: str, value: Any) -> Any:
        if self.test(value):
            return value
        raise ValueError(self.message.format(value=value, type=type(value).__name__))


@dataclass(frozen=True)
class Worded(_Wrapping):
    """What ``inner`` accepts (and returns), with the ValueError ``message`` of
    :class:`Predicate` instead of its own; ``inner``'s choices and bounds are kept."""

    message: str

    def __call__(self, name: str, value: Any) -> Any:
        try:
            return self.inner(name, value)
        except (TypeError, ValueError):
            raise ValueError(self.message.format(value=value,
                                                 type=type(value).__name__)) from None


def interval(lo: float | None, hi: float | None, *, closed: str = "both",
             integer: bool = False) -> Interval:
    """A number in [lo, hi] (``closed`` "both", "left", "right" or "neither"; None = unbounded)."""
    return Interval(lo, hi, closed, integer)


def one_of(*values: Any) -> OneOf:
    """One of the listed values (compared with ==)."""
    return OneOf(values)


def optional(inner: Check) -> OrNone:
    """None, or a value ``inner`` accepts."""
    return OrNone(inner)


def choices_of(check: Check) -> tuple[Any, ...] | None:
    """The values ``check`` accepts when it lists them (a :class:`OneOf`, or an
    :class:`OrNone` of one), else None."""
    return getattr(check, "choices", None)


def bounds_of(check: Check) -> tuple[float | None, float | None] | None:
    """``(lo, hi)`` of the numbers ``check`` accepts when it says (an :class:`Interval`,
    or an :class:`OrNone` of one), else None."""
    return getattr(check, "bounds", None)


def flag_options(param: Param) -> dict[str, Any]:
    """``argparse`` options of ``param``'s flag: its ``flag`` entries, with ``choices``
    read from its constraint when the flag does not give them."""
    options = dict(param.flag or {})
    choices = choices_of(param.check)
    if "choices" not in options and choices is not None:
        options["choices"] = [c for c in choices if c is not None]
    return options


def flag_param(name: str, default: Any, check: Check, kind: str, help: str,
               **options: Any) -> Param:
    """A command-line flag declared as a :class:`Param`: ``--NAME``, its argparse
    ``options`` and ``help``; its docstring entry is ``kind`` and the help.

    ``options`` may hold ``group`` (the title of the argument group it is listed under)
    and ``exclusive`` (flags of the same ``exclusive`` exclude each other); see
    :func:`add_flags`.
    """
    return Param(name, default, check, f"{kind}\n    {help}", flag={**options, "help": help})


def add_flags(parser: argparse.ArgumentParser, params: Iterable[Param],
              helps: Mapping[str, str | None] | None = None) -> None:
    """Add the flags of ``params`` to ``parser`` (in their order).

    Each flag's options are :func:`flag_options`; its default is the parameter's unless
    the flag gives one. ``helps``: another help text for some of them, by name (None
    keeps the flag's own).
    """
    groups: dict[str, Any] = {}
    exclusive: dict[str, Any] = {}
    for param in params:
        options = flag_options(param)
        title, together = options.pop("group", None), options.pop("exclusive", None)
        text = (helps or {}).get(param.name)
        if text is not None:
            options["help"] = text
        options.setdefault("default", param.default)
        target = parser if title is None else groups.get(title)
        if target is None:
            target = groups[title] = parser.add_argument_group(title)
        if together is not None:
            if together not in exclusive:
                exclusive[together] = target.add_mutually_exclusive_group()
            target = exclusive[together]
        target.add_argument(param.option, dest=param.name, **options)


def positive_int(s: str) -> int:
    """argparse type: an int of 1 or more (the CLI's counts and sizes)."""
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s}")
    return v


def seconds(s: str) -> float:
    """argparse type: a number of seconds, 0 or more."""
    try:
        v = float(s)
    except ValueError:
        v = float("nan")
    if not (0 <= v < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0 or more), got {s!r}")
    return v


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


@dataclass(frozen=True)
class LabelsOf(Constraint):
    """One of the strings ``values`` or, with ``matrix``, a finite symmetric 2-D array."""

    values: tuple[str, ...]
    matrix: bool = False

    @property
    def choices(self) -> tuple[str, ...]:
        return self.values

    def __call__(self, name: str, value: Any) -> Any:
        choices, matrix = self.values, self.matrix
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


def labels_of(*choices: str, matrix: bool = False) -> LabelsOf:
    """One of the strings ``choices`` or, with ``matrix``, a finite symmetric 2-D array."""
    return LabelsOf(choices, matrix)



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
