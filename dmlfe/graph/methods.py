"""Graph methods as pure functions: labels + K-NN graph -> the n x n matrices (A, B).

Each builder returns ``{"A": PairOperator, "B": PairOperator or None, "reg": float}``;
:func:`dmlfe.fit.graph.graph_fit` reduces them to A_p = X^T A X and
B_p = X^T B X + reg I (mope eq. 30-31; R^T A R on the relation route) in one pass.
B = None means orthogonal projections, B_p = I (``reg`` is then not used).

Notation: Y (n x c, 0/1), m = Y 1 (labels per document), n_c = Y^T 1 (class sizes),
n~ = sum_i m_i (documents after duplication), W the K-NN graph's weights
(:mod:`dmlfe.graph.knn`), D(.) the diagonal of row sums, L(W) = D(W) - W.

Tables 1-3 of the paper are images absent from its text, so each template below is
derived from the equations and the text it cites (eq. 26-33, section 2.1-2.3, 3.2-3.4)
and from the base method's own paper; where the text leaves a choice open, the choice
is named.

* LPP (section 2.1; "LPP requires ... P^T X^T D(W) X P = I"): A = W, B = D(W). By eq.
  28-29, max tr(P^T X^T W X P) under that constraint is min tr(P^T X^T L X P).
* OLPP (section 2.1: "OLPP ... directly impose[s] orthogonality P^T P = I"): A = -L(W),
  B_p = I (the min of eq. 28 as a max, template eq. 31). Cai et al.'s original OLPP
  also whitens by X^T D X after a PCA step; the paper's description is followed.
* MOPE (section 3.3): A = Psi(W, G) on the graph's pattern (eq. 43 or the Hadamard /
  weighted-sum options), G from schemes 1-3 (eq. 34-42). The paper searches the K-NN
  of psi itself ("define A = Psi(W, G) using a K-NN search ... using as edge weights
  either constant values or the psi_ij similarities"); here the pattern is the feature
  K-NN graph, psi is never evaluated on all n^2 pairs -- a deviation. Constraint
  ("the orthogonality condition imposed on the embeddings (or projections)"):
  orthogonal projections (B_p = I, eq. 31), orthogonal embeddings (B = I_n, eq. 30 with
  Z = XP) or the degree D(A) (the LPP-style scale constraint, an option of ours).
* MESD (section 3.2): the single-label method on the duplicated samples, collapsed
  per eq. 32 (unweighted: A_ij = sum_{s,t} a_ij^(s,t)) or eq. 33 (weighted: also times
  1 / (m_i m_j), i.e. A -> D_m^+ A D_m^+, applied to the objective A only, as eq. 33
  is written); the constraint is collapsed per eq. 32 ("B = I_n becomes
  diag(m_1, ..., m_n)"; scatter constraints "by exactly the same inductions"). With
  S = Y diag(1/n_c) Y^T (the collapsed same-class weights of FDA) and C = Y Y^T (shared
  classes):

  - fda (eq. 10 in the graph-embedding form of Yan et al.: S_b = X^T (H - 11^T / n) X,
    S_w = X^T (I - H) X, H_ij = 1/n_c for i, j in class c): A = S - m m^T / n~,
    B = diag(m) - S;
  - mmc (eq. 11, S_b - S_w with P^T P = I): A = (S - m m^T / n~) - (diag(m) - S),
    B_p = I;
  - lfda (Sugiyama 2007, cited as [24]: S_w = X^T L(W^w) X, S_b = X^T L(W^b) X with
    W^w_ij = a_ij / n_c and W^b_ij = a_ij (1/n - 1/n_c) for a same-class pair, 0 and
    1/n otherwise): B = L(W o S), A = L(W o (C / n~ - S) + (m m^T - C) / n~). The
    affinity a_ij is W on the K-NN graph (Sugiyama's uses local scaling over all pairs
    of a class: ``feature_weight="local_scaling"`` is the closest);
  - olpp_r (section 2.2.1, [27]: L = L_s - beta L_r, W_s "nonzero for pairs from the same
    class", W_r for "nearby pairs from different classes"): W_s = 1 on same-class
    pairs, W_r = W on graph neighbours of different classes (the text does not fix
    their values; [27] weights its repulsion graph with eq. 9, ``feature_weight="eq9"``),
    collapsed L = L(C) - beta L(W o (m m^T - C)); A = -L, B_p = I (OLPP's constraint).

  Copies of one document share its graph neighbours (the graph is over documents), and
  pairs of copies of one document drop out of every Laplacian (their embeddings are
  equal). Doubtful: the paper's rule for eq. 33, "modifying all the H matrices to
  (Y Y^T) o/ (Y 1 Y^T) o H" of Table 2, is not the same as eq. 33 unless Table 2's H
  differs from the S above (the rule multiplies S_ij by shared_ij / (m_i m_j), eq. 33
  divides by m_i m_j), and "all the H" would also reach B; we follow eq. 33 as
  written, which the duplication test checks.
* SSMOPE (section 3.4, eq. 44): A_p = lam X^T (-L(W)) X + (1 - lam) X_l^T A_MOPE X_l,
  UDR = OLPP over all documents, SDR = MOPE on the labelled ones (rows of Y not all
  zero, and not in the store split ``unlabelled_split`` when one is named; their label
  PCA of scheme 2 uses the labelled rows only), B_p = I (the first option of eq. 45).
  A^(SDR)'s feature weights are those of the graph over all documents restricted to
  labelled pairs, not of a K-NN search among the labelled documents alone.
* HSL (section 2.2.2, Table 1; Sun, Ji and Ye 2008, cited as [40]: "replaces the
  Laplacian matrix of LPP with a hypergraph-based Laplacian I - S"): min tr(P^T X^T
  (I - S_h) X P) s.t. P^T X^T X P = I, i.e. A = S_h, B = I_n (B_p = X^T X + reg I), with
  the clique expansion S_h = D_c^-1/2 Y Y^T D_c^-1/2, D_c = D(Y Y^T) (HSL1; the
  diagonal m_i of Y Y^T kept), or Zhou's hypergraph Laplacian (HSL3, [62]) S_h =
  D_m^-1/2 Y diag(1/n_c) Y^T D_m^-1/2 (unit hyperedge weights). The star expansion
  (HSL2) is not implemented.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from dmlfe.graph.combine import combine
from dmlfe.graph.knn import KNNGraph
from dmlfe.graph.label_similarity import check_label_similarity, label_proximity
from dmlfe.graph.products import PairOperator, diagonal, laplacian, lowrank

MESD_BASES = ("fda", "lfda", "mmc", "olpp_r")
WEIGHTINGS = ("unweighted", "weighted")
CONSTRAINTS = ("orthogonal", "embedding", "degree")
HSL_VARIANTS = ("clique", "hypergraph")
#: Default regularisation lambda of B_p = X^T B X + lambda I.
DEFAULT_REG = 1e-3

Operators = dict[str, PairOperator | float | None]


class GraphSource:
    """The training documents' K-NN graph, searched (or read from the cache) on first use,
    so methods that need no graph (MESD-FDA, HSL) never search one."""

    def __init__(self, load: Callable[[], KNNGraph]) -> None:
        self._load = load
        self._graph: KNNGraph | None = None

    @property
    def knn(self) -> KNNGraph:
        if self._graph is None:
            self._graph = self._load()
        return self._graph

    @property
    def searched(self) -> KNNGraph | None:
        """The graph if a method asked for it (searched or read from the cache), else None."""
        return self._graph

    def weights(self, kind: str, tau: float | None, mode: str) -> sp.csr_matrix:
        return self.knn.weights(kind, tau, mode)


def _inv(v: np.ndarray) -> np.ndarray:
    return np.divide(1.0, v, out=np.zeros_like(v, dtype=np.float64), where=v > 0)


def _edges(M: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    return np.repeat(np.arange(M.shape[0]), np.diff(M.indptr)), M.indices.astype(np.int64)


def _times(W: sp.csr_matrix, values: np.ndarray) -> PairOperator:
    """W o V for V given on W's edges."""
    return PairOperator(sp.csr_matrix((W.data * values, W.indices, W.indptr), shape=W.shape))


