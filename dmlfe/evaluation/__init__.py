"""Evaluation on embeddings: multi-label classifiers (here; declared in
:mod:`dmlfe.evaluation.registry`) and the papers' measures
(:mod:`dmlfe.evaluation.metrics`, public as :mod:`dmlfe.metrics`)."""

from dmlfe.evaluation.classifiers import (
    PPML,
    BinaryRelevance,
    MLkNN,
    MultiLabelRidge,
    PerLabelFLDA,
)
from dmlfe.evaluation.registry import (
    ClassifierDeclaration,
    all_classifiers,
    get_classifier,
    register_classifier,
)

__all__ = ["PPML", "BinaryRelevance", "ClassifierDeclaration", "MLkNN", "MultiLabelRidge",
           "PerLabelFLDA", "all_classifiers", "get_classifier", "register_classifier"]
