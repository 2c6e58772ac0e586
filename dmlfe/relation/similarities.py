"""The similarity registry: each similarity between documents declared once.

A :class:`SimilaritySpec` gives a similarity's name, aliases, flags and the one
function that computes it from a block of pairs (:class:`Pairs`). Both of its uses
call that function:

* the relation route (:mod:`dmlfe.relation.kernels`): pairs (document, prototype) of
  a row block, from the Gram block G = X_b P^T and the squared row norms
  (``--similarity``, ``similarity=``);
* the graph methods (:mod:`dmlfe.graph.knn`): the edges (i, j) of the document K-NN
  graph, from the neighbours' squared distances and the rows' squared norms
  (``--feature-weight``, ``feature_weight=``).

dmlfe's own similarities (mope section 2.1.1, eq. 7-9; mddm section 3.1.2):

* ``"linear"``: x.p (relation route only);
* ``"cosine"``: x.p / (||x|| ||p||), 0 when either row is empty;
* ``"gaussian"`` (eq. 7, aliases ``eq7``, ``rbf``): exp(-||x - p||^2 / tau);
* ``"local_scaling"`` (eq. 8, alias ``eq8``): exp(-||x - p||^2 / (sigma_x sigma_p));
  each use defines sigma, the distance to the K-th nearest neighbour, for its own pairs;
* ``"inverse_normalized_distance"`` (eq. 9, alias ``eq9``; the graph lists it as
  ``eq9``): 1 / (tau + ||x - p||^2 / (||x||^2 + ||p||^2)), the ratio 0 when both rows
  are empty; not positive semi-definite;
* ``"constant"``: 1 on every pair (graph weights only).

Adding a similarity = writing its function of :class:`Pairs` and calling
:func:`register_similarity`; the relation route, the graph methods, their parameter
checks and the command-line choices read the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dmlfe.params import LiveChoices

#: The two uses of a similarity.
USES = ("relation", "graph")


def sq_distances(G: np.ndarray, xsq: np.ndarray, psq: np.ndarray) -> np.ndarray:
    """||x - p||^2 from the Gram block and the squared norms, clipped at 0.

    ``psq`` holds the norms of G's columns (1-D), or of each entry's second row
    (G's shape: pairs (i, j_ik), as for a K-NN list).
    """
    norms = xsq[:, None] + (psq if psq.ndim == 2 else psq[None, :])
    d2 = norms - 2.0 * G
    # round-off of the expansion: anything below ~1e-12 of the norms is a zero distance
    d2[d2 <= 1e-12 * norms] = 0.0
    return d2


class Pairs:
    """A block of pairs (x, p): what a similarity function may read.

    Every array broadcasts to the block's shape: ``x_sq`` (m, 1), ``p_sq`` (1, p) for a
    relation block or (n, K) for K-NN lists. ``inner`` and ``sq_dist`` may be given as
    arrays or left to be derived from each other and the norms (through ||x - p||^2 =
    ||x||^2 + ||p||^2 - 2 x.p); ``x_sq`` may be given as a function, so that a
    similarity that reads only ``inner`` never computes the norms.

    Attributes
    ----------
    tau : float or None
        The width of a similarity with ``needs_tau`` (resolved by the caller).
    x_scale, p_scale : ndarray or None
        sigma of the rows of a similarity with ``needs_scale``, (m, 1) and (1, p) or
        (n, K) (set by the caller).
    """

    def __init__(self, *, p_sq: np.ndarray,
                 x_sq: np.ndarray | Callable[[], np.ndarray],
                 inner: np.ndarray | None = None, sq_dist: np.ndarray | None = None,
                 tau: float | None = None) -> None:
        if inner is None and sq_dist is None:
            raise ValueError("Pairs needs inner or sq_dist")
        self.p_sq = p_sq
        self._x_sq = x_sq
        self._inner = inner
        self._sq_dist = sq_dist
        self.tau = tau
        self.x_scale: np.ndarray | None = None
        self.p_scale: np.ndarray | None = None

    @property
    def x_sq(self) -> np.ndarray:
        """||x||^2 of the rows, shape (m, 1)."""
        if callable(self._x_sq):
            self._x_sq = self._x_sq()
        return self._x_sq

    @property
    def inner(self) -> np.ndarray:
        """x.p."""
        if self._inner is None:
            self._inner = 0.5 * (self.x_sq + self.p_sq - self.sq_dist)
        return self._inner

    @property
    def sq_dist(self) -> np.ndarray:
        """||x - p||^2, clipped at 0 against round-off."""
        if self._sq_dist is None:
            self._sq_dist = sq_distances(self.inner, self.x_sq.ravel(), self.p_sq)
        return self._sq_dist


@dataclass(frozen=True)
class SimilaritySpec:
    """One similarity, as the relation route and the graph methods use it.

    Attributes
    ----------
    name : str
        Registry key (lower case, ``_`` separated).
    weights : callable
        ``weights(pairs: Pairs) -> ndarray`` of the block's shape (float64).
    aliases : tuple of str
        Other accepted names.
    psd : bool
        Its prototype kernel matrix is positive semi-definite (kernel MDDM needs one).
    needs_tau : bool
        Takes a width ``tau`` (> 0).
    default_tau : float or None
        tau when none is given; None with ``needs_tau``: a median heuristic on the data
        (over a sample of the prototypes on the relation route, over the neighbour
        distances on the graph).
    needs_scale : bool
        Reads ``x_scale`` and ``p_scale``, each row's distance to its K-th nearest
        neighbour.
    relation, graph : bool
        Offered on the relation route (``similarity``) and as graph weights
        (``feature_weight``).
    graph_name : str
        Its name among the graph weights (default: ``name``).
    doc : str
        One line: the formula and its source.
    """

    name: str
    weights: Callable[[Pairs], np.ndarray]
    aliases: tuple[str, ...] = ()
    psd: bool = False
    needs_tau: bool = False
    default_tau: float | None = None
    needs_scale: bool = False
    relation: bool = True
    graph: bool = True
    graph_name: str = ""
    doc: str = ""

    def names(self, use: str) -> tuple[str, ...]:
        """The name it is listed under for ``use`` (none when it does not apply)."""
        if use == "relation":
            return (self.name,) if self.relation else ()
        if use == "graph":
            return (self.graph_name or self.name,) if self.graph else ()
        raise ValueError(f"use={use!r} is not one of {USES}")


_REGISTRY: dict[str, SimilaritySpec] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return str(name).lower().replace("-", "_")


def register_similarity(spec: SimilaritySpec) -> SimilaritySpec:
    """Add a similarity; the relation route, the graph weights and their choices follow."""
    name = _key(spec.name)
    taken = [n for n in (name, *map(_key, spec.aliases), _key(spec.graph_name or name))
             if n in _REGISTRY or n in _ALIASES]
    if taken:
        raise ValueError(f"a similarity named {taken[0]!r} is registered already")
    if spec.needs_tau and spec.default_tau is not None and spec.default_tau <= 0:
        raise ValueError(f"similarity {name}: default_tau={spec.default_tau!r} must be > 0")
    spec = replace(spec, name=name, aliases=tuple(_key(a) for a in spec.aliases))
    _REGISTRY[name] = spec
    for alias in spec.aliases:
        _ALIASES[alias] = name
    if spec.graph_name and _key(spec.graph_name) != name:
        _ALIASES[_key(spec.graph_name)] = name
    return spec


def unregister_similarity(name: str) -> None:
    """Remove a similarity (for tests and plug-ins that replace one)."""
    spec = get_similarity(name)
    _REGISTRY.pop(spec.name)
    for alias in [a for a, n in _ALIASES.items() if n == spec.name]:
        _ALIASES.pop(alias)


def all_similarities() -> dict[str, SimilaritySpec]:
    """Every registered similarity, in registration order."""
    return dict(_REGISTRY)


def get_similarity(name: str, use: str | None = None) -> SimilaritySpec:
    """A similarity by name or alias (case-insensitive; ``-`` = ``_``).

    ``use`` (``"relation"`` or ``"graph"``): only one offered there.
    """
    key = _key(name) if isinstance(name, str) else name
    spec = _REGISTRY.get(_ALIASES.get(key, key)) if isinstance(key, str) else None
    if spec is None or (use is not None and not spec.names(use)):
        what = {"relation": "similarity", "graph": "feature_weight"}.get(use or "", "similarity")
        aliases = sorted(a for a, n in _ALIASES.items()
                         if use is None or _REGISTRY[n].names(use))
        raise ValueError(f"{what}={name!r} is not one of {similarity_names(use)} (or the "
                         f"aliases {aliases})")
    return spec


def similarity_names(use: str | None = None) -> tuple[str, ...]:
    """The names listed for ``use`` (all canonical names when None), registration order."""
    if use is None:
        return tuple(_REGISTRY)
    return tuple(n for s in _REGISTRY.values() for n in s.names(use))


def similarity_choices(use: str, aliases: bool = False) -> LiveChoices:
    """The names offered for ``use`` (with ``aliases``, their aliases too), read from the
    registry at each access: command-line ``choices`` that follow later registrations."""

    def names() -> tuple[str, ...]:
        listed = similarity_names(use)
        if not aliases:
            return listed
        extra = [a for s in _REGISTRY.values() if s.names(use)
                 for a in (s.name, *s.aliases) if a not in listed]
        return listed + tuple(dict.fromkeys(extra))

    return LiveChoices(names)


def relation_similarity(name: str, value: Any) -> str:
    """Parameter check: a relation-route similarity; returns its canonical name."""
    if not isinstance(value, str):
        raise TypeError(f"parameter {name}={value!r} must be one of "
                        f"{similarity_names('relation')}")
    return get_similarity(value, "relation").name


def graph_weight(name: str, value: Any) -> str:
    """Parameter check: one of the graph weights' names (returned as given)."""
    if isinstance(value, str) and value in similarity_names("graph"):
        return value
    raise ValueError(f"parameter {name}={value!r} is not one of {similarity_names('graph')}")


# --------------------------------------------------------------------------- dmlfe's own
def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, 0 where den is 0."""
    return np.divide(num, den, out=np.zeros_like(num), where=den > 0)


def _linear(p: Pairs) -> np.ndarray:
    return p.inner


def _cosine(p: Pairs) -> np.ndarray:
    return _ratio(p.inner, np.sqrt(p.x_sq) * np.sqrt(p.p_sq))


def _gaussian(p: Pairs) -> np.ndarray:
    return np.exp(-p.sq_dist / float(p.tau))  # type: ignore[arg-type]


def _local_scaling(p: Pairs) -> np.ndarray:
    return np.exp(-p.sq_dist / (p.x_scale * p.p_scale))  # type: ignore[operator]


def _inverse_normalized_distance(p: Pairs) -> np.ndarray:
    d2 = p.sq_dist
    return 1.0 / (float(p.tau) + _ratio(d2, p.x_sq + p.p_sq))  # type: ignore[arg-type]


def _constant(p: Pairs) -> np.ndarray:
    return np.ones_like(p.sq_dist)


for _spec in (
    SimilaritySpec("constant", _constant, relation=False, doc="1 on every edge"),
    SimilaritySpec("linear", _linear, psd=True, graph=False,
                   doc="x.p, the linear kernel (mddm section 3.1.2)"),
    SimilaritySpec("cosine", _cosine, psd=True, doc="x.p / (||x|| ||p||)"),
    SimilaritySpec("gaussian", _gaussian, aliases=("eq7", "rbf"), psd=True, needs_tau=True,
                   doc="exp(-||x - p||^2 / tau) (mope eq. 7)"),
    SimilaritySpec("local_scaling", _local_scaling, aliases=("eq8",), needs_scale=True,
                   doc="exp(-||x - p||^2 / (sigma_x sigma_p)) (mope eq. 8)"),
    SimilaritySpec("inverse_normalized_distance", _inverse_normalized_distance,
                   aliases=("eq9",), needs_tau=True, default_tau=1.0, graph_name="eq9",
                   doc="1 / (tau + ||x - p||^2 / (||x||^2 + ||p||^2)) (mope eq. 9)"),
):
    register_similarity(_spec)
