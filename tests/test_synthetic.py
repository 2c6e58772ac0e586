"""Tests of the synthetic labelled corpus (dmlfe.readers.synthetic)."""

from __future__ import annotations

import json
import pickle
import re
from functools import lru_cache

import numpy as np
import pytest
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.linear_model import RidgeClassifier
from sklearn.metrics import f1_score
from sklearn.preprocessing import MultiLabelBinarizer

from dmlfe.readers import synthetic as syn
from dmlfe.readers.base import TextBatch
from dmlfe.readers.synthetic import SyntheticCorpus, synthetic_vocabulary, synthetic_word


def _concat(batches: list[TextBatch]) -> TextBatch:
    out = TextBatch(ids=[], texts=[], labels=[], splits=[])
    for b in batches:
        out.ids += b.ids
        out.texts += b.texts
        out.labels += b.labels
        out.splits += b.splits
    return out


def _as_tuple(b: TextBatch) -> tuple:
    return (b.ids, b.texts, b.labels, b.splits)


@lru_cache(maxsize=2)
def _big(seed: int = 11) -> tuple[SyntheticCorpus, TextBatch, np.ndarray]:
    """20,000 documents and their 0/1 label matrix (shared by the statistics tests)."""
    c = SyntheticCorpus(20_000, seed=seed)
    b = c.part(0, 20_000)
    y = MultiLabelBinarizer(classes=c.label_names).fit_transform(b.labels)
    return c, b, y


def test_labels_are_learnable_by_a_linear_classifier():
    c = SyntheticCorpus(4_000, seed=0)
    b = c.part(0, 4_000)
    train = np.array([s == "train" for s in b.splits])
    y = MultiLabelBinarizer(classes=c.label_names).fit_transform(b.labels)
    x = TfidfVectorizer(sublinear_tf=True).fit_transform(b.texts)
    # One ridge regression per label on +-1 targets (one-vs-rest), sign as decision.
    pred = RidgeClassifier(alpha=1.0, solver="sparse_cg").fit(x[train], y[train]).predict(x[~train])
    y_test = y[~train]
    model_f1 = f1_score(y_test, pred, average="micro")

    # Chance baselines. (a) Predict every label for every document.
    all_f1 = f1_score(y_test, np.ones_like(y_test), average="micro")
    # (b) Predict label l independently with its training prior p_l: in expectation
    # TP = sum_l p_l n1_l, predicted = n sum_l p_l, actual = sum_l n1_l.
    p = y[train].mean(axis=0)
    n1 = y_test.sum(axis=0)
    prior_f1 = 2 * np.sum(p * n1) / (y_test.shape[0] * p.sum() + n1.sum())
    chance = max(all_f1, prior_f1)
    print(
        f"\nsynthetic learnability (4,000 docs, {int(train.sum())} train / {int((~train).sum())}"
        f" test, {x.shape[1]} terms): tf-idf + one-vs-rest ridge classifier micro-F1 = "
        f"{model_f1:.3f}; chance: predict-all {all_f1:.3f}, random-with-priors {prior_f1:.3f}"
    )
    assert model_f1 >= chance + 0.25


def test_same_seed_same_documents_different_seed_different_documents():
    a = SyntheticCorpus(1_500, seed=5).part(0, 1_500)
    syn._block.cache_clear()
    syn._model.cache_clear()
    b = SyntheticCorpus(1_500, seed=5).part(0, 1_500)
    assert _as_tuple(a) == _as_tuple(b)
    other = SyntheticCorpus(1_500, seed=6).part(0, 1_500)
    assert other.ids == a.ids
    same_text = sum(s == t for s, t in zip(a.texts, other.texts, strict=True))
    same_labels = sum(s == t for s, t in zip(a.labels, other.labels, strict=True))
    assert same_text <= 5  # only empty documents may coincide
    assert same_labels < 0.5 * len(a)


def test_documents_do_not_depend_on_part_size_or_n_docs():
    c = SyntheticCorpus(2_500, seed=2)  # crosses the internal 1,024-document blocks
    assert c.n_parts(7) == 358 and c.n_parts(1_000) == 3 and c.n_parts(2_500) == 1
    small = _concat([c.part(i, 7) for i in range(c.n_parts(7))])
    large = _concat([c.part(i, 1_000) for i in range(3)])
    whole = _concat(list(c.batches(2_500)))
    assert len(small) == 2_500
    assert _as_tuple(small) == _as_tuple(large) == _as_tuple(whole)
    assert len(c.part(2, 1_000)) == 500 and len(c.part(357, 7)) == 1
    assert whole.ids[0] == "doc000000000" and whole.ids[-1] == "doc000002499"
    assert len(set(whole.ids)) == 2_500
    prefix = SyntheticCorpus(1_100, seed=2).part(0, 1_100)
    assert _as_tuple(prefix) == tuple(f[:1_100] for f in _as_tuple(whole))
    with pytest.raises(IndexError, match="index=3"):
        c.part(3, 1_000)
    with pytest.raises(ValueError, match="part_size"):
        c.part(0, 0)


