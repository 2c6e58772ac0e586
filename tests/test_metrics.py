"""The evaluation measures: hand-computed cases from the papers' formulas, scikit-learn
where it has the measure, and direct (loop) readings of the MDDM 4.2 definitions."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import metrics as skm

import dmlfe.metrics as M

# ------------------------------------------------------------------ hand-made cases
# 4 documents, 3 labels. T: {0,1}, {}, {2}, {}   P: {1,2}, {}, {}, {0}
T4 = np.array([[1, 1, 0], [0, 0, 0], [0, 0, 1], [0, 0, 0]])
P4 = np.array([[0, 1, 1], [0, 0, 0], [0, 0, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("hamming_loss", (2 + 0 + 1 + 1) / 12),
        # Jaccard: 1/3; both empty -> 1; 0/1; 0/1
        ("example_accuracy", (1 / 3 + 1 + 0 + 0) / 4),
        # |P| = 2 -> 1/2; both empty -> 1; empty P, T = {2} -> 0; 0/1
        ("example_precision", (0.5 + 1 + 0 + 0) / 4),
        # 1/2; both empty -> 1; 0/1; empty T, P = {0} -> 0 (symmetric convention)
        ("example_recall", (0.5 + 1 + 0 + 0) / 4),
        ("example_f1", (2 * 1 / 4 + 1 + 0 + 0) / 4),
        ("subset_accuracy", 1 / 4),
        ("micro_f1", 2 * 1 / (3 + 3)),
        # label 0: tp 0 -> 0; label 1: 2*1/(1+1) = 1; label 2: 0
        ("macro_f1", 1 / 3),
    ],
)
def test_label_set_measures_hand_made(name, expected):
    assert getattr(M, name)(T4, P4) == pytest.approx(expected, abs=1e-15)


def test_macro_f1_label_without_positives():
    T = np.array([[1, 0, 0], [0, 0, 0], [1, 0, 0]])
    P = np.array([[1, 0, 1], [0, 0, 0], [0, 0, 0]])
    # label 0: 2/(2+1); label 1: no positives, no predictions -> 1; label 2: predicted, no
    # positives -> 0
    assert M.macro_f1(T, P) == pytest.approx((2 / 3 + 1 + 0) / 3)
    assert M.micro_f1(np.zeros((2, 2)), np.zeros((2, 2))) == 1.0


# Ranking: rows 3 (no label) and 4 (all labels) define no ranking and are skipped.
TR = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
SR = np.array([
    [0.9, 0.8, 0.3, 0.3],  # ranks 1, 2, 4, 4 (the tie takes the worse rank)
    [0.5, 0.5, 0.1, 0.0],  # ranks 2, 2, 3, 4; top score shared with an irrelevant label
    [0.1, 0.2, 0.3, 0.4],
    [0.4, 0.3, 0.2, 0.1],
])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # row 0: worst relevant rank 4 -> 3; row 1: rank 2 -> 1
        ("coverage", (3 + 1) / 2),
        # row 0: label 0: 1/1, label 2: 2/4; row 1: 1/2
        ("average_precision", ((1 + 0.5) / 2 + 0.5) / 2),
        # row 0: (2,1) wrong, (2,3) tie = wrong -> 2/4; row 1: (1,0) tie -> 1/3
        ("ranking_loss", (2 / 4 + 1 / 3) / 2),
        # row 0: top is relevant; row 1: the tie at the top includes irrelevant label 0
        ("one_error", 1 / 2),
    ],
)
def test_ranking_measures_hand_made(name, expected):
    assert getattr(M, name)(TR, SR) == pytest.approx(expected, abs=1e-15)
    assert M.ranking_skipped(TR) == 2


def test_macro_auc_hand_made_and_skipped_labels():
    y = np.array([1, 0, 1, 0, 0])
    s = np.array([0.9, 0.9, 0.1, 0.5, 0.0])
    # positive-negative pairs: (.9,.9) 1/2, (.9,.5) 1, (.9,0) 1, (.1,.9) 0, (.1,.5) 0, (.1,0) 1
    T = np.stack([y, np.zeros(5, int), np.ones(5, int)], axis=1)
    S = np.stack([s, s, s], axis=1)
    assert M.macro_auc(T, S) == pytest.approx(3.5 / 6)
    assert M.auc_skipped(T) == 2
    assert np.isnan(M.macro_auc(T[:, 1:], S[:, 1:]))


def test_all_documents_skipped_is_nan():
    T = np.array([[0, 0], [1, 1]])
    S = np.array([[0.1, 0.2], [0.3, 0.1]])
    for name in ("ranking_loss", "one_error", "coverage", "average_precision"):
        assert np.isnan(getattr(M, name)(T, S))


# ------------------------------------------------------------ scikit-learn references
def _random_case(seed: int, n: int = 300, q: int = 7, ties: bool = False):
    rng = np.random.default_rng(seed)
    T = (rng.random((n, q)) < 0.3).astype(np.int8)
    T[:5] = 0
    T[5:8] = 1
    S = rng.normal(size=(n, q)) + 1.5 * T
    if ties:
        S = np.round(S)  # many tied scores
    P = (S + rng.normal(scale=0.8, size=(n, q)) > 1.0).astype(np.int8)
    P[8:12] = 0
    return T, P, S


@pytest.mark.parametrize("seed", [0, 1])
def test_label_set_measures_match_sklearn(seed):
    T, P, _ = _random_case(seed)
    assert M.hamming_loss(T, P) == pytest.approx(skm.hamming_loss(T, P), abs=1e-14)
    assert M.subset_accuracy(T, P) == pytest.approx(skm.accuracy_score(T, P), abs=1e-14)
    for avg, fn in (("micro", M.micro_f1), ("macro", M.macro_f1)):
        ref = skm.f1_score(T, P, average=avg, zero_division=1.0)
        assert fn(T, P) == pytest.approx(ref, abs=1e-14)
    ref = skm.jaccard_score(T, P, average="samples", zero_division=1.0)
    assert M.example_accuracy(T, P) == pytest.approx(ref, abs=1e-14)
    # sklearn's per-sample conventions for empty sets differ; compare where both are non-empty
    both = T.any(axis=1) & P.any(axis=1)
    assert (~both).sum() > 5
    for fn, ref_fn in ((M.example_precision, skm.precision_score),
                       (M.example_recall, skm.recall_score), (M.example_f1, skm.f1_score)):
        ref = ref_fn(T[both], P[both], average="samples")
        assert fn(T[both], P[both]) == pytest.approx(ref, abs=1e-14)


def _direct_ranking(T: np.ndarray, S: np.ndarray) -> dict[str, float]:
    """MDDM 4.2 read literally, with rank_j = #{k : f_k >= f_j} (pessimistic)."""
    rl, oe, cv, ap = [], [], [], []
    for t, s in zip(T, S, strict=True):
        rel = [j for j in range(len(t)) if t[j]]
        irr = [j for j in range(len(t)) if not t[j]]
        if not rel or not irr:
            continue
        rank = {j: sum(s[k] >= s[j] for k in range(len(s))) for j in range(len(s))}
        rl.append(sum(s[a] <= s[b] for a in rel for b in irr) / (len(rel) * len(irr)))
        top = [j for j in range(len(s)) if s[j] == s.max()]
        oe.append(float(any(not t[j] for j in top)))
        cv.append(max(rank[j] for j in rel) - 1)
        ap.append(np.mean([sum(rank[i] <= rank[j] for i in rel) / rank[j] for j in rel]))
    return {"ranking_loss": np.mean(rl), "one_error": np.mean(oe), "coverage": np.mean(cv),
            "average_precision": np.mean(ap)}


