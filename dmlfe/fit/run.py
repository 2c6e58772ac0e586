"""Carry out a :class:`~dmlfe.fit.plan.FitPlan`: statistics -> template -> solve.

Hop by hop: a store read to the driver when a small cluster would add only transfers
(:func:`dmlfe.fit.data.gather_reason`: the dual route, and the relation route with a
dense p x p solve) -> the relation map (relation route only: prototypes chosen and
gathered, a store view still on the cluster re-blocked so that dense relation blocks
stay small) -> the statistics, from
the cache beside the store or from one distributed pass -> the method's trace template
(its builder, :mod:`dmlfe.methods`) -> the dense, thin-SVD or matrix-free eigensolver
(:mod:`dmlfe.solvers`) -> a :class:`FittedProjection`, whose fields are the estimator's
fitted attributes (each with a trailing underscore).
"""

from __future__ import annotations

import inspect
import logging
import time
import warnings
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.compute import computing_client, driver_threads, is_dask
from dmlfe.fit.data import FitData, gather_reason
from dmlfe.fit.graph import graph_fit
from dmlfe.fit.params import MATRIX_FREE
from dmlfe.fit.plan import LABEL_OPERATOR, FitPlan
from dmlfe.labels import dense_labels, sparse_labels
from dmlfe.linalg.krylov import block_width
from dmlfe.methods.mlda import RowNormalisedLabels, WeightedLabels, label_correlation
from dmlfe.methods.template import TraceTemplate, symmetrize
from dmlfe.relation import RelationMap, build_relation_map, relation_block_rows, ship
from dmlfe.shards import ShardLostError, Slots, TiledMatrix, tile_blocks
from dmlfe.solvers.dense import solve_dense
from dmlfe.solvers.dimension import threshold_cap
from dmlfe.solvers.dual import label_only, solve_dual
from dmlfe.solvers.label_operator import solve_label_operator
from dmlfe.solvers.matrix_free import finish_leading, solve_matrix_free
from dmlfe.solvers.nspace import MEMORY_FRACTION, capacity, nspace_bytes
from dmlfe.solvers.result import EigenResult, expand_rows, flip_signs_inplace
from dmlfe.stats import sufficient
from dmlfe.stats.cache import (
    earlier_start,
    gram_strips,
    load_or_compute_gram,
    load_or_compute_stats,
    save_start,
    saved_start,
)
from dmlfe.stats.gram import GramStrips, gram_matrix, transpose_product
from dmlfe.stats.pass_ import compute_stats
from dmlfe.stats.sufficient import SufficientStats
from dmlfe.stats.tiled import tiled_stats

log = logging.getLogger(__name__)


@dataclass
class FittedProjection:
    """The outcome of a fit; each field is the estimator attribute ``<field>_``, except
    ``components`` and ``component_columns``, which the estimator keeps as they are and
    shows as ``components_`` (d x D; built on first use when the components are kept on
    the used columns only).

    See :class:`dmlfe.estimators.MultiLabelProjection` for their meaning.
    """

    components: np.ndarray
    component_columns: np.ndarray | None
    eigenvalues: np.ndarray
    n_components: int
    mean: np.ndarray
    centred: bool
    n_features_in: int
    n_samples: int
    n_genuine: int
    solver: str
    regularization: float
    converged: bool
    max_residual: float | None
    n_passes: int
    stats_from_cache: bool
    method_params: dict[str, Any]
    route: str
    route_reason: str
    relation_map: RelationMap | None
    relation: dict[str, Any] | None
    solver_info: dict[str, Any] | None
    prototype_indices: np.ndarray | None
    training_store: dict[str, Any] | None
    #: tr(A), the sum of all eigenvalues, when only the leading ones were computed (the
    #: denominator of a threshold then); None when ``eigenvalues`` is the whole spectrum
    eigenvalue_total: float | None = None
    #: documents the fit read from the data, each counted once: all of them, except
    #: where the statistics alone make the fit and came from the cache (0) or from the
    #: cache of an earlier version of an appended store (the appended documents); on the
    #: dual route every document, as the map back X^T alpha reads every row even when
    #: the Gram comes from the cache
    rows_read: int | None = None
    #: the randomized matrix-free solver's last Ritz vectors (D x (k + oversampling)),
    #: when the caller asked to keep them (``keep_start``): the estimator's warm start
    start_block: np.ndarray | None = None

    def attributes(self) -> dict[str, Any]:
        """``{name_: value}`` for every field (shallow: arrays and maps are not copied);
        the components as ``_components`` and ``_component_columns`` (see
        :meth:`dmlfe.estimators.MultiLabelProjection.components_`)."""
        # dataclasses.asdict would deep-copy every array (0.8 GB of components at 2^20)
        kept = ("components", "component_columns", "start_block")
        out = {f"{f.name}_": getattr(self, f.name) for f in fields(self) if f.name not in kept}
        return {**out, **{f"_{name}": getattr(self, name) for name in kept}}