def test_labels_are_correlated_within_themes():
    c, _, y = _big()
    n = y.shape[0]
    freq = y.mean(axis=0)
    joint = (y.T.astype(np.float64) @ y) / n
    lift = joint / np.outer(freq, freq)
    expected_pairs = n * np.outer(freq, freq)
    theme = c.label_themes()
    off_diag = ~np.eye(len(freq), dtype=bool)
    same = (theme[:, None] == theme[None, :]) & off_diag
    cross = (theme[:, None] != theme[None, :]) & off_diag
    print(
        f"\nlabel lift P(a,b)/P(a)P(b): same theme median {np.median(lift[same]):.2f}, "
        f"other themes median {np.median(lift[cross]):.2f}, max {lift[off_diag].max():.2f}"
    )
    # Independence predicts lift 1; pairs sharing a theme co-occur several times more.
    assert np.max(lift[off_diag & (expected_pairs >= 20)]) > 3.0
    assert np.median(lift[same]) > 2.0
    assert np.median(lift[same]) > 2.5 * np.median(lift[cross])


def test_label_frequencies_match_the_model_and_spread():
    c, _, y = _big()
    n = y.shape[0]
    freq = y.mean(axis=0)
    expected = c.expected_label_frequencies()
    assert expected.sum() == pytest.approx(2.0, rel=1e-9)
    # Binomial sampling error, 5 sigma.
    assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n))
    counts = y.sum(axis=1)
    assert abs(counts.mean() - 2.0) < 0.05
    unlabelled = np.mean(counts == 0)
    assert abs(unlabelled - 0.04) <= 5 * np.sqrt(0.04 * 0.96 / n)
    print(
        f"\nlabel frequencies: max {freq.max():.3f}, min {freq.min():.3f}, "
        f"labels/doc {counts.mean():.3f}, unlabelled {unlabelled:.3f}, max labels {counts.max()}"
    )
    assert freq.max() / freq.min() >= 4.0
    assert counts.max() >= 4  # label sets of several sizes, not just one or two


def test_lengths_splits_and_empty_documents():
    c, b, _ = _big()
    n = len(b)
    lengths = np.array([len(t.split()) for t in b.texts])
    assert abs(lengths.mean() - c.mean_doc_length) < 2.0  # sd of the mean is about 0.33
    assert lengths.std() > 30  # negative binomial shape 3: sd = sqrt(80 + 80**2 / 3) ~ 47
    empty = [t for t in b.texts if t == ""]
    # 0.001 forced empties + the NB mass at 0 (~5e-5): about 21 expected.
    assert 5 <= len(empty) <= 45
    assert all(t == t.strip() and "  " not in t for t in b.texts)
    test_share = np.mean([s == "test" for s in b.splits])
    assert set(b.splits) == {"train", "test"}
    assert abs(test_share - 0.2) <= 5 * np.sqrt(0.2 * 0.8 / n)


def test_tokenisation_round_trip():
    c, b, _ = _big()
    vocab = c.vocabulary()
    assert len(vocab) == c.vocab_size == len(set(vocab))
    analyse = CountVectorizer().build_analyzer()  # default token_pattern and lowercase
    texts = b.texts[:3_000]
    for t in texts:
        assert analyse(t) == (t.split(" ") if t else [])
    cv = CountVectorizer()
    counts = cv.fit_transform(texts)
    assert counts.sum() == sum(len(t.split()) for t in texts)
    assert set(cv.vocabulary_) <= set(vocab)


def test_words_are_unique_lowercase_and_well_formed():
    n = 80**2 + 80**3 + 10  # crosses from 2- to 3- to 4-syllable words
    vocab = synthetic_vocabulary(n)
    assert len(vocab) == n == len(set(vocab))
    assert all(re.fullmatch(r"[a-z]{4,}", w) for w in vocab[::997])
    for i in [0, 1, 79, 80, 6_399, 6_400, 6_400 + 512_000 - 1, n - 1]:
        assert synthetic_word(i) == vocab[i]
    assert [len(vocab[i]) for i in (0, 6_399, 6_400, n - 1)] == [4, 4, 6, 8]
    assert synthetic_vocabulary(10) == vocab[:10]


