"""The fit of a graph method (``MethodSpec.needs_graph``): graph -> (A, B) -> one pass.

Called by :func:`dmlfe.fit.run.run_fit` in place of the statistics pass and the
builder: the labels come to the driver (n x c, small), the builder turns them and
the K-NN graph (searched lazily, cached beside a store in ``<store>.graph/``) into
the n x n operators A and B, and :func:`dmlfe.graph.products.graph_products` reduces
them to A_p = X^T A X and B_p = X^T B X (R^T A R on the relation route) in one pass,
which also yields the first-order statistics the fitted model records.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dmlfe.compute import is_dask
from dmlfe.graph.knn import knn_graph, load_or_compute_graph
from dmlfe.graph.methods import GraphSource
from dmlfe.graph.products import graph_products
from dmlfe.labels import dense_labels
from dmlfe.methods.template import TraceTemplate, symmetrize
from dmlfe.relation import RelationMap, ship
from dmlfe.solvers.leading import FULL_SPECTRUM_LIMIT
from dmlfe.stats.sufficient import SufficientStats
from dmlfe.store import Store


def _graph_source(X: Any, store: Store | None, n_neighbors: int, method: str,
                  random_state: int, client: Any, progress: bool, cache: bool) -> GraphSource:
    if store is not None:
        return GraphSource(lambda: load_or_compute_graph(
            store, n_neighbors, client=client, progress=progress, cache=cache, method=method,
            random_state=random_state))
    return GraphSource(lambda: knn_graph(X, n_neighbors, client=client, progress=progress,
                                         method=method, random_state=random_state))


def _doc_splits(store: Store | None) -> np.ndarray | None:
    """Each training document's split (None without a store or a split column)."""
    if store is None or store.split is None:
        return None
    return store.obs_column("split")


def graph_fit(spec: Any, params: dict[str, Any], X: Any, Y: Any, store: Store | None,
              rmap: RelationMap | None, *, n_neighbors: int, knn_search: str = "auto",
              random_state: int = 0, client: Any = None, progress: bool = False,
              cache: bool = True
              ) -> tuple[SufficientStats, TraceTemplate, int]:
    """Statistics, trace template and passes over X of a graph method (module docstring).

    ``spec`` is the method's :class:`~dmlfe.methods.registry.MethodSpec` and ``params``
    its parameters; X, Y and ``store`` the training data (``store`` None for arrays).
    The passes are the products pass plus the K-NN search's when the graph was searched
    (not read from the cache, and not left unused by a method that needs none; see
    :attr:`dmlfe.graph.knn.KNNGraph.n_passes`).
    """
    Y = dense_labels(Y, client)
    source = _graph_source(X, store, n_neighbors, knn_search, random_state, client, progress,
                           cache)
    inputs = {}
    if params.get("unlabelled_split") is not None:  # SSMOPE: unlabelled by split
        inputs["doc_splits"] = _doc_splits(store)
    ops = spec.build(Y, source, **inputs, **params)
    # in memory, a relation route above the full-spectrum size keeps R^T A R as an
    # operator: R is held anyway, and the leading pairs need only its products
    implicit = frozenset({"A"}) if rmap is not None and not is_dask(X) and \
        rmap.n_prototypes > FULL_SPECTRUM_LIMIT else frozenset()
    out = graph_products(X, {"A": ops["A"], "B": ops["B"]},
                         block_fn=None if rmap is None else ship(rmap, X),
                         client=client, progress=progress, extra_factors={"y": Y},
                         implicit=implicit)
    D = int(out["sum_x"].shape[0])
    B = None
    if ops["B"] is not None:
        B = symmetrize(out["B"]) + float(ops["reg"]) * np.eye(D)
    template = TraceTemplate(method=spec.name, params=dict(params), centred=False,
                             n_features=D,
                             A=out["A"] if "A" in implicit else symmetrize(out["A"]), B=B)
    stats = SufficientStats(n=out["n"], sum_x=out["sum_x"], sum_y=Y.sum(axis=0),
                            xty=out["xt:y"], yty=Y.T @ Y)
    searched = 0 if source.searched is None else source.searched.n_passes
    return stats, template, 1 + searched
