"""scikit-learn estimators over the method family: thin shells over the pure functions.

``fit`` = one distributed statistics pass (or a cached one) -> the method's trace
template (``dmlfe.methods``) -> a driver eigensolver (``dmlfe.solvers``); ``transform``
= chunk-wise projection (``dmlfe.projection``).

Which solver runs (``solver="auto"``):

* A = F F^T from X^T Y alone (MDDMp, PLS): thin SVD of the D x q matrix F; no D x D
  matrix at any D and no pass beyond the statistics pass.
* D <= ``max_dense_features``: statistics with X^T X, dense (generalised) symmetric
  eigensolver on the driver; driver memory about 3 D^2 x 8 bytes.
* larger D, PCA/LSI/MVMD: matrix-free randomized subspace iteration whose products
  with a block of vectors are distributed passes over X (``n_passes_`` records how
  many); driver memory O(D k).
* otherwise a clear error (the method needs a D x D matrix that would not fit).

Which route (``route``; recorded as ``route_`` and ``route_reason_``):

* ``"feature"``: the methods on X itself (above).
* ``"relation"`` (mope section 3.5): each document becomes its similarities to p
  prototype documents, R = sim(X, prototypes) (``dmlfe.relation``); R's statistics
  come from the same one-pass reduction (the prototypes shipped to the workers once,
  each block's dense n_block x p relation features reduced straight into R^T R, R^T Y
  and the sums), so every method is a p x p problem whatever D is. ``components_``
  then has p columns (coefficients on the relation features) and ``transform``
  computes new documents' relation features against the stored prototypes first.
  With the linear similarity and every training document as a prototype,
  R = X X_train^T and a relation coefficient vector c is the feature direction
  X_train^T c.
* ``"auto"``: the relation route when the method needs a dense X^T X (it has no
  low-rank path: MDDMp and PLS work at any D), D exceeds ``max_dense_features``,
  p fits under it and D >= RELATION_RATIO * p; the feature route otherwise.

Kernel MDDM (:class:`KernelMDDM`, mddm eq. 13 / 20) always takes the relation route.
"""

from __future__ import annotations

import numbers
import os
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin

from dmlfe.methods.mlda import label_correlation, mlda_weighted_labels
from dmlfe.methods.registry import get_method
from dmlfe.solvers.dense import solve_dense
from dmlfe.solvers.dimension import DEFAULT_THRESHOLD, n_genuine

SOLVERS = ("auto", "dense", "randomized", "lanczos")
ROUTES = ("feature", "relation", "auto")
#: Default ``route`` of every estimator except KernelMDDM. "feature" keeps the
#: behaviour of models fitted before the relation route existed; "auto" is opt-in.
DEFAULT_ROUTE = "auto"
#: "auto" takes the relation route only when D is at least this many times p.
RELATION_RATIO = 2
#: Store reads for the relation route use blocks of about this many bytes of dense
#: relation features (n_block x p x 8), so a worker's block stays small.
RELATION_BLOCK_BYTES = 2**27


def _is_path(X: Any) -> bool:
    return isinstance(X, str | os.PathLike)