@pytest.mark.parametrize("ties", [False, True])
def test_ranking_measures_match_sklearn_and_direct_reading(ties):
    T, _, S = _random_case(3, n=120, ties=ties)
    ref = _direct_ranking(T, S)
    for name, value in ref.items():
        assert getattr(M, name)(T, S) == pytest.approx(value, abs=1e-12), name
    keep = (T.sum(axis=1) > 0) & (T.sum(axis=1) < T.shape[1])
    Tk, Sk = T[keep], S[keep]
    assert M.ranking_skipped(T) == (~keep).sum() >= 8
    assert M.ranking_loss(T, S) == pytest.approx(skm.label_ranking_loss(Tk, Sk), abs=1e-12)
    assert M.coverage(T, S) == pytest.approx(skm.coverage_error(Tk, Sk) - 1, abs=1e-12)
    lrap = skm.label_ranking_average_precision_score(Tk, Sk)
    assert M.average_precision(T, S) == pytest.approx(lrap, abs=1e-12)


@pytest.mark.parametrize("ties", [False, True])
def test_macro_auc_matches_sklearn(ties):
    T, _, S = _random_case(4, ties=ties)
    T[:, 2] = 0  # no positives: skipped
    S[:, 3] = -np.inf  # infinite scores are allowed (constant-label classifiers)
    kept = [j for j in range(T.shape[1]) if j != 2]
    ref = skm.roc_auc_score(T[:, kept], np.where(np.isinf(S), -1e300, S)[:, kept],
                            average="macro")
    assert M.macro_auc(T, S) == pytest.approx(ref, abs=1e-12)
    assert M.auc_skipped(T) == 1


