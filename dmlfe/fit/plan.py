"""Plan a fit before touching the data: route, solver and what the statistics pass computes.

:func:`plan_fit` is a pure function of the method's declaration, the validated
parameters, the data's shape and the memory limits; every decision it makes carries
its reason, and every impossible request fails here, before any pass over the data.

Route (``route``; recorded as ``route_`` and ``route_reason_``):

* ``"feature"``: the methods on X itself.
* ``"relation"`` (mope section 3.5): each document becomes its similarities to p
  prototype documents, R = sim(X, prototypes) (:mod:`dmlfe.relation`), so every
  method is a p x p problem whatever D is.
* ``"dual"``: exact, in the n-dimensional row space of X (:mod:`dmlfe.solvers.dual`):
  one pass for the n x n Gram X X^T, an n x n (or q x q) problem on the driver, one
  pass mapping the coefficients back to D-space components. Same eigenvalues and
  subspaces as the feature route at any D; needs n <= ``max_dual_samples``.
* ``"auto"``: the dual route for in-memory X (scipy.sparse/ndarray) with n <= D/2 and
  ``solver="auto"`` (medical, 333 x 1,449: a 333 x 333 problem instead of 1,449 x 1,449);
  the feature route when D <= ``max_dense_features`` or the method has the
  low-rank path (MDDMp, PLS: any D); otherwise the dual route when
  n <= ``max_dual_samples``; otherwise the matrix-free feature route for methods with
  an operator form (PCA, LSI, MVMD), and the relation route for the rest when p fits
  under ``max_dense_features`` and D >= RELATION_RATIO * p. Kernel methods always take
  the relation route.

Solver (``solver="auto"``):

* A = F F^T from X^T Y alone (MDDMp, PLS): thin SVD of the D x q matrix F ("lowrank");
  no D x D matrix at any D and no pass beyond the statistics pass.
* D (or p) <= ``max_dense_features``: statistics with X^T X, dense (generalised)
  symmetric eigensolver on the driver; driver memory about 3 D^2 x 8 bytes.
* larger D, methods with an operator form (PCA, LSI, MVMD): matrix-free randomized
  subspace iteration whose products are distributed passes over X; driver memory
  O(D k).
* otherwise a clear error (the method needs a D x D matrix that would not fit).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any

from dmlfe.errors import InputError
from dmlfe.fit.params import MATRIX_FREE
from dmlfe.graph.knn import require_nndescent, resolve_method
from dmlfe.methods import label_space
from dmlfe.methods.registry import MethodSpec
from dmlfe.relation import prototypes as relation_prototypes
from dmlfe.stats import sufficient

#: The estimator parameters that tune the matrix-free solver.
MATRIX_FREE_OPTIONS = ("n_oversamples", "n_iter", "tol", "max_passes")

#: "auto" takes the relation route only when D is at least this many times p.
RELATION_RATIO = 2


@dataclass(frozen=True)
class DataShape:
    """What a plan needs to know about the training data: its sizes and where it is.

    ``in_memory``: X is a scipy.sparse matrix or ndarray (not a store or dask array), so
    an extra pass over it costs no I/O.
    """

    n_samples: int
    n_features: int
    n_labels: int
    in_memory: bool = False


@dataclass(frozen=True)
class Limits:
    """Memory limits of the driver."""

    max_dense_features: int = 20_000
    max_components: int | None = None
    max_dual_samples: int = 12_000
    max_gather_bytes: int = 2**30
    threshold_memory: int = 2**32

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> Limits:
        """The limits an estimator's validated parameters set."""
        return cls(params["max_dense_features"], params["max_components"],
                   params["max_dual_samples"], params["max_gather_bytes"],
                   params["threshold_memory"])


@dataclass(frozen=True)
class StatsRequest:
    """What the statistics pass must compute.

    Attributes
    ----------
    need_xtx : bool
        X^T X (or R^T R), dense.
    need_xtwx : bool
        The row-weighted scatter X^T diag(w) X (MLDA, DMLDA).
    need_xty : bool
        X^T Y (D x q); the dual route reaches the labels through the Gram instead.
    sparse_labels : bool
        Keep the label side sparse (more than
        :data:`~dmlfe.stats.sufficient.MAX_DENSE_LABELS` labels): X^T Y and Y^T Y as CSR.
    labels : str
        "01" or "mlda_weighted" (see :class:`dmlfe.methods.registry.MethodSpec`).
    reason : str
    """

    need_xtx: bool
    need_xtwx: bool
    labels: str
    reason: str
    need_xty: bool = True
    sparse_labels: bool = False


