"""Multi-label feature selection: :class:`GRROOR` (orthogonal regression with feature
weights, global redundancy and relevance) and :func:`grroor_search`, the paper's parameter
search by ACR (eq. 39) on an inner validation split."""

from dmlfe.selection.grroor import GRROOR
from dmlfe.selection.search import GRROORSearch, acr, grroor_search, paper_grid

__all__ = ["GRROOR", "GRROORSearch", "acr", "grroor_search", "paper_grid"]