#: The n-space route's details kept as ``solver_info_`` (JSON: the model keeps them).
SOLVER_INFO = ("route", "block", "krylov_passes", "restarts", "basis", "max_basis", "tol",
               "n_iter", "slots", "slot_seconds", "second_rounds", "driver", "rounds")


def solver_info(res: EigenResult) -> dict[str, Any] | None:
    """What the n-space route's solve did (``solver_info_``); None for the other solvers."""
    info = res.info or {}
    if info.get("route") != "n-space":
        return None
    return {key: info[key] for key in SOLVER_INFO if key in info}


def label_gram(Y: Any, client: Any = None, sparse: bool = False) -> Any:
    """Y^T Y of the 0/1 labels (a pass over the small label matrix only); CSR when
    ``sparse`` (a sparse label side: O(the co-occurring label pairs))."""
    if is_dask(Y) or sp.issparse(Y):  # a store's Y has CSR blocks
        Ys = sparse_labels(Y, client).astype(np.float64)
        gram = sp.csr_matrix(Ys.T @ Ys)
        return gram if sparse else np.asarray(gram.toarray(), dtype=np.float64)
    Yd = np.asarray(Y, dtype=np.float64)
    return sp.csr_matrix(Yd.T @ Yd) if sparse else Yd.T @ Yd


def _label_fn(labels: str, Y: Any, client: Any, sparse: bool = False
              ) -> WeightedLabels | RowNormalisedLabels | None:
    if labels == "mlda_weighted":
        C = label_correlation(label_gram(Y, client, sparse=sparse))
        return RowNormalisedLabels(C) if sparse else WeightedLabels(C)
    return None


def statistics(plan: FitPlan, data: FitData, rmap: RelationMap | None, *, client: Any = None,
               progress: bool = False, cache: bool = True,
               tiled: TiledMatrix | None = None) -> SufficientStats:
    """The sufficient statistics the plan asks for: cached beside the store, or one pass
    (or, when X is in ``tiled``, from the tiles without a pass)."""
    # without the store's labels (an unsupervised fit, many labels): its rows with no
    # label column stand in for the store's, under a cache key of their own
    own = dict(labels="none", read=(data.X, data.Y)) if data.labels_ignored else {}
    if tiled is not None:
        if data.store is not None and cache:
            return load_or_compute_stats(data.store, compute=lambda: tiled_stats(tiled),
                                         **own)
        return tiled_stats(tiled)
    label_fn = _label_fn(plan.stats.labels, data.Y, client, sparse=plan.stats.sparse_labels)
    kw: dict[str, Any] = dict(need_xtx=plan.stats.need_xtx, need_xtwx=plan.stats.need_xtwx,
                              max_dense_features=plan.limits.max_dense_features, client=client,
                              label_fn=label_fn, progress=progress)
    if rmap is not None:
        kw["block_fn"] = ship(rmap, data.X)
    if plan.stats.sparse_labels:
        # the statistics cache keeps dense label sums only: a sparse label side is
        # reduced afresh (on the driver's copy when X was read there)
        stats = compute_stats(data.X, data.Y, need_xty=plan.stats.need_xty,
                              sparse_labels=True, **kw)
        if isinstance(label_fn, RowNormalisedLabels):
            stats.label_correlation = label_fn.C  # the statistics are of R, not Y'
        return stats
    if data.store is not None and cache:
        # X read to the driver (the dual route's gather): reduce that copy, not the store
        read = None if is_dask(data.X) else (data.X, data.Y)
        # the whole set, X^T Y included: the cache serves the store's later fits too
        own = own or dict(read=read,
                          labels=None if label_fn is None else label_fn.describe())
        return load_or_compute_stats(
            data.store, route=None if rmap is None else rmap.describe(), **own, **kw)
    return compute_stats(data.X, data.Y, need_xty=plan.stats.need_xty, **kw)