@dataclass(frozen=True)
class RelationRequest:
    """How to build the relation features (relation route only).

    ``n_prototypes`` and ``selection`` are resolved (an int p, and one of
    :data:`dmlfe.relation.prototypes.SELECTIONS` or row positions: never "auto");
    ``reason`` says how p and the selection were reached.
    """

    n_prototypes: int
    selection: str | tuple[int, ...]
    similarity: str
    tau: float | None
    n_neighbors: int
    random_state: int
    reason: str = ""


def prototype_count(n: int, n_prototypes: Any, selection: Any) -> tuple[int, Any, str]:
    """(p, selection, reason): the estimator's ``n_prototypes`` and
    ``prototype_selection`` resolved for n training documents
    (:func:`dmlfe.relation.prototypes.resolve_prototypes`; row positions are kept as
    given), and a line saying how."""
    p, chosen = relation_prototypes.resolve_prototypes(n, n_prototypes, selection)
    if not isinstance(selection, str):
        return p, selection, f"p = {p} prototypes at the given row positions"
    if chosen == "all":
        return p, chosen, f"p = n = {p} prototypes (every training document)"
    if n_prototypes == "auto":
        cap = relation_prototypes.MAX_AUTO_PROTOTYPES  # read now: tests lower it
        return p, chosen, (f"p = min(n, MAX_AUTO_PROTOTYPES) = min({n}, {cap}) = {p} "
                           f"prototypes chosen by {chosen!r}")
    return p, chosen, f"p = {p} prototypes (n_prototypes) of n = {n} chosen by {chosen!r}"


@dataclass(frozen=True)
class FitPlan:
    """Everything decided before the data is read.

    Attributes
    ----------
    spec : MethodSpec
    params : dict
        The method's own parameters (validated).
    route, route_reason : str
    solver : str
        "dense", "lowrank" (thin SVD), "randomized", "lanczos" or "dual".
    solver_reason : str
    problem_size : int
        Size of the eigenproblem: D on the feature and dual routes (the dual route solves
        it as an n x n one), p on the relation route.
    stats : StatsRequest
    dense_template : bool
        Whether the builder forms the dense A (False: only its operator form).
    n_components : int or float
    limits : Limits
    random_state : int
    relation : RelationRequest or None
    solver_options : dict
        The matrix-free solver's n_oversamples, n_iter, tol and max_passes.
    """

    spec: MethodSpec
    params: dict[str, Any]
    route: str
    route_reason: str
    solver: str
    solver_reason: str
    problem_size: int
    stats: StatsRequest
    dense_template: bool
    n_components: int | float
    limits: Limits
    random_state: int
    relation: RelationRequest | None = None
    solver_options: dict[str, Any] = field(default_factory=dict)
    #: K of the document K-NN graph (graph methods only, dmlfe.graph).
    graph_neighbors: int | None = None
    #: How that graph is searched (dmlfe.graph.knn.KNN_METHODS).
    graph_search: str = "auto"

    def describe(self) -> dict[str, Any]:
        """The decisions and their reasons, JSON-able (for logs and reports)."""
        return {"method": self.spec.name, "route": self.route, "route_reason": self.route_reason,
                "solver": self.solver, "solver_reason": self.solver_reason,
                "problem_size": self.problem_size, "need_xtx": self.stats.need_xtx,
                "need_xtwx": self.stats.need_xtwx, "need_xty": self.stats.need_xty,
                "labels": self.stats.labels,
                "stats_reason": self.stats.reason}


def _gib(D: int) -> str:
    return f"{D * D * 8 / 2**30:.1f} GiB"


