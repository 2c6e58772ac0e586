"""Public home of the evaluation measures (see :mod:`dmlfe.evaluation.metrics` for the
definitions and the conventions for empty label sets and ties)."""

from dmlfe.evaluation.metrics import *  # noqa: F403 - the public re-export is the point
from dmlfe.evaluation.metrics import __all__  # noqa: F401
