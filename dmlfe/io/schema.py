"""A small schema engine for the JSON + npz files dmlfe writes: declare each key and array
once, check a file's contents against the declarations.

A :class:`Key` declares one key of a JSON object (its JSON types, a constraint of
:mod:`dmlfe.params`, nested fields, and for a key added after files were first written
the value such files load with); an :class:`ArraySpec` declares one array of an npz
archive (its dtype kinds, its named dimensions and a check). :func:`key_error` and
:func:`array_error` say what is wrong with a value (None: nothing), so that the format's
own module (:mod:`dmlfe.io.model`) turns that into one line naming the file and the key
(:func:`fail`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from dmlfe.errors import ModelFormatError
from dmlfe.params import Check


@dataclass(frozen=True)
class Key:
    """One key of a JSON file (model.json).

    ``types`` are JSON type names ("object", "array", "string", "integer", "number",
    "boolean", "null"; "number" includes integers, neither includes booleans, and a
    number is always finite). A key that is not ``required`` was added after models
    of its format version were first written; those load with ``default``. An object
    may have ``fields``, its own keys (``closed``: no others).
    """

    types: tuple[str, ...]
    doc: str
    required: bool = True
    default: Any = None
    check: Check | None = None  # a dmlfe.params constraint on a value of the right type
    fields: Mapping[str, Key] | None = None
    closed: bool = True


@dataclass(frozen=True)
class ArraySpec:
    """One array of an npz archive (arrays.npz).

    ``kinds`` are the accepted numpy ``dtype.kind`` letters; ``shape`` names each
    dimension (see :data:`dmlfe.io.model.DIMENSIONS`; None: any number of dimensions).
    Floating-point arrays must be finite. ``check(array, dims)`` raises ValueError saying
    what else is wrong (as the constraints of :mod:`dmlfe.params` do).
    """

    kinds: str
    shape: tuple[str, ...] | None
    doc: str
    check: Callable[[np.ndarray, dict[str, int]], None] | None = None


def fail(file: str, key: str, what: str) -> NoReturn:
    """Raise the :class:`dmlfe.errors.ModelFormatError` ``file: key: what``."""
    raise ModelFormatError(f"{file}: {key}: {what}")


#: Python type -> JSON type name; bool before int (a bool is an int in Python).
_JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
               (str, "string"), (list, "array"), (dict, "object"))


def json_type(v: Any) -> str:
    """The JSON type name of a value read by :func:`json.loads`."""
    return next((name for t, name in _JSON_TYPES if isinstance(v, t)), type(v).__name__)


def _is(v: Any, types: tuple[str, ...]) -> bool:
    t = json_type(v)
    return t in types or (t == "integer" and "number" in types)


def short(v: Any) -> str:
    """``repr(v)`` cut to a length that fits in a one-line message."""
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def key_error(obj: Mapping[str, Any], schema: Mapping[str, Key], *,
              closed: bool) -> tuple[str, str] | None:
    """(key, what is wrong) for the first key of ``obj`` that breaks ``schema``."""
    if closed:
        for key in obj:
            if key not in schema:
                return key, "is not a key of a dmlfe model"
    for key, spec in schema.items():
        if key not in obj:
            if spec.required:
                return key, f"is missing ({spec.doc})"
            continue
        v = obj[key]
        if not _is(v, spec.types):
            return key, (f"= {short(v)} is {json_type(v)}, expected "
                         f"{' or '.join(spec.types)} ({spec.doc})")
        if v is not None and spec.check is not None:
            try:
                spec.check(key, v)
            except (TypeError, ValueError) as exc:
                return key, str(exc)
        if isinstance(v, dict) and spec.fields is not None:
            err = key_error(v, spec.fields, closed=spec.closed)
            if err is not None:
                return f"{key}.{err[0]}", err[1]
    return None


def with_defaults(obj: Mapping[str, Any], schema: Mapping[str, Key]) -> dict[str, Any]:
    """``obj`` with every key of ``schema``, the missing ones at their defaults."""
    return {k: obj.get(k, spec.default) for k, spec in schema.items()}


def non_finite_key(meta: Any) -> str | None:
    """The first key path (a.b[2].c) in ``meta`` whose value is a NaN or infinite float."""
    stack: list[tuple[str, Any]] = [("", meta)]
    while stack:
        where, v = stack.pop()
        if isinstance(v, float) and not np.isfinite(v):
            return where
        if isinstance(v, dict):
            stack += [(f"{where}.{k}" if where else str(k), x) for k, x in v.items()]
        elif isinstance(v, list):
            stack += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
    return None


def _dims(names: Any) -> str:
    return f"({', '.join(names)}{',' if len(names) == 1 else ''})"


def array_error(a: np.ndarray, spec: ArraySpec, dims: dict[str, int],
                names: Mapping[str, str]) -> str | None:
    """What is wrong with array ``a`` for ``spec`` (None: nothing).

    ``dims`` gives the known dimensions' sizes, ``names`` says where each size comes
    from (for the message).
    """
    if a.dtype.kind not in spec.kinds:
        want = {"f": "floating-point", "iu": "integer", "biuf": "numeric"}[spec.kinds]
        return f"is an array of {a.dtype}, expected {want}"
    if spec.shape is not None:
        if a.ndim != len(spec.shape):
            return (f"has {a.ndim} dimension(s) (shape {a.shape}), expected "
                    f"{len(spec.shape)}: {_dims(spec.shape)}")
        want = tuple(dims.get(n) for n in spec.shape)
        if any(w is not None and w != s for w, s in zip(want, a.shape, strict=True)):
            known = [n for n in spec.shape if n in dims]
            return (f"has shape {a.shape}, expected {_dims(spec.shape)} = "
                    f"{_dims(['*' if w is None else str(w) for w in want])} with "
                    + "; ".join(f"{n} = {names.get(n, n)}" for n in known))
    if a.dtype.kind == "f":
        bad = int(a.size - np.count_nonzero(np.isfinite(a)))
        if bad:
            return (f"has {bad} non-finite entr{'y' if bad == 1 else 'ies'} (NaN or inf) of "
                    f"{a.size}; the model would give non-finite embeddings")
    if spec.check is not None and a.size:
        try:
            spec.check(a, dims)
        except ValueError as exc:
            return str(exc)
    return None