def _dual_ok(spec: MethodSpec, n_labels: int = 0) -> bool:
    """The dual route is exact for methods built from the sufficient statistics alone;
    it holds the labels densely (n x q) and a q x q label factor, so not above
    MAX_DENSE_LABELS labels."""
    return spec.dual and not spec.needs_graph and not spec.needs_kernel and \
        not (spec.supervised and n_labels > sufficient.MAX_DENSE_LABELS)


#: The solver of the label-operator route (:mod:`dmlfe.solvers.label_operator`).
LABEL_OPERATOR = "label-operator"


def many_labels(spec: MethodSpec, shape: DataShape, params: dict[str, Any] | None = None
                ) -> bool:
    """Whether a supervised fit keeps its label side sparse: more labels than the dense
    label statistics allow, or -- for a method with a label-operator path -- a dense
    D x q X^T Y above MAX_DENSE_LABEL_BYTES."""
    if not spec.supervised:
        return False
    if shape.n_labels > sufficient.MAX_DENSE_LABELS:
        return True
    return _operator_path(spec, params or {}) and \
        8 * shape.n_features * shape.n_labels > sufficient.MAX_DENSE_LABEL_BYTES


def _operator_path(spec: MethodSpec, params: dict[str, Any]) -> bool:
    kernel = params.get("label_kernel", "linear")
    return spec.label_scale == "operator" and isinstance(kernel, str) and kernel == "linear"


def label_side_reason(shape: DataShape) -> str:
    """Why the label side is sparse, for the route's reason."""
    q, D = shape.n_labels, shape.n_features
    if q > sufficient.MAX_DENSE_LABELS:
        return f"q = {q:,} labels > MAX_DENSE_LABELS = {sufficient.MAX_DENSE_LABELS:,}"
    return (f"a dense D x q X^T Y of D = {D:,} features and q = {q:,} labels would take "
            f"{8 * D * q / 2**30:.1f} GiB > MAX_DENSE_LABEL_BYTES = "
            f"{sufficient.MAX_DENSE_LABEL_BYTES / 2**30:g} GiB")


def label_scale_refusal(spec: MethodSpec, shape: DataShape,
                        params: dict[str, Any]) -> str | None:
    """Why ``spec`` cannot fit these many labels (None when it can), with the memory its
    dense label matrices would take: said before any pass."""
    q, D = shape.n_labels, shape.n_features
    kernel = params.get("label_kernel", "linear")
    if spec.label_scale == "dense" or _operator_path(spec, params):
        return None
    needs = f"a dense q x q label matrix ({8 * q * q / 2**30:.2f} GiB)"
    if spec.needs_graph:
        n = shape.n_samples
        needs = f"the labels as a dense n x q matrix ({8 * n * q / 2**30:.2f} GiB)"
    elif spec.label_scale == "operator":
        given = repr(kernel) if isinstance(kernel, str) else "an array"
        needs = f"with label_kernel={given} {needs}"
    else:
        needs += f" and a dense D x q X^T Y ({8 * D * q / 2**30:.2f} GiB at D = {D:,})"
    return (f"{spec.name} cannot fit q = {q:,} labels: above MAX_DENSE_LABELS = "
            f"{sufficient.MAX_DENSE_LABELS:,} the label side is kept sparse, and {spec.name} "
            f"needs {needs}. Methods with a sparse label path: mddm (variant 'p', "
            "label_kernel='linear'), mvmd, pls, cca, opls, mlsi, mlda, dmlda, and the "
            "unsupervised pca and lsi; or keep fewer labels")


