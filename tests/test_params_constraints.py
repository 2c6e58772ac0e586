"""Constraints are small objects (issue 37): their choices and bounds are readable, and
they check as the closures they replaced did (the messages included)."""

from __future__ import annotations

import numpy as np
import pytest

from dmlfe.cli import build_parser
from dmlfe.fit.params import COMMON, COMPONENTS_DTYPES, MAX_SEED, SOLVERS
from dmlfe.methods.registry import all_methods
from dmlfe.params import (
    Interval,
    OneOf,
    Param,
    Predicate,
    Worded,
    choices_of,
    flag_options,
    interval,
    labels_of,
    one_of,
    optional,
)


def test_interval_exposes_its_bounds_and_checks():
    c = interval(1, None, integer=True)
    assert isinstance(c, Interval)
    assert (c.lo, c.hi, c.closed, c.integer, c.bounds) == (1, None, "both", True, (1, None))
    assert c("k", np.int64(3)) == 3 and type(c("k", np.int64(3))) is int
    with pytest.raises(ValueError, match=r"^parameter k=0 must be an int in \[1, inf\]$"):
        c("k", 0)
    with pytest.raises(TypeError, match=r"^parameter k=True must be an int in \[1, inf\]$"):
        c("k", True)
    with pytest.raises(TypeError):
        c("k", 2.0)
    open_ = interval(0.0, 1.0, closed="neither")
    assert open_.text == "(0.0, 1.0)" and open_("t", 0.5) == 0.5
    for bad in (0.0, 1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"must be a number in \(0.0, 1.0\)"):
            open_("t", bad)
    assert interval(0, MAX_SEED, integer=True).bounds == (0, MAX_SEED)
    assert interval(0, 1, closed="right").accepts(1) and not interval(
        0, 1, closed="right").accepts(0)


def test_one_of_and_optional_expose_the_choices():
    c = one_of("a", "b")
    assert isinstance(c, OneOf) and c.choices == ("a", "b") and c.bounds is None
    assert c("x", "b") == "b"
    with pytest.raises(ValueError, match=r"^parameter x='c' is not one of \('a', 'b'\)$"):
        c("x", "c")
    with pytest.raises(ValueError):
        c("x", ["a"])  # unhashable: refused, not a TypeError from ``in``
    o = optional(c)
    assert o.choices == ("a", "b") and o("x", None) is None and o("x", "a") == "a"
    assert optional(interval(0, 5)).bounds == (0, 5)
    assert choices_of(interval(0, 5)) is None
    assert labels_of("linear", "rbf", matrix=True).choices == ("linear", "rbf")


def test_worded_and_predicate_say_what_is_wrong_without_the_name():
    pos = Worded(interval(1, None, integer=True), "must be a positive integer, got {value!r}")
    assert pos("f", 4) == 4 and pos.bounds == (1, None)
    with pytest.raises(ValueError, match=r"^must be a positive integer, got 0$"):
        pos("f", 0)
    mapping = Predicate(lambda v: isinstance(v, dict), "must be a mapping, got {type} {value!r}")
    with pytest.raises(ValueError, match=r"^must be a mapping, got list \[1\]$"):
        mapping("f", [1])
    assert mapping.accepts({}) and not mapping.accepts(3)


def test_flag_options_read_the_choices_from_the_constraint():
    p = Param("mode", "a", optional(one_of("a", "b")), "str", flag={"type": str})
    assert flag_options(p) == {"type": str, "choices": ["a", "b"]}
    given = Param("mode", "a", one_of("a", "b"), "str", flag={"choices": ["a"]})
    assert flag_options(given) == {"choices": ["a"]}
    assert flag_options(Param("x", 1, interval(0, 2), "float", flag={"type": float})) == {
        "type": float}


def _fit_actions():
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices
               and "fit" in a.choices)
    return {a.dest: a for a in sub.choices["fit"]._actions}


def test_every_fit_flag_with_a_list_of_values_offers_exactly_its_parameters_values():
    actions = _fit_actions()
    declared = {p.name: p for spec in all_methods().values() for p in spec.parameters
                if p.flag is not None}
    declared.update({p.name: p for p in COMMON})
    checked = 0
    for name, param in declared.items():
        values = choices_of(param.check)
        if values is None or name not in actions:
            continue
        assert list(actions[name].choices) == [v for v in values if v is not None], name
        checked += 1
    assert checked >= 12
    assert list(actions["solver"].choices) == list(SOLVERS)
    assert list(actions["components_dtype"].choices) == list(COMPONENTS_DTYPES)
