"""The method registry: each method declared once.

A :class:`MethodSpec` says everything the rest of dmlfe needs to know about a method:
its name and aliases, its builder (a pure function statistics -> trace template), its
parameters (defaults are the builder's own keyword defaults; constraints, docs and
command-line flags are declared here), which statistics it needs, and which
estimator class carries it. The estimator classes' signatures and Parameters
(:mod:`dmlfe.estimators`), ``make_estimator``, ``dmlfe.__all__``, the ``dmlfe fit --method``
choices and flags and the pipeline configuration's parameter lists are all generated from
these declarations.

Adding a method = writing its builder and calling :func:`register_method` (below, for
dmlfe's own methods); its estimator class is made from the registration, unless a class
with ``_estimator`` set to its name is written in :mod:`dmlfe.estimators` (for its
description and examples).
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dmlfe.graph.combine import COMBINATIONS
from dmlfe.graph.knn import GRAPH_MODES
from dmlfe.graph.label_similarity import SCHEME_SIMILARITIES, check_label_similarity
from dmlfe.graph.methods import (
    CONSTRAINTS,
    HSL_VARIANTS,
    MESD_BASES,
    WEIGHTINGS,
    hsl,
    lpp,
    mesd,
    mope,
    olpp,
    ssmope,
)
from dmlfe.methods.cca import cca, opls, pls
from dmlfe.methods.kernel_mddm import kernel_mddm_f, kernel_mddm_p
from dmlfe.methods.mddm import mddm_f, mddm_p
from dmlfe.methods.mlda import dmlda, dmlda_nspace, mlda, mlda_nspace
from dmlfe.methods.mlsi import mlsi
from dmlfe.methods.mvmd import mvmd
from dmlfe.methods.template import TraceTemplate, psd_sqrt
from dmlfe.methods.unsupervised import lsi, pca
from dmlfe.params import (
    FROM_BUILDER,
    Param,
    interval,
    labels_of,
    one_of,
    optional,
    split_arg,
    split_names,
)
from dmlfe.relation.similarities import (
    all_similarities,
    get_similarity,
    graph_weight,
    similarity_choices,
)

#: Builder arguments that are inputs, not parameters.
_INPUTS = frozenset({"stats", "xtwx", "dense", "kernel", "labels", "graph", "doc_splits",
                     "overwrite"})


@dataclass(frozen=True)
class MethodSpec:
    """What the estimators, the fit plan and the statistics pass need to know about a method.

    Attributes
    ----------
    name : str
        Registry key (lower case, ``_`` separated).
    build : callable
        ``build(stats, **params) -> TraceTemplate``; MLDA/DMLDA also take ``xtwx``,
        kernel methods ``kernel``, and methods with an operator form ``dense``.
    centred : bool
        Whether projection subtracts the training mean.
    needs_xtx : bool
        The dense template needs X^T X (D x D) in the statistics.
    operator_form : bool
        A can be applied without X^T X (matrix-free passes or, when ``lowrank_only``,
        nothing but X^T Y); the builder then accepts ``dense=False``.
    lowrank_only : bool
        A = F F^T from X^T Y alone and B = I: thin SVD, no D x D, no extra pass.
    needs_weighted_xtx : bool
        Needs the row-weighted scatter X^T diag(w) X, w = row sums of the labels.
    labels : str
        Label matrix the statistics are computed on: "01" (the stored 0/1 Y; MVMD
        recodes +-1 itself from the 0/1 statistics) or "mlda_weighted" (Y' of mvmd
        eq. 44, see :func:`dmlfe.methods.mlda.mlda_weighted_labels`).
    generalized : bool
        The constraint B is not the identity.
    reference : str
        Paper and equations.
    parameters : tuple of Param
        The method's own parameters, defaults filled from the builder.
    needs_kernel : bool
        Kernel method on relation features: the builder takes ``kernel``, the p x p
        similarity matrix of the prototypes (relation route only).
    aliases : tuple of str
        Other accepted names.
    estimator : str
        Class name of the estimator (``dmlfe.<estimator>``); several methods may share
        one, told apart by ``variant``.
    variant : str or None
        Value of the estimator's ``variant`` parameter that selects this method.
    summary : str
        The estimator's description, for a method registered without an estimator class
        of its own (a plug-in's); dmlfe's own are written in their classes
        (:mod:`dmlfe.estimators`).
    estimator_defaults : dict
        The estimator's own defaults for common parameters (e.g. KernelMDDM's route).
    check_params : callable, optional
        ``check_params(params)`` on all of the estimator's parameters, for rules that
        involve common ones (raises ValueError).
    lowrank_form : callable, optional
        ``lowrank_form(params) -> bool``: whether A = F F^T holds for these parameters
        (default: always, for ``lowrank_only`` / ``operator_form`` methods).
    supervised : bool
        The objective uses the labels (False for PCA and LSI).
    dual : bool
        The builder uses nothing but the sufficient statistics, so the dual route (the
        problem in the row space of X, :mod:`dmlfe.solvers.dual`) is exact for it. False
        for kernel methods and for methods whose template needs more of the data.
    needs_graph : bool
        Graph method (:mod:`dmlfe.graph`): ``build(labels, graph, **params)`` returns the
        n x n operators A and B, reduced to A_p = X^T A X, B_p = X^T B X + reg I by
        :func:`dmlfe.fit.graph.graph_fit` instead of the statistics pass.
    nspace : callable, optional
        ``nspace(labels, **params)`` -> the n-space factors of a method whose B is
        row-weighted (:class:`dmlfe.methods.mlda.WeightedPencil`,
        :class:`dmlfe.methods.mlda.DirectPencil`), given its labels as
        the statistics see them (after ``labels``' map): the dual route then solves
        without the reduced data (:func:`dmlfe.solvers.dual.solve_dual`).
    label_scale : {"operator", "dense"} or None
        How the method fits with more than
        :data:`~dmlfe.stats.sufficient.MAX_DENSE_LABELS` labels, whose statistics keep
        the label side sparse: "operator", A = c Xc^T Xc + g Xc^T Yc Yc^T Xc applied by
        the label-operator route (:mod:`dmlfe.solvers.label_operator`; for parameters
        where ``lowrank_form`` holds); "dense", its dense template is built from the
        sparse label statistics (CCA, OPLS, MLSI, MLDA, DMLDA); None, it refuses before
        any pass, naming the dense label matrices it would need.
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
    parameters: tuple[Param, ...] = ()
    needs_kernel: bool = False
    aliases: tuple[str, ...] = ()
    estimator: str = ""
    variant: str | None = None
    summary: str = ""
    estimator_defaults: dict[str, Any] = field(default_factory=dict)
    check_params: Callable[[dict[str, Any]], None] | None = None
    lowrank_form: Callable[[dict[str, Any]], bool] | None = None
    supervised: bool = True
    dual: bool = True
    needs_graph: bool = False
    nspace: Callable[..., Any] | None = None
    label_scale: str | None = None

    @property
    def params(self) -> dict[str, Any]:
        """Parameter name -> default."""
        return {p.name: p.default for p in self.parameters}

    @property
    def family(self) -> str:
        """The name that selects the estimator's first variant (``mddm`` for ``mddm_p``)."""
        if self.variant is None:
            return self.name
        return self.name.removesuffix(f"_{self.variant}")

    def has_lowrank_form(self, params: dict[str, Any]) -> bool:
        return self.operator_form and (self.lowrank_form is None or self.lowrank_form(params))


def _with_builder_defaults(build: Callable[..., TraceTemplate],
                           parameters: tuple[Param, ...], name: str) -> tuple[Param, ...]:
    sig = inspect.signature(build)
    keywords = {k: p.default for k, p in sig.parameters.items()
                if k not in _INPUTS and p.default is not inspect.Parameter.empty}
    declared = {p.name for p in parameters}
    if declared != set(keywords):
        raise ValueError(f"method {name}: declared parameters {sorted(declared)} differ from "
                         f"the builder's keywords {sorted(keywords)}")
    return tuple(p.with_default(keywords[p.name]) if p.default is FROM_BUILDER else p
                 for p in parameters)


#: Feature-space methods, in registration order.
METHODS: dict[str, MethodSpec] = {}
#: Kernel methods on relation features (relation route only).
KERNEL_METHODS: dict[str, MethodSpec] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return str(name).lower().replace("-", "_")


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method to the registry; its estimator, CLI choice and flags follow from it.

    The spec's parameter defaults are filled from the builder's keyword defaults, and
    the declared parameters must be exactly the builder's keywords.
    """
    name = _key(spec.name)
    if name in all_methods() or name in _ALIASES:
        raise ValueError(f"a method named {name!r} is registered already")
    spec = replace(spec, name=name,
                   parameters=_with_builder_defaults(spec.build, spec.parameters, name),
                   estimator=spec.estimator or name.upper())
    for other in all_methods().values():
        if other.estimator == spec.estimator and other.variant is None:
            raise ValueError(f"estimator {spec.estimator} already has a method ({other.name}) "
                             "without variants; give both a variant")
    (KERNEL_METHODS if spec.needs_kernel else METHODS)[name] = spec
    for alias in spec.aliases:
        _ALIASES[_key(alias)] = name
    return spec


def unregister_method(name: str) -> None:
    """Remove a method (for tests and plug-ins that replace one)."""
    spec = get_method(name)
    (KERNEL_METHODS if spec.needs_kernel else METHODS).pop(spec.name)
    for alias in spec.aliases:
        _ALIASES.pop(_key(alias), None)


def all_methods() -> dict[str, MethodSpec]:
    """Every registered method, feature-space ones first."""
    return {**METHODS, **KERNEL_METHODS}


def get_method(name: str) -> MethodSpec:
    """Look a method up by name or alias (case-insensitive; ``-`` = ``_``)."""
    key = _key(name)
    key = _ALIASES.get(key, key)
    found = all_methods().get(key)
    if found is None:
        raise ValueError(f"unknown method {name!r}; choose one of {', '.join(all_methods())}")
    return found


def estimator_names() -> list[str]:
    """Every registered method's estimator class name, in registration order (the public
    estimators of ``dmlfe.__all__``)."""
    return list(dict.fromkeys(s.estimator for s in all_methods().values()))


def estimator_methods(estimator: str) -> list[MethodSpec]:
    """The methods an estimator class carries, in registration order."""
    return [s for s in all_methods().values() if s.estimator == estimator]


def resolve_method(name: str, variant: str | None = None) -> MethodSpec:
    """A method by name, where a family name (``mddm``) picks ``variant`` (default: first)."""
    key = _key(name)
    for spec in all_methods().values():
        if spec.variant is not None and spec.family == key:
            family = estimator_methods(spec.estimator)
            if variant is None:
                return family[0]
            for s in family:
                if s.variant == variant:
                    return s
            raise ValueError(f"{spec.estimator} variant must be one of "
                             f"{[s.variant for s in family]}, got {variant!r}")
    spec = get_method(key)
    if variant is not None and spec.variant != variant:
        if spec.variant is None:
            raise ValueError(f"method {spec.name} has no variants (variant={variant!r})")
        raise ValueError(f"variant={variant!r} contradicts method {spec.name}")
    return spec


def method_choices() -> list[str]:
    """Every name ``--method`` accepts: each family name before its variants."""
    out: list[str] = []
    for spec in all_methods().values():
        if spec.variant is not None and spec.family not in out:
            out.append(spec.family)
        out.append(spec.name)
    return out


# --------------------------------------------------------------------------- parameters
def _fraction_doc(what: str) -> str:
    return f"float in [0, 1]\n    {what}"


BETA = Param("beta", FROM_BUILDER, interval(0.0, 1.0),
             _fraction_doc("Balance between the variance (0) and the label-dependence (1) terms."),
             flag={"type": float})
MU = Param("mu", FROM_BUILDER, interval(0.0, 1.0),
           _fraction_doc("Weight of the data scatter in the constraint (variant 'f')."),
           flag={"type": float})
GAMMA_X = Param("gamma_x", FROM_BUILDER, interval(0.0, None),
                "float >= 0\n    Ridge added to the feature scatter X^T X.", flag={"type": float})
GAMMA_Y = Param("gamma_y", FROM_BUILDER, interval(0.0, None),
                "float >= 0\n    Ridge added to the label scatter Y^T Y.", flag={"type": float})
GAMMA_XY = Param("gamma_xy", FROM_BUILDER, interval(0.0, None),
                 "float >= 0\n    Ridge of the label-side matrix.", flag={"type": float})
GAMMA_XY_POSITIVE = Param("gamma_xy", FROM_BUILDER, interval(0.0, None, closed="right"),
                          "float > 0\n    Ridge of Yc Yc^T (keeps it invertible).",
                          flag={"type": float})
LABEL_RANK = Param("label_rank", FROM_BUILDER, interval(1, None, integer=True),
                   "int >= 1\n    Principal label directions kept when the label side is "
                   "sparse (more than MAX_DENSE_LABELS labels); every label direction "
                   "(exact) when q is at most this.", flag={"type": int})
LABEL_KERNEL = Param(
    "label_kernel", FROM_BUILDER, labels_of("linear", "rbf", matrix=True),
    "{'linear', 'rbf'} or ndarray (q, q)\n    L = Y B Y^T with B = I, an RBF kernel over the "
    "label columns, or B given (mddm section 3.3).",
    flag={})
RBF_GAMMA = Param("rbf_gamma", FROM_BUILDER, optional(interval(0.0, None)),
                  "float, optional\n    Width of the 'rbf' label kernel (default 1 / n).",
                  flag={"type": float})


def _psd_label_kernel(params: dict[str, Any]) -> bool:
    """A = Xc^T Yc B Yc^T Xc has the form F F^T only for a positive semi-definite B."""
    kernel = params.get("label_kernel")
    return isinstance(kernel, str) or psd_sqrt(np.asarray(kernel, dtype=np.float64)) is not None


def _kernel_checks(params: dict[str, Any]) -> None:
    if params.get("route") == "feature":
        raise ValueError("KernelMDDM is a kernel method on relation features; it needs "
                         "route='relation' (or 'auto')")
    if not get_similarity(params["similarity"], "relation").psd:
        psd = tuple(n for n, s in all_similarities().items() if s.psd and s.relation)
        raise ValueError(
            f"KernelMDDM needs a positive semi-definite kernel for its constraint (mddm eq. "
            f"13/20), one of {psd}; similarity={params['similarity']!r} is not. "
            "Use MDDM(route='relation', similarity=...) to run MDDM on those relation "
            "features instead")
    if params.get("solver") in ("randomized", "lanczos"):
        raise ValueError(f"KernelMDDM solves a generalised p x p problem densely; "
                         f"solver={params['solver']!r} is not available")


_KMDDM_DEFAULTS = {"route": "relation", "similarity": "gaussian"}


for _spec in (
    MethodSpec("pca", pca, centred=True, needs_xtx=True, operator_form=True, lowrank_only=False,
               needs_weighted_xtx=False, labels="01", generalized=False,
               reference="mvmd eq. 10-11; mope eq. 1", supervised=False),
    MethodSpec("lsi", lsi, centred=False, needs_xtx=True, operator_form=True, lowrank_only=False,
               needs_weighted_xtx=False, labels="01", generalized=False, reference="mope eq. 2",
               supervised=False),
    MethodSpec("mddm_p", mddm_p, centred=True, needs_xtx=False, operator_form=True,
               lowrank_only=True, needs_weighted_xtx=False, labels="01", generalized=False,
               reference="mddm eq. 5-7, section 3.3; mvmd eq. 17-18",
               parameters=(LABEL_KERNEL, RBF_GAMMA), aliases=("mddmp",), estimator="MDDM",
               variant="p", lowrank_form=_psd_label_kernel, label_scale="operator"),
    MethodSpec("mddm_f", mddm_f, centred=True, needs_xtx=True, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mddm eq. 16-17; mvmd eq. 19-20",
               parameters=(MU, LABEL_KERNEL, RBF_GAMMA), aliases=("mddmf",), estimator="MDDM",
               variant="f"),
    MethodSpec("mvmd", mvmd, centred=True, needs_xtx=True, operator_form=True,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=False,
               reference="mvmd eq. 30-37", parameters=(BETA,), label_scale="operator"),
    MethodSpec("cca", cca, centred=True, needs_xtx=True, operator_form=False, lowrank_only=False,
               needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mvmd eq. 40; mope eq. 14", parameters=(GAMMA_X, GAMMA_Y, LABEL_RANK),
               label_scale="dense"),
    MethodSpec("pls", pls, centred=True, needs_xtx=False, operator_form=True, lowrank_only=True,
               needs_weighted_xtx=False, labels="01", generalized=False,
               reference="mope eq. 15", label_scale="operator"),
    MethodSpec("opls", opls, centred=True, needs_xtx=True, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mope section 2.2.2", parameters=(GAMMA_X, LABEL_RANK),
               label_scale="dense"),
    MethodSpec("mlsi", mlsi, centred=True, needs_xtx=True, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mvmd eq. 39", parameters=(BETA, GAMMA_X, GAMMA_XY_POSITIVE, LABEL_RANK),
               label_scale="dense"),
    MethodSpec("mlda", mlda, centred=False, needs_xtx=False, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=True, labels="mlda_weighted",
               generalized=True, reference="mvmd eq. 41-44, 47", parameters=(GAMMA_XY,),
               nspace=mlda_nspace, label_scale="dense"),
    MethodSpec("dmlda", dmlda, centred=False, needs_xtx=True, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=True, labels="01", generalized=True,
               reference="mvmd eq. 45-47", parameters=(GAMMA_XY,), nspace=dmlda_nspace,
               label_scale="dense"),
    MethodSpec("kmddm_p", kernel_mddm_p, centred=True, needs_xtx=False, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mddm eq. 10-14 (section 3.1.2)", parameters=(LABEL_KERNEL, RBF_GAMMA),
               needs_kernel=True, aliases=("kmddmp",), estimator="KernelMDDM", variant="p",
               estimator_defaults=_KMDDM_DEFAULTS, check_params=_kernel_checks),
    MethodSpec("kmddm_f", kernel_mddm_f, centred=True, needs_xtx=True, operator_form=False,
               lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=True,
               reference="mddm eq. 18-20 (section 3.2.2)",
               parameters=(MU, LABEL_KERNEL, RBF_GAMMA), needs_kernel=True,
               aliases=("kmddmf",), estimator="KernelMDDM", variant="f",
               estimator_defaults=_KMDDM_DEFAULTS, check_params=_kernel_checks),
):
    register_method(_spec)


# --------------------------------------------------------------------------- graph methods
# Proximity-graph methods of the MOPE paper (dmlfe.graph): A is an n x n matrix on the
# document K-NN graph and the labels; A_p = X^T A X comes from their own pass.
REG = Param("reg", FROM_BUILDER, interval(0.0, None),
            "float >= 0, default 1e-3\n    lambda of B_p = X^T B X + lambda I (mope section 3.1); "
            "not used when B_p = I\n    (orthogonal projections).", flag={"type": float})
FEATURE_WEIGHT = Param(
    "feature_weight", FROM_BUILDER, graph_weight,
    "{'constant', 'gaussian', 'local_scaling', 'eq9', 'cosine'}\n    Weights of the K-NN "
    "graph W (mope section 2.1.1, eq. 7, 8, 9; dmlfe.relation.similarities); K is "
    "n_neighbors.",
    flag={"choices": similarity_choices("graph")})
FEATURE_TAU = Param("feature_tau", FROM_BUILDER, optional(interval(0.0, None, closed="neither")),
                    "float, optional\n    tau of the 'gaussian' (default: median neighbour "
                    "distance) and 'eq9' (default 1)\n    graph weights.", flag={"type": float})
GRAPH_MODE = Param("graph_mode", FROM_BUILDER, one_of(*GRAPH_MODES),
                   "{'symmetrized', 'mutual'}\n    Edge i-j when either (or both) is among "
                   "the other's K nearest neighbours.", flag={})
_GRAPH = (FEATURE_WEIGHT, FEATURE_TAU, GRAPH_MODE)
SCHEME = Param("scheme", FROM_BUILDER, one_of(1, 2, 3),
               "{1, 2, 3}\n    Label proximity scheme (mope section 3.3.1).",
               flag={"type": int})
_LABEL_SIMS = sorted({s for v in SCHEME_SIMILARITIES.values() for s in v})
LABEL_SIMILARITY = Param(
    "label_similarity", FROM_BUILDER, optional(one_of(*_LABEL_SIMS)),
    "str, optional\n    Scheme 1: 'sorensen' (eq. 34), 'scaled_sorensen' (35), 'jaccard' (36), "
    "'hamming_exp'\n    (37), 'hamming' (38); scheme 2: 'cosine', 'minkowski' (40), 'tanimoto' "
    "(41);\n    scheme 3: Sigma = 'sorensen' over Y^T or 'yty' (eq. 42). Default: the first.",
    flag={})
COMBINATION = Param("combination", FROM_BUILDER, one_of(*COMBINATIONS),
                    "{'priority', 'hadamard', 'weighted_sum'}\n    Psi(W, G): eq. 43 (general "
                    "form with gamma), G o W, or beta G + (1 - beta) W.",
                    flag={})
PSI_A = Param("a", FROM_BUILDER, interval(0.0, None, closed="neither"),
              "float > 0\n    Exponent of g in eq. 43.", flag={"type": float})
PSI_B = Param("b", FROM_BUILDER, interval(0.0, None, closed="neither"),
              "float > 0\n    Exponent of w in eq. 43.", flag={"type": float})
PSI_BETA = Param("beta", FROM_BUILDER, interval(0.0, None),
                 "float >= 0\n    beta of eq. 43 (in [0, 1] for 'weighted_sum').",
                 flag={"type": float})
PSI_GAMMA = Param("gamma", FROM_BUILDER, interval(0.0, 1.0),
                  "float in [0, 1]\n    gamma of eq. 43's general form (1 = eq. 43).",
                  flag={"type": float})
LABEL_TAU = Param("label_tau", FROM_BUILDER, interval(0.0, None, closed="neither"),
                  "float > 0\n    tau of eq. 37 and eq. 40.", flag={"type": float})
MINKOWSKI_P = Param("minkowski_p", FROM_BUILDER, interval(0.0, None, closed="neither"),
                    "float > 0\n    P of eq. 40.", flag={"type": float})
LABEL_COMPONENTS = Param("label_components", FROM_BUILDER,
                         optional(interval(1, None, integer=True)),
                         "int, optional\n    k_c of scheme 2's label PCA (eq. 39); default "
                         "its rank.", flag={"type": int})
_MOPE_COMMON = (SCHEME, LABEL_SIMILARITY, COMBINATION, PSI_A, PSI_B, PSI_BETA, PSI_GAMMA,
                *_GRAPH, LABEL_TAU, MINKOWSKI_P, LABEL_COMPONENTS, REG)


def _olpp_checks(params: dict[str, Any]) -> None:
    if not isinstance(params.get("n_components"), numbers.Integral):
        raise ValueError(
            f"OLPP minimises tr(P^T X^T L X P): its objective -X^T L X has no positive "
            f"eigenvalue, so n_components={params.get('n_components')!r} (a fraction of the "
            "positive eigenvalues' sum) cannot choose d; give n_components as an int")


def _weighted_sum_beta(params: dict[str, Any]) -> None:
    if params.get("combination") == "weighted_sum" and not 0.0 <= params["beta"] <= 1.0:
        raise ValueError(f"combination='weighted_sum' needs beta in [0, 1], got "
                         f"{params['beta']!r}")
    check_label_similarity(params["scheme"], params["label_similarity"])


_GRAPH_KW = dict(centred=False, needs_xtx=True, operator_form=False, lowrank_only=False,
                 needs_weighted_xtx=False, labels="01", needs_graph=True)
for _spec in (
    MethodSpec("lpp", lpp, generalized=True, reference="mope section 2.1; Table 1",
               parameters=(*_GRAPH, REG), supervised=False, **_GRAPH_KW),
    MethodSpec("olpp", olpp, generalized=False, reference="mope section 2.1; Table 1",
               parameters=(*_GRAPH, REG), supervised=False, check_params=_olpp_checks,
               # its objective -X^T L X has no positive eigenvalue: a threshold on their
               # sum cannot apply, so the default is a number of components
               estimator_defaults={"n_components": 2}, **_GRAPH_KW),
    MethodSpec("mope", mope, generalized=True, reference="mope section 3.3, eq. 34-43",
               parameters=(*_MOPE_COMMON[:10], Param(
                   "constraint", FROM_BUILDER, one_of(*CONSTRAINTS),
                   "{'orthogonal', 'embedding', 'degree'}\n    B_p = I, X^T X + reg I, or "
                   "X^T D(A) X + reg I.", flag={}),
                   *_MOPE_COMMON[10:]),
               check_params=_weighted_sum_beta, **_GRAPH_KW),
    MethodSpec("mesd", mesd, generalized=True, reference="mope section 3.2, eq. 32-33",
               parameters=(
                   Param("base", FROM_BUILDER, one_of(*MESD_BASES),
                         "{'fda', 'lfda', 'mmc', 'olpp_r'}\n    The single-label method "
                         "extended by sample duplication.",
                         flag={}),
                   Param("weighting", FROM_BUILDER, one_of(*WEIGHTINGS),
                         "{'unweighted', 'weighted'}\n    Eq. 32 or eq. 33 (pairs weighted "
                         "by 1 / (m_i m_j)).", flag={}),
                   Param("beta", FROM_BUILDER, interval(0.0, None),
                         "float >= 0\n    Repulsion weight of 'olpp_r' (L = L_s - beta L_r).",
                         flag={"type": float}),
                   *_GRAPH, REG), **_GRAPH_KW),
    MethodSpec("ssmope", ssmope, generalized=False, reference="mope section 3.4, eq. 44-45",
               parameters=(Param("unlabelled_split", FROM_BUILDER, optional(split_names),
                                 "str or list of str, optional\n    Store path only: the "
                                 "documents of this split (or these splits) count as\n    "
                                 "unlabelled, whatever labels the store holds for them; the "
                                 "fit's\n    ``split`` must include them (e.g. split=['train', "
                                 "'unlabelled']).\n    Default: the documents whose rows of Y "
                                 "are all zero.", flag={"type": split_arg}),
                           Param("unsupervised_weight", FROM_BUILDER, interval(0.0, 1.0),
                                 "float in [0, 1]\n    lambda of eq. 44 (weight of OLPP over "
                                 "all documents).", flag={"type": float}),
                           *_MOPE_COMMON),
               check_params=_weighted_sum_beta, **_GRAPH_KW),
    MethodSpec("hsl", hsl, generalized=True, reference="mope Table 1; Sun, Ji & Ye 2008",
               parameters=(Param("hypergraph", FROM_BUILDER, one_of(*HSL_VARIANTS),
                                 "{'clique', 'hypergraph'}\n    Clique expansion or Zhou's "
                                 "hypergraph Laplacian.", flag={"choices": list(HSL_VARIANTS)}),
                           REG), **_GRAPH_KW),
):
    register_method(_spec)
