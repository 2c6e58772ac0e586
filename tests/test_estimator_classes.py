"""The estimator classes are written in source (issue 37), their parameters declared once
in the method registry: the class statement is in dmlfe/estimators.py, the signature and
the docstring's Parameters follow the registry, a re-registration redeclares the class in
place, and pickling and scikit-learn's ``clone`` keep the class."""

from __future__ import annotations

import inspect
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone

import dmlfe
import dmlfe.estimators
from dmlfe.estimators import MultiLabelProjection, estimator_class, estimator_classes
from dmlfe.methods.registry import (
    MethodSpec,
    all_methods,
    register_method,
    unregister_method,
)
from dmlfe.params import Param, interval

SOURCE = Path(dmlfe.estimators.__file__).read_text()
BUILT_IN = sorted({spec.estimator for spec in all_methods().values()})


@pytest.mark.parametrize("name", BUILT_IN)
def test_each_estimator_is_a_class_statement_in_source(name):
    # what grep, an IDE or a type checker reads
    assert re.search(rf"^class {name}\(MultiLabelProjection\):$", SOURCE, re.M), name
    cls = getattr(dmlfe, name)
    assert cls is estimator_class(name) is getattr(dmlfe.estimators, name)
    assert cls.__module__ == "dmlfe.estimators" and cls.__qualname__ == name
    assert inspect.getsource(cls).startswith(f"class {name}(MultiLabelProjection):")


@pytest.mark.parametrize("name", BUILT_IN)
def test_signature_and_parameters_come_from_the_registry(name):
    cls = estimator_class(name)
    specs = [s for s in all_methods().values() if s.estimator == name]
    own = {p.name: p.default for s in specs for p in s.parameters}
    params = inspect.signature(cls).parameters
    assert list(params)[0] == "n_components"
    assert list(params) == [p.name for p in cls._declared]
    for key, default in own.items():
        assert params[key].default == default, (name, key)
    assert set(cls().get_params()) == set(params)
    doc = inspect.getdoc(cls)
    parameters = doc.split("\nParameters\n----------\n")[1].split("\n\n")[0]
    documented = re.findall(r"^(\w+) : ", parameters, re.M)
    assert documented == list(params), name
    # the class body's own text stays: its description first, its examples last
    assert doc.startswith(inspect.cleandoc(cls._written_doc).split("\n")[0])
    assert doc.index("Parameters\n") < doc.index("Examples\n--------\n")
    assert f"dmlfe.{name}(" in doc or f"{name}(" in doc.split("Examples")[1]


def test_estimator_classes_are_the_source_classes():
    classes = estimator_classes()
    assert sorted(classes) == BUILT_IN
    for name, cls in classes.items():
        assert cls.__dict__["_estimator"] == name and issubclass(cls, MultiLabelProjection)


def test_pickle_and_clone_keep_the_class():
    X = np.random.default_rng(0).random((30, 6))
    Y = (X[:, :2] > 0.5).astype(int)
    est = dmlfe.MVMD(n_components=2, beta=0.3)
    twin = clone(est)
    assert type(twin) is dmlfe.MVMD and twin.get_params() == est.get_params()
    fitted = est.fit(X, Y)
    back = pickle.loads(pickle.dumps(fitted))
    assert type(back) is dmlfe.MVMD and back.beta == 0.3
    np.testing.assert_array_equal(back.transform(X), fitted.transform(X))


def test_a_user_subclass_keeps_the_parameters():
    class Mine(dmlfe.MVMD):
        pass

    assert estimator_class("MVMD") is dmlfe.MVMD  # the subclass replaced nothing
    assert Mine(beta=0.2).get_params() == dmlfe.MVMD(beta=0.2).get_params()


def _toy(stats, scale=1.0):
    raise AssertionError("never fitted here")


def _register_toy(default: float) -> None:
    register_method(MethodSpec(
        "toyclass", _toy, centred=True, needs_xtx=True, operator_form=False,
        lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=False,
        reference="a test", summary="Registered by a test, without a class.",
        parameters=(Param("scale", default, interval(0.0, None), "float\n    A factor."),)))


def test_a_method_without_a_class_gets_one_and_a_re_registration_redeclares_it():
    _register_toy(1.0)
    try:
        cls = estimator_class("TOYCLASS")
        assert cls.__module__ == "dmlfe.estimators" and cls().scale == 1.0
        assert "TOYCLASS" in dmlfe.__all__
        doc = inspect.getdoc(cls)
        assert doc.startswith("Registered by a test, without a class.")
        assert "dmlfe.TOYCLASS(n_components=2)" in doc  # the generated example
        unregister_method("toyclass")
        _register_toy(2.5)
        assert estimator_class("TOYCLASS") is cls  # redeclared in place
        assert cls().scale == 2.5 and inspect.signature(cls).parameters["scale"].default == 2.5
    finally:
        unregister_method("toyclass")
    assert "TOYCLASS" not in dmlfe.__all__
    with pytest.raises(AttributeError, match="dmlfe has no estimator 'TOYCLASS'"):
        estimator_class("TOYCLASS")


def test_a_class_without_a_registered_method_is_refused():
    with pytest.raises(TypeError, match=r"class NotThere: no registered method has estimator "
                                        r"'NotThere'; register it first"):
        type("NotThere", (MultiLabelProjection,), {"_estimator": "NotThere"})
