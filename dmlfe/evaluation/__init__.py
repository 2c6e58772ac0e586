"""Evaluation on embeddings: multi-label classifiers (here) and the papers' measures
(:mod:`dmlfe.evaluation.metrics`, public as :mod:`dmlfe.metrics`)."""

from dmlfe.evaluation.classifiers import (
    PPML,
    BinaryRelevance,
    MLkNN,
    MultiLabelRidge,
    PerLabelFLDA,
)

__all__ = ["PPML", "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA"]
