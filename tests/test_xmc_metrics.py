"""The extreme classification measures (P@k, nDCG@k, PSP@k, PSnDCG@k, recall@k) against
independent plain-Python readings of the Extreme Classification Repository's formulas
(pyxclib's normalisation of the propensity-scored ones), a hand-computed case and
invariants."""

from __future__ import annotations

import json
import math

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp

import dmlfe.evaluation.metrics
import dmlfe.metrics as M


# ------------------------------------------------------------ plain-Python references
def ref_ranking(row_scores: dict[int, float], k: int) -> list[int]:
    """The k best labels: score down, then the lower label index first."""
    return sorted(row_scores, key=lambda j: (-row_scores[j], j))[:k]


def rows_of(scores) -> list[dict[int, float]]:
    """Candidate labels and scores per row: every label (dense), the stored ones (sparse)."""
    if sp.issparse(scores):
        c = sp.coo_matrix(scores)
        out: list[dict[int, float]] = [{} for _ in range(c.shape[0])]
        for i, j, v in zip(c.row, c.col, c.data, strict=True):
            out[int(i)][int(j)] = float(v)
        return out
    return [{j: float(v) for j, v in enumerate(r)} for r in np.asarray(scores)]


def true_sets(Y) -> list[set[int]]:
    Y = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    return [{j for j in range(Y.shape[1]) if Y[i, j]} for i in range(Y.shape[0])]


def ref_measures(Y, scores, k: int, prop=None) -> dict[str, float]:
    T, R = true_sets(Y), rows_of(scores)
    n = len(T)
    P = nD = Rc = 0.0
    psp_num = psp_den = psn_num = psn_den = psp_raw = psn_raw = 0.0
    for t, r in zip(T, R, strict=True):
        top = ref_ranking(r, k)
        P += sum(1 for j in top if j in t) / k
        Rc += (sum(1 for j in top if j in t) / len(t)) if t else 0.0
        z = sum(1 / math.log2(i + 1) for i in range(1, min(k, len(t)) + 1))
        dcg = sum(1 / math.log2(pos + 2) for pos, j in enumerate(top) if j in t)
        nD += dcg / z if t else 0.0
        if prop is not None:
            w = {j: 1 / prop[j] for j in t}
            gain = [w[j] if j in t else 0.0 for j in top]
            best = sorted(w.values(), reverse=True)[:k]
            psp_raw += sum(gain) / k
            psp_num += sum(gain) / k
            psp_den += sum(best) / k
            if t:
                g = sum(v / math.log2(pos + 2) for pos, v in enumerate(gain)) / z
                b = sum(v / math.log2(pos + 2) for pos, v in enumerate(best)) / z
                psn_raw += g
                psn_num += g
                psn_den += b
    out = {"P": P / n, "nDCG": nD / n, "recall": Rc / n}
    if prop is not None:
        out.update(PSP=psp_num / psp_den if psp_den else math.nan,
                   PSnDCG=psn_num / psn_den if psn_den else math.nan,
                   PSP_raw=psp_raw / n, PSnDCG_raw=psn_raw / n)
    return out


def ref_propensities(counts, N, A=0.55, B=1.5):
    C = (math.log(N) - 1) * (B + 1) ** A
    return [1 / (1 + C * math.exp(-A * math.log(c + B))) for c in counts]


def random_case(seed: int, n: int = 40, q: int = 12, ties: bool = False):
    rng = np.random.default_rng(seed)
    Y = (rng.uniform(size=(n, q)) < 0.2).astype(np.uint8)
    Y[:3] = 0  # documents without a relevant label
    S = rng.integers(0, 4, size=(n, q)).astype(float) if ties else rng.normal(size=(n, q))
    prop = rng.uniform(0.05, 1.0, size=q)
    return Y, S, prop