def test_background_follows_zipf_law():
    _, b, _ = _big()
    cv = CountVectorizer(vocabulary=synthetic_vocabulary(10))
    counts = np.asarray(cv.transform(b.texts[:8_000]).sum(axis=0)).ravel()
    # The 10 most frequent ranks are never topic words, so their counts follow
    # p(r) ~ (r + 1)^-1.1 alone; each count is in the thousands (sd <= 1.5%).
    ratio = counts / counts[0]
    expected = np.arange(1, 11, dtype=np.float64) ** -1.1
    np.testing.assert_allclose(ratio, expected, rtol=0.08)


def test_guide_table_sampling_equals_searchsorted():
    rng = np.random.default_rng(1)
    for v, s in [(1, 1.1), (7, 0.0), (20_000, 1.1), (300_000, 2.5)]:
        cdf = syn._cdf(np.arange(1, v + 1, dtype=np.float64) ** -s)
        guide = syn._guide_table(cdf)
        u = np.concatenate([rng.random(50_000), cdf[:-1][:1000], [0.0, np.nextafter(1.0, 0.0)]])
        np.testing.assert_array_equal(
            syn._inverse_cdf(cdf, guide, u), np.searchsorted(cdf, u, side="right")
        )


def test_params_round_trip_and_cheap_pickle():
    c = SyntheticCorpus(3_000, vocab_size=1_000_000, n_labels=40, seed=9, mean_doc_length=30)
    p = c.params()
    assert json.loads(json.dumps(p)) == p
    assert set(p) == {
        "n_docs", "vocab_size", "n_labels", "mean_doc_length", "mean_labels_per_doc",
        "test_fraction", "zipf_exponent", "seed",
    }  # fmt: skip
    again = SyntheticCorpus(**p)
    blob = pickle.dumps(c)
    assert len(blob) < 1_000
    assert _as_tuple(pickle.loads(blob).part(1, 1_000)) == _as_tuple(again.part(1, 1_000))
    assert c.label_names == [f"label{i:02d}" for i in range(40)]


def test_small_models_and_few_labels():
    c = SyntheticCorpus(3_000, vocab_size=5, n_labels=1, mean_labels_per_doc=0.5, seed=1)
    b = c.part(0, 3_000)
    assert set(" ".join(b.texts).split()) <= set(synthetic_vocabulary(5))
    assert c.label_names == ["label00"]
    has = np.mean([bool(ls) for ls in b.labels])
    assert abs(has - 0.5) <= 5 * np.sqrt(0.25 / 3_000)
    nothing = SyntheticCorpus(10, mean_labels_per_doc=0.0, mean_doc_length=0).part(0, 10)
    assert nothing.labels == [[]] * 10 and nothing.texts == [""] * 10
    assert SyntheticCorpus(0).n_parts(100) == 0 and list(SyntheticCorpus(0).batches(5)) == []


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"n_docs": -1}, "n_docs"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"n_labels": 0}, "n_labels"),
        ({"mean_doc_length": -3}, "mean_doc_length"),
        ({"test_fraction": 1.5}, "test_fraction"),
        ({"zipf_exponent": float("nan")}, "zipf_exponent"),
        ({"seed": -1}, "seed"),
        ({"n_docs": 2.5}, "n_docs"),
        ({"n_labels": 2, "mean_labels_per_doc": 5.0}, "mean_labels_per_doc"),
    ],
)
def test_invalid_parameters_are_named(kwargs, name):
    with pytest.raises(ValueError, match=name):
        SyntheticCorpus(**kwargs)


def test_a_part_without_text_has_the_same_ids_labels_and_splits():
    c = SyntheticCorpus(2_500, seed=4, n_labels=7)
    for index, size in ((0, 2_500), (1, 1_000), (5, 300)):
        full, bare = c.part(index, size), c.part(index, size, text=False)
        assert bare.texts == [] and len(bare) == len(full)
        assert (bare.ids, bare.labels, bare.splits) == (full.ids, full.labels, full.splits)
    assert any(full.labels) and "test" in full.splits and "train" in full.splits


def test_parts_on_dask_workers_equal_local_parts(cluster_client):
    c = SyntheticCorpus(2_000, seed=4)
    futures = [cluster_client.submit(c.part, i, 700, pure=False) for i in range(c.n_parts(700))]
    remote = _concat(cluster_client.gather(futures))
    assert _as_tuple(remote) == _as_tuple(c.part(0, 2_000))
