"""``dmlfe.__all__`` is the package's public names: every registered method's estimator,
each resolving to a real object (issue 37: six estimators had drifted out of it)."""

from __future__ import annotations

import inspect

import dmlfe
from dmlfe.estimators import MultiLabelProjection
from dmlfe.methods.registry import all_methods


def test_all_holds_every_registered_estimator():
    registered = {spec.estimator for spec in all_methods().values()}
    assert registered, "the method registry is empty"
    missing = registered - set(dmlfe.__all__)
    assert not missing, f"add to dmlfe.__all__ (dmlfe/__init__.py): {sorted(missing)}"


def test_every_public_name_resolves_and_appears_once():
    assert len(dmlfe.__all__) == len(set(dmlfe.__all__))
    for name in dmlfe.__all__:
        # through the lazy table (PEP 562), not an attribute an earlier lookup cached
        value = dmlfe.__version__ if name == "__version__" else dmlfe.__getattr__(name)
        assert value is getattr(dmlfe, name), name


def test_every_estimator_in_all_is_the_registry_class():
    for spec in all_methods().values():
        cls = getattr(dmlfe, spec.estimator)
        assert inspect.isclass(cls) and issubclass(cls, MultiLabelProjection), spec.estimator
        assert cls.__name__ == spec.estimator


def test_dir_lists_the_public_names():
    assert set(dmlfe.__all__) <= set(dir(dmlfe))