def compare(Y, S, k, prop, ref_scores=None):
    ref = ref_measures(Y, S if ref_scores is None else ref_scores, k, prop)
    assert M.precision_at_k(Y, S, k) == pytest.approx(ref["P"], abs=1e-12)
    assert M.ndcg_at_k(Y, S, k) == pytest.approx(ref["nDCG"], abs=1e-12)
    assert M.recall_at_k(Y, S, k) == pytest.approx(ref["recall"], abs=1e-12)
    assert M.psprecision_at_k(Y, S, k, prop) == pytest.approx(ref["PSP"], abs=1e-12)
    assert M.psndcg_at_k(Y, S, k, prop) == pytest.approx(ref["PSnDCG"], abs=1e-12)
    assert M.psprecision_at_k(Y, S, k, prop, normalize=False) == pytest.approx(
        ref["PSP_raw"], abs=1e-12)
    assert M.psndcg_at_k(Y, S, k, prop, normalize=False) == pytest.approx(
        ref["PSnDCG_raw"], abs=1e-12)


# ------------------------------------------------------------------------- tests
@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 3, 5, 12, 15])  # 12 = q, 15 > q
def test_dense_matches_reference(ties, k):
    Y, S, prop = random_case(1 + ties, ties=ties)
    compare(Y, S, k, prop)


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("k", [1, 3, 5, 15])
def test_sparse_inputs_match_reference(ties, k):
    Y, S, prop = random_case(3 + ties, ties=ties)
    compare(sp.csr_matrix(Y), S, k, prop)  # sparse truth, dense scores
    # scores as predict --top-k writes them: each row's 5 best stored, nothing else
    idx, val = M.top_k(S, 5)
    rows = np.repeat(np.arange(S.shape[0]), 5)
    top = sp.csr_matrix((val.ravel(), (rows, idx.ravel())), shape=S.shape)
    compare(sp.csr_matrix(Y), top, k, prop)
    if k <= 5:  # the top-5 holds the whole top-k: the same values as the full scores
        assert M.ndcg_at_k(Y, top, k) == pytest.approx(M.ndcg_at_k(Y, S, k), abs=1e-12)
        assert M.psndcg_at_k(Y, top, k, prop) == pytest.approx(
            M.psndcg_at_k(Y, S, k, prop), abs=1e-12)


def test_dask_inputs_and_small_blocks(monkeypatch):
    Y, S, prop = random_case(5, n=50, ties=True)
    want = M.xmc_report(Y, S, (1, 3, 5), prop)
    # several row blocks of 2 rows (the constant is read where top_k is defined)
    monkeypatch.setattr(dmlfe.evaluation.metrics, "TOP_K_BLOCK_ENTRIES", 30)
    assert M.xmc_report(Y, S, (1, 3, 5), prop) == want
    got = M.xmc_report(da.from_array(Y, chunks=(7, 12)), da.from_array(S, chunks=(9, 5)),
                       (1, 3, 5), prop)
    assert got == pytest.approx(want, abs=1e-12)


def test_hand_computed_case():
    # doc 0: relevant {0, 2}; ranking 2, 1, 0, 3.  doc 1: relevant {3}; ranking 3, ...
    # doc 2: no relevant label (counts 0)
    Y = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [0, 0, 0, 0]])
    S = np.array([[0.2, 0.5, 0.9, 0.1], [0.3, 0.2, 0.1, 0.8], [0.1, 0.2, 0.3, 0.4]])
    l2, l3 = math.log2(3), math.log2(4)
    assert M.precision_at_k(Y, S, 1) == pytest.approx((1 + 1 + 0) / 3)
    assert M.precision_at_k(Y, S, 3) == pytest.approx((2 / 3 + 1 / 3 + 0) / 3)
    # doc 0: DCG@3 = 1 + 1/log2(4); ideal (2 relevant) = 1 + 1/log2(3). doc 1: 1
    assert M.ndcg_at_k(Y, S, 3) == pytest.approx(((1 + 1 / l3) / (1 + 1 / l2) + 1 + 0) / 3)
    assert M.recall_at_k(Y, S, 1) == pytest.approx((1 / 2 + 1 + 0) / 3)
    p = np.array([0.5, 1.0, 0.25, 1.0])  # 1/p = 2, 1, 4, 1
    # PSP@1: ranking gains 4 (doc 0), 1 (doc 1); ideal 4, 1 -> 1.0 normalised
    assert M.psprecision_at_k(Y, S, 1, p) == pytest.approx(1.0)
    assert M.psprecision_at_k(Y, S, 1, p, normalize=False) == pytest.approx(5 / 3)
    # PSP@3: gains (4 + 2) / 3 and 1 / 3; ideal the same labels -> 1.0
    assert M.psprecision_at_k(Y, S, 3, p) == pytest.approx(1.0)
    # swap doc 0's best: ranking 0, 1, 2 -> gains 2, 0, 4 at places 1, 3
    S2 = S.copy()
    S2[0] = [0.9, 0.5, 0.2, 0.1]
    assert M.psprecision_at_k(Y, S2, 1, p) == pytest.approx((2 + 1) / (4 + 1))
    num = ((2 + 4 / l3) / (1 + 1 / l2) + 1) / 3
    den = ((4 + 2 / l2) / (1 + 1 / l2) + 1) / 3
    assert M.psndcg_at_k(Y, S2, 3, p) == pytest.approx(num / den)
    assert M.psndcg_at_k(Y, S2, 3, p, normalize=False) == pytest.approx(num)


