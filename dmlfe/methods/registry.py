"""Method registry: name -> builder, the statistics it needs and its parameters."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dmlfe.methods.cca import cca, opls, pls
from dmlfe.methods.kernel_mddm import kernel_mddm_f, kernel_mddm_p
from dmlfe.methods.mddm import mddm_f, mddm_p
from dmlfe.methods.mlda import dmlda, mlda
from dmlfe.methods.mlsi import mlsi
from dmlfe.methods.mvmd import mvmd
from dmlfe.methods.template import TraceTemplate
from dmlfe.methods.unsupervised import lsi, pca


@dataclass(frozen=True)
class MethodSpec:
    """What the estimators and the statistics pass need to know about a method.

    Attributes
    ----------
    name : str
        Registry key.
    build : callable
        ``build(stats, **params) -> TraceTemplate`` (MLDA/DMLDA also take ``xtwx``).
    centred : bool
        Whether projection subtracts the training mean.
    needs_xtx : bool
        The dense template needs X^T X (D x D) in the statistics.
    operator_form : bool
        A can be applied without X^T X (matrix-free passes or, when
        ``lowrank_only``, nothing but X^T Y); builders then accept ``dense=False``.
    lowrank_only : bool
        A = F F^T from X^T Y alone and B = I: thin SVD, no D x D, no extra pass.
    needs_weighted_xtx : bool
        Needs the row-weighted scatter X^T diag(w) X, w = row sums of the labels.
    labels : str
        Label matrix the statistics are computed on: "01" (the stored 0/1 Y;
        MVMD recodes +-1 itself from the 0/1 statistics) or "mlda_weighted"
        (Y' of mvmd eq. 44, see :func:`dmlfe.methods.mlda.mlda_weighted_labels`).
    generalized : bool
        The constraint B is not the identity.
    params : dict
        Parameter name -> default.
    reference : str
        Paper and equations.
    needs_kernel : bool
        Kernel methods on relation features: the builder also takes ``kernel``, the
        p x p similarity matrix of the prototypes (relation route only).
    """

    name: str
    build: Callable[..., TraceTemplate]
    centred: bool
    needs_xtx: bool
    operator_form: bool
    lowrank_only: bool
    needs_weighted_xtx: bool
    labels: str
    generalized: bool
    reference: str
    params: dict[str, Any] = field(default_factory=dict)
    needs_kernel: bool = False


def _defaults(fn: Callable[..., TraceTemplate]) -> dict[str, Any]:
    """Keyword parameters of a builder with their defaults (not stats/xtwx/dense)."""
    sig = inspect.signature(fn)
    skip = {"stats", "xtwx", "dense", "kernel"}
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if k not in skip and p.default is not inspect.Parameter.empty
    }


def _spec(name: str, fn: Callable[..., TraceTemplate], **kw: Any) -> MethodSpec:
    return MethodSpec(name=name, build=fn, params=_defaults(fn), **kw)


METHODS: dict[str, MethodSpec] = {
    s.name: s
    for s in [
        _spec(
            "pca",
            pca,
            centred=True,
            needs_xtx=True,
            operator_form=True,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=False,
            reference="mvmd eq. 10-11; mope eq. 1",
        ),
        _spec(
            "lsi",
            lsi,
            centred=False,
            needs_xtx=True,
            operator_form=True,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=False,
            reference="mope eq. 2",
        ),
        _spec(
            "mddm_p",
            mddm_p,
            centred=True,
            needs_xtx=False,
            operator_form=True,
            lowrank_only=True,
            needs_weighted_xtx=False,
            labels="01",
            generalized=False,
            reference="mddm eq. 5-7, section 3.3; mvmd eq. 17-18",
        ),
        _spec(
            "mddm_f",
            mddm_f,
            centred=True,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mddm eq. 16-17; mvmd eq. 19-20",
        ),
        _spec(
            "mvmd",
            mvmd,
            centred=True,
            needs_xtx=True,
            operator_form=True,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=False,
            reference="mvmd eq. 30-37",
        ),
        _spec(
            "cca",
            cca,
            centred=True,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mvmd eq. 40; mope eq. 14",
        ),
        _spec(
            "pls",
            pls,
            centred=True,
            needs_xtx=False,
            operator_form=True,
            lowrank_only=True,
            needs_weighted_xtx=False,
            labels="01",
            generalized=False,
            reference="mope eq. 15",
        ),
        _spec(
            "opls",
            opls,
            centred=True,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mope section 2.2.2",
        ),
        _spec(
            "mlsi",
            mlsi,
            centred=True,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mvmd eq. 39",
        ),
        _spec(
            "mlda",
            mlda,
            centred=False,
            needs_xtx=False,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=True,
            labels="mlda_weighted",
            generalized=True,
            reference="mvmd eq. 41-44, 47",
        ),
        _spec(
            "dmlda",
            dmlda,
            centred=False,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=True,
            labels="01",
            generalized=True,
            reference="mvmd eq. 45-47",
        ),
    ]
}

#: Kernel methods on relation features (relation route only), kept apart from the
#: feature-space family in :data:`METHODS`.
KERNEL_METHODS: dict[str, MethodSpec] = {
    s.name: s
    for s in [
        _spec(
            "kmddm_p",
            kernel_mddm_p,
            centred=True,
            needs_xtx=False,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mddm eq. 10-14 (section 3.1.2)",
            needs_kernel=True,
        ),
        _spec(
            "kmddm_f",
            kernel_mddm_f,
            centred=True,
            needs_xtx=True,
            operator_form=False,
            lowrank_only=False,
            needs_weighted_xtx=False,
            labels="01",
            generalized=True,
            reference="mddm eq. 18-20 (section 3.2.2)",
            needs_kernel=True,
        ),
    ]
}


def get_method(name: str) -> MethodSpec:
    """Look a method up by name (case-insensitive; "mddmp"/"mddmf" accepted)."""
    key = name.lower().replace("-", "_")
    key = {"mddmp": "mddm_p", "mddmf": "mddm_f", "kmddmp": "kmddm_p",
           "kmddmf": "kmddm_f"}.get(key, key)
    if key in METHODS:
        return METHODS[key]
    if key in KERNEL_METHODS:
        return KERNEL_METHODS[key]
    raise ValueError(
        f"unknown method {name!r}; choose one of "
        f"{', '.join(sorted(METHODS) + sorted(KERNEL_METHODS))}"
    )