def build_template(plan: FitPlan, stats: SufficientStats,
                   rmap: RelationMap | None, kernel: np.ndarray | None = None,
                   own: bool = False) -> TraceTemplate:
    """The method's (A, B) from the statistics, in the form the plan's solver uses;
    ``kernel``: the prototypes' kernel matrix when the caller has it (else computed).
    ``own``: the statistics are this fit's alone (read or reduced for it): a builder that
    takes ``overwrite`` (PCA) builds A in their X^T X, with no D x D copy, on the dense
    solvers' path (the matrix-free solvers read the statistics later)."""
    spec, kw = plan.spec, dict(plan.params)
    if spec.needs_kernel:
        kw["kernel"] = rmap.prototype_kernel() if kernel is None else kernel
    if spec.needs_weighted_xtx:
        kw["xtwx"] = stats.xtwx
    if spec.operator_form:
        kw["dense"] = plan.dense_template
    if own and plan.solver not in MATRIX_FREE and \
            "overwrite" in inspect.signature(spec.build).parameters:
        kw["overwrite"] = True
    return spec.build(stats, **kw)


def solve_dual_route(plan: FitPlan, data: FitData, stats: SufficientStats, *,
                     client: Any = None, progress: bool = False,
                     gram: np.ndarray | GramStrips | None = None, gram_passes: int = 0,
                     start: np.ndarray | None = None
                     ) -> tuple[EigenResult, dict[str, Any]]:
    """The dual route: Gram pass -> n-space solve on the driver -> map-back pass.

    ``gram``: X X^T when the caller has it (an incremental fit extends it block by
    block; the Gram cache beside a store): no Gram pass then, but ``gram_passes``, the
    passes the caller made for it, are counted. The solve works in it, so it is
    overwritten (or, as the cache's strips, applied without a copy when the solve
    starts warm). The map back reads every row of X whatever the Gram's origin.
    ``start``: the Ritz block (``ritz`` of the result) of a fit on the first rows of X,
    the warm start of the row-space solve (:func:`dmlfe.solvers.dual.solve_dual`), made
    zero on the rows after them.
    Returns the solution and the method's parameters as its builder recorded them.
    """
    spec = plan.spec
    Y = dense_labels(data.Y, client)
    label_side = None if spec.needs_weighted_xtx else build_template(plan, label_only(stats),
                                                                      None)
    label_fn = _label_fn(spec.labels, Y, None)
    built: list[TraceTemplate] = [] if label_side is None else [label_side]

    def build_reduced(Z: np.ndarray, order: np.ndarray) -> TraceTemplate:
        zstats = compute_stats(Z, Y[order], need_xtx=True, need_xtwx=spec.needs_weighted_xtx,
                               max_dense_features=Z.shape[1], label_fn=label_fn)
        built.append(build_template(plan, zstats, None))
        return built[-1]

    G = gram_matrix(data.X, client=client, progress=progress) if gram is None else gram
    # P = X^T alpha is zero on the columns no document uses: only the others are formed
    columns = stats.used_columns()
    if isinstance(G, GramStrips) and not is_dask(data.X):
        G = G.with_rows(data.X, columns)  # held by the driver: cheaper products than G's
    n = int(G.shape[0])
    used = stats.n_features if columns is None else int(columns.size)
    # a threshold's pairs: alpha (n x k) and the components (used x k) on the driver
    cap, note = threshold_cap(n, plan.limits.max_components,
                              plan.limits.threshold_memory // (8 * (used + n)),
                              plan.limits.threshold_memory)
    weighted = None
    if label_side is None and spec.nspace is not None:
        weighted = spec.nspace(Y if label_fn is None else label_fn(Y), **plan.params)
        built.append(TraceTemplate(method=spec.name, params=weighted.params,
                                   centred=spec.centred, n_features=stats.n_features))
    sol = solve_dual(label_side, G, Y, stats.n_features, plan.n_components,
                     build_reduced=build_reduced, max_components=cap, cap_note=note,
                     random_state=plan.random_state, weighted=weighted, start=start)
    del G
    comps = transpose_product(data.X, sol.alpha, columns=columns, client=client,
                              progress=progress)
    res = EigenResult(components=flip_signs_inplace(comps), eigenvalues=sol.eigenvalues,
                      n_components=sol.n_components, n_genuine=sol.n_genuine,
                      solver=sol.solver, regularization=sol.regularization,
                      n_passes=1 + (1 if gram is None else gram_passes),
                      converged=sol.converged, trace=sol.trace, columns=columns,
                      ritz=sol.ritz, info={"warm_start": sol.warm_start})
    return res, dict(built[0].params)


