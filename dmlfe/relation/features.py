"""Relation features R = sim(X, prototypes) as a picklable ``block_fn`` (mope section 3.5).

:class:`RelationMap` holds the prototype rows (CSR) and the similarity's parameters;
called on a CSR row block it returns that block's dense n_block x p relation
features. The statistics pass (:func:`dmlfe.stats.pass_.compute_stats`) applies it
to each block and reduces the block straight into R^T R, R^T Y and the column sums,
so R is never held whole; :func:`dmlfe.projection.project` applies it to new
documents before the coefficients.

The prototypes go to the workers once: :func:`ship` wraps the map in a single dask
graph key that every block task depends on (each worker fetches it once), instead
of a copy embedded in every task.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask import delayed

from dmlfe.compute import is_dask
from dmlfe.relation.kernels import (
    DEFAULT_NEIGHBORS,
    canonical_similarity,
    median_tau,
    row_sq_norms,
    similarity,
)
from dmlfe.relation.kernels import prototype_scales as _local_scales
from dmlfe.relation.prototypes import gather_rows, select_prototypes
from dmlfe.relation.similarities import get_similarity
from dmlfe.stats.outer import dense_outer

#: Rows per slice when the map is applied on the driver (bounds the dense m x p block).
DRIVER_ROWS = 4096
#: Store reads for the relation route use blocks of about this many bytes of dense
#: relation features (n_block x p x 8), so a worker's block stays small.
RELATION_BLOCK_BYTES = 2**27


def relation_block_rows(n_prototypes: int, chunk_rows: int) -> int:
    """Rows per block whose dense relation features (rows x p float64) stay small."""
    return max(64, min(int(chunk_rows), RELATION_BLOCK_BYTES // (8 * max(n_prototypes, 1))))


class RelationMap:
    """Block map X_b -> sim(X_b, prototypes), dense (m, p) float64.

    Parameters
    ----------
    prototypes : scipy.sparse matrix (p, D)
        The prototype documents' rows.
    similarity : str
        A relation similarity of :mod:`dmlfe.relation.similarities` (or an alias).
    tau : float, optional
        Width of a similarity that takes one: "gaussian" (required there: see
        :func:`build_relation_map` for the median heuristic) and
        "inverse_normalized_distance" (default 1.0).
    n_neighbors : int
        K of "local_scaling".
    prototype_scales : ndarray (p,), optional
        sigma of each prototype for "local_scaling" (computed when not given).
    """

    def __init__(self, prototypes: Any, similarity: str = "linear", tau: float | None = None,
                 n_neighbors: int = DEFAULT_NEIGHBORS,
                 prototype_scales: np.ndarray | None = None) -> None:
        P = sp.csr_matrix(prototypes, dtype=np.float64)
        P.sort_indices()
        self.prototypes = P
        self.similarity = canonical_similarity(similarity)
        spec = get_similarity(self.similarity)
        # the declaration travels with the map: a worker process has only dmlfe's own
        # similarities registered, not those a plug-in registered in the driver
        self._spec = spec
        if isinstance(n_neighbors, bool) or int(n_neighbors) < 1:
            raise ValueError(f"n_neighbors={n_neighbors!r} must be a positive int")
        self.n_neighbors = int(n_neighbors)
        if spec.needs_tau and tau is None:
            tau = spec.default_tau
        if spec.needs_tau:
            if tau is None:
                raise ValueError(f"similarity={self.similarity!r} needs tau (> 0)")
            if not np.isfinite(float(tau)) or float(tau) <= 0.0:
                raise ValueError(f"tau={tau!r} must be a positive number for similarity="
                                 f"{self.similarity!r}")
            tau = float(tau)
        else:
            tau = None
        self.tau = tau
        self._prepare()
        if spec.needs_scale:
            if prototype_scales is None:
                prototype_scales = _local_scales(P, self._psq, self.n_neighbors)
            prototype_scales = np.asarray(prototype_scales, dtype=np.float64).ravel()
            if prototype_scales.shape != (P.shape[0],):
                raise ValueError(f"prototype_scales has shape {prototype_scales.shape}, "
                                 f"expected ({P.shape[0]},)")
        else:
            prototype_scales = None
        self.prototype_scales = prototype_scales

    # ------------------------------------------------------------------ pickling
    def _prepare(self) -> None:
        self._psq = row_sq_norms(self.prototypes)

    def __getstate__(self) -> dict[str, Any]:
        # the norms are rebuilt on arrival
        state = dict(self.__dict__)
        state.pop("_psq", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._prepare()

    def __dask_tokenize__(self) -> Any:
        return ("dmlfe.RelationMap", self.sha256)

    # ------------------------------------------------------------------ use
    @property
    def n_prototypes(self) -> int:
        return int(self.prototypes.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.prototypes.shape[1])

    def __call__(self, xb: Any) -> np.ndarray:
        """Relation features of one row block (CSR or dense, D columns): dense (m, p)."""
        if xb.shape[1] != self.n_features:
            raise ValueError(f"a row block has {xb.shape[1]} features but the prototypes have "
                             f"{self.n_features}: use documents of the training feature space")
        G = dense_outer(xb, self.prototypes)
        return similarity(self._spec, G, xb, self._psq, tau=self.tau,
                          proto_scales=self.prototype_scales, n_neighbors=self.n_neighbors)

    def transform(self, X: Any, rows: int = DRIVER_ROWS) -> np.ndarray:
        """Relation features of an in-memory matrix, in row slices (dense (n, p))."""
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        out = np.empty((X.shape[0], self.n_prototypes))
        for s in range(0, X.shape[0], rows):
            out[s:s + rows] = self(X[s:s + rows])
        return out

    def prototype_kernel(self) -> np.ndarray:
        """K_pp = sim(prototypes, prototypes) (p x p), symmetrised against round-off."""
        K = self.transform(self.prototypes)
        return 0.5 * (K + K.T)

    # ------------------------------------------------------------------ description
    @property
    def sha256(self) -> str:
        h = hashlib.sha256()
        for a in (self.prototypes.data, self.prototypes.indices, self.prototypes.indptr):
            h.update(np.ascontiguousarray(a).tobytes())
        h.update(repr(self.prototypes.shape).encode())
        return h.hexdigest()

    def params(self) -> dict[str, Any]:
        """JSON-able similarity parameters (saved in model.json)."""
        return {"similarity": self.similarity, "tau": self.tau,
                "n_neighbors": self.n_neighbors, "n_prototypes": self.n_prototypes,
                "n_features": self.n_features}

    def describe(self) -> dict[str, Any]:
        """Identity of the map for the statistics cache key."""
        d = {"kind": "relation", **self.params(), "prototypes_sha256": self.sha256}
        if self.prototype_scales is not None:
            d["scales_sha256"] = hashlib.sha256(self.prototype_scales.tobytes()).hexdigest()
        return d

    def to_arrays(self, prefix: str = "relation.") -> dict[str, np.ndarray]:
        """The prototypes as CSR parts (data/indices/indptr) plus the local scales."""
        P = self.prototypes
        out = {f"{prefix}prototypes.data": P.data.astype(np.float64),
               f"{prefix}prototypes.indices": P.indices.astype(np.int64),
               f"{prefix}prototypes.indptr": P.indptr.astype(np.int64)}
        if self.prototype_scales is not None:
            out[f"{prefix}prototype_scales"] = self.prototype_scales
        return out

    @classmethod
    def from_arrays(cls, params: dict[str, Any], arrays: dict[str, np.ndarray],
                    prefix: str = "relation.") -> RelationMap:
        """Inverse of :meth:`to_arrays` + :meth:`params`."""
        shape = (int(params["n_prototypes"]), int(params["n_features"]))
        P = sp.csr_matrix((arrays[f"{prefix}prototypes.data"],
                           arrays[f"{prefix}prototypes.indices"],
                           arrays[f"{prefix}prototypes.indptr"]), shape=shape)
        return cls(P, params["similarity"], tau=params.get("tau"),
                   n_neighbors=int(params.get("n_neighbors") or DEFAULT_NEIGHBORS),
                   prototype_scales=arrays.get(f"{prefix}prototype_scales"))


def ship(fn: RelationMap, X: Any) -> Any:
    """``fn`` as one dask graph key when X is a dask array (sent to each worker once);
    ``fn`` itself for in-memory X."""
    if not is_dask(X):
        return fn
    return delayed(fn, name=f"dmlfe-relation-map-{fn.sha256[:24]}", pure=True)


def build_relation_map(
    X: Any,
    Y: Any = None,
    *,
    n_prototypes: int | None = None,
    selection: str | Sequence[int] = "all",
    similarity_name: str = "linear",
    tau: float | None = None,
    n_neighbors: int = DEFAULT_NEIGHBORS,
    random_state: int = 0,
    client: Any = None,
) -> tuple[RelationMap, np.ndarray]:
    """Choose the prototypes, gather their rows, resolve tau; returns (map, prototype rows).

    A tau without a default (the Gaussian's), when not given, is the median squared
    distance between a seeded sample of the prototypes
    (:func:`dmlfe.relation.kernels.median_tau`), so it too is independent of the chunking.
    """
    kind = canonical_similarity(similarity_name)
    spec = get_similarity(kind)
    idx = select_prototypes(X, Y, n_prototypes=n_prototypes, selection=selection,
                            random_state=random_state, client=client)
    P = gather_rows(X, idx, client)
    if spec.needs_tau and tau is None and spec.default_tau is None:
        tau = median_tau(P, row_sq_norms(P), random_state)
    return RelationMap(P, kind, tau=tau, n_neighbors=n_neighbors), idx
