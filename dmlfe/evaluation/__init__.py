"""Evaluation on embeddings: multi-label classifiers (here) and the papers' measures
(:mod:`dmlfe.evaluation.metrics`, public as :mod:`dmlfe.metrics`)."""

from dmlfe.evaluation.classifiers import BinaryRelevance, MLkNN, MultiLabelRidge, PerLabelFLDA

__all__ = ["BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA"]
