"""PPML: penalised partial least squares discriminant analysis for multi-label learning
(Ma, Liu, Su & Zheng, WAIM 2014; ``shared/seeds/ppml-penalized-pls-discriminant-analysis.txt``).

Notation as in the paper: X (n x m) features, Y (n x d) 0/1 labels, both centred
(PLS-DA); component h has the X weight w_h, the score t_h = X_h w_h, the X loading
p_h and the label loading q_h (eq. 1-3).

How the paper's pieces are read here
------------------------------------
* **Directions** (Alg. 1, inner loop): start from the leading singular pair of
  M_h^T = X_h^T Y_h (eq. 11), then repeat "p from q" (p ∝ X_h^T Y_h q, the stationarity
  condition of eq. 8), "q from p" by the ridge update eq. 14,
  q ∝ (M M^T + λ I)^† M p with M = Y_h^T X_h, and w ∝ X_h^T u with u = Y_h q, until w
  stops changing. Because eq. 14 is followed by a normalisation and its shrinkage
  factors σ_i² / (σ_i² + λ) (eq. 15) increase with σ_i, the iteration's fixed point is the
  leading singular pair for every λ: the weights and scores are those of PLS-DA
  (NIPALS / PLS2), whatever the penalty. The loop usually stops after one check.
* **Label loadings** (the penalty's effect): eq. 4 regresses Y on the scores; the ridge
  penalty of eq. 12 on that regression gives, per component (the scores are
  orthogonal), q_h = Y_h^T t_h / (t_h^T t_h + λ) = f(σ_h) · (Y_h^T t_h / t_h^T t_h) with
  σ_h² = t_h^T t_h, the shrinkage factor of eq. 15. λ = 0 is PLS-DA's Q (eq. 4);
  λ > 0 shrinks the low-variance (late) components most, like ridge regression on the
  latent space.
* **Deflation** (Alg. 1): X_{h+1} = X_h - t_h p_h^T with p_h = X_h^T t_h / t_h^T t_h,
  Y_{h+1} = Y_h - t_h q_h^T. It is never carried out on X: with the rotations
  R = W (P^T W)^{-1} (so T = X R), X_h = X (I - R P^T), hence
  X_h^T Y_h = (I - P R^T) X^T Y and X_h w = X r with r = (I - R P^T) w. Y's deflation
  does not change X_h^T Y_h (X_h^T t_j = 0 for j < h), so it needs no work at all.
* **Prediction** (eq. 6, Alg. 1): O = (x̄ - mean_x) R Q^T + mean_y (eq. 6 with W
  replaced by the rotations R, which is what eq. 3 T = XW means once X is deflated);
  label j is predicted where O_j >= θ (paper: θ = 0.5). ``decision_function`` returns
  O - θ (relevant where >= 0, the convention of every dmlfe classifier), the scores for
  the ranking measures (a shift common to all labels leaves every ranking unchanged).

Passes over the data
--------------------
One pass for n, the column means and X^T Y (:func:`dmlfe.stats.pass_.compute_stats`), then
one pass per component for X^T X r_h (:class:`dmlfe.solvers.matrix_free.ScatterOperator`),
which gives t_h^T t_h = r_h^T X^T X r_h, p_h and, with X^T Y, Y^T t_h. Everything else is
m x d or m x k algebra on the driver. ``n_passes_`` counts the passes. Driver memory:
8 · m · (d + 3 k) bytes (X^T Y, W, P, R).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import dask.array as da
import numpy as np
from scipy.special import expit
from sklearn.base import TransformerMixin

from dmlfe.evaluation._common import (
    MultiLabelBase,
    as_features,
    check_labels,
    dense_block,
    from_store,
    map_rows,
)
from dmlfe.params import Param, anything, interval, validate
from dmlfe.solvers.matrix_free import ScatterOperator
from dmlfe.solvers.result import flip_signs
from dmlfe.stats.pass_ import compute_stats

#: Defaults chosen on the medical set (benchmarks/ppml_cv.py; see the class docstring).
DEFAULT_N_COMPONENTS = 300
DEFAULT_PENALTY = 30.0
#: The paper's prediction threshold (section 3.3: "often empirically set as 0.5").
DEFAULT_THRESHOLD = 0.5


#: PPML's parameters and their constraints (checked in ``fit``, before any pass).
PARAMS = (
    Param("n_components", DEFAULT_N_COMPONENTS, interval(1, None, integer=True), "int"),
    Param("penalty", DEFAULT_PENALTY, interval(0, None), "float"),
    Param("threshold", DEFAULT_THRESHOLD, interval(None, None), "float"),
    Param("max_iter", 100, interval(1, None, integer=True), "int"),
    Param("tol", 1e-12, interval(0, 1, closed="left"), "float"),
    Param("client", None, anything, "distributed.Client or None"),
)


def _scores(xb: Any, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    B, b = state
    xb = xb.astype(np.float64) if hasattr(xb, "astype") else np.asarray(xb, np.float64)
    return np.asarray(xb @ B) + b


def _relevant(xb: Any, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return (_scores(xb, state) >= 0).astype(np.int8)


def _probabilities(xb: Any, state: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    return expit(4.0 * _scores(xb, state))


def _unit(v: np.ndarray) -> np.ndarray:
    nrm = float(np.linalg.norm(v))
    return v / nrm if nrm > 0 else v


def nipals_direction(M: np.ndarray, penalty: float, max_iter: int, tol: float
                     ) -> tuple[np.ndarray, np.ndarray, int]:
    """Alg. 1's inner loop on M = X_h^T Y_h (m x d): the weight w and label weight q.

    One symmetric eigendecomposition G = M^T M = U diag(σ²) U^T (d x d, the paper's
    M M^T) serves both the eq. 11 start (q = the leading eigenvector, i.e. the leading
    right singular vector of M) and eq. 14, q ∝ (G + λ I)^† M^T p = U diag(1 / (σ² + λ))
    U^T M^T p (Moore-Penrose: zero where σ² + λ vanishes). Each round: p ∝ M q,
    q by eq. 14, w ∝ M q = X_h^T u. Stops when |w_new · w_old| > 1 - tol.
    Returns (w, q, rounds).
    """
    vals, U = np.linalg.eigh(M.T @ M)
    q = U[:, -1].copy()
    w = _unit(M @ q)
    shifted = vals + penalty
    cut = max(float(shifted.max(initial=0.0)), 0.0) * len(vals) * np.finfo(np.float64).eps
    inv = np.where(shifted > cut, 1.0 / np.where(shifted > cut, shifted, 1.0), 0.0)
    rounds = 0
    for _ in range(max_iter):
        rounds += 1
        p = _unit(M @ q)
        q = _unit(U @ (inv * (U.T @ (M.T @ p))))
        w_new = _unit(M @ q)
        done = abs(float(w_new @ w)) > 1.0 - tol
        w = w_new
        if done:
            break
    return w, q, rounds


class PPML(TransformerMixin, MultiLabelBase):
    """Penalised PLS-DA multi-label classifier (PPML, Ma et al. 2014, Alg. 1).

    Parameters
    ----------
    n_components : int, default 300
        Number of latent components h (Alg. 1's outer loop). Fewer are extracted when
        X_h^T Y_h vanishes first (rank exhausted); ``n_components_`` says how many.
    penalty : float, default 30.0
        λ >= 0, the ridge penalty on the label loadings (eq. 12-15). 0 is plain PLS-DA.
        It is absolute, like ``MultiLabelRidge``'s alpha: it competes with t_h^T t_h,
        which grows with n and with the scale of X.
    threshold : float, default 0.5
        θ: label j is predicted where the output O_j >= θ (Alg. 1, predicting stage;
        the paper's value).
    max_iter : int, default 100
        Rounds of Alg. 1's inner loop per component.
    tol : float, default 1e-12
        Inner loop stops when ``1 - |w_new · w_old| <= tol``.
    client : distributed.Client, optional
        Run the passes on this client (default: dask's current scheduler).

    Attributes
    ----------
    x_weights_ : ndarray (m, k)
        W, unit columns (sign: the entry of largest ``|.|`` positive).
    x_loadings_ : ndarray (m, k)
        P, p_h = X_h^T t_h / t_h^T t_h.
    x_rotations_ : ndarray (m, k)
        R = W (P^T W)^{-1}: scores T = (X - mean) R.
    y_weights_ : ndarray (d, k)
        The unit label weights q of the inner loop (eq. 14).
    y_loadings_ : ndarray (d, k)
        The penalised label loadings Q (eq. 4 with eq. 12's ridge penalty).
    score_sq_norms_ : ndarray (k,)
        σ_h² = t_h^T t_h.
    shrinkage_ : ndarray (k,)
        f(σ_h) = σ_h² / (σ_h² + λ) (eq. 15).
    coef_ : ndarray (m, d)
        ``O = X coef_ + intercept_`` (eq. 5-6).
    intercept_ : ndarray (d,)
        See ``coef_``.
    classes_ : ndarray
        ``arange(d)`` for a label matrix, the class values for 1-D class labels.
    n_components_, n_features_in_, n_labels_, n_samples_ : int
    n_passes_ : int
        Passes over X during ``fit`` (``1 + n_components_``).
    n_iter_ : ndarray (k,)
        Inner-loop rounds per component (one entry per component, as scikit-learn's
        PLS estimators).

    Notes
    -----
    See the module docstring for how the penalty enters and why the weights equal
    PLS-DA's. X may be an ndarray, a scipy.sparse matrix (kept sparse), a dask array of
    row blocks (CSR or dense: the passes run on the cluster, X is never rewritten), a
    store path or an opened store (its X and Y). Targets: a 0/1 documents x labels
    matrix, or 1-D class labels (one 0/1 label per class; ``predict`` returns classes,
    a multi-class target the class of the largest output), as every dmlfe classifier.

    ``decision_function`` is O - θ, so a label is relevant where it is >= 0.
    ``predict_proba`` is a calibration of O, not a fitted probability model: PLS-DA
    regresses the 0/1 labels on the scores, so O estimates P(relevant | x) linearly;
    ``predict_proba`` is expit(4 (O - θ)), which is 1/2 at the threshold with slope 1
    there (P ~ O near θ = 0.5), strictly increasing (the ranking is O's) and in (0, 1).
    When no feature covaries with any label (X^T Y = 0, e.g. a single class), no
    component is extracted (``n_components_`` = 0) and O is the training label
    frequencies.

    The defaults (300 components, λ = 30: the grid's best average precision, 0.8996)
    were chosen by 10-fold cross-validation on medical (train + test pooled, 978
    documents, ~880 per training fold; grid of n_components 20-400 x penalty 0-100 on a
    shuffle other than the reported one, ``benchmarks/ppml_cv.py --tune``). Without the
    penalty the average precision peaks near 60 components and falls as more are added
    (0.81 at 400); with λ = 20-30 it stays at 0.897-0.900 from 160 to 400 components:
    the penalty is what makes many components safe. λ is absolute: scale it with n for
    much larger training sets.
    Each component costs one pass over X.

    Examples
    --------
    PPML fits raw features or embeddings; in memory here, by passes over a store's dask
    arrays otherwise:

    >>> import numpy as np
    >>> import dmlfe
    >>> X = np.random.default_rng(0).random((60, 12))
    >>> Y = (X[:, :3] > 0.5).astype(int)  # three labels, determined by X
    >>> clf = dmlfe.PPML(n_components=5, penalty=1.0).fit(X, Y)
    >>> clf.predict(X).shape, clf.predict_proba(X).shape, clf.transform(X).shape
    ((60, 3), (60, 3), (60, 5))
    """

    _keeps_sparse: ClassVar[bool] = True
    _xfail_checks: ClassVar[dict[str, str]] = {
        **MultiLabelBase._xfail_checks,
        "check_transformer_n_iter": "n_iter_ holds the inner-loop rounds of each component "
                                    "(an array, as scikit-learn's PLS estimators, which the "
                                    "check recognises only by name)",
    }

    def __init__(self, n_components: int = DEFAULT_N_COMPONENTS,
                 penalty: float = DEFAULT_PENALTY, threshold: float = DEFAULT_THRESHOLD,
                 max_iter: int = 100, tol: float = 1e-12, client: Any = None):
        self.n_components = n_components
        self.penalty = penalty
        self.threshold = threshold
        self.max_iter = max_iter
        self.tol = tol
        self.client = client

    # ------------------------------------------------------------------ checks
    def _inputs(self, X: Any, Y: Any) -> tuple[Any, Any]:
        if isinstance(X, (str, os.PathLike)) or hasattr(X, "fingerprint"):
            X, Y = from_store(X, Y, "PPML")
        X, Y = self._fit_input(X, Y)
        X = as_features(X)
        if not isinstance(Y, da.Array):
            Y = dense_block(Y)
            if Y.ndim != 2:
                raise ValueError(f"Y must be a 2-D documents x labels 0/1 matrix; got {Y.shape}")
            Y = check_labels(Y)
        if Y.shape[0] != X.shape[0]:
            raise ValueError(f"Y has {Y.shape[0]} rows but X has {X.shape[0]}; they must match")
        return X, Y

    # ------------------------------------------------------------------ fit
    def fit(self, X: Any, Y: Any = None) -> PPML:
        """Extract the components (Alg. 1, training) and the linear predictor (eq. 5-6).

        Parameters
        ----------
        X : ndarray, scipy.sparse, dask array of row blocks, store path or store
            Documents x features (m columns).
        Y : ndarray, scipy.sparse or dask array, shape (n, d), entries 0/1, or 1-D
            class labels. Optional when X is a store (its labels are used).

        Returns
        -------
        self
        """
        validate(self.get_params(), PARAMS, "PPML")
        X, Y = self._inputs(X, Y)
        lam = float(self.penalty)
        stats = compute_stats(X, Y, client=self.client)  # pass 1: n, means, X^T Y
        n, m, d = stats.n, stats.n_features, stats.n_labels
        if n < 2:
            raise ValueError(f"PPML.fit needs at least 2 documents; got {n} sample(s)")
        C = stats.centred_xty()  # X^T Y on centred data (m x d)
        op = ScatterOperator(X, centre=True, client=self.client)
        k_max = int(self.n_components)
        W, P, R = (np.zeros((m, 0)) for _ in range(3))
        Qw, Ql, sig2, iters = np.zeros((d, 0)), np.zeros((d, 0)), [], []
        c_norm = float(np.linalg.norm(C))
        for _ in range(k_max):
            M = C - P @ (R.T @ C)  # X_h^T Y_h by implicit deflation
            if c_norm == 0 or float(np.linalg.norm(M)) <= 1e-10 * c_norm:
                break
            w, q, rounds = nipals_direction(M, lam, int(self.max_iter), float(self.tol))
            s = flip_signs(w[:, None])[:, 0]
            q = q * float(s @ w)  # keep (w, q) a pair under the sign rule
            w = s
            r = w - R @ (P.T @ w)  # t_h = X_h w = X r
            g = op.matmat(r)[:, 0]  # X^T X r (centred): one pass
            tt = float(r @ g)  # t^T t
            if not tt > 1e-12 * max(op.trace() or 0.0, 1e-300):
                break
            W = np.column_stack([W, w])
            P = np.column_stack([P, g / tt])  # X_h^T t / t^T t (X_h^T t = X^T t)
            R = np.column_stack([R, r])
            Qw = np.column_stack([Qw, q])
            Ql = np.column_stack([Ql, (C.T @ r) / (tt + lam)])  # Y^T t / (t^T t + λ): eq. 12-15
            sig2.append(tt)
            iters.append(rounds)
        self.x_weights_, self.x_loadings_, self.x_rotations_ = W, P, R
        self.y_weights_, self.y_loadings_ = Qw, Ql
        s2 = np.asarray(sig2, dtype=np.float64)
        self.score_sq_norms_ = s2
        self.shrinkage_ = s2 / (s2 + lam)
        self.n_iter_ = np.asarray(iters, dtype=np.int64)
        self.coef_ = R @ Ql.T
        self.intercept_ = stats.mean_y - stats.mean_x @ self.coef_
        self.x_mean_ = stats.mean_x
        self.n_components_ = W.shape[1]
        self.n_features_in_, self.n_labels_, self.n_samples_ = m, d, n
        self.n_passes_ = 1 + op.n_passes
        return self

    # ------------------------------------------------------------------ predict
    def _state(self) -> tuple[np.ndarray, np.ndarray]:
        return self.coef_, self.intercept_ - float(self.threshold)

    _scores = staticmethod(_scores)
    _relevant = staticmethod(_relevant)
    _probabilities = staticmethod(_probabilities)

    def transform(self, X: Any) -> np.ndarray | da.Array:
        """Latent scores ``T = (X - mean) R``, shape ``(n, n_components_)`` (eq. 3).

        Lazy (row chunk by row chunk) for a dask X.
        """
        X = self._check_query(X)
        shift = -(self.x_mean_ @ self.x_rotations_)
        return map_rows(X, _scores, self.n_components_, np.float64, (self.x_rotations_, shift))

    def get_feature_names_out(self, input_features: Any = None) -> np.ndarray:
        """``ppml0``, ``ppml1``, ...: the names of ``transform``'s columns."""
        self._check_fitted()
        return np.array([f"ppml{i}" for i in range(self.n_components_)], dtype=object)