def choose_route(spec: MethodSpec, route: str, solver: str, shape: DataShape, p: int,
                 limits: Limits) -> tuple[str, str]:
    """(route, reason); see the module docstring."""
    name, D, limit = spec.name, shape.n_features, limits.max_dense_features
    n = shape.n_samples
    if spec.needs_kernel:
        return "relation", f"{name} is a kernel method on relation features"
    if route == "feature":
        return "feature", "route='feature' was asked for"
    if route == "relation":
        return "relation", "route='relation' was asked for"
    if route == "dual":
        if not _dual_ok(spec, shape.n_labels):
            raise ValueError(f"route='dual' is not available for {name}, whose template is not "
                             "built from the sufficient statistics; use route='feature' or "
                             "'relation'")
        if n > limits.max_dual_samples:
            raise ValueError(
                f"route='dual' needs an n x n Gram but n = {n} exceeds max_dual_samples="
                f"{limits.max_dual_samples} ({_gib(n)} per n x n matrix); raise the limit if "
                "the driver has the memory, or use route='auto'")
        return "dual", "route='dual' was asked for"
    if spec.lowrank_only:
        return "feature", (f"{name} has the low-rank path (thin SVD of the D x q X^T Y), "
                           "which works at any D")
    if not (spec.needs_xtx or spec.needs_weighted_xtx):
        return "feature", f"{name} needs no D x D scatter"
    if (shape.in_memory and solver == "auto" and _dual_ok(spec, shape.n_labels) and 2 * n <= D
            and n <= limits.max_dual_samples):
        # the second pass of the dual route (the map-back) is free in memory, and an
        # n x n eigenproblem is (D/n)^3 times cheaper than the D x D one
        return "dual", (f"in-memory X with n = {n} <= D/2 = {D // 2} and n <= "
                        f"max_dual_samples = {limits.max_dual_samples}: exact solve in the "
                        "n-dimensional row space of X, smaller than the D x D problem")
    if D <= limit:
        return "feature", f"D = {D} <= max_dense_features = {limit}: the dense D x D route fits"
    if solver in MATRIX_FREE:
        return "feature", f"solver={solver!r} (matrix-free on X) was asked for"
    if solver == "dense":
        return "feature", "solver='dense' (the D x D problem on the driver) was asked for"
    if _dual_ok(spec, shape.n_labels) and n <= limits.max_dual_samples:
        return "dual", (f"D = {D} > max_dense_features = {limit} but n = {n} <= "
                        f"max_dual_samples = {limits.max_dual_samples}: exact solve in the "
                        f"n-dimensional row space of X (an n x n Gram, {_gib(n)})")
    if spec.operator_form and not spec.lowrank_only:
        return "feature", (f"D = {D} > max_dense_features = {limit} and n = {n} > "
                           f"max_dual_samples = {limits.max_dual_samples}: {name} is applied "
                           "matrix-free by passes over X")
    if p > limit:
        return "feature", (f"p = {p} prototypes exceed max_dense_features = {limit} as well, "
                           "so the relation route would not fit either")
    if D < RELATION_RATIO * p:
        return "feature", (f"D = {D} is not large relative to p = {p} (needs D >= "
                           f"{RELATION_RATIO} p)")
    return "relation", (f"{name} needs X^T X; D = {D} exceeds max_dense_features = {limit} and "
                        f"is {D / p:.1f} x p = {p} prototypes: solved as a p x p problem on "
                        "relation features")