def test_top_k_ties_padding_and_sparse_rows():
    S = np.array([[0.5, 0.7, 0.5, 0.7, -np.inf], [1.0, 1.0, 1.0, 1.0, 1.0]])
    idx, val = M.top_k(S, 3)
    assert idx.tolist() == [[1, 3, 0], [0, 1, 2]]
    assert val.tolist() == [[0.7, 0.7, 0.5], [1.0, 1.0, 1.0]]
    # integer scores rank as numbers (no unsigned wrap-around when negated)
    assert M.top_k(np.array([[0, 3, 255, 3]], dtype=np.uint8), 2)[0].tolist() == [[2, 1]]
    idx, val = M.top_k(S, 7)  # k > q: padded with -1 / -inf
    assert idx.tolist() == [[1, 3, 0, 2, 4, -1, -1], [0, 1, 2, 3, 4, -1, -1]]
    assert np.isneginf(val[:, 5:]).all()
    # sparse: only the stored entries, even a stored negative one; empty row all padding
    Ssp = sp.csr_matrix((np.array([-1.0, 2.0, 2.0]), np.array([4, 3, 1]),
                         np.array([0, 3, 3])), shape=(2, 5))
    idx, val = M.top_k(Ssp, 4)
    assert idx.tolist() == [[1, 3, 4, -1], [-1, -1, -1, -1]]
    assert val[0, :3].tolist() == [2.0, 2.0, -1.0]


def test_invariants():
    for seed in range(4):
        Y, S, prop = random_case(10 + seed, ties=seed % 2 == 1)
        for k in (1, 2, 5, 20):
            p = M.precision_at_k(Y, S, k)
            nd = M.ndcg_at_k(Y, S, k)
            assert 0.0 <= p <= 1.0 and 0.0 <= nd <= 1.0 + 1e-12
            assert 0.0 <= M.recall_at_k(Y, S, k) <= 1.0
            assert 0.0 <= M.psprecision_at_k(Y, S, k, prop) <= 1.0 + 1e-12
            assert 0.0 <= M.psndcg_at_k(Y, S, k, prop) <= 1.0 + 1e-12
            ones = np.ones(Y.shape[1])
            assert M.psprecision_at_k(Y, S, k, ones, normalize=False) == pytest.approx(p)
            assert M.psndcg_at_k(Y, S, k, ones, normalize=False) == pytest.approx(nd)
    # a perfect ranking: nDCG, PSnDCG, PSP at 1, and recall at q
    Y, _, prop = random_case(20)
    perfect = Y + 0.01 * np.arange(Y.shape[1])[None, :] / Y.shape[1]
    with_labels = Y.any(axis=1)
    assert M.ndcg_at_k(Y, perfect, 3) == pytest.approx(with_labels.mean())
    assert M.recall_at_k(Y, Y.astype(float), Y.shape[1]) == pytest.approx(with_labels.mean())
    ideal_ps = Y * (1 / prop)[None, :]
    assert M.psprecision_at_k(Y, ideal_ps, 3, prop) == pytest.approx(1.0)
    assert M.psndcg_at_k(Y, ideal_ps, 5, prop) == pytest.approx(1.0)


def test_no_relevant_label_anywhere():
    Y = np.zeros((3, 4), dtype=np.uint8)
    S = np.arange(12.0).reshape(3, 4)
    assert M.precision_at_k(Y, S, 2) == 0.0 and M.ndcg_at_k(Y, S, 2) == 0.0
    assert M.recall_at_k(Y, S, 2) == 0.0
    assert math.isnan(M.psprecision_at_k(Y, S, 2, np.ones(4)))
    assert M.psprecision_at_k(Y, S, 2, np.ones(4), normalize=False) == 0.0


