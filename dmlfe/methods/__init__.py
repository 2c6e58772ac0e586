"""The feature-space method family as pure functions: statistics -> trace template."""

from dmlfe.methods.cca import cca, opls, pls
from dmlfe.methods.mddm import mddm_f, mddm_p, rbf_label_correlation
from dmlfe.methods.mlda import (
    dmlda,
    label_correlation,
    mlda,
    mlda_weighted_labels,
    weighted_scatter,
)
from dmlfe.methods.mlsi import mlsi
from dmlfe.methods.mvmd import mvmd
from dmlfe.methods.registry import METHODS, MethodSpec, get_method, register_method
from dmlfe.methods.template import TraceTemplate
from dmlfe.methods.unsupervised import lsi, pca

__all__ = [
    "METHODS",
    "MethodSpec",
    "TraceTemplate",
    "cca",
    "dmlda",
    "get_method",
    "label_correlation",
    "lsi",
    "mddm_f",
    "mddm_p",
    "mlda",
    "mlda_weighted_labels",
    "mlsi",
    "mvmd",
    "opls",
    "pca",
    "pls",
    "rbf_label_correlation",
    "register_method",
    "weighted_scatter",
]