def choose_solver(spec: MethodSpec, params: dict[str, Any], solver: str, route: str, D: int,
                  limits: Limits) -> tuple[str, str]:
    """(solver, reason) for a problem of size D (p on the relation route)."""
    name, limit = spec.name, limits.max_dense_features
    if route == "dual":
        return "dual", ("the n x n problem in the row space of X, leading eigenpairs only "
                        "(dmlfe.solvers.dual)")
    dense_ok = D <= limit
    lowrank = spec.lowrank_only and spec.has_lowrank_form(params)
    if solver in MATRIX_FREE:
        if not spec.operator_form:
            raise ValueError(f"solver={solver!r} is available for PCA, LSI, MVMD, MDDMp and "
                             f"PLS only; {name} needs the dense solver")
        return solver, f"solver={solver!r} was asked for"
    if lowrank and (solver == "auto" or not dense_ok):
        # the thin SVD of F is this method's exact solver; the dense template would also
        # form the D x D matrix A
        return "lowrank", "A = F F^T with F = Xc^T Yc B^1/2 (D x q): thin SVD, no D x D matrix"
    if dense_ok:
        size = "p" if route == "relation" else "D"
        return "dense", f"{size} = {D} <= max_dense_features = {limit}: dense eigensolver"
    if solver == "dense":
        raise ValueError(
            f"solver='dense' needs a {D} x {D} matrix ({_gib(D)}) but max_dense_features="
            f"{limit}; raise the limit or use solver='auto'")
    if route == "relation" and not (spec.operator_form and not spec.lowrank_only):
        raise ValueError(
            f"the relation route solves p x p problems densely for {name}, but p = {D} "
            f"prototypes exceed max_dense_features={limit}; choose fewer prototypes "
            "(n_prototypes) or raise max_dense_features")
    if route == "relation":
        return "randomized", (f"p = {D} > max_dense_features = {limit}: matrix-free randomized "
                              "subspace iteration on the relation features, one pass per "
                              "iteration")
    if spec.operator_form and not spec.lowrank_only:
        return "randomized", (f"D = {D} > max_dense_features = {limit}: matrix-free randomized "
                              "subspace iteration, one pass over X per iteration")
    if spec.lowrank_only:
        raise ValueError(f"{name}: this label kernel is not positive semi-definite, so A must be "
                         f"formed densely, but D = {D} exceeds max_dense_features={limit}")
    exact = (" route='auto' or 'dual' (the same problem solved exactly in the row space of X, "
             "when n <= max_dual_samples)," if _dual_ok(spec) else "")
    raise ValueError(
        f"{name} needs D x D matrices and D = {D} exceeds max_dense_features={limit} (a D x D "
        f"float64 matrix is {_gib(D)}); raise max_dense_features if the driver has the "
        f"memory, reduce D (fewer features), or use{exact} route='relation' (a p x p problem "
        "on similarities to p prototype documents)")


def _check_n_components(n_components: int | float, solver: str, D: int, q: int) -> None:
    if not isinstance(n_components, numbers.Integral):
        return
    most = {"lowrank": min(D, q), "lanczos": D - 1}.get(solver, D)
    if not 1 <= n_components <= most:
        what = {"lowrank": f"min(D, q) = {most} (the rank of the D x q X^T Y)",
                "lanczos": f"D - 1 = {most} (Lanczos)"}.get(solver, f"the problem size {most}")
        raise ValueError(f"n_components={n_components} must lie between 1 and the number of "
                         f"computable eigenvalues, {what}")


def plan_fit(spec: MethodSpec, params: dict[str, Any], shape: DataShape,
             limits: Limits = Limits()) -> FitPlan:
    """Decide how to fit ``spec`` with ``params`` (all of the estimator's, validated).

    Raises
    ------
    ValueError
        When the request cannot be carried out (too large for the driver, a solver the
        method does not support, more components than the problem has...).
    """
    if shape.n_samples < 1:
        raise InputError("the training data have no documents: nothing to fit")
    if shape.n_features < 1:
        raise InputError("the training data have no features (0 columns): nothing to project")
    if spec.supervised and shape.n_labels < 1:
        raise InputError(f"{spec.name} is supervised but the training data have no labels "
                         "(0 label columns)")
    method_params = {k: params[k] for k in spec.params}
    if spec.check_params is not None:
        spec.check_params(params)
    if many_labels(spec, shape, method_params):
        refusal = label_scale_refusal(spec, shape, method_params)
        if refusal is not None:
            raise InputError(refusal)
        if spec.label_scale == "operator":
            return _label_operator_plan(spec, method_params, params, shape, limits)
    if spec.needs_graph and not resolve_method(params.get("knn_search", "auto"),
                                               shape.n_samples):
        require_nndescent()  # a missing extra fails before any pass
    bad_prototypes = None
    try:
        p, selection, p_reason = prototype_count(
            shape.n_samples, params.get("n_prototypes", "auto"), params["prototype_selection"])
    except ValueError as exc:  # raised below only if the relation route is taken
        bad_prototypes, p, selection, p_reason = exc, shape.n_samples, None, ""
    route, route_reason = choose_route(spec, params["route"], params["solver"], shape, p, limits)
    relation = None
    if route == "relation":
        if bad_prototypes is not None:
            raise bad_prototypes
        route_reason = f"{route_reason}; {p_reason}"
        relation = RelationRequest(p, selection, params["similarity"], params["tau"],
                                   int(params["n_neighbors"]), int(params["random_state"]),
                                   reason=p_reason)
    D = p if route == "relation" else shape.n_features
    if route == "relation" and many_labels(spec, shape, method_params):
        _check_dense_label_product(spec, p, shape.n_labels)
    solver, solver_reason = choose_solver(spec, method_params, params["solver"], route, D, limits)
    _check_n_components(params["n_components"], solver,
                        min(D, shape.n_samples) if route == "dual" else D, shape.n_labels)
    dense = solver in ("dense", "dual")
    need_xtx = solver == "dense" and spec.needs_xtx
    reason = ("the dense template needs the scatter" if need_xtx else
              "A is applied without X^T X" if spec.operator_form else "no scatter needed")
    if route == "dual":
        reason = "sums and label statistics only; the scatter lives in the n x n Gram"
    stats = StatsRequest(need_xtx=need_xtx, need_xtwx=spec.needs_weighted_xtx and route != "dual",
                         labels="01" if route == "dual" else spec.labels, reason=reason,
                         need_xty=route != "dual",
                         sparse_labels=many_labels(spec, shape, method_params))
    return FitPlan(spec=spec, params=method_params, route=route, route_reason=route_reason,
                   solver=solver, solver_reason=solver_reason, problem_size=D, stats=stats,
                   dense_template=dense, n_components=params["n_components"],
                   limits=limits,
                   random_state=int(params["random_state"]), relation=relation,
                   solver_options={k: params[k] for k in MATRIX_FREE_OPTIONS if k in params},
                   graph_neighbors=int(params["n_neighbors"]) if spec.needs_graph else None,
                   graph_search=str(params.get("knn_search", "auto")))


