"""scikit-learn estimators over the method family, declared by the method registry.

Each estimator (``dmlfe.PCA``, ``dmlfe.MDDM``, ...) is a class written at the end of this
module: its description and ``Examples``, and ``_estimator``, the registry's name for it.
Everything else comes from its methods' declarations in :mod:`dmlfe.methods.registry` and
the common parameters of :mod:`dmlfe.fit.params`, once, through
:class:`MultiLabelProjection`'s subclass hook: its ``__init__`` signature (explicit
parameters, as scikit-learn's ``get_params`` needs), defaults and the docstring's
Parameters. A method registered without a class (a plug-in's,
:func:`dmlfe.methods.registry.register_method`) gets one made the same way, through
:func:`estimator_class`, ``make_estimator`` or ``dmlfe.estimators.<Name>``.

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
from dmlfe.fit.data import FitData, is_path, is_store
from dmlfe.fit.incremental import Accumulator
from dmlfe.fit.params import COMMON, N_COMPONENTS
from dmlfe.fit.plan import DataShape, FitPlan
from dmlfe.io.model import save_model
from dmlfe.methods.registry import (
    MethodSpec,
    estimator_methods,
    estimator_names,
    resolve_method,
)
from dmlfe.params import Param, validate
from dmlfe.projection import project, project_block, projection_operands
from dmlfe.relation import ship
from dmlfe.solvers.result import expand_rows
from dmlfe.store import Store, open_store
from dmlfe.validation import checked_matrix


class MultiLabelProjection(TransformerMixin, BaseEstimator):
    """Common machinery of every dmlfe projection estimator.

    Fitted attributes: ``components_`` (n_components_, n_features), ``eigenvalues_``
    (the computed eigenvalues, descending: the whole spectrum of problems up to
    ``dmlfe.solvers.leading.FULL_SPECTRUM_LIMIT`` = 1,000; above it only the leading
    ones -- d, or for a threshold as many as it needs, whose denominator is then the
    trace (the whole spectrum when A is indefinite); on the dual route the non-zero
    spectrum, at most n values, or q for CCA, OPLS and MDDMf, and only the leading
    ones when they are at most a fifth of an n above
    ``dmlfe.solvers.leading.SUBSET_MIN`` = 256), ``n_components_``, ``mean_`` (training
    feature means; zeros for uncentred methods, whose projection is X P),
    ``centred_``, ``solver_``, ``n_passes_`` (passes over the data made by this fit,
    each reading every row: the statistics pass unless the statistics came from the
    cache, or from the cache of the store before its last appends extended by the
    appended rows only (``rows_read_`` counts those), plus the solver's: the Gram and
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
    on the store before its last appends saved beside it, and whether their saved image
    X^T X V, with the appended rows' part added, spared the first pass; None for the
    other solvers),
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

    #: Registry estimator name (the class name), set in each estimator's class body; the
    #: class then takes its signature, parameters and docstring from the registry.
    _estimator: ClassVar[str] = ""
    #: Every parameter of the class, in signature order.
    _declared: ClassVar[tuple[Param, ...]] = ()
    #: The registry's methods the class was declared from (a re-registration redeclares it).
    _specs: ClassVar[tuple[MethodSpec, ...]] = ()
    #: The docstring written in the class body: its description and ``Examples``.
    _written_doc: ClassVar[str] = ""
    #: scikit-learn checks this class fails on purpose -> why (see dmlfe.validation).
    _xfail_checks: ClassVar[dict[str, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("_estimator"):  # an estimator of the registry, not a user's subclass
            cls._written_doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
            _declare(cls)
            _CLASSES[cls._estimator] = cls

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
        X : store path, Store, dask array of CSR row blocks, scipy.sparse matrix or ndarray
            Documents x features. A store path or a :class:`~dmlfe.store.Store`
            (``dmlfe.open_store(path)``, or its ``subset(...)``) brings its labels, and
            the ``split`` parameter selects its rows. Sparse matrices and arrays run in
            memory; they must have at least one row and column and only finite values.
        Y : array-like (n, q) of 0/1, or 1-D class labels, optional
            1-D class labels are the multi-label case with one label per document: a
            0/1 column for each class (two for a binary target).
            Not given when X is a store (the store's are used), and
            optional for the unsupervised methods (PCA, LSI), which ignore them.
        """
        name = type(self).__name__
        params = validate(self.get_params(deep=False), self._declared, name)
        spec = self._spec()
        self.__dict__.pop("_incremental", None)  # a fit starts afresh (sklearn convention)
        start = self._warm_start() if params["warm_start"] else None
        if not (is_store(X) or is_dask(X)):
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
        if is_store(X) or is_dask(X):
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

        A store path (the documents of the fit's ``split``, all without one), a
        :class:`~dmlfe.store.Store` (its documents as given: ``store.subset("test")``
        for a split) or a dask array gives a lazy dask array (chunked like X's rows);
        a scipy.sparse matrix or ndarray (finite values only) gives an ndarray. On a
        distributed client (``client``, or the default one) components over 8 MB are
        scattered to the workers once instead of travelling in the graph: compute the
        result on that client.
        float64, or float32 for a model fitted with ``components_dtype="float32"``
        (X is then multiplied in float32, cast 16,384 rows at a time).
        """
        self._check_fitted()
        if isinstance(X, Store):  # its rows as they are (a subset is the user's choice)
            X = X.X
        elif is_path(X):
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

        See :mod:`dmlfe.io.model`; load it with :func:`dmlfe.load_model`.
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


# --------------------------------------------------------------------------- declaration
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


def _docstring(specs: tuple[MethodSpec, ...], declared: tuple[Param, ...],
               written: str) -> str:
    """The class body's description (or the registry's summary), the Parameters from the
    registry, and the class body's Examples (or a generated one)."""
    description, _, examples = written.partition("Examples\n--------\n")
    lines = [description.strip() or specs[0].summary
             or f"{specs[0].name} ({specs[0].reference}).", "", "Parameters", "----------"]
    for p in declared:
        kind, _, text = p.doc.partition("\n")
        if "default" not in kind and p.default is not None:
            kind += f", default {p.default!r}"
        lines.append(f"{p.name} : {kind}")
        lines += [f"    {t.strip()}" for t in text.splitlines() if t.strip()]
    lines += ["", "See :class:`dmlfe.estimators.MultiLabelProjection` for the fitted "
              "attributes.", ""]
    if examples:
        lines += ["Examples", "--------", examples.rstrip()]
    else:
        lines += _example(specs[0].estimator)
    return "\n".join(lines)


def _example(estimator: str) -> list[str]:
    """The ``Examples`` section of a class without one in its body (a method registered
    by a plug-in): a fit on a tiny matrix in memory, run as a doctest
    (tests/test_doctests.py); its output is shapes only, which no BLAS changes."""
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


def _declare(cls: type[MultiLabelProjection]) -> None:
    """Give an estimator class its ``__init__`` (explicit parameters, as scikit-learn's
    ``get_params`` reads them), ``_declared`` and docstring from its registered methods."""
    specs = tuple(estimator_methods(cls._estimator))
    if not specs:
        raise TypeError(f"class {cls.__name__}: no registered method has estimator "
                        f"{cls._estimator!r}; register it first "
                        "(dmlfe.methods.registry.register_method)")
    declared = declared_params(list(specs))
    kinds = [inspect.Parameter.POSITIONAL_OR_KEYWORD] + [inspect.Parameter.KEYWORD_ONLY] * (
        len(declared) - 1)
    signature = inspect.Signature(
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(p.name, kind, default=p.default)
           for p, kind in zip(declared, kinds, strict=True)])

    def __init__(self: MultiLabelProjection, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = signature  # scikit-learn's get_params reads it
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__module__ = cls.__module__
    cls.__init__ = __init__
    cls._specs, cls._declared = specs, declared
    cls.__doc__ = _docstring(specs, declared, cls._written_doc)


#: Estimator name -> its class: the classes written below and those made for methods
#: registered without one (:func:`estimator_class`).
_CLASSES: dict[str, type[MultiLabelProjection]] = {}


def estimator_class(estimator: str) -> type[MultiLabelProjection]:
    """The estimator class of a registered estimator name (``"MVMD"``, ``"MDDM"``...).

    dmlfe's own estimators are the classes written in this module; a method registered
    without one (a plug-in's) gets a class made here, ``dmlfe.estimators.<Name>``.
    """
    specs = tuple(estimator_methods(estimator))
    if not specs:
        raise AttributeError(f"dmlfe has no estimator {estimator!r}")
    cls = _CLASSES.get(estimator)
    if cls is None:  # the hook of MultiLabelProjection declares and records it
        cls = type(estimator, (MultiLabelProjection,), {
            "__module__": __name__, "__qualname__": estimator, "_estimator": estimator})
    elif cls._specs != specs:  # (re)registered since: its parameters and docstring anew
        _declare(cls)
    return cls


def estimator_classes() -> dict[str, type[MultiLabelProjection]]:
    """Class name -> class, for every registered method's estimator."""
    return {name: estimator_class(name) for name in estimator_names()}


def make_estimator(method: str, **params: Any) -> MultiLabelProjection:
    """Estimator for a method name or alias (``mddm``/``mddm_p``/``mddm_f`` give MDDM with
    that variant, ``kmddm...`` KernelMDDM)."""
    spec = resolve_method(method, params.get("variant"))
    if spec.variant is not None:
        params.setdefault("variant", spec.variant)
    return estimator_class(spec.estimator)(**params)


def __getattr__(name: str) -> Any:
    # the class of a method registered without one (a plug-in's), made from the registry
    try:
        return estimator_class(name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(estimator_classes()))


# --------------------------------------------------------------------------- the estimators
# Each class body holds what the registry does not: the description and the Examples. The
# Parameters section and __init__ are added by MultiLabelProjection's subclass hook.
class PCA(MultiLabelProjection):
    """Principal component analysis on centred X (mvmd eq. 10-11; mope eq. 1).

    Unsupervised: Y is accepted and ignored by the objective.

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import PCA
    >>> X = np.random.default_rng(0).random((50, 10))
    >>> pca = PCA(n_components=3).fit(X)
    >>> pca.transform(X).shape
    (50, 3)
    >>> np.allclose(pca.components_ @ pca.components_.T, np.eye(3))  # orthonormal rows
    True
    """

    _estimator = "PCA"


class LSI(MultiLabelProjection):
    """Latent semantic indexing: PCA's objective on uncentred X (mope eq. 2).

    Examples
    --------
    Documents x terms as a sparse matrix, projected without centring:

    >>> import scipy.sparse as sp
    >>> from dmlfe import LSI
    >>> X = sp.random(40, 30, density=0.2, format="csr", random_state=0)
    >>> lsi = LSI(n_components=5).fit(X)
    >>> lsi.transform(X).shape, lsi.centred_
    ((40, 5), False)
    """

    _estimator = "LSI"


class MDDM(MultiLabelProjection):
    """Multi-label dimensionality reduction via dependence maximisation (mddm section 3).

    variant='p': orthonormal projection, eigenvectors of Xc^T Yc B Yc^T Xc (mddm eq. 5-7;
    the thin SVD of Xc^T Yc for the linear label kernel). variant='f': uncorrelated
    features, generalised problem with mu Xc^T Xc + (1 - mu) I (mddm eq. 16-17).

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import MDDM
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels
    >>> MDDM(n_components=2).fit(X, Y).solver_  # variant 'p', linear kernel: X^T Y alone
    'thin_svd'
    >>> mddm_f = MDDM(n_components=2, variant="f", mu=0.5).fit(X, Y)
    >>> mddm_f.transform(X).shape
    (60, 2)
    """

    _estimator = "MDDM"


class MVMD(MultiLabelProjection):
    """Maximum variance and maximum dependence (mvmd eq. 30-37).

    Eigenvectors of G = (1 - beta) Xc^T Xc + beta Xc^T Yc Yc^T Xc with +-1 label coding.

    Examples
    --------
    ``beta=0`` leaves the variance term alone, which is PCA's:

    >>> import numpy as np
    >>> import dmlfe
    >>> rng = np.random.default_rng(1)
    >>> X = rng.random((80, 10))
    >>> Y = (X[:, :2] + rng.random((80, 2)) > 1).astype(int)
    >>> mvmd = dmlfe.MVMD(n_components=3, beta=0.0).fit(X, Y)
    >>> np.allclose(mvmd.eigenvalues_, dmlfe.PCA(n_components=3).fit(X).eigenvalues_)
    True
    >>> dmlfe.MVMD(n_components=3, beta=0.7).fit(X, Y).transform(X).shape
    (80, 3)
    """

    _estimator = "MVMD"


#: Why CCA is left out of two of scikit-learn's checks (dmlfe.validation reads it).
_CCA_TARGET = ("scikit-learn's checks take any estimator named CCA for its own "
               "cross-decomposition CCA and pass a continuous 2-column target; dmlfe.CCA "
               "takes 0/1 labels (or 1-D class labels) and refuses it")


class CCA(MultiLabelProjection):
    """Regularised canonical correlation analysis (mvmd eq. 40; mope eq. 14).

    Examples
    --------
    1-D class labels are one 0/1 label column per class:

    >>> import numpy as np
    >>> from dmlfe import CCA
    >>> rng = np.random.default_rng(2)
    >>> X = rng.random((90, 8))
    >>> y = rng.integers(0, 3, size=90)  # three classes
    >>> cca = CCA(n_components=2, gamma_x=0.1).fit(X, y)
    >>> cca.transform(X).shape
    (90, 2)
    >>> bool(cca.eigenvalues_[0] <= 1.0)  # a squared canonical correlation
    True
    """

    _estimator = "CCA"
    _xfail_checks = {"check_transformer_general": _CCA_TARGET,
                     "check_transformer_data_not_an_array": _CCA_TARGET}


class PLS(MultiLabelProjection):
    """Partial least squares directions (mope eq. 15).

    Eigenvectors of Xc^T Yc Yc^T Xc, by the thin SVD of Xc^T Yc.

    Examples
    --------
    At most q directions, the rank of Xc^T Yc:

    >>> import numpy as np
    >>> from dmlfe import PLS
    >>> rng = np.random.default_rng(3)
    >>> X = rng.random((50, 20))
    >>> Y = (rng.random((50, 4)) > 0.7).astype(int)
    >>> pls = PLS().fit(X, Y)  # the default n_components is a share of the spectrum
    >>> bool(pls.n_components_ <= 4), pls.solver_
    (True, 'thin_svd')
    """

    _estimator = "PLS"


class OPLS(MultiLabelProjection):
    """Orthonormalised PLS (mope section 2.2.2).

    Xc^T Yc (Yc^T Yc)^-1 Yc^T Xc against Xc^T Xc + gamma_x I.

    Examples
    --------
    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(4).random((70, 9))
    >>> Y = np.column_stack([X[:, 0] > 0.5, X[:, 1] + X[:, 2] > 1]).astype(int)
    >>> opls = dmlfe.OPLS(n_components=2, gamma_x=1e-3).fit(X, Y)
    >>> opls.transform(X[:5]).shape
    (5, 2)
    """

    _estimator = "OPLS"


class MLSI(MultiLabelProjection):
    """Multi-label latent semantic indexing (mvmd eq. 39).

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import MLSI
    >>> X = np.random.default_rng(5).random((40, 15))
    >>> mlsi = MLSI(n_components=4, beta=0.5).fit(X, (X[:, :4] > 0.6).astype(int))
    >>> mlsi.get_feature_names_out()[:2]
    array(['mlsi0', 'mlsi1'], dtype=object)
    """

    _estimator = "MLSI"


class MLDA(MultiLabelProjection):
    """Multi-label LDA with label-correlation weights (mvmd eq. 41-44).

    X and Y uncentred.

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import MLDA
    >>> y = np.repeat([0, 1, 2], 20)  # 1-D class labels
    >>> X = np.random.default_rng(6).random((60, 6)) + y[:, None]
    >>> mlda = MLDA(n_components=2).fit(X, y)
    >>> mlda.transform(X).shape, mlda.centred_
    ((60, 2), False)
    """

    _estimator = "MLDA"


class DMLDA(MultiLabelProjection):
    """Direct multi-label LDA (mvmd eq. 45-47); X and Y uncentred.

    Examples
    --------
    >>> import numpy as np
    >>> import scipy.sparse as sp
    >>> import dmlfe
    >>> X = sp.random(60, 25, density=0.3, format="csr", random_state=7)
    >>> Y = np.eye(3, dtype=int)[np.arange(60) % 3]  # one label a document
    >>> dmlda = dmlfe.DMLDA(n_components=2, gamma_xy=0.1).fit(X, Y)
    >>> dmlda.transform(X).shape
    (60, 2)
    """

    _estimator = "DMLDA"


class KernelMDDM(MultiLabelProjection):
    """Kernel MDDM on relation features (mddm sections 3.1.2 and 3.2.2).

    variant='p': Q H L H Q c = lambda Q c (mddm eq. 13); variant='f':
    Q H L H Q c = lambda (mu Q Q + (1 - mu) Q) c (eq. 20), Q the kernel of the
    prototypes; see dmlfe.methods.kernel_mddm for the reading with p < n prototypes.
    Always the relation route; the similarity must give a positive semi-definite
    kernel (linear, cosine, gaussian).

    Examples
    --------
    The components weigh the similarities to the prototypes (every document here: the
    default ``n_prototypes="auto"`` takes all n up to
    :data:`dmlfe.relation.prototypes.MAX_AUTO_PROTOTYPES`):

    >>> import numpy as np
    >>> from dmlfe import KernelMDDM
    >>> rng = np.random.default_rng(8)
    >>> X = rng.random((40, 10))
    >>> kmddm = KernelMDDM(n_components=2).fit(X, (X[:, :2] > 0.5).astype(int))
    >>> kmddm.route_, kmddm.similarity, kmddm.components_.shape
    ('relation', 'gaussian', (2, 40))
    """

    _estimator = "KernelMDDM"


class LPP(MultiLabelProjection):
    """Locality preserving projections (mope section 2.1.1).

    max tr(P^T X^T W X P) s.t. P^T (X^T D(W) X + reg I) P = I, W the document K-NN
    graph. Unsupervised.

    Examples
    --------
    W <= D(W), so every eigenvalue is at most 1:

    >>> import numpy as np
    >>> from dmlfe import LPP
    >>> X = np.random.default_rng(9).random((50, 8))
    >>> lpp = LPP(n_components=3, n_neighbors=5, feature_weight="gaussian").fit(X)
    >>> lpp.transform(X).shape
    (50, 3)
    >>> bool(np.all(lpp.eigenvalues_ <= 1 + 1e-9))
    True
    """

    _estimator = "LPP"


class OLPP(MultiLabelProjection):
    """Orthogonal LPP (mope section 2.1).

    min tr(P^T X^T L X P) s.t. P^T P = I, L = D(W) - W. Unsupervised.

    Examples
    --------
    Its eigenvalues (of -X^T L X) are negative: ``n_components`` is a number, not a share:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(10).random((45, 7))
    >>> olpp = dmlfe.OLPP(n_components=2).fit(X)
    >>> np.allclose(olpp.components_ @ olpp.components_.T, np.eye(2))
    True
    >>> bool(olpp.eigenvalues_.max() < 0)
    True
    """

    _estimator = "OLPP"


class MOPE(MultiLabelProjection):
    """Multi-output proximity-based embeddings (mope section 3.3).

    A = Psi(W, G) on the document K-NN graph, G a label proximity of scheme 1-3
    (eq. 34-42), Psi eq. 43.

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import MOPE
    >>> rng = np.random.default_rng(11)
    >>> X = rng.random((60, 10))
    >>> Y = (X[:, :3] > 0.5).astype(int)
    >>> mope = MOPE(n_components=3, scheme=2, label_similarity="cosine",
    ...             combination="hadamard", constraint="orthogonal").fit(X, Y)
    >>> np.allclose(mope.components_ @ mope.components_.T, np.eye(3))  # B_p = I
    True
    """

    _estimator = "MOPE"


class MESD(MultiLabelProjection):
    """Multi-label extension via sample duplication (mope section 3.2).

    FDA, LFDA, MMC or OLPP-R, by adjusting the template (eq. 32-33); no sample is
    duplicated.

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import MESD
    >>> X = np.random.default_rng(12).random((60, 8))
    >>> Y = np.column_stack([X[:, 0] > 0.5, X[:, 1] > 0.3, X[:, 2] > 0.7]).astype(int)
    >>> mesd = MESD(n_components=2, base="lfda", weighting="weighted").fit(X, Y)
    >>> mesd.transform(X).shape
    (60, 2)
    """

    _estimator = "MESD"


class SSMOPE(MultiLabelProjection):
    """Semi-supervised MOPE (mope section 3.4, eq. 44).

    OLPP on all documents plus MOPE on the labelled ones (rows of Y not all zero, less
    the store split ``unlabelled_split``).

    Examples
    --------
    Rows of Y that are all zero are the unlabelled documents:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(13).random((60, 10))
    >>> labelled = np.arange(60) % 3 > 0  # every third document unlabelled
    >>> Y = (X[:, 4:7] > 0.5) & labelled[:, None]
    >>> ssmope = dmlfe.SSMOPE(n_components=2, unsupervised_weight=0.3).fit(X, Y.astype(int))
    >>> ssmope.transform(X).shape
    (60, 2)
    """

    _estimator = "SSMOPE"


class HSL(MultiLabelProjection):
    """Hypergraph spectral learning (mope Table 1; Sun, Ji & Ye 2008).

    max tr(P^T X^T S_h X P) s.t. P^T (X^T X + reg I) P = I (labels as hyperedges).

    Examples
    --------
    >>> import numpy as np
    >>> from dmlfe import HSL
    >>> X = np.random.default_rng(14).random((50, 9))
    >>> Y = (X[:, 3:6] > 0.4).astype(int)
    >>> hsl = HSL(n_components=2, hypergraph="clique").fit(X, Y)
    >>> hsl.transform(X).shape
    (50, 2)
    """

    _estimator = "HSL"