def test_label_propensities():
    counts = [0, 1, 5, 100, 1000]
    got = M.label_propensities(counts, 1000)
    assert got == pytest.approx(ref_propensities(counts, 1000), rel=1e-12)
    assert np.all(np.diff(got) > 0) and np.all((got > 0) & (got < 1))
    got = M.label_propensities(counts, 1000, A=0.5, B=0.4)
    assert got == pytest.approx(ref_propensities(counts, 1000, 0.5, 0.4), rel=1e-12)


def test_xmc_report_keys_and_values():
    Y, S, prop = random_case(30)
    rep = M.xmc_report(sp.csr_matrix(Y), S, (5, 1, 3), prop)
    assert list(rep) == ["P@1", "nDCG@1", "PSP@1", "PSnDCG@1", "P@3", "nDCG@3", "PSP@3",
                         "PSnDCG@3", "P@5", "nDCG@5", "PSP@5", "PSnDCG@5", "recall@5"]
    for k in (1, 3, 5):
        ref = ref_measures(Y, S, k, prop)
        assert rep[f"P@{k}"] == pytest.approx(ref["P"])
        assert rep[f"PSnDCG@{k}"] == pytest.approx(ref["PSnDCG"])
    assert rep["recall@5"] == pytest.approx(ref_measures(Y, S, 5)["recall"])
    assert "PSP@1" not in M.xmc_report(Y, S, (1,))


def test_metric_report_xmc_and_large_label_sets(monkeypatch):
    Y, S, prop = random_case(50)
    P = (S > 0.5).astype(np.uint8)
    rep = M.metric_report(Y, P, S)  # q = 12 < XMC_LABELS: the 13 measures only
    assert "ranking_loss" in rep and "P@1" not in rep and "skipped_measures" not in rep
    rep = M.metric_report(Y, P, S, xmc=True, ks=(2,), propensities=prop)
    assert {k: rep[k] for k in ("P@2", "nDCG@2", "PSP@2", "PSnDCG@2", "recall@2")} == \
        M.xmc_report(Y, S, (2,), prop)
    monkeypatch.setattr(dmlfe.evaluation.metrics, "XMC_LABELS", 12)  # q = 12 is "large"
    rep = M.metric_report(Y, P, S)
    assert "P@5" in rep and "PSP@5" not in rep  # no propensities given
    assert rep["skipped_measures"] == list(M.RANKING_METRICS) and "coverage" not in rep
    assert rep["micro_f1"] == M.micro_f1(Y, P)
    rep = M.metric_report(Y, P, S, ranking=True, xmc=False)
    assert "coverage" in rep and "P@1" not in rep


def test_errors_name_the_bad_value():
    Y, S, prop = random_case(40)
    with pytest.raises(ValueError, match="k must be a positive integer; got 0"):
        M.precision_at_k(Y, S, 0)
    with pytest.raises(ValueError, match=r"shape \(40, 12\) but scores has shape \(40, 11\)"):
        M.ndcg_at_k(Y, S[:, :11], 3)
    with pytest.raises(ValueError, match=r"propensities must hold one value per label \(12\)"):
        M.psprecision_at_k(Y, S, 3, prop[:5])
    bad = prop.copy()
    bad[4] = 0.0
    with pytest.raises(ValueError, match=r"propensities\[4\] = 0.0"):
        M.psndcg_at_k(Y, S, 3, bad)
    S2 = S.copy()
    S2[2, 7] = np.nan
    with pytest.raises(ValueError, match=r"scores\[row 2, label 7\] is NaN"):
        M.top_k(S2, 2)
    Y2 = Y.copy()
    Y2[1, 3] = 2
    with pytest.raises(ValueError, match=r"Y_true\[row 1, label 3\] = 2"):
        M.precision_at_k(sp.csr_matrix(Y2), S, 1)
    with pytest.raises(ValueError, match=r"label_counts\[1\] = 11.0"):
        M.label_propensities([1, 11], 10)
    with pytest.raises(ValueError, match="A must be a finite number > 0; got -1"):
        M.label_propensities([1, 2], 10, A=-1)
    with pytest.raises(ValueError, match="n_docs = 1"):
        M.label_propensities([0, 1], 1)


