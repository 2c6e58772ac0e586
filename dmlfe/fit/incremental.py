"""Incremental fits: what ``partial_fit`` keeps of the row blocks it is given.

Each :meth:`~dmlfe.estimators.MultiLabelProjection.partial_fit` call hands one block of
rows to an :class:`Accumulator`; the eigenproblem is solved only when a fitted
attribute is needed, with the plan :func:`dmlfe.fit.plan_fit` makes for *all* the rows
given so far (the same plan as ``fit`` on their concatenation, so that the result is
the same). What is kept depends on that plan:

* the feature route with the dense or thin-SVD solver, labels used as given (PCA, LSI,
  MDDM, MVMD, CCA, PLS, OPLS, MLSI, DMLDA on the feature route): the sufficient
  statistics only, in float64 -- n, the column sums, X^T Y, Y^T Y and, when the solve
  needs them, X^T X or X^T diag(w) X (:class:`~dmlfe.stats.sufficient.SufficientStats`,
  added block by block). No row is kept: the memory is that of the statistics (D x D
  when the method needs the scatter), whatever the number of rows.
* the dual route: the rows themselves (a list of blocks; the components are X^T alpha),
  the n x n Gram extended by each new block's products with every earlier row (O(n m)
  for m new rows, the old x old part is never recomputed), and the first-order
  statistics.
* everything else keeps the rows and fits them afresh at solve time, which is exact
  by construction: the graph methods (the K-NN graph is rebuilt over all rows, since a
  new document changes old documents' neighbour lists), the relation route (the
  prototypes are chosen from all rows, as ``fit`` chooses them), the matrix-free
  solvers, and MLDA on the feature route (its label weighting depends on Y^T Y of all
  rows, so its weighted scatter cannot be summed block by block).

The plan depends on n only through the dual route's conditions (``2 n <= D`` in memory,
``n <= max_dual_samples``), which hold for the first blocks and may stop holding as rows
arrive, never the other way round: once the plan keeps statistics only, every later one
does, and the rows are dropped then (their statistics are computed from the kept rows
once, with the scatter the solve needs).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import InputError
from dmlfe.fit.data import FitData
from dmlfe.fit.plan import DataShape, FitPlan, Limits, plan_fit
from dmlfe.labels import class_indicators
from dmlfe.methods.registry import MethodSpec, get_method
from dmlfe.stats.gram import extend_gram
from dmlfe.stats.pass_ import compute_stats
from dmlfe.stats.sufficient import SufficientStats

#: The solvers whose feature-route solve needs nothing but the statistics.
STATISTICS_SOLVERS = ("dense", "lowrank")


def statistics_suffice(plan: FitPlan) -> bool:
    """Whether ``plan`` solves from summed statistics alone (no row kept)."""
    return (plan.route == "feature" and plan.solver in STATISTICS_SOLVERS
            and plan.relation is None and not plan.spec.needs_graph
            and not plan.spec.needs_kernel and plan.stats.labels == "01")


def indicator_labels(Y: Any, classes: np.ndarray, owner: str) -> np.ndarray:
    """1-D class labels as 0/1 columns for the given ``classes`` (the first block's).

    Raises
    ------
    InputError
        A label that is not one of ``classes``.
    """
    y = np.asarray(Y)
    hit = y[:, None] == classes[None, :]
    missing = ~hit.any(axis=1)
    if missing.any():
        i = int(np.flatnonzero(missing)[0])
        raise InputError(
            f"{owner}.partial_fit: Y[{i}] = {y[i].item()!r} is not one of the classes of the "
            f"first block ({', '.join(map(repr, classes.tolist()))}); give every block a 0/1 "
            "documents x labels matrix with a column for every label instead")
    return hit.astype(np.int8)


def _stack(blocks: list[Any]) -> Any:
    if sp.issparse(blocks[0]):
        return sp.vstack(blocks, format="csr")
    return np.vstack(blocks)


@dataclass
class Accumulator:
    """The rows or statistics of the blocks an estimator's ``partial_fit`` was given.

    Attributes
    ----------
    method : str
        The registered method's name (its spec is looked up, so that the estimator
        pickles mid-stream).
    params : dict
        The estimator's validated parameters at the first block; a later block or
        solve with other parameters is refused (see :meth:`check_params`).
    owner : str
        The estimator's class name, for messages.
    n_features : int
    n_labels : int or None
        Label columns of every block (None before the first).
    classes : ndarray or None
        The first block's classes when Y was given as 1-D class labels.
    n_samples : int
        Rows given so far.
    stats : SufficientStats or None
        The statistics of every row given so far: the first-order ones on the dual
        route, also X^T Y and the scatter the solve needs once the rows are not kept;
        None where the solve refits the kept rows.
    blocks : list of (X, Y) or None
        The row blocks (CSR or ndarray, as the first block was given); None once the
        plan needs the statistics only.
    gram : ndarray or None
        X X^T of the kept rows, while the plan is the dual route.
    rows_read : int
        Rows read since the last solve (each time a row is read: a new block by its
        statistics, old rows by a Gram extension or a refit).
    pending : bool
        Rows were added since the last solve.
    """

    method: str
    params: dict[str, Any]
    owner: str
    n_features: int
    n_labels: int | None = None
    classes: np.ndarray | None = None
    n_samples: int = 0
    stats: SufficientStats | None = None
    blocks: list[tuple[Any, np.ndarray]] | None = field(default_factory=list)
    gram: np.ndarray | None = None
    rows_read: int = 0
    pending: bool = False

    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)

    # ------------------------------------------------------------------ checks
    def check_params(self, params: dict[str, Any]) -> None:
        """Refuse parameters that differ from the first block's (set_params in between)."""
        changed = [k for k in params if params[k] is not self.params.get(k)
                   and params[k] != self.params.get(k)]
        if changed:
            k = changed[0]
            raise ValueError(
                f"{self.owner}.partial_fit: parameter {k} changed from {self.params.get(k)!r} "
                f"to {params[k]!r} since the first block; the blocks seen so far were "
                "accumulated for the old value: call fit, or partial_fit on a fresh "
                "estimator (sklearn.base.clone)")

    def labels(self, Y: Any) -> Any:
        """1-D class labels as indicator columns of the first block's classes; a matrix
        (or None) as it is."""
        if Y is None or sp.issparse(Y) or np.ndim(Y) != 1:
            return Y
        if self.classes is None:
            Yi, self.classes, _ = class_indicators(Y, self.owner, every_class=True)
            return Yi
        return indicator_labels(Y, self.classes, self.owner)

    def _check_labels(self, Y: np.ndarray) -> None:
        q = int(Y.shape[1])
        if self.n_labels is None:
            self.n_labels = q
        elif q != self.n_labels:
            raise InputError(
                f"{self.owner}.partial_fit: Y has {q} label columns, but the earlier blocks "
                f"had {self.n_labels}; every block needs the same labels in the same columns")

    # ------------------------------------------------------------------ plan
    def shape(self, n: int | None = None) -> DataShape:
        return DataShape(self.n_samples if n is None else n, self.n_features,
                         int(self.n_labels or 0), in_memory=True)

    def plan(self, n: int | None = None) -> FitPlan:
        """The plan ``fit`` makes for the concatenation of the blocks (of ``n`` rows)."""
        return plan_fit(self.spec, self.params, self.shape(n), Limits.from_params(self.params))

    def _plan_or_none(self, n: int) -> FitPlan | None:
        # a plan refused for this n (e.g. more components than rows on the dual route)
        # may be accepted with more rows: keep the rows, the solve reports what is left
        try:
            return self.plan(n)
        except ValueError:
            return None

    # ------------------------------------------------------------------ blocks
    def _stats(self, X: Any, Y: np.ndarray, plan: FitPlan | None) -> SufficientStats:
        """One block's statistics: what ``plan``'s solve needs, or (None) the first-order
        ones that every route uses."""
        self.rows_read += int(X.shape[0])
        if plan is None:
            return compute_stats(X, Y, need_xty=False,
                                 max_dense_features=self.params["max_dense_features"])
        return compute_stats(X, Y, need_xtx=plan.stats.need_xtx,
                             need_xtwx=plan.stats.need_xtwx,
                             max_dense_features=plan.limits.max_dense_features)

    def _first_order_of_kept(self) -> SufficientStats:
        assert self.blocks
        total = self._stats(*self.blocks[0], None)
        for Xb, Yb in self.blocks[1:]:
            total += self._stats(Xb, Yb, None)
        return total

    def _gram_of_kept(self) -> np.ndarray | None:
        G = None
        assert self.blocks is not None
        for i, (Xb, _) in enumerate(self.blocks):
            G = extend_gram(G, [b for b, _ in self.blocks[:i]], Xb)
            self.rows_read += sum(int(b.shape[0]) for b, _ in self.blocks[:i + 1])
        return G

    def add(self, X: Any, Y: np.ndarray) -> None:
        """Add a checked block (CSR matrix or ndarray, float64; 0/1 Y of its rows)."""
        self._check_labels(Y)
        Y = np.asarray(Y)
        m = int(X.shape[0])
        n = self.n_samples + m
        plan = self._plan_or_none(n)
        if self.blocks is None:  # statistics only, and so for every later plan
            if plan is None or not statistics_suffice(plan):
                raise AssertionError("an incremental fit dropped its rows for a plan that "
                                     "needs them")  # pragma: no cover - see module docstring
            self.stats += self._stats(X, Y, plan)
            self.n_samples, self.pending = n, True
            return
        if self.blocks and sp.issparse(self.blocks[0][0]) != sp.issparse(X):
            # one kind of block, as the first: the Gram tiles and the stacked X need it
            X = sp.csr_matrix(X) if sp.issparse(self.blocks[0][0]) else X.toarray()
        if plan is not None and statistics_suffice(plan):
            # from now on the statistics suffice: those of the kept rows, with what the
            # solve needs, then the rows go
            total = None
            for Xb, Yb in [*self.blocks, (X, Y)]:
                part = self._stats(Xb, Yb, plan)
                if total is None:
                    total = part
                else:
                    total += part
            self.stats, self.blocks, self.gram = total, None, None
            self.n_samples, self.pending = n, True
            return
        if plan is not None and plan.route == "dual":
            # the first-order statistics and the Gram, of the earlier rows if an earlier
            # plan did not keep them
            if self.blocks and (self.stats is None or self.stats.n != self.n_samples):
                self.stats = self._first_order_of_kept()
            if self.blocks and (self.gram is None or self.gram.shape[0] != self.n_samples):
                self.gram = self._gram_of_kept()
            part = self._stats(X, Y, None)
            if self.stats is None:
                self.stats = part
            else:
                self.stats += part
            old = [b for b, _ in self.blocks]
            self.gram = extend_gram(self.gram if old else None, old, X)
            self.rows_read += sum(int(b.shape[0]) for b in old)
        else:  # the solve refits the kept rows: nothing to accumulate
            self.stats, self.gram = None, None
        self.blocks.append((X, Y))
        self.n_samples, self.pending = n, True

    # ------------------------------------------------------------------ solve
    def solve_inputs(self) -> tuple[FitPlan, FitData, dict[str, Any]]:
        """(plan, data, the keyword arguments of :func:`dmlfe.fit.run_fit`) of the solve.

        The statistics and Gram handed over are copies: the solve may overwrite them,
        and the next block adds to these.
        """
        plan = self.plan()
        q = int(self.n_labels or 0)
        if self.blocks is None:
            if not statistics_suffice(plan):
                raise AssertionError("statistics-only accumulation for a plan that needs "
                                     "rows")  # pragma: no cover - see module docstring
            assert self.stats is not None
            stats = copy.deepcopy(self.stats)
            if not plan.stats.need_xtx:
                stats.xtx = None
            if not plan.stats.need_xtwx:
                stats.xtwx = None
            # the solve reads the statistics only: X has no rows here
            empty = FitData(sp.csr_matrix((0, self.n_features)), np.zeros((0, q), np.int8))
            return plan, empty, {"stats": stats}
        X = _stack([b for b, _ in self.blocks])
        Y = np.vstack([y for _, y in self.blocks])
        self.rows_read += int(X.shape[0])  # the map back or the fit reads every row
        if plan.route == "dual":
            if self.stats is None or self.stats.n != self.n_samples:
                self.stats = self._first_order_of_kept()
            if self.gram is None or self.gram.shape[0] != self.n_samples:
                self.gram = self._gram_of_kept()
            return plan, FitData(X, Y), {"stats": copy.deepcopy(self.stats),
                                         "gram": self.gram.copy()}
        return plan, FitData(X, Y), {}

    def take_rows_read(self) -> int:
        read, self.rows_read = self.rows_read, 0
        return read