# ------------------------------------------------------------------------ redundancy
def test_redundancy_hand_made():
    X = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0]])
    # cos^2: (0,1) = 1/2, (0,2) = 0, (1,2) = 1/2; ordered pairs sum 2, m (m - 1) = 6
    raw = {"centered": False}
    assert M.redundancy(X, [0, 1, 2], **raw) == pytest.approx(1 / 3)
    assert M.redundancy(X, np.array([True, True, False, False]), **raw) == pytest.approx(0.5)
    assert M.redundancy(X, [0, 3], **raw) == 0.0  # zero column: cosine 0
    # centred (eq. 12-13): columns 0 and 2 become -+1/2, column 1 constant (cosine 0)
    assert M.redundancy(X, [0, 1, 2]) == pytest.approx(2 / 6)
    assert M.redundancy(X, [2]) == 0.0
    with pytest.raises(ValueError, match="selected twice"):
        M.redundancy(X, [1, 1])
    with pytest.raises(ValueError, match="outside 0..3"):
        M.redundancy(X, [0, 4])


def test_redundancy_sparse_and_dask_match_sklearn_cosine():
    from sklearn.metrics.pairwise import cosine_similarity

    Xs = sp.random(90, 30, density=0.2, format="csr", random_state=6) * 3.0
    sel = [3, 7, 11, 20, 29]
    C = cosine_similarity(Xs[:, sel].T.toarray()) ** 2
    ref = (C.sum() - np.trace(C)) / (5 * 4)
    assert M.redundancy(Xs, sel, centered=False) == pytest.approx(ref, rel=1e-12)
    assert M.redundancy(Xs.toarray(), sel, centered=False) == pytest.approx(ref, rel=1e-12)
    blocks = [Xs[i:i + 25] for i in range(0, 90, 25)]
    Xd = da.concatenate([da.from_array(b, chunks=b.shape, asarray=False) for b in blocks])
    assert M.redundancy(Xd, sel, centered=False) == pytest.approx(ref, rel=1e-12)
    # centred: eq. 12's squared Pearson correlations
    Cc = np.corrcoef(Xs[:, sel].toarray().T) ** 2
    refc = (Cc.sum() - np.trace(Cc)) / (5 * 4)
    assert M.redundancy(Xs, sel) == pytest.approx(refc, rel=1e-10)
    assert M.redundancy(Xd, sel) == pytest.approx(refc, rel=1e-10)


# --------------------------------------------------------------- report and inputs
def test_metric_report_and_dask_inputs():
    T, P, S = _random_case(7)
    rep = M.metric_report(da.from_array(T, chunks=50), da.from_array(P, chunks=50),
                          da.from_array(S, chunks=50))
    for name in M.LABEL_SET_METRICS:
        assert rep[name] == getattr(M, name)(T, P)
    for name in M.RANKING_METRICS:
        assert rep[name] == getattr(M, name)(T, S)
    assert rep["n_documents"] == 300 and rep["n_labels"] == 7
    assert rep["n_ranking_skipped"] == M.ranking_skipped(T) >= 8
    assert rep["n_auc_labels_skipped"] == 0
    assert all(isinstance(v, float | int) for v in rep.values())
    assert "ranking_loss" not in M.metric_report(T, P)