def _labels(labels: np.ndarray) -> np.ndarray:
    return np.asarray(labels, dtype=np.float64)


def lpp(labels: np.ndarray, graph: GraphSource, *, feature_weight: str = "gaussian",
        feature_tau: float | None = None, graph_mode: str = "symmetrized",
        reg: float = DEFAULT_REG) -> Operators:
    """LPP: max tr(P^T X^T W X P) s.t. P^T (X^T D(W) X + reg I) P = I (mope section 2.1)."""
    W = PairOperator(graph.weights(feature_weight, feature_tau, graph_mode))
    return {"A": W, "B": diagonal(W.row_sums()), "reg": reg}


def olpp(labels: np.ndarray, graph: GraphSource, *, feature_weight: str = "gaussian",
         feature_tau: float | None = None, graph_mode: str = "symmetrized",
         reg: float = DEFAULT_REG) -> Operators:
    """OLPP: min tr(P^T X^T L X P) s.t. P^T P = I, as max of -L (mope section 2.1)."""
    W = PairOperator(graph.weights(feature_weight, feature_tau, graph_mode))
    return {"A": -laplacian(W), "B": None, "reg": reg}


def _mope_a(Y: np.ndarray, graph: GraphSource, scheme: int, label_similarity: str | None,
            combination: str, a: float, b: float, beta: float, gamma: float,
            feature_weight: str, feature_tau: float | None, graph_mode: str,
            label_tau: float, minkowski_p: float,
            label_components: int | None) -> sp.csr_matrix:
    W = graph.weights(feature_weight, feature_tau, graph_mode)
    G = label_proximity(Y, W, scheme, check_label_similarity(scheme, label_similarity),
                        tau=label_tau, minkowski_p=minkowski_p,
                        label_components=label_components)
    return combine(W, G, combination, a=a, b=b, beta=beta, gamma=gamma)


