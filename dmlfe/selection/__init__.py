"""Multi-label feature selection: :class:`GRROOR` (orthogonal regression with feature
weights, global redundancy and relevance)."""

from dmlfe.selection.grroor import GRROOR

__all__ = ["GRROOR"]
