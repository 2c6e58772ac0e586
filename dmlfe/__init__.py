"""dmlfe: distributed multi-label feature extraction on dask.

Main entry points: :func:`ingest` (corpus -> store), :func:`append` (more documents ->
the store), :func:`open_store`, and the scikit-learn estimators of the method registry
(:class:`PCA`, :class:`MVMD`, ..., :class:`MOPE`, :class:`HSL`; ``__all__`` lists every
one, from the registry).

The public names are imported on first use (PEP 562): a dask worker that unpickles a
task of :mod:`dmlfe.stats` then imports what that task needs, not scikit-learn and
every estimator, whose import would otherwise be most of a fresh cluster's first pass
(it shows in the fresh-process fits of ``benchmarks/scale.py``).
"""

from __future__ import annotations

import importlib
from typing import Any

from dmlfe._version import __version__ as __version__  # public: in __all__

#: The public names outside the registries -> the module that defines them. The method
#: registry's estimators (PCA, MVMD, ...) are public through it (:func:`_public_names`).
_PUBLIC = {
    **dict.fromkeys(("estimator_class", "make_estimator"), "dmlfe.estimators"),
    **dict.fromkeys(("PPML", "BinaryRelevance", "KNNLabelVote", "MLkNN", "MultiLabelRidge",
                     "PerLabelFLDA"),
                    "dmlfe.evaluation"),
    **dict.fromkeys(("append", "ingest"), "dmlfe.ingestion"),
    "load_model": "dmlfe.model_io",
    "text_pipeline": "dmlfe.model_io",
    "GRROOR": "dmlfe.selection",
    "open_store": "dmlfe.store",
}
#: Public modules.
_MODULES = {"metrics": "dmlfe.metrics"}


def _public_names() -> list[str]:
    """``__all__``: the fixed names above and every registered method's estimator, read
    from the method registry when asked for (a method registered there is public at once,
    and ``import dmlfe`` alone imports no registry)."""
    from dmlfe.methods.registry import estimator_names

    return ["__version__", *_PUBLIC, *_MODULES, *estimator_names()]


def __getattr__(name: str) -> Any:
    if name == "__all__":  # not kept: it follows the registry
        return _public_names()
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name.startswith("_"):  # probes such as __wrapped__: never an estimator
        raise AttributeError(f"module 'dmlfe' has no attribute {name!r}")
    else:
        # the estimators of the method registry (dmlfe.estimators)
        try:
            value = importlib.import_module("dmlfe.estimators").estimator_class(name)
        except AttributeError:
            raise AttributeError(f"module 'dmlfe' has no attribute {name!r}") from None
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_public_names()})
