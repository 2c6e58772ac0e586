"""dmlfe: distributed multi-label feature extraction on dask.

Main entry points: :func:`ingest` (corpus -> store), :func:`append` (more documents ->
the store), :func:`open_store`, and the scikit-learn estimators of the method registry
(:class:`PCA`, :class:`MVMD`, ..., :class:`MOPE`, :class:`HSL`; ``__all__`` lists every
one).

The public names are imported on first use (PEP 562): a dask worker that unpickles a
task of :mod:`dmlfe.stats` then imports what that task needs, not scikit-learn and
every estimator, whose import would otherwise be most of a fresh cluster's first pass
(it shows in the fresh-process fits of ``benchmarks/scale.py``).
"""

from __future__ import annotations

import importlib
from typing import Any

from dmlfe._version import __version__

#: public name -> the module that defines it
_PUBLIC = {
    **dict.fromkeys(("CCA", "DMLDA", "LSI", "MDDM", "MLDA", "MLSI", "MVMD", "OPLS", "PCA",
                     "PLS", "LPP", "OLPP", "MOPE", "MESD", "SSMOPE", "HSL", "KernelMDDM",
                     "estimator_class", "make_estimator"),
                    "dmlfe.estimators"),
    **dict.fromkeys(("PPML", "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA"),
                    "dmlfe.evaluation"),
    **dict.fromkeys(("append", "ingest"), "dmlfe.ingestion"),
    "load_model": "dmlfe.model_io",
    "text_pipeline": "dmlfe.model_io",
    "GRROOR": "dmlfe.selection",
    "open_store": "dmlfe.store",
}

__all__ = [
    "GRROOR", "PPML", "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA",
    "CCA", "DMLDA", "KernelMDDM", "LSI", "MDDM", "MLDA", "MLSI", "MVMD", "OPLS", "PCA", "PLS",
    "LPP", "OLPP", "MOPE", "MESD", "SSMOPE", "HSL",
    "__version__", "append", "estimator_class", "ingest", "load_model", "make_estimator",
    "metrics",
    "open_store", "text_pipeline",
]


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        value = getattr(importlib.import_module(_PUBLIC[name]), name)
    elif name == "metrics":
        value = importlib.import_module("dmlfe.metrics")
    elif name.startswith("_"):  # probes such as __wrapped__: never an estimator
        raise AttributeError(f"module 'dmlfe' has no attribute {name!r}")
    else:
        # estimators of methods registered after import (dmlfe.methods.registry)
        try:
            value = importlib.import_module("dmlfe.estimators").estimator_class(name)
        except AttributeError:
            raise AttributeError(f"module 'dmlfe' has no attribute {name!r}") from None
    globals()[name] = value  # the next lookup is an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
