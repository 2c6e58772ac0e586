"""The parameters every dmlfe estimator has, declared once (see :mod:`dmlfe.params`).

Method-specific parameters are declared with their method in
:mod:`dmlfe.methods.registry`; an estimator's signature is ``n_components``, then its
methods' parameters, then these (keyword-only).
"""

from __future__ import annotations

from typing import Any

from dmlfe.graph.knn import KNN_METHODS
from dmlfe.params import Param, anything, boolean, interval, one_of, optional, split_names
from dmlfe.relation.kernels import DEFAULT_NEIGHBORS
from dmlfe.relation.prototypes import (
    AUTO_SELECTION,
    MAX_AUTO_PROTOTYPES,
    SELECTION_CHOICES,
    SELECTIONS,  # noqa: F401  (re-exported: its import path before "auto")
    fixed_rows,
)
from dmlfe.relation.similarities import relation_similarity
from dmlfe.solvers.dimension import DEFAULT_THRESHOLD, check_n_components

#: The solvers that make passes over X (or R) of their own.
MATRIX_FREE = ("randomized", "lanczos")
#: Largest ``random_state``: ``numpy.random.RandomState`` (k-means++ prototypes) takes
#: seeds from 0 to 2**32 - 1.
MAX_SEED = 2**32 - 1
SOLVERS = ("auto", "dense", *MATRIX_FREE)
ROUTES = ("feature", "relation", "dual", "auto")
#: Storage dtypes of ``components_``; the solve itself is always float64.
COMPONENTS_DTYPES = ("float64", "float32")


def _n_components(name: str, value: Any) -> int | float:
    return check_n_components(value)


def _prototype_selection(name: str, value: Any) -> str | tuple[int, ...]:
    if isinstance(value, str):
        return one_of(*SELECTION_CHOICES)(name, value)
    return tuple(int(v) for v in fixed_rows(value))


_PROTOTYPE_COUNT = interval(1, None, integer=True)


def _n_prototypes(name: str, value: Any) -> int | str | None:
    if isinstance(value, str):
        if value == "auto":
            return value
        raise ValueError(f"parameter {name}={value!r} is not 'auto', None (every training "
                         f"document) or an int in {_PROTOTYPE_COUNT.text}")
    return optional(_PROTOTYPE_COUNT)(name, value)


N_COMPONENTS = Param(
    "n_components", DEFAULT_THRESHOLD, _n_components,
    "int or float, default 0.999\n    An int: the number of components d. A float t in (0, 1]: "
    "the smallest d whose\n    eigenvalues sum to at least t times the sum of the positive "
    "eigenvalues\n    (mvmd eq. 15).")