def solve(plan: FitPlan, template: TraceTemplate, data: FitData, stats: SufficientStats, *,
          client: Any = None, rmap: RelationMap | None = None,
          tiled: TiledMatrix | None = None, v0: np.ndarray | None = None,
          keep_ritz: bool = False, v0_image: np.ndarray | None = None,
          added: Any = None) -> EigenResult:
    """The plan's eigensolver on the template; d chosen by the one dimension rule.

    On the relation route the matrix-free passes map every row block to its relation
    features first (``rmap``), so R is never held whole. ``v0``, ``keep_ritz``,
    ``v0_image`` and ``added``: the randomized matrix-free solver's warm start, its last
    Ritz vectors, and the start's image without a pass over X
    (:func:`~dmlfe.solvers.matrix_free.solve_matrix_free`).
    """
    if plan.solver == LABEL_OPERATOR:
        opts = {k: plan.solver_options[k] for k in ("tol", "max_passes")
                if k in plan.solver_options}
        res = solve_label_operator(template, data.X, data.Y, stats, plan.n_components,
                                   max_components=plan.limits.max_components,
                                   threshold_memory=plan.limits.threshold_memory,
                                   random_state=plan.random_state, **opts)
        return finish_leading(template, res, plan.n_components, stats.n_features,
                              compact=True, solver_options=opts)
    if plan.solver in MATRIX_FREE:
        options = plan.solver_options if plan.solver == "randomized" else {}
        return solve_matrix_free(template, data.X, plan.n_components,
                                 max_components=plan.limits.max_components,
                                 threshold_memory=plan.limits.threshold_memory, solver=plan.solver,
                                 client=client, random_state=plan.random_state, stats=stats,
                                 block_fn=None if rmap is None else ship(rmap, data.X),
                                 compact=True, Y=data.Y, tiled=tiled, v0=v0,
                                 keep_ritz=keep_ritz, v0_image=v0_image, added=added,
                                 **options)
    return solve_dense(template, plan.n_components, max_components=plan.limits.max_components,
                       random_state=plan.random_state, compact=True)


def statistics_passes(stats: SufficientStats) -> int:
    """Passes over the data the statistics step made: 1 when it read every row, 0 when
    they came from the cache or extended an earlier version's cached statistics by the
    appended rows only -- reading those is not a pass over X (``rows_read_`` counts
    them), as a :meth:`~dmlfe.estimators.MultiLabelProjection.partial_fit` block is not."""
    if stats.from_cache:
        return 0
    return 0 if stats.rows_read is not None and stats.rows_read < stats.n else 1


