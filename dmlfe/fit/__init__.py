"""The fit path: validate -> :func:`plan_fit` (pure) -> :func:`run_fit` (statistics ->
template -> solve). The estimators (:mod:`dmlfe.estimators`) are thin shells over it."""

from dmlfe.fit.data import FitData, fit_data
from dmlfe.fit.plan import DataShape, FitPlan, Limits, plan_fit
from dmlfe.fit.run import FittedProjection, run_fit

__all__ = ["DataShape", "FitData", "FitPlan", "FittedProjection", "Limits", "fit_data",
           "plan_fit", "run_fit"]