#: The common parameters after ``n_components``, in signature order.
COMMON: tuple[Param, ...] = (
    Param("solver", "auto", one_of(*SOLVERS),
          "{'auto', 'dense', 'randomized', 'lanczos'}, default 'auto'\n    Eigensolver; 'auto' "
          "picks one from the data size (see dmlfe.fit.plan)."),
    Param("max_dense_features", 20_000, interval(1, None, integer=True),
          "int, default 20000\n    Largest D (or p) for which a D x D matrix is formed on the "
          "driver."),
    Param("max_dual_samples", 12_000, interval(1, None, integer=True),
          "int, default 12000\n    Largest n for the dual route (an n x n Gram on the driver, "
          "n^2 x 8 bytes;\n    about 3 such matrices at once: 3.5 GB at the default)."),
    Param("max_gather_bytes", 2**30, interval(0, None, integer=True),
          "int, default 2**30\n    Dual route, and relation route with a dense p x p solve, on "
          "a store: when X's\n    sparse arrays (12 bytes per stored value) are at most this "
          "size and the cluster\n    has no more threads than the driver "
          "(dmlfe.compute.driver_threads), the driver\n    reads X itself in one pass and the "
          "Gram, solve and map back (or the relation\n    features, their statistics and the "
          "solve) run there: the cluster would add only\n    transfers (X's stored values, "
          "where the workers would send n x n Gram tiles\n    or a p x p partial per row "
          "block). 0: always the distributed passes."),
    Param("max_components", None, optional(interval(1, None, integer=True)),
          "int, optional\n    A threshold ``n_components``: most eigenpairs computed. None "
          "(default): as many\n    as the threshold needs -- all of a dense problem (its "
          "matrix already holds them),\n    within ``threshold_memory`` where the components "
          "are rows of X's features (dual,\n    n-space and matrix-free routes). A threshold "
          "the computed pairs do not reach\n    warns."),
    Param("threshold_memory", 2**32, interval(1, None, integer=True),
          "int, default 2**32\n    A threshold ``n_components`` on the dual, n-space and "
          "matrix-free routes: bytes\n    of driver memory the computed pairs may take (the "
          "D' x k components, 8 bytes\n    each, D' the used columns; the matrix-free rounds "
          "also hold three\n    D' x (k + n_oversamples) blocks)."),
    Param("n_oversamples", 10, interval(0, None, integer=True),
          "int, default 10\n    Matrix-free path when X stays in the store (see "
          "dmlfe.solvers.matrix_free): extra\n    columns of the iterated block (scikit-learn's "
          "name). The n-space route's block\n    Lanczos does not use it."),
    Param("n_iter", None, optional(interval(1, None, integer=True)),
          "int, optional\n    Matrix-free path: a fixed number of passes (scikit-learn's "
          "name); None: iterate\n    until the residuals meet ``tol``, at most ``max_passes``. "
          "``converged_`` says\n    whether they did."),
    Param("tol", 1e-5, interval(0.0, None, closed="neither"),
          "float, default 1e-5\n    Matrix-free path: stop when every wanted pair has "
          "||A u - theta u|| <= tol * theta,\n    its own eigenvalue, on the n-space route "
          "(dmlfe.solvers.nspace), and\n    <= tol * theta_1 when X stays in the store; "
          "``max_residual_`` reports the\n    largest relative to its own eigenvalue."),
    Param("max_passes", 300, interval(1, None, integer=True),
          "int, default 300\n    Matrix-free path: most passes over X when ``n_iter`` is "
          "None (the n-space\n    route's block Lanczos makes about 40 for 100 components of "
          "text)."),
    Param("split", None, optional(split_names),
          "str or list of str, optional\n    When X is a store path: fit on (and transform) "
          "the documents of these splits. Without it every document is read, and a store "
          "with a 'test' split warns."),
    Param("cache", True, boolean,
          "bool, default True\n    Reuse statistics saved beside the store (store paths "
          "only)."),
    Param("client", None, anything,
          "distributed.Client, optional\n    Where passes run; default the process's default "
          "client or dask's local scheduler."),
    Param("random_state", 0, interval(0, MAX_SEED, integer=True),
          "int, default 0\n    Seed of the randomized solver and of prototype selection "
          "(0 to 2**32 - 1,\n    the seeds numpy's generators accept)."),
    Param("progress", False, boolean,
          "bool, default False\n    Progress messages on stderr for the passes."),
    Param("route", "auto", one_of(*ROUTES),
          "{'feature', 'relation', 'dual', 'auto'}, default 'auto'\n    Solve on X, on "
          "relation features R = sim(X, prototypes) (mope section 3.5),\n    exactly in the "
          "n-dimensional row space of X through the n x n Gram\n    ('dual', n moderate, any "
          "D), or choose (see dmlfe.fit.plan). ``route_``\n    and ``route_reason_`` record "
          "it."),
    Param("n_prototypes", "auto", _n_prototypes,
          "int, 'auto' or None, default 'auto'\n    Relation route: p, the prototype "
          "documents. 'auto': min(n, "
          f"{MAX_AUTO_PROTOTYPES:,})\n    (dmlfe.relation.prototypes.MAX_AUTO_PROTOTYPES: "
          "every p x p matrix is formed\n    from the n x p relation features, n p^2 "
          "flops, and factorised, p^3, so\n    the cost grows linearly in n, not as n^3; "
          "mope section 3.5); None: every\n    training document (p = n, the exact "
          "kernel route)."),
    Param("prototype_selection", "auto", _prototype_selection,
          "{'auto', 'all', 'random', 'stratified', 'kmeans++'} or list of int, default "
          "'auto'\n    Relation route: how the p prototypes are chosen (seeded by "
          "``random_state``,\n    independent of the chunking), or their row positions "
          "among the training\n    documents (e.g. an earlier fit's "
          "``prototype_indices_``: after an append the\n    relation statistics are then "
          "extended by the new rows only). 'auto': 'all'\n    when p = n, else "
          f"'{AUTO_SELECTION}' (each label combination keeps its share)."),
    Param("similarity", "linear", relation_similarity,
          "str, default 'linear'\n    Relation route: 'linear', 'cosine', 'gaussian' (mope eq. "
          "7), 'local_scaling'\n    (eq. 8) or 'inverse_normalized_distance' (eq. 9, alias "
          "'eq9')."),
    Param("tau", None, optional(interval(0.0, None, closed="neither")),
          "float, optional\n    Width of 'gaussian' (default: median squared distance between "
          "a seeded sample\n    of the prototypes) and of 'inverse_normalized_distance' "
          "(default 1.0)."),
    Param("n_neighbors", DEFAULT_NEIGHBORS, interval(1, None, integer=True),
          "int, default 7\n    K of 'local_scaling', and of the document K-NN graph of the graph "
          "methods\n    (LPP, OLPP, MOPE, MESD, SSMOPE; mope section 2.1.1)."),
    Param("knn_search", "auto", one_of(*KNN_METHODS),
          "{'auto', 'exact', 'approximate'}, default 'auto'\n    Graph methods: how the "
          "document K-NN graph is searched: exact and blockwise\n    on the cluster, or "
          "NN-descent on the driver (pynndescent, ``pip install 'dmlfe[ann]'``;\n    its "
          "recall against exact is measured on a sample); 'auto' is exact up to\n    "
          "100,000 documents (dmlfe.graph.knn.EXACT_LIMIT)."),
    Param("components_dtype", "float64", one_of(*COMPONENTS_DTYPES),
          "{'float64', 'float32'}, default 'float64'\n    Storage of ``components_`` (d x D: "
          "8 bytes per value in float64, 4 in\n    float32). The "
          "statistics and the solve stay float64;\n    only the result is cast. With "
          "'float32', ``transform`` multiplies in float32\n    and returns float32 embeddings "
          "(``mean_`` and ``eigenvalues_`` stay float64)."),
    Param("warm_start", False, boolean,
          "bool, default False\n    Matrix-free randomized solve (scikit-learn's name): "
          "``fit`` starts the iteration\n    from the previous fit's last Ritz vectors "
          "(kept with it: D x (d + n_oversamples)\n    float64) or ``components_``, when "
          "it had the same number of\n    features, instead of random vectors; the "
          "stopping rule (``tol``) is the same,\n    and every row is still read. A fit on a "
          "store whose earlier version (before\n    an append) had a matrix-free fit of the "
          "same method starts from the Ritz vectors\n    that fit saved beside the store, "
          "warm_start or not (``cache``);\n    ``solver_info_['warm_start']`` says which."),
)

#: Common parameters that say where and how to run, not what the model is.
RUNTIME = ("client", "progress", "cache")