def test_input_errors_name_the_problem():
    with pytest.raises(ValueError, match=r"Y_pred\[row 1, label 2\] = 2"):
        M.hamming_loss(T4, np.array([[0, 1, 1], [0, 0, 2], [0, 0, 0], [1, 0, 0]]))
    with pytest.raises(ValueError, match="shape"):
        M.example_f1(T4, P4[:, :2])
    S = SR.copy()
    S[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"scores\[row 1, label 2\] is NaN"):
        M.coverage(TR, S)


# ------------------------------------------------------- sparse label-set inputs
def _reference_set_measures(T: np.ndarray, P: np.ndarray) -> dict[str, float]:
    """The module docstring's definitions, read one document and one label at a time."""
    T, P = T.astype(bool), P.astype(bool)
    n, q = T.shape
    acc, prec, rec, f1, exact = [], [], [], [], []
    for t, p in zip(T, P, strict=True):
        inter, union, nt, npred = int((t & p).sum()), int((t | p).sum()), int(t.sum()), int(p.sum())
        acc.append(1.0 if union == 0 else inter / union)
        prec.append(float(nt == 0) if npred == 0 else inter / npred)
        rec.append(float(npred == 0) if nt == 0 else inter / nt)
        f1.append(1.0 if nt + npred == 0 else 2 * inter / (nt + npred))
        exact.append(bool((t == p).all()))
    per_label = []
    for j in range(q):
        t, p = T[:, j], P[:, j]
        tp, fp, fn = int((t & p).sum()), int((~t & p).sum()), int((t & ~p).sum())
        per_label.append(1.0 if tp + fp + fn == 0 else 2 * tp / (2 * tp + fp + fn))
    pooled = int(T.sum()) + int(P.sum())
    return {
        "hamming_loss": int((T ^ P).sum()) / (n * q),
        "example_accuracy": float(np.mean(acc)),
        "example_precision": float(np.mean(prec)),
        "example_recall": float(np.mean(rec)),
        "example_f1": float(np.mean(f1)),
        "subset_accuracy": float(np.mean(exact)),
        "micro_f1": 1.0 if pooled == 0 else 2 * int((T & P).sum()) / pooled,
        "macro_f1": float(np.mean(per_label)),
    }


