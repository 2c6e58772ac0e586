"""``dmlfe.__all__`` is the package's public names: every registered method's estimator,
read from the method registry, and the fixed names outside it, each resolving to a real
object (issue 37: six estimators had drifted out of a hand-kept list)."""

from __future__ import annotations

import inspect

import dmlfe
from dmlfe.estimators import MultiLabelProjection
from dmlfe.methods.registry import all_methods

#: The public names outside the registries, written out here independently of dmlfe.
NOT_REGISTERED = {"__version__", "GRROOR", "PPML", "BinaryRelevance", "MLkNN", "KNNLabelVote",
                  "MultiLabelRidge", "PerLabelFLDA", "append", "ingest", "open_store",
                  "load_model", "text_pipeline", "estimator_class", "make_estimator", "metrics"}


def test_all_is_the_registry_estimators_and_the_fixed_names():
    registered = {spec.estimator for spec in all_methods().values()}
    assert {"PCA", "MVMD", "MOPE", "HSL", "KernelMDDM"} <= registered
    assert set(dmlfe.__all__) == registered | NOT_REGISTERED


def test_import_star_gives_every_public_name():
    names: dict = {}
    exec("from dmlfe import *", names)
    assert set(dmlfe.__all__) <= set(names)
    assert names["MVMD"] is dmlfe.MVMD and names["metrics"] is dmlfe.metrics


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