def run_fit(plan: FitPlan, data: FitData, *, client: Any = None, progress: bool = False,
            cache: bool = True, components_dtype: str = "float64",
            stats: SufficientStats | None = None,
            gram: np.ndarray | None = None,
            start: tuple[np.ndarray, str] | None = None,
            keep_start: bool = False) -> FittedProjection:
    """Statistics -> template -> solve for ``plan`` on ``data``.

    Everything is computed in float64; ``components_dtype`` ("float64" or "float32") is
    only the dtype the components are stored in.

    ``stats`` and ``gram``: the statistics the plan asks for and (dual route) the Gram
    X X^T, when the caller accumulated them (:mod:`dmlfe.fit.incremental`): no
    statistics pass and no Gram pass then. With ``stats`` on the feature route's dense
    or thin-SVD solve ``data`` is not read, and may hold no rows. Both are the caller's
    to hand over: the solve may overwrite them.

    ``start``: (a D x c block, a line saying what it is), the warm start of a randomized
    matrix-free solve on X (an estimator's ``warm_start``: its earlier components). On a
    store with ``cache``, such a solve saves its last Ritz vectors beside the store
    (:func:`dmlfe.stats.cache.save_start`) and their scatter image X^T X block, and
    without ``start`` a fit on a grown version of the store starts from those of the
    version before the append (:func:`dmlfe.stats.cache.saved_start`): the image plus
    the appended rows' part is the start's image, so its first Rayleigh-Ritz step makes
    no pass over X. Either way only the start changes:
    the solver stops on the same residual rule, and the passes still read every row.
    ``solver_info_["warm_start"]`` says where a warm start came from. ``keep_start``:
    such a solve's last Ritz vectors are also returned (``start_block``, D x (k +
    oversampling)), a better start than the d components.
    """
    rmap, proto_idx, relation = None, None, None
    n_features_in = int(data.X.shape[1])
    if not plan.spec.supervised and data.shape.n_labels > sufficient.MAX_DENSE_LABELS:
        data = data.without_labels()
    gather_note = None
    if plan.route == "dual" or (plan.relation is not None and plan.solver not in MATRIX_FREE):
        # not with a matrix-free solve on R: in memory, it holds the n x p features whole
        gather_note = gather_reason(data, client, plan.limits.max_gather_bytes,
                                    None if plan.relation is None else plan.relation.n_prototypes)
        if gather_note is not None:
            data = data.gathered(progress)
    elif plan.solver == LABEL_OPERATOR and (is_dask(data.X) or data.store is not None):
        data = data.gathered(progress, sparse_labels=True)
        gather_note = ("X and Y were read to the driver in one pass: the label-operator "
                       "route applies them there")
    if plan.relation is not None:
        r = plan.relation
        rmap, proto_idx = build_relation_map(
            data.X, data.Y, n_prototypes=r.n_prototypes, selection=r.selection,
            similarity_name=r.similarity, tau=r.tau, n_neighbors=r.n_neighbors,
            random_state=r.random_state, client=client)
        log.info("relation route: %s", r.reason)
        if data.store is not None and isinstance(r.selection, str) and cache and \
                len(data.store.history()) > 1:
            log.info("relation route on %s, a store grown by appends: prototypes chosen "
                     "(%s) from its %d training documents now, so statistics saved with an "
                     "earlier version's prototypes are not extended; pass "
                     "prototype_selection=<an earlier fit's prototype_indices_> to keep "
                     "them", data.store.path, r.selection, int(data.X.shape[0]))
        if data.store is not None and is_dask(data.X):
            data = data.reblocked(relation_block_rows(rmap.n_prototypes, data.store.chunk_rows))
        relation = {**rmap.params(), "prototype_selection":
                    r.selection if isinstance(r.selection, str) else "rows",
                    "random_state": r.random_state}
    for attempt in range(1 + SHARD_RETRIES):
        tiled = None
        try:
            tiled = held_tiles(plan, data, rmap, client)
            return _fit(plan, data, rmap, proto_idx, relation, n_features_in, gather_note,
                        tiled, client=client, progress=progress, cache=cache,
                        components_dtype=components_dtype, stats=stats, gram=gram,
                        start=start, keep_start=keep_start)
        except ShardLostError as exc:
            if attempt == SHARD_RETRIES:
                raise
            # X is read again onto the workers there are now; the fit is deterministic,
            # so it ends as it would have (up to round-off if their number changed)
            warnings.warn(f"{exc}; the fit starts again from the store on the workers "
                          "the cluster has now", RuntimeWarning, stacklevel=2)
            recover(computing_client(client), exc.address)
        finally:
            if tiled is not None:
                tiled.release()
                tiled.slots.close()
    raise AssertionError("unreachable")  # pragma: no cover


#: Times a fit on the n-space route starts again after a worker holding its tiles left.
SHARD_RETRIES = 1
#: Seconds a fit waits for the scheduler to drop a lost worker and for a worker to be
#: there before it starts again.
RECOVER_SECONDS = 30.0