class MultiLabelProjection(TransformerMixin, BaseEstimator):
    """Common machinery; subclasses set ``_method`` and their parameters.

    Fitted attributes: ``components_`` (n_components_, n_features), ``eigenvalues_``
    (all computed eigenvalues, descending), ``n_components_``, ``mean_`` (training
    feature means; zeros for uncentred methods, whose projection is X P),
    ``centred_``, ``solver_``, ``n_passes_`` (passes over the data made by this fit:
    the statistics pass unless ``stats_from_cache_``, plus the matrix-free solver's),
    ``regularization_``, ``n_features_in_``, ``n_genuine_``, ``n_samples_``,
    ``method_params_`` and ``training_store_`` (provenance of the
    training store, see :func:`dmlfe.model_io.store_provenance`; None when X was not
    a store path), ``route_`` ("feature" or "relation") and ``route_reason_``. On the
    relation route also ``relation_map_`` (the :class:`dmlfe.relation.RelationMap`:
    prototypes and similarity), ``relation_`` (its JSON parameters) and
    ``prototype_indices_`` (the prototypes' training row indices); ``components_``
    and ``mean_`` then have p columns. :meth:`save` writes a fitted model;
    ``dmlfe.model_io.load_model`` reads it back.
    """

    _method: ClassVar[str] = ""

    # ------------------------------------------------------------------ params
    def _method_params(self) -> dict[str, Any]:
        spec = get_method(self._method)
        return {k: getattr(self, k) for k in spec.params}

    def _validate(self) -> None:
        nc = self.n_components
        if isinstance(nc, bool) or not isinstance(nc, numbers.Real):
            raise TypeError(f"n_components must be an int or a float in (0, 1), got {nc!r}")
        if isinstance(nc, numbers.Integral):
            if nc < 1:
                raise ValueError(f"n_components={nc} must be >= 1")
        elif not 0.0 < float(nc) <= 1.0:
            raise ValueError(f"n_components={nc!r}: a float is the eigenvalue-sum threshold t "
                             "and must lie in (0, 1]")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver={self.solver!r} is not one of {SOLVERS}")
        if int(self.max_dense_features) < 1:
            raise ValueError("max_dense_features must be a positive int")
        if self.route not in ROUTES:
            raise ValueError(f"route={self.route!r} is not one of {ROUTES}")

    # ------------------------------------------------------------------ data
    def _data(self, X: Any, Y: Any) -> tuple[Any, Any, Any]:
        """(X, Y, store path or None); a store path reads X and Y from the store."""
        if _is_path(X):
            from dmlfe.store import open_store

            if Y is not None:
                raise ValueError("Y must not be given with a store path: the labels come from "
                                 "the store (pass X and Y as arrays to use other labels)")
            store = open_store(X)
            if self.split is not None:
                store = store.subset(self.split)
            return store.X, store.Y, X
        if Y is None:
            raise ValueError(f"{type(self).__name__}.fit needs Y (a 0/1 label indicator "
                             "matrix) unless X is a store path")
        if self.split is not None:
            raise ValueError("split= applies only when X is a store path")
        if not hasattr(X, "dask"):
            if sp.issparse(X):
                X = sp.csr_matrix(X, dtype=np.float64)
            else:
                X = np.asarray(X, dtype=np.float64)
                if X.ndim != 2:
                    raise ValueError(f"X must be 2-D (documents x features), got shape "
                                     f"{X.shape}")
            Y = np.asarray(Y)
            if Y.ndim == 1:
                Y = Y[:, None]
            if Y.shape[0] != X.shape[0]:
                raise ValueError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}")
            bad = ~np.isin(Y, (0, 1))
            if bad.any():
                r, c = np.argwhere(bad)[0]
                raise ValueError(f"Y must be a 0/1 indicator matrix; Y[{r}, {c}] = "
                                 f"{Y[r, c].item()!r}")
        return X, Y, None

    def _stats(self, X, Y, path, *, need_xtx, label_fn=None, labels_key=None,
               need_xtwx=False, block_fn=None, route_desc=None):
        from dmlfe.stats.cache import load_or_compute_stats, stats_dir_for
        from dmlfe.stats.pass_ import compute_stats

        kw = dict(need_xtx=need_xtx, max_dense_features=int(self.max_dense_features),
                  client=self.client, label_fn=label_fn, need_xtwx=need_xtwx)
        if block_fn is not None:
            kw["block_fn"] = block_fn
        if path is not None and self.cache:
            if block_fn is None:
                return load_or_compute_stats(path, split=self.split, labels=labels_key,
                                             progress=self.progress, **kw)
            # relation route: X was reopened with smaller blocks; the entry sits beside
            # the store, keyed by that X (store, split, blocks) and the relation map
            return load_or_compute_stats(X, Y, route=route_desc, labels=labels_key,
                                         cache_dir=stats_dir_for(path),
                                         subset={"split": self.split},
                                         progress=self.progress, **kw)
        return compute_stats(X, Y, progress=self.progress, **kw)

    # ------------------------------------------------------------------ route
    def _choose_route(self, spec: Any, X: Any, D: int) -> tuple[str, str]:
        """(route, reason) for this fit; see the module docstring."""
        if spec.needs_kernel:
            if self.route == "feature":
                raise ValueError(f"{self._method} is a kernel method on relation features; "
                                 "it needs route='relation' (or 'auto')")
            return "relation", f"{self._method} is a kernel method on relation features"
        if self.route == "feature":
            return "feature", "route='feature' was asked for"
        if self.route == "relation":
            return "relation", "route='relation' was asked for"
        n = int(X.shape[0])
        p = n if self.n_prototypes is None else int(self.n_prototypes)
        limit = int(self.max_dense_features)
        if spec.lowrank_only:
            return "feature", (f"{self._method} has the low-rank path (thin SVD of the D x q "
                               "X^T Y), which works at any D")
        if not (spec.needs_xtx or spec.needs_weighted_xtx):
            return "feature", f"{self._method} needs no D x D scatter"
        if D <= limit:
            return "feature", (f"D = {D} <= max_dense_features = {limit}: the dense D x D "
                               "route fits")
        if self.solver in ("randomized", "lanczos"):
            return "feature", f"solver={self.solver!r} (matrix-free on X) was asked for"
        if p > limit:
            return "feature", (f"p = {p} prototypes exceed max_dense_features = {limit} as "
                               "well, so the relation route would not fit either")
        if D < RELATION_RATIO * p:
            return "feature", (f"D = {D} is not large relative to p = {p} (needs D >= "
                               f"{RELATION_RATIO} p)")
        return "relation", (f"{self._method} needs X^T X; D = {D} exceeds max_dense_features "
                            f"= {limit} and is {D / p:.1f} x p = {p} prototypes: solved as a "
                            "p x p problem on relation features")

    def _relation_map(self, X: Any, Y: Any) -> tuple[Any, np.ndarray]:
        from dmlfe.relation import build_relation_map

        return build_relation_map(
            X, Y, n_prototypes=self.n_prototypes, selection=self.prototype_selection,
            similarity_name=self.similarity, tau=self.tau, n_neighbors=self.n_neighbors,
            random_state=self.random_state, client=self.client)

    def _relation_blocks(self, path: Any, p: int) -> tuple[Any, Any]:
        """The store's (X, Y) again, in blocks whose dense relation features stay small."""
        from dmlfe.store import open_store

        store = open_store(path)
        rows = max(64, min(store.chunk_rows, RELATION_BLOCK_BYTES // (8 * max(p, 1))))
        if rows != store.chunk_rows:
            store = open_store(path, chunk_rows=rows)
        if self.split is not None:
            store = store.subset(self.split)
        return store.X, store.Y

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, Y: Any = None) -> MultiLabelProjection:
        """Learn the projection.

        Parameters
        ----------
        X : store path, dask array of CSR row blocks, scipy.sparse matrix or ndarray
            Documents x features. Sparse matrices and arrays run in memory.
        Y : array-like (n, q) of 0/1, optional when X is a store path
        """
        self._validate()
        spec = get_method(self._method)
        params = self._method_params()
        X, Y, path = self._data(X, Y)
        D_in = int(X.shape[1])
        route, reason = self._choose_route(spec, X, D_in)
        rmap, proto_idx, block_fn = None, None, None
        if route == "relation":
            from dmlfe.relation import ship

            rmap, proto_idx = self._relation_map(X, Y)
            if path is not None:
                X, Y = self._relation_blocks(path, rmap.n_prototypes)
            block_fn = ship(rmap, X)
        D = D_in if rmap is None else rmap.n_prototypes
        dense_ok = D <= int(self.max_dense_features)
        solver = self.solver
        if solver == "dense" and not dense_ok and spec.lowrank_only:
            # the thin SVD of X^T Y is this method's exact dense solver; the dense
            # template would also form the D x D matrix A, which does not fit
            solver = "lowrank"
        if solver == "dense" and not dense_ok:
            raise ValueError(
                f"solver='dense' needs a {D} x {D} matrix ({D * D * 8 / 2**30:.1f} GiB) but "
                f"max_dense_features={self.max_dense_features}; raise the limit or use "
                "solver='auto'")
        if solver == "auto":
            if spec.lowrank_only:
                solver = "lowrank"
            elif dense_ok:
                solver = "dense"
            elif spec.operator_form:
                solver = "randomized"
            else:
                raise ValueError(
                    f"{self._method} needs D x D matrices and D = {D} exceeds "
                    f"max_dense_features={self.max_dense_features} (a D x D float64 matrix "
                    f"is {D * D * 8 / 2**30:.1f} GiB); raise max_dense_features if the "
                    "driver has the memory, reduce D (fewer features), or use route='relation' "
                    "(a p x p problem on similarities to p prototype documents)")
        if solver in ("randomized", "lanczos") and not spec.operator_form:
            raise ValueError(f"solver={solver!r} is available for PCA, LSI, MVMD, MDDMp and "
                             f"PLS only; {self._method} needs the dense solver")
        if rmap is not None and solver in ("randomized", "lanczos"):
            raise ValueError(
                f"the relation route solves p x p problems densely, but p = {D} prototypes "
                f"exceed max_dense_features={self.max_dense_features}; choose fewer "
                "prototypes (n_prototypes) or raise max_dense_features")

        label_fn, labels_key = None, None
        if spec.labels == "mlda_weighted":
            C = label_correlation(self._label_gram(Y))
            label_fn = _WeightedLabels(C)
            labels_key = {"mlda_weighted": C.round(15).tolist()}
        need_xtx = solver == "dense" and (spec.needs_xtx or spec.needs_weighted_xtx)
        stats = self._stats(X, Y, path, need_xtx=need_xtx and spec.needs_xtx,
                            label_fn=label_fn, labels_key=labels_key,
                            need_xtwx=spec.needs_weighted_xtx, block_fn=block_fn,
                            route_desc=None if rmap is None else rmap.describe())
        n_passes = 0 if stats.from_cache else 1
        if spec.needs_kernel:
            template = spec.build(stats, kernel=rmap.prototype_kernel(), **params)
        elif spec.needs_weighted_xtx:
            template = spec.build(stats, xtwx=stats.xtwx, **params)
        elif solver == "dense":
            template = spec.build(stats, **params)
        else:
            template = spec.build(stats, dense=False, **params)

        self.regularization_ = 0.0
        if solver in ("randomized", "lanczos"):
            res = self._solve_matrix_free(X, stats, template, solver)
            n_passes += res.n_passes
            P, w = res.components, res.eigenvalues
            self.solver_ = res.solver
            self.n_genuine_ = n_genuine(w)
            self.converged_ = bool(res.converged)
            if not res.converged:
                warnings.warn(
                    f"{self._method}: the {res.solver} solver stopped after {res.n_passes} "
                    "passes before its residuals met the tolerance; the leading components "
                    "are approximate (see converged_)", RuntimeWarning, stacklevel=2)
        else:
            if solver == "lowrank" and not template.is_pure_lowrank:
                # e.g. an indefinite label kernel: A is only available densely
                if not dense_ok:
                    raise ValueError(f"{self._method}: this label kernel is not positive "
                                     f"semi-definite, so A must be formed densely, but D = {D} "
                                     "exceeds max_dense_features")
                template = spec.build(stats, **params)
            res = solve_dense(template, self.n_components)
            P, w = res.components, res.eigenvalues
            self.solver_ = res.solver
            self.regularization_ = float(res.regularization)
            self.n_genuine_ = int(res.n_genuine)
            self.converged_ = True

        self.components_ = np.ascontiguousarray(P.T)
        self.eigenvalues_ = np.asarray(w, dtype=np.float64)
        self.n_components_ = int(P.shape[1])
        self.centred_ = bool(template.centred)
        self.mean_ = stats.mean_x if template.centred else np.zeros(D)
        self.n_features_in_ = D_in
        self.route_ = route
        self.route_reason_ = reason
        self.relation_map_ = rmap
        self.relation_ = None
        self.prototype_indices_ = proto_idx
        if rmap is not None:
            self.relation_ = {**rmap.params(), "prototype_selection": self.prototype_selection,
                              "random_state": int(self.random_state)}
        self.n_passes_ = n_passes
        self.stats_from_cache_ = bool(stats.from_cache)
        self.n_samples_ = int(stats.n)
        self.method_params_ = dict(template.params)
        self.training_store_ = None
        if path is not None:
            from dmlfe.model_io import store_provenance

            self.training_store_ = store_provenance(path, self.split)
        return self

    @staticmethod
    def _label_gram(Y: Any) -> np.ndarray:
        """Y^T Y of the 0/1 labels (a cheap pass over the small label matrix only)."""
        if hasattr(Y, "dask"):
            import dask.array as da

            Yf = Y.astype(np.float64)
            return np.asarray(da.dot(Yf.T, Yf).compute(), dtype=np.float64)
        Yd = np.asarray(Y, dtype=np.float64)
        return Yd.T @ Yd

    def _solve_matrix_free(self, X, stats, template, solver):
        from dmlfe.solvers.matrix_free import matrix_free_eigh

        D = int(X.shape[1])
        nc = self.n_components
        k = int(nc) if isinstance(nc, numbers.Integral) else min(int(self.max_components), D)
        res = matrix_free_eigh(
            X, k, solver=solver, xx_coef=template.xx_coef, lowrank=template.lowrank,
            centre=template.centred, stats=stats, client=self.client,
            random_state=self.random_state,
        )
        if not isinstance(nc, numbers.Integral):
            total = res.trace
            csum = np.cumsum(res.eigenvalues)
            reached = np.flatnonzero(csum >= float(nc) * total)
            if reached.size:
                d = int(reached[0]) + 1
            else:
                d = k
                warnings.warn(
                    f"{self._method}: the top {k} eigenvalues found by the matrix-free solver "
                    f"hold {csum[-1] / total:.4f} of the total, below the threshold t={nc}; "
                    f"keeping {k} components (raise max_components or pass an int "
                    "n_components)", RuntimeWarning, stacklevel=3)
            res.components = res.components[:, :d]
        return res

    # ------------------------------------------------------------------ transform
    def transform(self, X: Any) -> Any:
        """Embeddings Z = (X - mean_) components_^T.

        A store path or dask array gives a lazy dask array (chunked like X's rows);
        a scipy.sparse matrix or ndarray gives an ndarray.
        """
        from dmlfe.projection import project

        self._check_fitted()
        if _is_path(X):
            from dmlfe.store import open_store

            store = open_store(X)
            X = store.subset(self.split).X if self.split is not None else store.X
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features but the model was fitted on "
                             f"{self.n_features_in_}")
        mean = self.mean_ if self.centred_ else None
        rmap = getattr(self, "relation_map_", None)
        if rmap is not None:
            from dmlfe.relation import ship

            if not hasattr(X, "dask"):
                R = rmap.transform(X)
                return (R - self.mean_) @ self.components_.T if mean is not None \
                    else R @ self.components_.T
            return project(X, self.components_.T, mean, block_fn=ship(rmap, X))
        if not hasattr(X, "dask"):
            Xm = sp.csr_matrix(X, dtype=np.float64) if sp.issparse(X) else np.asarray(
                X, dtype=np.float64)
            Z = np.asarray(Xm @ self.components_.T)
            if mean is not None:
                Z = Z - mean @ self.components_.T
            return Z
        return project(X, self.components_.T, mean)

    def fit_transform(self, X: Any, Y: Any = None, **fit_params: Any) -> Any:
        return self.fit(X, Y).transform(X)

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit first")

    def save(self, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
        """Save the fitted model to the directory ``path`` (JSON + npz, no pickle).

        See :func:`dmlfe.model_io.save_model`; load it with :func:`dmlfe.model_io.load_model`.
        """
        from dmlfe.model_io import save_model

        return save_model(self, path, overwrite=overwrite)

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        self._check_fitted()
        return np.array([f"{self._method}{i}" for i in range(self.n_components_)], dtype=object)


class _WeightedLabels:
    """Picklable label map Y -> Y' (mvmd eq. 44) applied to each label block."""

    def __init__(self, C: np.ndarray) -> None:
        self.C = C

    def __call__(self, Yb: Any) -> np.ndarray:
        return mlda_weighted_labels(Yb, self.C)


_COMMON_DOC = """
    n_components : int or float, default 0.999
        An int: the number of components d. A float t in (0, 1]: the smallest d whose
        eigenvalues sum to at least t times the sum of the positive eigenvalues
        (mvmd eq. 15).
    solver : {"auto", "dense", "randomized", "lanczos"}
        See the module docstring.
    max_dense_features : int, default 20000
        Largest D for which a D x D matrix is formed on the driver.
    max_components : int, default 500
        Matrix-free path with a threshold: most eigenpairs computed.
    split : str or list of str, optional
        When X is a store path: fit on (and transform) the documents of these splits.
    cache : bool, default True
        Reuse statistics saved beside the store (store paths only).
    client : distributed.Client, optional
        Where passes run; default the process's default client or dask's local scheduler.
    random_state : int, default 0
        Seed of the randomized solver.
    progress : bool, default False
        Progress messages on stderr for the passes.
    route : {"feature", "relation", "auto"}, default "feature"
        Solve on X, on relation features R = sim(X, prototypes) (mope section 3.5), or
        choose (see the module docstring). ``route_`` and ``route_reason_`` record it.
    n_prototypes : int, optional
        Relation route: p; None = every training document.
    prototype_selection : {"all", "random", "stratified", "kmeans++"}, default "all"
        Relation route: how the p prototypes are chosen (``dmlfe.relation.prototypes``;
        seeded by ``random_state``, independent of the chunking).
    similarity : str, default "linear"
        Relation route: "linear", "cosine", "gaussian" (mope eq. 7), "local_scaling"
        (eq. 8) or "inverse_normalized_distance" (eq. 9, alias "eq9").
    tau : float, optional
        Width of "gaussian" (default: median squared distance between a seeded sample
        of the prototypes) and of "inverse_normalized_distance" (default 1.0).
    n_neighbors : int, default 7
        K of "local_scaling".
"""


def _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                  n_neighbors) -> None:
    self.route = route
    self.n_prototypes = n_prototypes
    self.prototype_selection = prototype_selection
    self.similarity = similarity
    self.tau = tau
    self.n_neighbors = n_neighbors