def _check_dense_label_product(spec: MethodSpec, p: int, q: int) -> None:
    """The relation features are dense, so their X^T Y is a dense p x q array in every
    block of the pass: refused before the pass above MAX_LABEL_PRODUCT_BYTES."""
    limit = label_space.MAX_LABEL_PRODUCT_BYTES  # read now: tests lower it
    if 8 * p * q > limit:
        raise InputError(
            f"{spec.name} on the relation route forms the dense p x q X^T Y of its relation "
            f"features: {8 * p * q / 2**30:.2f} GiB for p = {p:,} prototypes and q = {q:,} "
            f"labels, above MAX_LABEL_PRODUCT_BYTES = {limit / 2**30:g} GiB; choose fewer "
            f"prototypes (n_prototypes <= {max(1, limit // (8 * q)):,}) or use MDDM "
            "(variant 'p'), PLS or MVMD, which need no such matrix")


def _label_operator_plan(spec: MethodSpec, method_params: dict[str, Any], params: dict[str, Any],
                         shape: DataShape, limits: Limits) -> FitPlan:
    """The plan of a method with an operator label path and a sparse label side."""
    why = label_side_reason(shape)
    if params["route"] not in ("auto", "feature") or params["solver"] != "auto":
        raise InputError(
            f"{spec.name} is solved on the label-operator route ({why}); "
            f"route={params['route']!r} and solver={params['solver']!r} are not available "
            "there: leave both at 'auto'")
    nc = params["n_components"]
    if isinstance(nc, numbers.Integral) and not 1 <= nc <= shape.n_features:
        raise ValueError(f"n_components={nc} must lie between 1 and the number of features "
                         f"{shape.n_features}")
    return FitPlan(
        spec=spec, params=method_params, route="feature",
        route_reason=(f"{why}: the label side stays sparse; X and Y are read to the driver "
                      "once"),
        solver=LABEL_OPERATOR,
        solver_reason=("A = c Xc^T Xc + g Xc^T Yc Yc^T Xc applied by sparse products with X "
                       "and Y (no D x q, q x q or n x q dense array); thick-restart block "
                       "Lanczos on the driver"),
        problem_size=shape.n_features,
        stats=StatsRequest(need_xtx=False, need_xtwx=False, labels="01",
                           reason="sums only; the sparse X^T Y too for a threshold's trace",
                           need_xty=not isinstance(nc, numbers.Integral), sparse_labels=True),
        dense_template=False, n_components=nc, limits=limits,
        random_state=int(params["random_state"]),
        solver_options={k: params[k] for k in MATRIX_FREE_OPTIONS if k in params})