def recover(client: Any, address: str | None) -> None:
    """Wait until the scheduler no longer lists the lost worker and has at least one."""
    if client is None:
        return
    deadline = time.monotonic() + RECOVER_SECONDS
    while address is not None and address in client.scheduler_info()["workers"] and \
            time.monotonic() < deadline:
        time.sleep(0.1)
    client.wait_for_workers(1, timeout=max(1.0, deadline - time.monotonic()))


def held_tiles(plan: FitPlan, data: FitData, rmap: RelationMap | None,
               client: Any) -> TiledMatrix | None:
    """X and Y read once into tiles on the workers (:mod:`dmlfe.shards.tiles`) when the
    plan solves on the n-space route (:mod:`dmlfe.solvers.nspace`): the statistics then
    come from the tiles and every pass of the solve reads them in memory; None otherwise
    (a statistics pass, and the solver's passes read X where it is)."""
    if plan.solver != "randomized" or rmap is not None or plan.spec.needs_graph \
            or plan.route != "feature":
        return None
    n, D = (int(v) for v in data.X.shape)
    lim = plan.limits
    k = plan.n_components if isinstance(plan.n_components, int) else \
        threshold_cap(n - 1, lim.max_components, lim.threshold_memory // (8 * D))[0]
    if n >= D or k >= n:
        return None
    slots = Slots(computing_client(client), n_local=driver_threads())
    nnz = data.store.nnz if data.store is not None else \
        (int(data.X.nnz) if hasattr(data.X, "nnz") else n * D)
    need = nspace_bytes(nnz, n, int(k), block_width(int(k), slots.n))
    if need > MEMORY_FRACTION * capacity(slots):
        slots.close()
        return None
    return tile_blocks(data.X, data.Y, slots)


def _fit(plan: FitPlan, data: FitData, rmap: RelationMap | None, proto_idx: Any,
         relation: Any, n_features_in: int, gather_note: str | None,
         tiled: TiledMatrix | None, *, client: Any, progress: bool, cache: bool,
         components_dtype: str, stats: SufficientStats | None = None,
         gram: np.ndarray | None = None,
         start: tuple[np.ndarray, str] | None = None,
         keep_start: bool = False) -> FittedProjection:
    stats_rows = None  # None: the fit reads every document
    warm_note = None  # where a warm-started solve started from
    block = None  # its last Ritz vectors, when kept
    if plan.spec.needs_graph:  # graph methods: labels + K-NN graph -> one products pass
        stats, template, data_passes = graph_fit(
            plan.spec, plan.params, data.X, data.Y, data.store, rmap,
            n_neighbors=int(plan.graph_neighbors), knn_search=plan.graph_search,
            random_state=plan.random_state, client=client, progress=progress, cache=cache)
    elif plan.spec.needs_kernel and rmap is not None and data.store is None and \
            not is_dask(data.X):
        # in-memory arrays: R once, whose prototype rows are the kernel K = sim(P, P)
        R = rmap.transform(data.X)
        stats = statistics(plan, FitData(R, data.Y), None, client=client, progress=progress,
                           cache=cache)
        data_passes = 1
        template = build_template(plan, stats, rmap, kernel=symmetrize(R[proto_idx]))
        del R
    elif stats is not None:  # accumulated by the caller
        data_passes = 0
        template = None if plan.route == "dual" else build_template(plan, stats, rmap,
                                                                    own=True)
    else:
        stats = statistics(plan, data, rmap, client=client, progress=progress, cache=cache,
                           tiled=tiled)
        data_passes = 1 if tiled is not None else statistics_passes(stats)
        if tiled is None and stats.rows_read is not None:
            stats_rows = stats.rows_read
        # the dual route builds its templates in the row space (solve_dual_route)
        template = None if plan.route == "dual" else build_template(plan, stats, rmap,
                                                                    own=True)
    if template is None:
        gram_passes = 0
        saving = cache and data.store is not None
        key = {"method": plan.spec.name, "params": dict(plan.params), "route": "dual"}
        # the row-space solve of the version before an append starts this one
        warm = earlier_start(data.store, key) if saving else None
        if gram is None and warm is not None:
            # warm, the solve applies the saved strips and needs no n x n copy of them
            strips = gram_strips(data.store, data.X, client=client, progress=progress)
            if strips is not None:
                gram, gram_passes = strips
        if gram is None and saving:
            # saved beside the statistics; after an append only the new rows' products
            gram, gram_passes = load_or_compute_gram(data.store, data.X, client=client,
                                                     progress=progress)
        res, params = solve_dual_route(plan, data, stats, client=client, progress=progress,
                                       gram=gram, gram_passes=gram_passes,
                                       start=None if warm is None else warm[0])
        if res.info.get("warm_start"):
            warm_note = warm[1]
            log.info("row-space solve of %s started from %s", plan.spec.name, warm_note)
        if saving and res.ritz is not None:
            save_start(data.store, key, res.ritz)
        res.ritz = None
        centred = plan.spec.centred
    else:
        warm = plan.solver == "randomized" and rmap is None
        saving = warm and cache and data.store is not None
        key = {"method": template.method, "params": template.params, "route": plan.route,
               "centred": template.centred, "n_features": int(template.n_features)}
        if start is not None and np.shape(start[0])[0] != template.n_features:
            start = None  # components of other features: no start for these
        image = added = None  # X^T X start of the earlier rows, and the rows since
        if warm and start is None and saving:
            saved = saved_start(data.store, key)
            if saved is not None:
                start, image = (saved.block, saved.note), saved.image
                added = None if saved.added is None else saved.added.X
        res = solve(plan, template, data, stats, client=client, rmap=rmap, tiled=tiled,
                    v0=start[0] if warm and start is not None else None,
                    keep_ritz=warm and (saving or keep_start), v0_image=image, added=added)
        if (res.info or {}).get("warm_start"):
            warm_note = start[1]
            if (res.info or {}).get("start_image"):
                warm_note += (f", with their image under those rows plus that of the "
                              f"{int(added.shape[0])} appended: no pass over X for it")
            log.info("matrix-free solve of %s started from %s", template.method, warm_note)
        if res.ritz is not None:
            block = res.ritz if res.columns is None else \
                expand_rows(res.ritz, res.columns, int(template.n_features))
            image = res.ritz_image
            if image is not None and res.columns is not None:
                image = expand_rows(image, res.columns, int(template.n_features))
            res.ritz = res.ritz_image = None
            if saving:
                save_start(data.store, key, block, image=image)
            if not keep_start:
                block = None
        if tiled is not None:  # the workers need not hold X while the driver finishes
            tiled.release()
        centred, params = template.centred, dict(template.params)
    # (D, d) in C order, so components_ is its transpose without a copy (0.8 GB at
    # 2^20 and d = 100) and projecting, X components_^T, reads it as written; a float32
    # request casts that C-ordered array (after the sign rule, so the float32 components
    # are the float64 ones rounded); the float64 one goes with res when this returns
    components = np.ascontiguousarray(res.components, dtype=np.dtype(components_dtype)).T
    return FittedProjection(
        components=components, component_columns=res.columns,
        eigenvalues=np.asarray(res.eigenvalues, dtype=np.float64),
        n_components=int(res.n_components), centred=bool(centred),
        mean=stats.mean_x if centred else np.zeros(stats.n_features),
        n_features_in=n_features_in, n_samples=int(stats.n), n_genuine=int(res.n_genuine),
        solver=res.solver, regularization=float(res.regularization),
        converged=bool(res.converged), max_residual=res.max_own_residual(),
        n_passes=data_passes + int(res.n_passes) + (gather_note is not None),
        stats_from_cache=bool(stats.from_cache), method_params=params,
        route=plan.route, relation_map=rmap,
        route_reason="; ".join([plan.route_reason, *([] if gather_note is None
                                                      else [gather_note]),
                                *([] if template is None else template.notes)]),
        relation=relation, prototype_indices=proto_idx,
        solver_info=solver_info(res) if warm_note is None
        else {**(solver_info(res) or {}), "warm_start": warm_note},
        training_store=None if data.store is None else data.store.provenance(),
        eigenvalue_total=None if res.trace is None else float(res.trace),
        rows_read=stats_rows if stats_rows is not None and res.n_passes == 0
        and gather_note is None else int(stats.n), start_block=block)