def _set_case(seed: int, n: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """0/1 (T, P) with every convention's case: documents with T, P or both empty, a
    document with P == T, labels never true nor predicted, only predicted, only true."""
    rng = np.random.default_rng(seed)
    T = (rng.random((n, q)) < rng.uniform(0.1, 0.4)).astype(np.uint8)
    P = T ^ (rng.random((n, q)) < 0.15).astype(np.uint8)
    T[:4] = 0
    P[2:6] = 0
    T[:, 1] = P[:, 1] = 0
    T[:, 2] = 0
    P[7:, 2] = 1
    P[:, 3] = 0
    T[7:, 3] = 1
    P[10] = T[10]
    return T, P


SET_CASES = [(0, 50, 5), (1, 120, 17), (2, 200, 40)]


def _forms(T: np.ndarray, P: np.ndarray) -> dict[str, tuple]:
    n, q = T.shape

    def csr(a: np.ndarray, dtype: type = np.uint8) -> sp.csr_matrix:
        return sp.csr_matrix(a.astype(dtype))

    def dask_csr(a: np.ndarray) -> da.Array:
        return da.from_array(csr(a), chunks=(n // 3 + 1, q), asarray=False)

    return {"csr-csr": (csr(T), csr(P, np.float64)), "dense-csr": (T, csr(P)),
            "csr-dense": (csr(T, np.int8), P.astype(bool)),
            "dask_csr": (dask_csr(T), dask_csr(P)),
            "csr_array-coo": (sp.csr_array(T), sp.coo_matrix(P))}


@pytest.mark.parametrize(("seed", "n", "q"), SET_CASES)
def test_label_set_measures_sparse_inputs_match_the_definitions(seed, n, q):
    T, P = _set_case(seed, n, q)
    assert (~T.any(axis=1) & ~P.any(axis=1)).any() and (T.any(axis=1) & ~P.any(axis=1)).any()
    assert (~T.any(axis=1) & P.any(axis=1)).any()
    ref = _reference_set_measures(T, P)
    dense = {name: getattr(M, name)(T, P) for name in M.LABEL_SET_METRICS}
    for name in M.LABEL_SET_METRICS:
        assert dense[name] == pytest.approx(ref[name], rel=1e-15, abs=0), name
    for form, (Tf, Pf) in _forms(T, P).items():
        rep = M.metric_report(Tf, Pf)
        assert rep["n_documents"] == n and rep["n_labels"] == q
        for name in M.LABEL_SET_METRICS:
            got = getattr(M, name)(Tf, Pf)
            assert got == pytest.approx(ref[name], rel=1e-15, abs=0), (form, name)
            assert got == pytest.approx(dense[name], rel=1e-15, abs=0), (form, name)
            assert rep[name] == got, (form, name)


def test_label_set_measures_never_densify_sparse_labels(monkeypatch):
    import tracemalloc

    n, q = 400, 100_000  # a dense n x q copy: 40 MB even as bool
    rng = np.random.default_rng(3)
    rows = np.repeat(np.arange(n), 3)
    T = sp.csr_matrix((np.ones(rows.size, dtype=np.uint8), (rows, rng.integers(0, q, rows.size))),
                      shape=(n, q))
    T.data[:] = 1
    P = T.copy()
    P.data[::4] = 0  # explicit zeros: not predicted
    scores = sp.csr_matrix(T, dtype=np.float64)

    def refuse(self, *args, **kwargs):
        raise AssertionError("a sparse label matrix was densified")

    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix):
        monkeypatch.setattr(cls, "toarray", refuse)
        monkeypatch.setattr(cls, "todense", refuse)
    tracemalloc.start()
    try:
        rep = M.metric_report(T, P, scores, ranking=False, xmc=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < n * q // 4
    assert rep["n_labels"] == q and rep["skipped_measures"] == list(M.RANKING_METRICS)
    assert 0 < rep["micro_f1"] < 1 and "P@1" in rep
    assert M.macro_f1(T, P) == rep["macro_f1"]


def test_sparse_label_errors_name_the_stored_entry():
    T, P = _set_case(0, 50, 5)
    for value, shown in ((3.0, "3.0"), (np.nan, "nan")):
        bad = P.astype(np.float64)
        bad[6, 4] = value
        with pytest.raises(ValueError, match=rf"Y_pred\[row 6, label 4\] = {shown}: Y_pred "
                                             r"must be a 0/1 indicator matrix"):
            M.metric_report(sp.csr_matrix(T), sp.csr_matrix(bad))
    # duplicate entries add up, as in a dense copy: two stored 1s at (9, 0) are a 2
    indptr = np.r_[np.zeros(10, dtype=np.int64), np.full(41, 2, dtype=np.int64)]
    dup = sp.csr_matrix((np.ones(2, dtype=np.int8), np.zeros(2, dtype=np.int32), indptr),
                        shape=T.shape)
    with pytest.raises(ValueError, match=r"Y_true\[row 9, label 0\] = 2"):
        M.hamming_loss(dup, P)
    with pytest.raises(ValueError, match=r"Y_true has shape \(50, 5\) but Y_pred has shape "
                                         r"\(50, 4\)"):
        M.micro_f1(sp.csr_matrix(T), sp.csr_matrix(P[:, :4]))
    zeros = sp.csr_matrix(T.astype(np.float64))
    zeros.data[:] = 0.0  # stored zeros are no labels
    assert M.micro_f1(zeros, sp.csr_matrix(P)) == M.micro_f1(np.zeros_like(T), P)