def mope(labels: np.ndarray, graph: GraphSource, *, scheme: int = 3,
         label_similarity: str | None = None, combination: str = "priority",
         a: float = 1.0, b: float = 1.0, beta: float = 1.0, gamma: float = 1.0,
         feature_weight: str = "gaussian", feature_tau: float | None = None,
         graph_mode: str = "symmetrized", constraint: str = "orthogonal",
         label_tau: float = 1.0, minkowski_p: float = 2.0,
         label_components: int | None = None, reg: float = DEFAULT_REG) -> Operators:
    """MOPE: A = Psi(W, G) (mope eq. 43, G of eq. 34-42) with the chosen constraint."""
    Y = _labels(labels)
    A = PairOperator(_mope_a(Y, graph, scheme, label_similarity, combination, a, b, beta,
                             gamma, feature_weight, feature_tau, graph_mode, label_tau,
                             minkowski_p, label_components))
    B = {"orthogonal": None, "embedding": diagonal(np.ones(Y.shape[0])),
         "degree": diagonal(A.row_sums())}[constraint]
    return {"A": A, "B": B, "reg": reg}


def unlabelled_rows(doc_splits: np.ndarray | None,
                    unlabelled_split: str | list[str]) -> np.ndarray:
    """Boolean mask of the documents whose split is (one of) ``unlabelled_split``.

    Raises
    ------
    ValueError
        When the documents carry no split (arrays, or a store without a split column),
        or when no document of the fit is in those splits (a typo, or a fit ``split``
        that leaves them out).
    """
    wanted = [unlabelled_split] if isinstance(unlabelled_split, str) else list(unlabelled_split)
    if doc_splits is None:
        raise ValueError(f"unlabelled_split={unlabelled_split!r} needs X as a store path with a "
                         "split column; with arrays, give the unlabelled documents all-zero "
                         "rows of Y")
    mask = np.isin(np.asarray(doc_splits, dtype=object), wanted)
    if not mask.any():
        present = sorted({str(v) for v in doc_splits if v is not None})
        raise ValueError(f"unlabelled_split={unlabelled_split!r} matches none of the "
                         f"{len(doc_splits)} training documents (their splits: {present}); "
                         f"fit on a split list that includes it, e.g. split=['train', "
                         f"{wanted[0]!r}]")
    return mask


