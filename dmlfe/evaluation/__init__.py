"""Evaluation on embeddings: multi-label classifiers (here; declared in
:mod:`dmlfe.evaluation.registry`) and the papers' measures
(:mod:`dmlfe.evaluation.metrics`, public as :mod:`dmlfe.metrics`)."""

# the input handling that dmlfe.selection shares with the classifiers, public here so
# that no other package imports the private module
from dmlfe.evaluation._common import as_features, check_labels, dense_block, from_store  # noqa: F401
from dmlfe.evaluation.classifiers import (
    PPML,
    BinaryRelevance,
    KNNLabelVote,
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

__all__ = ["PPML", "BinaryRelevance", "ClassifierDeclaration", "KNNLabelVote",
           "MLkNN", "MultiLabelRidge",
           "PerLabelFLDA", "all_classifiers", "get_classifier", "register_classifier"]
