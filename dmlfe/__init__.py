"""dmlfe: distributed multi-label feature extraction on dask.

Main entry points: :func:`ingest` (corpus -> store), :func:`open_store`, and the
scikit-learn estimators :class:`PCA`, :class:`LSI`, :class:`MDDM`, :class:`MVMD`,
:class:`CCA`, :class:`PLS`, :class:`OPLS`, :class:`MLSI`, :class:`MLDA`, :class:`DMLDA`.
"""

from dmlfe import metrics
from dmlfe._version import __version__
from dmlfe.estimators import (
    CCA,
    DMLDA,
    LSI,
    MDDM,
    MLDA,
    MLSI,
    MVMD,
    OPLS,
    PCA,
    PLS,
    KernelMDDM,
    estimator_class,
    make_estimator,
)
from dmlfe.evaluation import PPML, BinaryRelevance, MLkNN, MultiLabelRidge, PerLabelFLDA
from dmlfe.ingestion import ingest
from dmlfe.model_io import load_model, text_pipeline
from dmlfe.selection import GRROOR
from dmlfe.store import open_store

__all__ = [
    "GRROOR", "PPML", "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA",
    "CCA", "DMLDA", "KernelMDDM", "LSI", "MDDM", "MLDA", "MLSI", "MVMD", "OPLS", "PCA", "PLS",
    "__version__", "estimator_class", "ingest", "load_model", "make_estimator", "metrics",
    "open_store", "text_pipeline",
]


def __getattr__(name: str):
    # estimators of methods registered after import (dmlfe.methods.registry)
    try:
        return estimator_class(name)
    except AttributeError:
        raise AttributeError(f"module 'dmlfe' has no attribute {name!r}") from None