# ---------------------------------------------------------------- the command line
N_DOCS, N_FEATURES, N_LABELS = 150, 30, 12


@pytest.fixture(scope="module")
def xmc_fitted(tmp_path_factory, cluster_client):
    from helpers import write_store

    from dmlfe.cli import main

    tmp = tmp_path_factory.mktemp("xmc")
    rng = np.random.default_rng(11)
    Y = (rng.uniform(size=(N_DOCS, N_LABELS)) < 0.2).astype(np.uint8)
    X = Y @ rng.normal(size=(N_LABELS, N_FEATURES)) + 0.5 * rng.normal(
        size=(N_DOCS, N_FEATURES))
    splits = ["train" if i % 3 else "test" for i in range(N_DOCS)]
    store = write_store(tmp / "s.zarr", sp.csr_matrix(X), Y, splits, chunk_rows=16)
    address = cluster_client.scheduler.address
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "4", "--split", "train",
                 "--classifier", "ridge", "--out", str(tmp / "model"), "--scheduler",
                 address, "--quiet"]) == 0
    return tmp, store, tmp / "model", address, (sp.csr_matrix(X), Y, splits)


def _in_memory(model_dir, X, Y, splits):
    import dmlfe
    from dmlfe.classifier_files import load_classifier

    rows = np.array([s == "test" for s in splits])
    _, clf = load_classifier(model_dir)
    Z = np.asarray(dmlfe.load_model(model_dir).transform(X[rows]))
    return Y[rows], np.asarray(clf.predict(Z)), np.asarray(clf.predict_proba(Z)), rows


def test_cli_evaluate_xmc(xmc_fitted, capsys):
    from dmlfe.cli import main

    tmp, store, model_dir, address, (X, Y, splits) = xmc_fitted
    out = tmp / "xmc.json"
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--xmc", "--k",
                 "2,1", "--json", str(out), "--scheduler", address, "--overwrite"]) == 0
    table = capsys.readouterr().out
    doc = json.loads(out.read_text())
    got = doc["metrics"]
    T, _, S, _ = _in_memory(model_dir, X, Y, splits)
    train = Y[[s == "train" for s in splits]]
    prop = ref_propensities(train.sum(axis=0).tolist(), len(train))
    for k in (1, 2):
        ref = ref_measures(T, S, k, prop)
        for fam in ("P", "nDCG", "PSP", "PSnDCG"):
            assert got[f"{fam}@{k}"] == pytest.approx(ref[fam], abs=1e-12), (fam, k)
    assert got["recall@2"] == pytest.approx(ref_measures(T, S, 2)["recall"], abs=1e-12)
    assert "ranking_loss" in got and "skipped_measures" not in got  # q = 12: all 13 too
    assert doc["propensities"]["from"] == "training" and doc["propensities"]["n_docs"] == 100
    lines = table.splitlines()
    assert any(line.split()[:3] == ["PSnDCG", f"{got['PSnDCG@1']:.4f}",
                                    f"{got['PSnDCG@2']:.4f}"] for line in lines)
    assert any(line.startswith("recall@2") for line in lines)
    assert "propensities (A = 0.55, B = 1.5) from the training labels" in table