def _set_common(self, n_components, solver, max_dense_features, max_components, split, cache,
                client, random_state, progress) -> None:
    self.n_components = n_components
    self.solver = solver
    self.max_dense_features = max_dense_features
    self.max_components = max_components
    self.split = split
    self.cache = cache
    self.client = client
    self.random_state = random_state
    self.progress = progress


_D = DEFAULT_THRESHOLD


class PCA(MultiLabelProjection):
    __doc__ = ("Principal component analysis on centred X (mvmd eq. 10-11; mope eq. 1).\n\n"
               "    Unsupervised: Y is accepted and ignored by the objective.\n"
               "    Parameters\n    ----------" + _COMMON_DOC)
    _method = "pca"

    def __init__(self, n_components=_D, *, solver="auto", max_dense_features=20_000,
                 max_components=500, split=None, cache=True, client=None, random_state=0,
                 progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class LSI(MultiLabelProjection):
    __doc__ = ("Latent semantic indexing: PCA's objective on uncentred X (mope eq. 2).\n\n"
               "    Parameters\n    ----------" + _COMMON_DOC)
    _method = "lsi"

    def __init__(self, n_components=_D, *, solver="auto", max_dense_features=20_000,
                 max_components=500, split=None, cache=True, client=None, random_state=0,
                 progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class MDDM(MultiLabelProjection):
    __doc__ = ("Multi-label dimensionality reduction via dependence maximisation (mddm §3).\n\n"
               "    variant='p': orthonormal projection, eigenvectors of Xc^T Yc B Yc^T Xc\n"
               "    (mddm eq. 5-7; the thin SVD of Xc^T Yc for the linear label kernel).\n"
               "    variant='f': uncorrelated features, generalised problem with\n"
               "    mu Xc^T Xc + (1 - mu) I (mddm eq. 16-17).\n\n"
               "    Parameters\n    ----------\n"
               "    variant : {'p', 'f'}\n"
               "    label_kernel : 'linear', 'rbf' or ndarray (q x q)\n"
               "        L = Y B Y^T with B = I, an RBF kernel over label columns, or given\n"
               "        (mddm §3.3).\n"
               "    rbf_gamma : float, optional\n"
               "    mu : float, default 0.5 (variant 'f')" + _COMMON_DOC)

    def __init__(self, n_components=_D, *, variant="p", label_kernel="linear", rbf_gamma=None,
                 mu=0.5, solver="auto", max_dense_features=20_000, max_components=500,
                 split=None, cache=True, client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.variant = variant
        self.label_kernel = label_kernel
        self.rbf_gamma = rbf_gamma
        self.mu = mu
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)

    @property
    def _method(self) -> str:  # type: ignore[override]
        if self.variant not in ("p", "f"):
            raise ValueError(f"MDDM variant must be 'p' or 'f', got {self.variant!r}")
        return f"mddm_{self.variant}"


class MVMD(MultiLabelProjection):
    __doc__ = ("Maximum variance and maximum dependence (mvmd eq. 30-37): eigenvectors of\n"
               "    G = (1 - beta) Xc^T Xc + beta Xc^T Yc Yc^T Xc with +-1 label coding.\n\n"
               "    Parameters\n    ----------\n    beta : float in [0, 1], default 0.5"
               + _COMMON_DOC)
    _method = "mvmd"

    def __init__(self, n_components=_D, *, beta=0.5, solver="auto", max_dense_features=20_000,
                 max_components=500, split=None, cache=True, client=None, random_state=0,
                 progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.beta = beta
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class CCA(MultiLabelProjection):
    __doc__ = ("Regularised canonical correlation analysis (mvmd eq. 40; mope eq. 14).\n\n"
               "    Parameters\n    ----------\n    gamma_x, gamma_y : float, default 0.1"
               + _COMMON_DOC)
    _method = "cca"

    def __init__(self, n_components=_D, *, gamma_x=0.1, gamma_y=0.1, solver="auto",
                 max_dense_features=20_000, max_components=500, split=None, cache=True,
                 client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.gamma_x = gamma_x
        self.gamma_y = gamma_y
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class PLS(MultiLabelProjection):
    __doc__ = ("Partial least squares directions: eigenvectors of Xc^T Yc Yc^T Xc\n"
               "    (mope eq. 15), by the thin SVD of Xc^T Yc.\n\n"
               "    Parameters\n    ----------" + _COMMON_DOC)
    _method = "pls"

    def __init__(self, n_components=_D, *, solver="auto", max_dense_features=20_000,
                 max_components=500, split=None, cache=True, client=None, random_state=0,
                 progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class OPLS(MultiLabelProjection):
    __doc__ = ("Orthonormalised PLS (mope §2.2.2): Xc^T Yc (Yc^T Yc)^-1 Yc^T Xc against\n"
               "    Xc^T Xc + gamma_x I.\n\n"
               "    Parameters\n    ----------\n    gamma_x : float, default 0.0"
               + _COMMON_DOC)
    _method = "opls"

    def __init__(self, n_components=_D, *, gamma_x=0.0, solver="auto",
                 max_dense_features=20_000, max_components=500, split=None, cache=True,
                 client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.gamma_x = gamma_x
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class MLSI(MultiLabelProjection):
    __doc__ = ("Multi-label latent semantic indexing (mvmd eq. 39).\n\n"
               "    Parameters\n    ----------\n    beta : float, default 0.5\n"
               "    gamma_x, gamma_xy : float, default 0.1" + _COMMON_DOC)
    _method = "mlsi"

    def __init__(self, n_components=_D, *, beta=0.5, gamma_x=0.1, gamma_xy=0.1, solver="auto",
                 max_dense_features=20_000, max_components=500, split=None, cache=True,
                 client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.beta = beta
        self.gamma_x = gamma_x
        self.gamma_xy = gamma_xy
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class MLDA(MultiLabelProjection):
    __doc__ = ("Multi-label LDA with label-correlation weights (mvmd eq. 41-44); X and Y\n"
               "    uncentred.\n\n"
               "    Parameters\n    ----------\n    gamma_xy : float, default 0.1"
               + _COMMON_DOC)
    _method = "mlda"

    def __init__(self, n_components=_D, *, gamma_xy=0.1, solver="auto",
                 max_dense_features=20_000, max_components=500, split=None, cache=True,
                 client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.gamma_xy = gamma_xy
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class DMLDA(MultiLabelProjection):
    __doc__ = ("Direct multi-label LDA (mvmd eq. 45-47); X and Y uncentred.\n\n"
               "    Parameters\n    ----------\n    gamma_xy : float, default 0.1"
               + _COMMON_DOC)
    _method = "dmlda"

    def __init__(self, n_components=_D, *, gamma_xy=0.1, solver="auto",
                 max_dense_features=20_000, max_components=500, split=None, cache=True,
                 client=None, random_state=0, progress=False,
                 route=DEFAULT_ROUTE, n_prototypes=None, prototype_selection="all",
                 similarity="linear", tau=None, n_neighbors=7):
        self.gamma_xy = gamma_xy
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)


class KernelMDDM(MultiLabelProjection):
    __doc__ = ("Kernel MDDM on relation features (mddm sections 3.1.2 and 3.2.2).\n\n"
               "    variant='p': Q H L H Q c = lambda Q c (mddm eq. 13); variant='f':\n"
               "    Q H L H Q c = lambda (mu Q Q + (1 - mu) Q) c (eq. 20), Q the kernel of the\n"
               "    prototypes; see dmlfe.methods.kernel_mddm for the reading with p < n\n"
               "    prototypes. Always the relation route; the similarity must give a positive\n"
               "    semi-definite kernel (linear, cosine, gaussian).\n\n"
               "    Parameters\n    ----------\n"
               "    variant : {'p', 'f'}\n"
               "    label_kernel : 'linear', 'rbf' or ndarray (q x q)\n"
               "    rbf_gamma : float, optional\n"
               "    mu : float, default 0.5 (variant 'f')" + _COMMON_DOC)

    def __init__(self, n_components=_D, *, variant="p", label_kernel="linear", rbf_gamma=None,
                 mu=0.5, solver="auto", max_dense_features=20_000, max_components=500,
                 split=None, cache=True, client=None, random_state=0, progress=False,
                 route="relation", n_prototypes=None, prototype_selection="all",
                 similarity="gaussian", tau=None, n_neighbors=7):
        self.variant = variant
        self.label_kernel = label_kernel
        self.rbf_gamma = rbf_gamma
        self.mu = mu
        _set_common(self, n_components, solver, max_dense_features, max_components, split,
                    cache, client, random_state, progress)
        _set_relation(self, route, n_prototypes, prototype_selection, similarity, tau,
                      n_neighbors)

    @property
    def _method(self) -> str:  # type: ignore[override]
        if self.variant not in ("p", "f"):
            raise ValueError(f"KernelMDDM variant must be 'p' or 'f', got {self.variant!r}")
        return f"kmddm_{self.variant}"

    def _validate(self) -> None:
        from dmlfe.relation.kernels import PSD_SIMILARITIES, canonical_similarity

        super()._validate()
        kind = canonical_similarity(self.similarity)
        if kind not in PSD_SIMILARITIES:
            raise ValueError(
                f"KernelMDDM needs a positive semi-definite kernel for its constraint (mddm eq. "
                f"13/20), one of {PSD_SIMILARITIES}; similarity={self.similarity!r} is not. "
                "Use MDDM(route='relation', similarity=...) to run MDDM on those relation "
                "features instead")
        if self.solver in ("randomized", "lanczos"):
            raise ValueError(f"KernelMDDM solves a generalised p x p problem densely; "
                             f"solver={self.solver!r} is not available")


ESTIMATORS: dict[str, type[MultiLabelProjection]] = {
    "pca": PCA, "lsi": LSI, "mddm_p": MDDM, "mddm_f": MDDM, "mvmd": MVMD, "cca": CCA,
    "pls": PLS, "opls": OPLS, "mlsi": MLSI, "mlda": MLDA, "dmlda": DMLDA,
    "kmddm_p": KernelMDDM, "kmddm_f": KernelMDDM,
}


def make_estimator(method: str, **params: Any) -> MultiLabelProjection:
    """Estimator for a method name (``mddm_p``/``mddm_f`` give MDDM with that variant,
    ``kmddm_p``/``kmddm_f`` KernelMDDM)."""
    key = method.lower().replace("-", "_")
    key = {"mddm": "mddm_p", "kmddm": "kmddm_p"}.get(key, key)
    if key not in ESTIMATORS:
        raise ValueError(f"unknown method {method!r}; choose one of "
                         f"{', '.join(sorted(set(ESTIMATORS) | {'mddm', 'kmddm'}))}")
    cls = ESTIMATORS[key]
    if cls in (MDDM, KernelMDDM):
        params.setdefault("variant", key[-1])
    return cls(**params)
