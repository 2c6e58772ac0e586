"""Evaluation on embeddings: multi-label classifiers and the papers' measures."""

from dmlfe.evaluation.classifiers import BinaryRelevance, MLkNN, MultiLabelRidge, PerLabelFLDA
from dmlfe.evaluation.metrics import (
    auc_skipped,
    average_precision,
    coverage,
    example_accuracy,
    example_f1,
    example_precision,
    example_recall,
    hamming_loss,
    macro_auc,
    macro_f1,
    metric_report,
    micro_f1,
    one_error,
    ranking_loss,
    ranking_skipped,
    redundancy,
    subset_accuracy,
)

__all__ = [
    "BinaryRelevance", "MLkNN", "MultiLabelRidge", "PerLabelFLDA",
    "auc_skipped", "average_precision", "coverage", "example_accuracy", "example_f1",
    "example_precision", "example_recall", "hamming_loss", "macro_auc", "macro_f1",
    "metric_report", "micro_f1", "one_error", "ranking_loss", "ranking_skipped",
    "redundancy", "subset_accuracy",
]
