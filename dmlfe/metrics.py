"""Public home of the evaluation measures (see :mod:`dmlfe.evaluation.metrics` for the
definitions and the conventions for empty label sets and ties)."""

from dmlfe.evaluation.metrics import (
    LABEL_SET_METRICS,
    RANKING_METRICS,
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
    "LABEL_SET_METRICS", "RANKING_METRICS",
    "auc_skipped", "average_precision", "coverage", "example_accuracy", "example_f1",
    "example_precision", "example_recall", "hamming_loss", "macro_auc", "macro_f1",
    "metric_report", "micro_f1", "one_error", "ranking_loss", "ranking_skipped",
    "redundancy", "subset_accuracy",
]
