"""Issue 34, statistics of a grown store saved as delta records: after an append the
cache entry of the new version holds the appended documents' part only, listed after the
files of the earlier version's entry; read back, base + deltas are summed.

References: numpy sums of the store's rows (X read whole, densified), the same PCA fit on
a store ingested from all documents at once without the cache, and numpy's eigh of the
centred scatter.
"""

from __future__ import annotations

import copy
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import dmlfe
import dmlfe.stats.cache as cache
from dmlfe.stats.cache import load_or_compute_stats, stats_dir_for
from dmlfe.stats.pass_ import compute_stats
from dmlfe.store import open_store

APPEND = {"id_field": "id", "split_field": "split"}
#: Above the dense solvers' LAPACK sizes: PCA's leading pairs come from block Krylov,
#: as on the benchmark's store hashed to 2^12.
WIDE = 4096


def _docs(seed: int, n: int, start: int, split: str, vocabulary: int) -> list[dict]:
    """``n`` documents of 20-60 words drawn from ``vocabulary`` words, one or two labels."""
    rng = np.random.default_rng(seed)
    words = [f"t{i}" for i in range(vocabulary)]
    return [{"id": f"d{start + k}", "split": split,
             "text": " ".join(rng.choice(words, size=int(rng.integers(20, 60)))),
             "labels": sorted(set(rng.choice(["a", "b", "c"], size=2).tolist()))}
            for k in range(n)]


def _write(path: Path, docs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def _ingest(path: Path, docs: list[dict], n_features: int, chunk_rows: int,
            fit_split: str = "train") -> Path:
    """A store of ``docs`` hashed to ``n_features``, its idf from the split ``fit_split``."""
    src = _write(path.with_suffix(".jsonl"), docs)
    return Path(dmlfe.ingest(src, "jsonl", path, vectorizer="hashing", n_features=n_features,
                             chunk_rows=chunk_rows, fit_split=fit_split, **APPEND))


def _records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in stats_dir_for(store).glob("*.json")]


def _record_for(store: Path, n: int) -> dict:
    found = [r for r in _records(store) if r.get("n") == n and "kind" not in r["params"]]
    assert len(found) == 1
    return found[0]


def _numpy_sums(store: Path) -> tuple[np.ndarray, np.ndarray]:
    st = open_store(store)
    return st.X.compute().toarray(), st.Y.compute().toarray().astype(np.float64)


