"""Evaluation on embeddings: multi-label classifiers (here) and the papers' measures
(:mod:`dmlfe.evaluation.metrics`, public as :mod:`dmlfe.metrics`)."""

# the input handling that dmlfe.selection shares with the classifiers, public here so
# that no other package imports the private module
from dmlfe.evaluation._common import as_features, check_labels, dense_block, from_store  # noqa: F401
from dmlfe.evaluation.classifiers import (
    PPML,
    BinaryRelevance,
    MLkNN,
    MultiLabelRidge,
    PerLabelFLDA,
)

__all__ = ["PPML", "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA"]
