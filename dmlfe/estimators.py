"""scikit-learn estimators over the method family, generated from the method registry.

Each estimator class (``dmlfe.PCA``, ``dmlfe.MDDM``, ...) is made from its methods'
declarations in :mod:`dmlfe.methods.registry` and the common parameters of
:mod:`dmlfe.fit.params`: its ``__init__`` signature (explicit parameters, as
scikit-learn's ``get_params`` needs), defaults and docstring. A method registered
later (:func:`dmlfe.methods.registry.register_method`) gets its class the same way,
through :func:`estimator_class`, ``make_estimator`` or ``dmlfe.estimators.<Name>``.

``fit`` = validate every parameter -> open the data once (:func:`dmlfe.fit.fit_data`)
-> :func:`dmlfe.fit.plan_fit` (route, solver, statistics; pure, each with a reason)
-> :func:`dmlfe.fit.run_fit` (statistics -> template -> solve) -> fitted attributes.
``transform`` = chunk-wise projection (:mod:`dmlfe.projection`).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils import Tags

from dmlfe.compute import SelectColumns, is_dask
from dmlfe.errors import InputError
from dmlfe.fit import FittedProjection, Limits, fit_data, plan_fit, run_fit
from dmlfe.fit.data import FitData, is_path
from dmlfe.fit.incremental import Accumulator
from dmlfe.fit.params import COMMON, N_COMPONENTS
from dmlfe.fit.plan import DataShape, FitPlan
from dmlfe.methods.registry import (
    MethodSpec,
    all_methods,
    estimator_methods,
    resolve_method,
)
from dmlfe.model_files import save_model
from dmlfe.params import Param, validate
from dmlfe.projection import project, project_block, projection_operands
from dmlfe.relation import ship
from dmlfe.solvers.result import expand_rows
from dmlfe.store import open_store
from dmlfe.validation import checked_matrix


class MultiLabelProjection(TransformerMixin, BaseEstimator):
    """Common machinery of every dmlfe projection estimator.

    Fitted attributes: ``components_`` (n_components_, n_features), ``eigenvalues_``
    (the computed eigenvalues, descending: the whole spectrum of problems up to
    ``dmlfe.solvers.partial.FULL_SPECTRUM_LIMIT`` = 1,000; above it only the leading
    ones -- d, or for a threshold as many as it needs, whose denominator is then the
    trace (the whole spectrum when A is indefinite); on the dual route the non-zero
    spectrum, at most n values, or q for CCA, OPLS and MDDMf, and only the leading
    ones when they are at most a fifth of an n above
    ``dmlfe.solvers.partial.SUBSET_MIN`` = 256), ``n_components_``, ``mean_`` (training
    feature means; zeros for uncentred methods, whose projection is X P),
    ``centred_``, ``solver_``, ``n_passes_`` (passes over the data made by this fit:
    the statistics pass unless ``stats_from_cache_``, plus the solver's: the Gram and
    map-back passes of the dual route, one per iteration of the matrix-free one; for the
    graph methods the products pass plus the K-NN search's when the graph was searched
    rather than read from the cache beside the store: 1 exact, 3 approximate),
    ``rows_read_`` (documents this fit read from the data, each once: all of them,
    except when cached statistics alone made the fit -- 0 -- or the cached statistics of
    a store before its last appends, extended by the appended documents only -- a
    matrix-free solve still reads every row, warm-started or not; after
    :meth:`partial_fit`, the rows read since the previous solve -- the new ones alone
    where the statistics suffice),
    ``converged_``, ``max_residual_`` (the largest ||A p_i - lambda_i p_i|| / |lambda_i|
    of the d components where the solver measured it -- the matrix-free route. On its
    n-space form (:mod:`dmlfe.solvers.nspace`: X held in tiles on the workers, n < D)
    ``tol`` is relative to each pair's own eigenvalue and the residual is that of the
    documents' n x n problem, which bounds the D-space one; when X stays in the store
    ``tol`` is relative to the largest eigenvalue, so that ``converged_`` may hold while
    components far below it are looser -- a RuntimeWarning then says so when one is above
    ``dmlfe.solvers.matrix_free.LOOSE_RESIDUAL`` = 1 %; None for the dense, dual and
    relation solves, whose pairs meet their tolerance against their own eigenvalue),
    ``solver_info_`` (the n-space route's block width, passes, restarts and seconds per
    slot -- the pass, the orthogonalisation, sending and waiting -- and on the driver;
    ``warm_start``: where a warm-started matrix-free solve started from -- the previous
    fit's Ritz vectors or ``components_`` (``warm_start=True``), or the Ritz vectors a fit
    on the store before its last appends saved beside it; None for the other solvers),
    ``eigenvalue_total_`` (tr(A), the sum of all eigenvalues, when ``eigenvalues_`` holds
    only the leading ones: the denominator of a threshold and of every cumulative share;
    None when ``eigenvalues_`` is the whole spectrum, whose positive values then sum to
    it), ``regularization_``, ``n_features_in_``, ``n_genuine_``,
    ``n_samples_``, ``method_params_`` and ``training_store_`` (the training store's
    :meth:`dmlfe.store.Store.provenance`; None when X was not a store path),
    ``route_`` ("feature", "relation" or "dual") and ``route_reason_``. Memory: ``components_``
    is d x D float64, 0.8 GB per 100 components at D = 2^20; ``components_dtype="float32"``
    stores it in float32 (0.4 GB; the solve is float64 all the same, and ``transform``
    then returns float32). The dual and matrix-free routes keep only the columns that
    some training document uses (the components are exactly zero on the others) when
    that leaves out at least a tenth of D (hashed text uses a fraction of its columns),
    and ``transform`` multiplies those columns
    only (a new document's entries in the others meet zeros); reading ``components_``
    builds the d x D array once and keeps it in their place. On the relation route
    also ``relation_map_`` (the :class:`dmlfe.relation.RelationMap`: prototypes and
    similarity), ``relation_`` (its JSON parameters) and ``prototype_indices_`` (the
    prototypes' training row indices); ``components_`` and ``mean_`` then have p
    columns. :meth:`save` writes a fitted model; :func:`dmlfe.load_model` reads it.
    """

    #: Registry estimator name (the class name); set on each generated class.
    _estimator: ClassVar[str] = ""
    #: Every parameter of the class, in signature order.
    _declared: ClassVar[tuple[Param, ...]] = ()
    #: scikit-learn checks this class fails on purpose -> why (see dmlfe.validation).
    _xfail_checks: ClassVar[dict[str, str]] = {}

    # ------------------------------------------------------------------ params
    def _spec(self) -> MethodSpec:
        variants = estimator_methods(self._estimator)
        if len(variants) == 1:
            return variants[0]
        return resolve_method(variants[0].family, self.variant)

    @property
    def _method(self) -> str:
        return self._spec().name

    # ------------------------------------------------------------------ components
    @property
    def components_(self) -> np.ndarray:
        """The projection's rows, shape ``(n_components_, n_features_in_)``.

        A fit that kept the components on the used columns only builds this d x D
        array here, once (d x D x 8 bytes), and keeps it in their place.
        After :meth:`partial_fit`, the first read solves the eigenproblem.
        """
        self._solve_pending()
        state = self.__dict__
        if "_components" not in state:
            raise AttributeError(f"{type(self).__name__} has no components_ (not fitted)")
        columns = state.get("_component_columns")
        if columns is not None:
            # (D, d) in C order, as a fit leaves it, so that the transpose is F-ordered
            full = expand_rows(state["_components"].T, columns, int(self.n_features_in_))
            state["_components"], state["_component_columns"] = full.T, None
        return state["_components"]

    @components_.setter
    def components_(self, value: np.ndarray) -> None:
        self._keep_components(value, None)

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "components_" in state:  # pickled when components_ was a plain attribute
            state = {k: v for k, v in state.items() if k != "components_"} | {
                "_components": state["components_"], "_component_columns": None}
        super().__setstate__(state)

    def _keep_components(self, components: np.ndarray, columns: np.ndarray | None) -> None:
        """Keep the components as a fit or a saved model holds them (see
        :meth:`_kept_components`)."""
        self.__dict__["_components"] = components
        self.__dict__["_component_columns"] = columns

    def _kept_components(self) -> tuple[np.ndarray, np.ndarray | None]:
        """(components, columns) as kept: d x D and None, or d x len(columns) and the
        sorted columns of D they are (zero elsewhere)."""
        return self.__dict__["_components"], self.__dict__.get("_component_columns")

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, Y: Any = None) -> MultiLabelProjection:
        """Learn the projection.

        Every parameter is checked before the data is read.

        Parameters
        ----------
        X : store path, dask array of CSR row blocks, scipy.sparse matrix or ndarray
            Documents x features. Sparse matrices and arrays run in memory; they must
            have at least one row and column and only finite values.
        Y : array-like (n, q) of 0/1, or 1-D class labels, optional
            1-D class labels are the multi-label case with one label per document: a
            0/1 column for each class (two for a binary target).
            Not given when X is a store path (the store's are used), and
            optional for the unsupervised methods (PCA, LSI), which ignore them.
        """
        name = type(self).__name__
        params = validate(self.get_params(deep=False), self._declared, name)
        spec = self._spec()
        self.__dict__.pop("_incremental", None)  # a fit starts afresh (sklearn convention)
        start = self._warm_start() if params["warm_start"] else None
        if not (is_path(X) or is_dask(X)):
            X = checked_matrix(self, X, reset=True)
        data = fit_data(X, Y, params["split"], name, supervised=spec.supervised)
        self._check_documents(spec, data.shape)
        plan = plan_fit(spec, params, data.shape, Limits.from_params(params))
        self.__dict__.pop("_start_block", None)
        self._run(plan, data, params, start=start, keep_start=params["warm_start"])
        return self

    def _warm_start(self) -> tuple[np.ndarray, str] | None:
        """``warm_start``: the previous fit's last Ritz vectors (kept by a matrix-free
        fit with ``warm_start``) or else its components (D x d) as a matrix-free start
        block, and a line saying which; None when there is no previous fit on X's
        features (or it was on the relation route, whose components are on prototypes)."""
        if "_components" not in self.__dict__ or getattr(self, "relation_map_", None) \
                is not None:
            return None
        block = self.__dict__.get("_start_block")
        if block is not None:
            return block, (f"the last Ritz vectors of the previous fit ({block.shape[1]} "
                           "vectors)")
        components, columns = self._kept_components()
        block = np.asarray(components, dtype=np.float64).T
        if columns is not None:
            block = expand_rows(block, columns, int(self.n_features_in_))
        return block, f"components_ of the previous fit ({block.shape[1]} components)"

    def _check_documents(self, spec: MethodSpec, shape: DataShape) -> None:
        if (spec.centred or spec.needs_graph) and shape.n_samples == 1:
            # centred about its own mean, a single document is all zeros; a graph method
            # has no neighbours for it
            why = "centres the data" if spec.centred else "builds a graph between documents"
            raise InputError(f"{type(self).__name__} {why}, so it needs at least 2 documents; "
                             "got 1 sample")

    def _run(self, plan: FitPlan, data: FitData, params: dict[str, Any],
             **accumulated: Any) -> FittedProjection:
        """:func:`dmlfe.fit.run_fit` and the fitted attributes it gives."""
        fitted = run_fit(plan, data, client=params["client"], progress=params["progress"],
                         cache=params["cache"], components_dtype=params["components_dtype"],
                         **accumulated)
        for key, value in fitted.attributes().items():
            setattr(self, key, value)
        return fitted

    # ------------------------------------------------------------------ partial_fit
    def partial_fit(self, X: Any, Y: Any = None) -> MultiLabelProjection:
        """Add a block of documents to the training data (scikit-learn's incremental API).

        The statistics of the blocks are accumulated; the eigenproblem is solved when
        ``transform``, ``components_`` or another fitted attribute is first needed after
        new rows, and the result is kept until the next ``partial_fit``. It is the same
        as ``fit`` on all the blocks stacked in order (up to round-off): the plan is the
        one ``fit`` makes for all of them (:func:`dmlfe.fit.plan_fit`). ``fit`` starts
        afresh; so does the first ``partial_fit`` after it (the rows of that fit are not
        kept). What is kept between calls depends on the route
        (:mod:`dmlfe.fit.incremental`, and the documentation's "Incremental fits"):

        * feature route, dense or thin-SVD solve: the sums, X^T Y, Y^T Y and, where the
          method needs it, the D x D scatter, in float64; no row.
        * dual route: the rows (a list of blocks) and the n x n Gram, extended by each
          block's products with the earlier rows.
        * graph methods (LPP, OLPP, MOPE, MESD, SSMOPE, HSL), the relation route
          (KernelMDDM, whose prototypes are chosen from all rows), matrix-free solves and
          MLDA on the feature route: the rows; the solve is a fit on all of them (the
          K-NN graph is rebuilt then).

        ``rows_read_`` says how many rows were read since the previous solve (the new
        ones alone where statistics suffice); ``n_passes_`` counts the solve's own
        passes (0 where the statistics suffice).

        Parameters
        ----------
        X : scipy.sparse matrix or ndarray (m, n_features)
            The block's documents; every block has the same features (columns). Store
            paths and dask arrays are refused: append to a store and ``fit`` it.
        Y : array-like (m, q) of 0/1, or 1-D class labels, optional
            As in :meth:`fit`; every block has the same q label columns. 1-D labels take
            the classes of the first block (a later block with another class is
            refused: give 0/1 columns then).

        Returns
        -------
        self

        Raises
        ------
        InputError
            A block whose number of features or label columns differs from the first
            block's, or that fails :meth:`fit`'s input checks.
        ValueError
            Parameters changed (``set_params``) since the first block.
        """
        name = type(self).__name__
        params = validate(self.get_params(deep=False), self._declared, name)
        spec = self._spec()
        if is_path(X) or is_dask(X):
            raise InputError(f"{name}.partial_fit takes in-memory blocks (scipy.sparse or "
                             "numpy); for a store, append the documents to it and call fit")
        acc: Accumulator | None = self.__dict__.get("_incremental")
        if acc is not None:
            acc.check_params(params)
        X = checked_matrix(self, X, reset=acc is None)
        if acc is None:
            acc = Accumulator(spec.name, params, name, int(X.shape[1]))
        data = fit_data(X, acc.labels(Y), params["split"], name, supervised=spec.supervised)
        acc.add(data.X, data.Y)
        if self.__dict__.get("_incremental") is not acc:  # the first block
            self.__dict__["_incremental"] = acc
        for key in _SOLVED:  # the attributes of the previous solve are out of date
            self.__dict__.pop(key, None)
        return self

    def _solve_pending(self) -> None:
        """Solve the eigenproblem of the blocks given to :meth:`partial_fit` since the
        last solve, if any (the fitted attributes are set as :meth:`fit` sets them)."""
        acc: Accumulator | None = self.__dict__.get("_incremental")
        if acc is None or not acc.pending:
            return
        self._check_documents(acc.spec, acc.shape())
        plan, data, accumulated = acc.solve_inputs()
        self._run(plan, data, acc.params, **accumulated)
        self.rows_read_ = acc.take_rows_read()
        acc.pending = False

    def __getattr__(self, name: str) -> Any:
        # only for attributes not found: after partial_fit, a fitted one solves first
        acc = self.__dict__.get("_incremental")
        if name in _SOLVED and acc is not None and acc.pending:
            self._solve_pending()
            return getattr(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ transform
    def transform(self, X: Any) -> Any:
        """Embeddings ``Z = (X - mean_) components_^T``.

        A store path or dask array gives a lazy dask array (chunked like X's rows);
        a scipy.sparse matrix or ndarray (finite values only) gives an ndarray. On a
        distributed client (``client``, or the default one) components over 8 MB are
        scattered to the workers once instead of travelling in the graph: compute the
        result on that client.
        float64, or float32 for a model fitted with ``components_dtype="float32"``
        (X is then multiplied in float32, cast 16,384 rows at a time).
        """
        self._check_fitted()
        if is_path(X):
            store = open_store(X)
            X = store.subset(self.split).X if self.split is not None else store.X
        if is_dask(X) and X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input")
        mean = self.mean_ if self.centred_ else None
        rmap = getattr(self, "relation_map_", None)
        components, columns = self._kept_components()
        # components kept on the used columns: X's other columns meet zero components
        select = None if columns is None else \
            SelectColumns(columns, int(self.n_features_in_), drop_others=True)
        if select is not None and mean is not None:
            mean = mean[columns]
        if is_dask(X):
            return project(X, components.T, mean, client=self.client,
                           block_fn=select if rmap is None else ship(rmap, X))
        X = checked_matrix(self, X, reset=False)
        if rmap is not None:
            X = rmap.transform(X)
        # as project() multiplies, block by block: float32 components take X to float32
        # (never P to float64) and give float32 embeddings
        return project_block(X, *projection_operands(components.T, mean), select)

    def fit_transform(self, X: Any, y: Any = None, **fit_params: Any) -> Any:
        """``fit(X, y).transform(X)``; ``y`` (scikit-learn's name) is fit's ``Y``."""
        return self.fit(X, y).transform(X)

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR documents x terms is the native input
        tags.target_tags.required = self._spec().supervised
        tags.target_tags.multi_output = True
        return tags

    def _check_fitted(self) -> None:
        self._solve_pending()
        if "_components" not in self.__dict__:  # components_ itself may build d x D
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Save the fitted model to the directory ``path`` (JSON + npz, no pickle).

        See :mod:`dmlfe.model_files`; load it with :func:`dmlfe.load_model`.
        """
        return save_model(self, path, overwrite=overwrite)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        self._check_fitted()
        return np.array([f"{self._method}{i}" for i in range(self.n_components_)], dtype=object)


#: The attributes a solve sets, which ``partial_fit`` removes until the next solve
#: (``n_features_in_`` stays: the input checks set it).
_SOLVED = frozenset({f"{f.name}_" for f in fields(FittedProjection)}
                    - {"components_", "component_columns_", "n_features_in_"}
                    | {"_components", "_component_columns", "rows_read_"})


# --------------------------------------------------------------------------- generation
#: scikit-learn estimator checks that cannot apply, per class, with the reason
#: (read by :func:`dmlfe.validation.expected_failed_checks`).
_CCA_TARGET = ("scikit-learn's checks take any estimator named CCA for its own "
               "cross-decomposition CCA and pass a continuous 2-column target; dmlfe.CCA "
               "takes 0/1 labels (or 1-D class labels) and refuses it")
_XFAIL_CHECKS: dict[str, dict[str, str]] = {
    "CCA": {"check_transformer_general": _CCA_TARGET,
            "check_transformer_data_not_an_array": _CCA_TARGET},
}


def _variant_param(specs: list[MethodSpec]) -> Param:
    values = tuple(s.variant for s in specs)
    owner = specs[0].estimator

    def check(name: str, value: Any) -> Any:
        if value not in values:
            raise ValueError(f"variant must be {' or '.join(map(repr, values))}, got {value!r}")
        return value

    doc = (f"{{{', '.join(map(repr, values))}}}, default {values[0]!r}\n    Which {owner}: "
           + "; ".join(f"{v!r} = {s.name} ({s.reference})" for v, s in zip(values, specs,
                                                                            strict=True)) + ".")
    return Param("variant", values[0], check, doc, flag={"choices": list(values)})


def declared_params(specs: list[MethodSpec]) -> tuple[Param, ...]:
    """An estimator's parameters in signature order: n_components, [variant], the methods'
    own (first declaration wins; all variants must agree on defaults), the common ones
    (with the estimator's own defaults)."""
    own: dict[str, Param] = {}
    for spec in specs:
        for p in spec.parameters:
            if p.name in own and own[p.name].default != p.default:
                raise ValueError(f"{spec.estimator}: variants disagree on the default of "
                                 f"{p.name} ({own[p.name].default!r} vs {p.default!r})")
            own.setdefault(p.name, p)
    overrides = specs[0].estimator_defaults
    common = tuple(p.with_default(overrides[p.name]) if p.name in overrides else p
                   for p in COMMON)
    variant = (_variant_param(specs),) if len(specs) > 1 else ()
    n_components = (N_COMPONENTS.with_default(overrides["n_components"])
                    if "n_components" in overrides else N_COMPONENTS)
    return (n_components, *variant, *own.values(), *common)


def _docstring(specs: list[MethodSpec], declared: tuple[Param, ...]) -> str:
    lines = [specs[0].summary or f"{specs[0].name} ({specs[0].reference}).", "",
             "Parameters", "----------"]
    for p in declared:
        kind, _, text = p.doc.partition("\n")
        if "default" not in kind and p.default is not None:
            kind += f", default {p.default!r}"
        lines.append(f"{p.name} : {kind}")
        lines += [f"    {t.strip()}" for t in text.splitlines() if t.strip()]
    lines += ["", "See :class:`dmlfe.estimators.MultiLabelProjection` for the fitted "
              "attributes.", "", *_example(specs[0].estimator)]
    return "\n".join(lines)


def _example(estimator: str) -> list[str]:
    """The ``Examples`` section of a generated docstring: a fit on a tiny matrix in memory,
    run as a doctest (tests/test_doctests.py); its output is shapes only, which no BLAS
    changes."""
    return ["Examples", "--------",
            "A store path, or a dask array of CSR row blocks with ``Y``, is fitted the same "
            "way:", "",
            ">>> import numpy as np",
            ">>> import dmlfe",
            ">>> rng = np.random.default_rng(0)",
            ">>> X = rng.random((60, 12))",
            ">>> Y = (X[:, :3] > 0.5).astype(int)  # three labels",
            f">>> model = dmlfe.{estimator}(n_components=2).fit(X, Y)",
            ">>> model.transform(X).shape",
            "(60, 2)",
            ">>> model.n_components_",
            "2"]


def _make_class(estimator: str) -> type[MultiLabelProjection]:
    specs = estimator_methods(estimator)
    declared = declared_params(specs)
    kinds = [inspect.Parameter.POSITIONAL_OR_KEYWORD] + [inspect.Parameter.KEYWORD_ONLY] * (
        len(declared) - 1)
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(p.name, kind, default=p.default)
           for p, kind in zip(declared, kinds, strict=True)])

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = signature  # scikit-learn's get_params reads it
    __init__.__qualname__ = f"{estimator}.__init__"
    return type(estimator, (MultiLabelProjection,), {
        "__init__": __init__, "__doc__": _docstring(specs, declared), "__module__": __name__,
        "__qualname__": estimator, "_estimator": estimator, "_declared": declared,
        "_xfail_checks": _XFAIL_CHECKS.get(estimator, {})})


_CLASSES: dict[str, tuple[tuple[MethodSpec, ...], type[MultiLabelProjection]]] = {}


def estimator_class(estimator: str) -> type[MultiLabelProjection]:
    """The estimator class of a registered estimator name (``"MVMD"``, ``"MDDM"``...)."""
    specs = tuple(estimator_methods(estimator))
    if not specs:
        raise AttributeError(f"dmlfe has no estimator {estimator!r}")
    made = _CLASSES.get(estimator)
    if made is None or made[0] != specs:  # (re)registered since: make it anew
        made = _CLASSES[estimator] = (specs, _make_class(estimator))
    return made[1]


def estimator_classes() -> dict[str, type[MultiLabelProjection]]:
    """Class name -> class, for every registered method's estimator."""
    names = dict.fromkeys(s.estimator for s in all_methods().values())
    return {name: estimator_class(name) for name in names}


def make_estimator(method: str, **params: Any) -> MultiLabelProjection:
    """Estimator for a method name or alias (``mddm``/``mddm_p``/``mddm_f`` give MDDM with
    that variant, ``kmddm...`` KernelMDDM)."""
    spec = resolve_method(method, params.get("variant"))
    if spec.variant is not None:
        params.setdefault("variant", spec.variant)
    return estimator_class(spec.estimator)(**params)


def __getattr__(name: str) -> Any:
    # the estimator classes (dmlfe.estimators.PCA, ...) are made from the registry
    try:
        return estimator_class(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(estimator_classes()))