def ssmope(labels: np.ndarray, graph: GraphSource, doc_splits: np.ndarray | None = None, *,
           unlabelled_split: str | list[str] | None = None, unsupervised_weight: float = 0.5,
           scheme: int = 3, label_similarity: str | None = None,
           combination: str = "priority", a: float = 1.0, b: float = 1.0, beta: float = 1.0,
           gamma: float = 1.0, feature_weight: str = "gaussian",
           feature_tau: float | None = None, graph_mode: str = "symmetrized",
           label_tau: float = 1.0, minkowski_p: float = 2.0,
           label_components: int | None = None, reg: float = DEFAULT_REG) -> Operators:
    """SSMOPE (mope eq. 44): lam OLPP over all documents + (1 - lam) MOPE on labelled ones.

    The labelled documents X_l are the rows of Y that are not all zero, less the
    documents whose split is ``unlabelled_split`` (``doc_splits``: each document's
    split, from the store; their stored labels are ignored).
    """
    Y = _labels(labels)
    if unlabelled_split is not None:
        Y = Y * ~unlabelled_rows(doc_splits, unlabelled_split)[:, None]
    lam = float(unsupervised_weight)
    W = PairOperator(graph.weights(feature_weight, feature_tau, graph_mode))
    A_sdr = _mope_a(Y, graph, scheme, label_similarity, combination, a, b, beta, gamma,
                    feature_weight, feature_tau, graph_mode, label_tau, minkowski_p,
                    label_components)
    labelled = (Y.sum(axis=1) > 0).astype(np.float64)
    A_sdr = PairOperator(A_sdr).scaled(labelled)  # X_l^T A X_l: labelled pairs only
    return {"A": lam * (-laplacian(W)) + (1.0 - lam) * A_sdr, "B": None, "reg": reg}


def mesd(labels: np.ndarray, graph: GraphSource, *, base: str = "fda",
         weighting: str = "unweighted", beta: float = 1.0, feature_weight: str = "gaussian",
         feature_tau: float | None = None, graph_mode: str = "symmetrized",
         reg: float = DEFAULT_REG) -> Operators:
    """MESD (mope eq. 32-33) of ``base``; see the module docstring for the templates."""
    Y = _labels(labels)
    m = Y.sum(axis=1)
    n_tilde = float(m.sum())
    if n_tilde == 0:
        raise ValueError("MESD needs labelled documents; every row of Y is zero")
    S = lowrank(Y * _inv(Y.sum(axis=0)), Y)
    mm = lowrank(m, m, 1.0 / n_tilde)
    B: PairOperator | None = None
    if base == "fda":
        A, B = S - mm, diagonal(m) - S
    elif base == "mmc":
        A = (S - mm) - (diagonal(m) - S)
    elif base in ("lfda", "olpp_r"):
        W = graph.weights(feature_weight, feature_tau, graph_mode)
        r, c = _edges(W)
        shared = (Y[r] * Y[c]).sum(axis=1)
        if base == "lfda":
            same = (Y[r] * Y[c] * _inv(Y.sum(axis=0))).sum(axis=1)
            B = laplacian(_times(W, same))
            A = laplacian(_times(W, shared / n_tilde - same) + mm
                          - lowrank(Y, Y, 1.0 / n_tilde))
        else:
            repulsion = _times(W, m[r] * m[c] - shared)
            A = -(laplacian(lowrank(Y, Y)) - float(beta) * laplacian(repulsion))
    else:
        raise ValueError(f"base={base!r} is not one of {MESD_BASES}")
    if weighting == "weighted":
        A = A.scaled(_inv(m))
    return {"A": A, "B": B, "reg": reg}


def hsl(labels: np.ndarray, graph: GraphSource, *, hypergraph: str = "clique",
        reg: float = DEFAULT_REG) -> Operators:
    """HSL (Table 1): A = S_h (clique expansion or Zhou's hypergraph), B = I_n."""
    Y = _labels(labels)
    if hypergraph == "clique":
        U = Y * np.sqrt(_inv(Y @ Y.sum(axis=0)))[:, None]
    else:
        U = Y * np.sqrt(_inv(Y.sum(axis=1)))[:, None] * np.sqrt(_inv(Y.sum(axis=0)))[None, :]
    return {"A": lowrank(U), "B": diagonal(np.ones(Y.shape[0])), "reg": reg}