def test_cli_evaluate_many_labels_and_no_training_store(xmc_fitted, capsys, monkeypatch):
    import dmlfe.cli.transform as T_cli
    from dmlfe.cli import main

    tmp, store, model_dir, address, (X, Y, splits) = xmc_fitted
    # as if the store had many labels: XMC by default, the ranking measures left out
    monkeypatch.setattr(T_cli, "XMC_LABELS", 10)
    monkeypatch.setattr(dmlfe.evaluation.metrics, "XMC_LABELS", 10)

    def gone(path, **kw):
        raise FileNotFoundError(f"{path} does not exist")

    monkeypatch.setattr(T_cli, "open_store", gone)  # the training store moved away
    seen = []

    def report(Y, P, *args, **kwargs):
        seen.append((Y, P))
        return M.metric_report(Y, P, *args, **kwargs)

    monkeypatch.setattr(T_cli, "metric_report", report)
    out = tmp / "many.json"
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json",
                 str(out), "--scheduler", address, "--overwrite"]) == 0
    table = capsys.readouterr().out
    doc = json.loads(out.read_text())
    got = doc["metrics"]
    T, P, S, _ = _in_memory(model_dir, X, Y, splits)
    prop = ref_propensities(T.sum(axis=0).tolist(), len(T))
    ref = ref_measures(T, S, 5, prop)
    assert got["PSP@5"] == pytest.approx(ref["PSP"], abs=1e-12)
    assert got["recall@5"] == pytest.approx(ref["recall"], abs=1e-12)
    assert set(got) >= {"P@1", "P@3", "P@5", "nDCG@3", "PSnDCG@5", "micro_f1"}
    for k in (1, 3):  # the scores were kept as each document's top 5 only: the same values
        ref = ref_measures(T, S, k, prop)
        assert got[f"nDCG@{k}"] == pytest.approx(ref["nDCG"], abs=1e-12)
        assert got[f"PSnDCG@{k}"] == pytest.approx(ref["PSnDCG"], abs=1e-12)
    # and the predicted label sets (kept as index lists) give the label-set measures
    for name in M.LABEL_SET_METRICS:
        assert got[name] == pytest.approx(getattr(M, name)(T, P), abs=1e-12), name
    assert "ranking_loss" not in got and got["skipped_measures"] == list(M.RANKING_METRICS)
    assert doc["propensities"]["from"] == "evaluated"
    assert "from the evaluated labels" in table and "--all-metrics" in table
    assert main(["evaluate", str(model_dir), str(store), "--split", "test", "--json", "-",
                 "--all-metrics", "--scheduler", address, "--quiet"]) == 0
    got = json.loads(capsys.readouterr().out)["metrics"]
    assert "ranking_loss" in got and "P@5" in got
    # the true labels reach the measures as CSR on both paths, the predicted label sets
    # too where only the top k scores were kept
    assert len(seen) == 2
    assert all(Y.format == "csr" for Y, _ in seen) and seen[0][1].format == "csr"


def test_cli_predict_top_k(xmc_fitted, capsys):
    from dmlfe.cli import main

    tmp, store, model_dir, address, (X, Y, splits) = xmc_fitted
    out = tmp / "top.jsonl"
    assert main(["predict", str(model_dir), str(store), "--split", "test", "--top-k", "3",
                 "--out", str(out), "--scheduler", address, "--overwrite"]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    _, P, S, rows = _in_memory(model_dir, X, Y, splits)
    names = [f"L{j}" for j in range(N_LABELS)]
    assert len(got) == rows.sum()
    for g, p, s in zip(got, P, S, strict=True):
        assert g["labels"] == [names[j] for j in np.flatnonzero(p)]
        best = ref_ranking(dict(enumerate(s.tolist())), 3)
        assert list(g["scores"]) == [names[j] for j in best]  # best first
        assert list(g["scores"].values()) == pytest.approx(s[best].tolist(), abs=1e-12)
    with pytest.raises(SystemExit):  # argparse: "'0': give a positive integer"
        main(["predict", str(model_dir), str(store), "--top-k", "0", "--out", "-"])
    assert "'0': give a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["ridge", "mlknn"])
def test_top_k_blocks_slice_the_rows_and_equal_predict_and_top_k(monkeypatch, name):
    import dask.array as da

    from dmlfe.evaluation import metrics
    from dmlfe.evaluation.registry import get_classifier

    rng = np.random.default_rng(4)
    Z = rng.normal(size=(90, 5))
    Y = (rng.random((90, 40)) < 0.1).astype(np.uint8)
    clf = get_classifier(name).make().fit(Z[:60], Y[:60])
    monkeypatch.setattr(metrics, "TOP_K_BLOCK_ENTRIES", 7 * 40)  # slices of 7 rows
    parts = da.compute(*clf.top_k_blocks(da.from_array(Z[60:], chunks=(16, 5)), 4))
    found = [f for p in parts for f in p[0]]
    idx = np.concatenate([p[1] for p in parts])
    vals = np.concatenate([p[2] for p in parts])
    ref_idx, ref_vals = M.top_k(clf.predict_proba(Z[60:]), 4)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(vals, ref_vals, rtol=1e-14)
    P = clf.predict(Z[60:])
    assert [list(f) for f in found] == [list(np.flatnonzero(r)) for r in P]