def _check_sums(stats, X: np.ndarray, Y: np.ndarray) -> None:
    assert stats.n == X.shape[0]
    np.testing.assert_allclose(stats.sum_x, X.sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.sumsq_x, (X * X).sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.xty, X.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.yty, Y.T @ Y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(stats.xtx, X.T @ X, rtol=1e-12, atol=1e-12)


def test_pca_refit_after_appends_equals_a_fresh_fit(tmp_path, cluster_client) -> None:
    """Two appends on a store hashed to 4096 features, several chunks each, on the
    LocalCluster: each refit reads the appended documents only, saves a delta record,
    and equals a fresh fit of a store ingested from all documents at once."""
    first = _docs(1, 160, 0, "train", 6000)
    more = [_docs(2, 50, 160, "train", 6000), _docs(3, 40, 210, "train", 6000)]
    grown = _ingest(tmp_path / "grown.zarr", first, WIDE, chunk_rows=32)
    kw = dict(n_components=6, route="feature", client=cluster_client)
    dmlfe.PCA(**kw).fit(str(grown))
    done = list(first)
    for step, docs in enumerate(more):
        dmlfe.append(grown, _write(tmp_path / f"more{step}.jsonl", docs),
                     client=cluster_client, **APPEND)
        done += docs
        refit = dmlfe.PCA(**kw).fit(str(grown))
        assert refit.rows_read_ == len(docs) and refit.n_passes_ == 0
        assert refit.solver_ == "eigh-partial"  # the block Krylov branch
        record = _record_for(grown, len(done))
        # the base (the first fit's whole entry), then one delta per append
        assert [p["n"] for p in record["parts"]] == [160] + [len(d) for d in more[:step + 1]]
        # all documents at once, the first ones marked apart: its idf comes from the
        # same documents as grown's (an append keeps the idf)
        marked = [{**d, "split": "first"} for d in first] + done[len(first):]
        whole = _ingest(tmp_path / f"whole{step}.zarr", marked, WIDE, chunk_rows=32,
                        fit_split="first")
        fresh = dmlfe.PCA(cache=False, **kw).fit(str(whole))
        assert fresh.rows_read_ == len(done)
        np.testing.assert_allclose(refit.eigenvalues_[:6], fresh.eigenvalues_[:6], rtol=1e-10)
        np.testing.assert_allclose(refit.components_, fresh.components_, atol=1e-8)
        X = open_store(whole).X.compute()
        np.testing.assert_allclose(refit.transform(X), fresh.transform(X), atol=1e-8)
    # independent reference: numpy's eigh of the centred Gram of every row (the
    # non-zero eigenvalues of the centred scatter)
    Xd = X.toarray()
    Xc = Xd - Xd.mean(0)
    ref = np.linalg.eigvalsh(Xc @ Xc.T)[::-1][:6]
    np.testing.assert_allclose(refit.eigenvalues_[:6], ref, rtol=1e-9)
    # a hit on the last version sums base and deltas as the refit did: the same arrays
    hit = load_or_compute_stats(open_store(grown), need_xtx=True)
    assert hit.from_cache and hit.rows_read == 0
    _check_sums(hit, Xd, open_store(grown).Y.compute().toarray().astype(np.float64))


def test_deltas_are_folded_into_a_new_base(tmp_path, monkeypatch, cluster_client) -> None:
    """Past MAX_STATS_DELTAS the entry is saved whole again, and the versions after it
    list deltas on that new base; every version's statistics equal numpy's sums, also
    when an append brings more rows than a chunk (reduced on the cluster)."""
    monkeypatch.setattr(cache, "MAX_STATS_DELTAS", 2)
    store = _ingest(tmp_path / "s.zarr", _docs(1, 40, 0, "train", 300), 256, chunk_rows=16)
    load_or_compute_stats(open_store(store), need_xtx=True)
    sizes, start, shapes = [5, 7, 40, 3], 40, []
    for step, size in enumerate(sizes):
        docs = _docs(10 + step, size, start, "train", 300)
        dmlfe.append(store, _write(tmp_path / f"m{step}.jsonl", docs), **APPEND)
        start += size
        stats = load_or_compute_stats(open_store(store), need_xtx=True,
                                      client=cluster_client)
        assert stats.rows_read == size and not stats.from_cache
        _check_sums(stats, *_numpy_sums(store))
        record = _record_for(store, start)
        shapes.append([p["n"] for p in record.get("parts", [])])
        again = load_or_compute_stats(open_store(store), need_xtx=True)
        assert again.from_cache
        # read back in the order they were added: the very same arrays
        np.testing.assert_array_equal(again.xtx, stats.xtx)
        np.testing.assert_array_equal(again.xty, stats.xty)
        np.testing.assert_array_equal(again.sum_x, stats.sum_x)
    # two deltas on the first base; the third is folded (whole: no parts); then a delta
    # on that new base
    assert shapes == [[40, 5], [40, 5, 7], [], [92, 3]]


@pytest.mark.parametrize("damage", ["delta", "base", "missing base"])
def test_a_damaged_part_is_detected_and_the_entry_recomputed(tmp_path, damage) -> None:
    store = _ingest(tmp_path / "s.zarr", _docs(1, 40, 0, "train", 300), 256, chunk_rows=16)
    load_or_compute_stats(open_store(store), need_xtx=True)
    dmlfe.append(store, _write(tmp_path / "m.jsonl", _docs(2, 9, 40, "train", 300)),
                 **APPEND)
    load_or_compute_stats(open_store(store), need_xtx=True)
    record = _record_for(store, 49)
    directory = stats_dir_for(store)
    target = directory / record["parts"][0 if damage != "delta" else 1]["file"]
    if damage == "missing base":
        target.unlink()
    else:
        with zipfile.ZipFile(target) as z:
            big = max(z.infolist(), key=lambda info: info.file_size)
        raw = bytearray(target.read_bytes())
        raw[big.header_offset + 100 + big.file_size // 2] ^= 0xFF  # one of its values
        target.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"ignoring unreadable statistics cache entry "
                      rf".*{record['key']}\.npz: .*{target.name}.*recomputing"):
        stats = load_or_compute_stats(open_store(store), need_xtx=True)
    # a damaged delta: extended again from the earlier entry; a damaged base is the
    # earlier entry's own archive: every row read again
    assert stats.rows_read == (9 if damage == "delta" else 49) and not stats.from_cache
    _check_sums(stats, *_numpy_sums(store))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the entry was replaced: a clean hit now
        again = load_or_compute_stats(open_store(store), need_xtx=True)
    assert again.from_cache
    _check_sums(again, *_numpy_sums(store))


def test_centring_in_place_gives_the_same_entries() -> None:
    """PCA's A built in the statistics' own X^T X (``overwrite``) equals the new array
    of the other form entry for entry, and numpy's centred scatter; the statistics then
    hold no X^T X."""
    rng = np.random.default_rng(3)
    X = sp.random(90, 300, density=0.1, format="csr", random_state=4)
    Y = (rng.random((90, 3)) < 0.4).astype(np.float64)
    stats = compute_stats(X, Y, need_xtx=True)
    own = copy.deepcopy(stats)
    held_xtx = own.xtx
    kept = stats.centred_xtx()
    inplace = own.centred_xtx(overwrite=True)
    assert inplace is held_xtx and own.xtx is None
    np.testing.assert_array_equal(inplace, kept)
    Xd = X.toarray()
    Xc = Xd - Xd.mean(0)
    np.testing.assert_allclose(kept, Xc.T @ Xc, rtol=1e-12, atol=1e-12)
    assert stats.xtx is not None  # the other form leaves the statistics as they were
