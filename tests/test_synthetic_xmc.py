"""The synthetic XMC corpus (issue 47): files the xmc reader parses, the same X at every
label count, power-law labels, the mean label count, determinism and streaming."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dmlfe import ingest
from dmlfe.errors import InputError
from dmlfe.readers.synthetic_xmc import (
    RNG_BLOCK_DOCS,
    coarse_label_map,
    corpus_files,
    main,
    write_xmc_corpus,
)
from dmlfe.readers.xmc import read_xmc
from dmlfe.store import open_store

SMALL = {"n_features": 2**12, "fine_labels": 3000, "words_per_doc": 30}


def _read(out, q):
    """X, Y and the splits of label count q, read with the project's xmc reader."""
    src = read_xmc(list(corpus_files(out, q)))
    batches = list(src.batches(700))
    X = sp.vstack([b.X for b in batches], format="csr")
    Y = sp.vstack([b.Y for b in batches]).toarray()
    splits = [s for b in batches for s in b.splits]
    return X, Y, splits


def _bytes(out, q) -> bytes:
    return b"".join(p.read_bytes() for p in corpus_files(out, q))


def test_files_parse_with_the_xmc_reader(tmp_path):
    paths = write_xmc_corpus(tmp_path, 1500, [10, 3000], test_fraction=0.2, **SMALL)
    assert set(paths) == {10, 3000}
    X, Y, splits = _read(tmp_path, 10)
    assert X.shape == (1500, 2**12) and Y.shape == (1500, 10)
    assert splits.count("test") == 300 and splits.count("train") == 1200
    assert (X.data > 0).all()
    np.testing.assert_allclose(sp.linalg.norm(X, axis=1), 1.0, rtol=1e-5)
    assert (Y.sum(axis=1) >= 1).all()
    assert paths[10][0].read_text().splitlines()[0] == f"1200 {2**12} 10"


def test_same_X_across_label_counts_after_ingest(tmp_path):
    write_xmc_corpus(tmp_path / "c", 900, [20, 3000], **SMALL)
    stores = {q: ingest(list(corpus_files(tmp_path / "c", q)), "xmc", tmp_path / f"{q}.zarr",
                        chunk_rows=400) for q in (20, 3000)}
    blocks = {q: list(open_store(s).iter_blocks()) for q, s in stores.items()}
    X = {q: sp.vstack([b["X"] for b in bl], format="csr") for q, bl in blocks.items()}
    Y = {q: sp.vstack([b["Y"] for b in bl]).toarray() for q, bl in blocks.items()}
    assert (X[20] != X[3000]).nnz == 0 and X[20].nnz > 0
    assert Y[20].shape == (900, 20) and Y[3000].shape == (900, 3000)
    # the coarse labels are the images of the fine ones
    coarse = coarse_label_map(3000, 20)
    for r in range(0, 900, 97):
        fine = np.flatnonzero(Y[3000][r])
        assert set(np.flatnonzero(Y[20][r])) == set(coarse[fine])


def test_coarse_map_covers_every_label_and_keeps_order():
    for F, q in [(30000, 100), (30000, 1000), (30000, 10000), (3000, 7), (10, 9)]:
        c = coarse_label_map(F, q)
        assert c.shape == (F,) and c[0] == 0 and c[-1] == q - 1
        assert set(np.unique(c)) == set(range(q))
        assert (np.diff(c) >= 0).all()
    np.testing.assert_array_equal(coarse_label_map(50, 50), np.arange(50))
    with pytest.raises(InputError, match="between 1 and fine_labels"):
        coarse_label_map(100, 101)


@pytest.mark.parametrize("q", [100, 30000])
def test_label_frequencies_follow_a_power_law(tmp_path, q):
    write_xmc_corpus(tmp_path, 6000, q, n_features=2**12, words_per_doc=10)
    _, Y, _ = _read(tmp_path, q)
    freq = np.sort(Y.sum(axis=0))[::-1].astype(float)
    used = int((freq > 0).sum())
    hi = min(used // 2, 1000)
    ranks = np.arange(1, len(freq) + 1)
    slope = np.polyfit(np.log(ranks[1:hi]), np.log(freq[1:hi]), 1)[0]
    assert -1.4 < slope < -0.6
    assert freq[0] > 10 * np.median(freq[:used])


def test_mean_labels_per_document_near_the_target(tmp_path):
    write_xmc_corpus(tmp_path, 4000, [3000, 30], labels_per_doc=5.0, **SMALL)
    _, Y, _ = _read(tmp_path, 3000)
    assert abs(Y.sum(axis=1).mean() - 5.0) < 0.15
    _, Yc, _ = _read(tmp_path, 30)
    assert 3.0 < Yc.sum(axis=1).mean() <= Y.sum(axis=1).mean()


def test_deterministic_by_seed(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        write_xmc_corpus(tmp_path / name, 700, 50, seed=seed, **SMALL)
    assert _bytes(tmp_path / "a", 50) == _bytes(tmp_path / "b", 50)
    assert _bytes(tmp_path / "a", 50) != _bytes(tmp_path / "c", 50)


def test_block_size_does_not_change_the_files(tmp_path):
    n = 2 * RNG_BLOCK_DOCS + 321
    write_xmc_corpus(tmp_path / "one", n, 40, block_size=n, **SMALL)
    write_xmc_corpus(tmp_path / "many", n, 40, block_size=1, **SMALL)
    assert _bytes(tmp_path / "one", 40) == _bytes(tmp_path / "many", 40)


def test_refusals_and_command_line(tmp_path, capsys):
    with pytest.raises(InputError, match="between 1 and fine_labels"):
        write_xmc_corpus(tmp_path, 10, 5000, fine_labels=3000)
    with pytest.raises(InputError, match="labels_per_doc"):
        write_xmc_corpus(tmp_path, 10, 5, labels_per_doc=0.5)
    assert main([str(tmp_path / "cli"), "--docs", "50", "--labels", "5,60",
                 "--features", "256", "--fine-labels", "60"]) == 0
    assert "60 labels:" in capsys.readouterr().out
    X, Y, _ = _read(tmp_path / "cli", 5)
    assert X.shape == (50, 256) and Y.shape == (50, 5)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "cli"), "--docs", "5", "--labels", "x"])
