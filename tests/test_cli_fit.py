"""``dmlfe ingest`` -> ``dmlfe fit`` -> ``dmlfe transform`` through the CLI, in process.

The outputs are checked against the estimators run in Python on the same store.
Every command runs on the session's 2-worker LocalCluster through ``--scheduler``
(starting a fresh LocalCluster per command, as ``--workers 2`` does, costs several
seconds each; that route is exercised by tests/test_ingest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import zarr

from dmlfe.cli import main
from dmlfe.estimators import MDDM, MVMD
from dmlfe.model_io import load_model
from dmlfe.projection import read_embeddings
from dmlfe.store import open_store


def _ingest(out: Path, seed: int, address: str, *extra: str) -> Path:
    rc = main(["ingest", "--format", "synthetic", "--out", str(out), "--n-docs", "240",
               "--vocab-size", "150", "--n-labels", "4", "--seed", str(seed),
               "--chunk-rows", "64", "--scheduler", address, "--quiet", *extra])
    assert rc == 0
    return out


@pytest.fixture(scope="module")
def work(tmp_path_factory, cluster_client):
    root = tmp_path_factory.mktemp("cli")
    store = _ingest(root / "syn.zarr", 3, cluster_client.scheduler.address)
    return root, store, cluster_client.scheduler.address


def test_ingest_fit_transform(work, capsys):
    root, store, address = work
    model_dir = root / "mvmd-model"
    capsys.readouterr()
    rc = main(["fit", str(store), "--method", "mvmd", "--beta", "0.3", "--dim", "5",
               "--split", "train", "--out", str(model_dir), "--scheduler", address])
    out = capsys.readouterr().out
    assert rc == 0
    assert "method: mvmd (MVMD, beta=0.3)" in out
    assert "d: 5 (fixed)" in out and "solver: eigh" in out and "passes over the data: 1" in out
    assert f"model: {model_dir.resolve()}" in out
    assert "top eigenvalues: " in out

    model = load_model(model_dir)
    ref = MVMD(n_components=5, beta=0.3, split="train", cache=False).fit(store)
    assert isinstance(model, MVMD) and model.get_params()["beta"] == 0.3
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(model.components_, ref.components_, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(model.mean_, ref.mean_)
    top = out.split("top eigenvalues: ")[1].split(",")[0]
    assert float(top) == pytest.approx(ref.eigenvalues_[0], rel=1e-5)
    assert model.training_store_["split"] == "train"

    full = open_store(store)
    test = full.subset("test")

    # zarr, the test split
    emb = root / "test.zarr"
    rc = main(["transform", str(model_dir), str(store), "--out", str(emb), "--split", "test",
               "--scheduler", address])
    assert rc == 0
    assert "wrote zarr embeddings" in capsys.readouterr().out
    g = zarr.open_group(str(emb), mode="r")
    Z_ref = ref.transform(test.X).compute()
    assert g["obsm/X_mvmd"].shape == (test.n_docs, 5)
    np.testing.assert_allclose(read_embeddings(emb), Z_ref, rtol=1e-10, atol=1e-12)
    assert [str(i) for i in g["obs/_index"][:]] == [str(i) for i in test.ids.compute()]
    assert g.attrs["dmlfe"]["method"] == "mvmd" and g.attrs["dmlfe"]["split"] == "test"
    adata = pytest.importorskip("anndata").read_zarr(emb)  # the CLI writes anndata's layout
    np.testing.assert_allclose(adata.obsm["X_mvmd"], Z_ref, rtol=1e-10, atol=1e-12)
    assert set(adata.obs["split"]) == {"test"}
    np.testing.assert_array_equal(adata.obsm["Y"].toarray(), test.Y.compute().toarray())
    assert list(adata.uns["label_names"]) == test.label_names

    # existing output without --overwrite: refused before any work
    rc = main(["transform", str(model_dir), str(store), "--out", str(emb), "--split", "test",
               "--scheduler", address, "--quiet"])
    assert rc == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err

    # parquet, every document
    emb_pq = root / "all.parquet"
    rc = main(["transform", str(model_dir), str(store), "--out", str(emb_pq), "--format",
               "parquet", "--scheduler", address, "--quiet"])
    assert rc == 0
    parts = sorted(emb_pq.glob("part-*.parquet"))
    assert len(parts) >= 2  # one per row chunk, written by the workers
    cols = [pq.read_table(p).to_pydict() for p in parts]
    ids = [i for c in cols for i in c["id"]]
    Z = np.column_stack([np.concatenate([c[f"z{j}"] for c in cols]) for j in range(5)])
    np.testing.assert_array_equal(ids, full.ids.compute().astype(str))
    np.testing.assert_allclose(Z, ref.transform(full.X).compute(), rtol=1e-10, atol=1e-12)
    assert json.loads((emb_pq / "_dmlfe.json").read_text())["n"] == full.n_docs


def test_fit_threshold_and_method_options(work, capsys):
    root, store, address = work
    model_dir = root / "mddmf"
    rc = main(["fit", str(store), "--method", "mddm", "--variant", "f", "--mu", "0.3",
               "--threshold", "0.9", "--out", str(model_dir), "--scheduler", address])
    out = capsys.readouterr().out
    assert rc == 0
    model = load_model(model_dir)
    assert isinstance(model, MDDM) and model.variant == "f" and model.mu == 0.3
    assert model.n_components == 0.9 and model.split is None
    assert "eigenvalue-sum threshold 0.9" in out
    ref = MDDM(variant="f", mu=0.3, n_components=0.9, cache=False).fit(store)
    assert model.n_components_ == ref.n_components_
    np.testing.assert_allclose(model.components_, ref.components_, rtol=1e-8, atol=1e-10)
    # the same model again needs --overwrite
    args = ["fit", str(store), "--method", "pca", "--dim", "2", "--out", str(model_dir),
            "--scheduler", address, "--quiet"]
    assert main(args) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    assert load_model(model_dir)._method == "pca"


def test_fit_threshold_memory(work, capsys):
    # one byte holds one pair: the threshold's rounds stop there, and the warning says why
    root, store, address = work
    model_dir = root / "pca-threshold-memory"
    capsys.readouterr()
    rc = main(["fit", str(store), "--method", "pca", "--route", "feature", "--solver",
               "randomized", "--threshold", "0.99", "--threshold-memory", "1", "--split",
               "train", "--out", str(model_dir), "--scheduler", address, "--quiet"])
    assert rc == 0
    # the library's warning, as one line in the command's terms
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert line.startswith("dmlfe fit: warning: ") and "--threshold-memory = " in line
    model = load_model(model_dir)
    assert model.get_params()["threshold_memory"] == 1
    assert model.eigenvalues_.size == 1 and model.n_components_ == 1


@pytest.mark.parametrize(("extra", "message"), [
    (["--method", "nmf"], "unknown method 'nmf'; choose one of pca, lsi, mddm"),
    (["--method", "pca", "--beta", "0.2"], "--beta does not apply to method pca; it takes no "
                                           "method options"),
    (["--method", "pca", "--split", "validation"], "split value(s) ['validation'] not in"),
    (["--method", "cca", "--mu", "0.2"], "--mu does not apply to method cca; its options: "
                                         "--gamma-x, --gamma-y"),
    (["--method", "mddm_p", "--variant", "f"], "--variant f contradicts --method mddm_p"),
    (["--method", "mvmd", "--variant", "p"], "--variant applies to --method mddm only"),
])
def test_bad_fit_arguments_exit_2(work, capsys, extra, message):
    root, store, _ = work
    out = root / "never"
    assert main(["fit", str(store), *extra, "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dmlfe fit: error: ") and message in err
    assert not out.exists()


def test_missing_inputs_exit_2(work, capsys):
    root, store, _ = work
    assert main(["fit", str(root / "nowhere.zarr"), "--method", "pca", "--out",
                 str(root / "m0"), "--quiet"]) == 2
    assert "nowhere.zarr" in capsys.readouterr().err
    assert main(["transform", str(root / "no-model"), str(store), "--out",
                 str(root / "e0"), "--quiet"]) == 2
    assert "no model at" in capsys.readouterr().err


def test_transform_refuses_another_feature_space(work, capsys):
    root, store, address = work
    model_dir = root / "pca-model"
    assert main(["fit", str(store), "--method", "pca", "--dim", "2", "--out", str(model_dir),
                 "--scheduler", address, "--quiet"]) == 0
    # as many columns as the training vocabulary, but hashed: the columns mean other things
    D = open_store(store).n_features
    hashed = _ingest(root / "hashed.zarr", 3, address, "--vectorizer", "hashing",
                     "--n-features", str(D))
    assert open_store(hashed).n_features == D
    # fewer columns
    smaller = _ingest(root / "smaller.zarr", 3, address, "--max-features", str(D - 10))
    capsys.readouterr()
    for other, message in ((hashed, "hashed features, but the model was fitted on a "
                                    "vocabulary"),
                           (smaller, f"has {D - 10} features but the model was fitted on {D}")):
        assert main(["transform", str(model_dir), str(other), "--out", str(root / "e1"),
                     "--scheduler", address, "--quiet"]) == 2
        assert message in capsys.readouterr().err
        assert not (root / "e1").exists()


def test_fit_components_dtype_float32(work, capsys):
    root, store, address = work
    model_dir = root / "mvmd-f32"
    assert main(["fit", str(store), "--method", "mvmd", "--dim", "3", "--components-dtype",
                 "float32", "--out", str(model_dir), "--scheduler", address, "--quiet"]) == 0
    model = load_model(model_dir)
    assert model.components_dtype == "float32" and model.components_.dtype == np.float32
    ref = MVMD(n_components=3, cache=False).fit(store)  # float64
    np.testing.assert_allclose(model.eigenvalues_, ref.eigenvalues_, rtol=1e-10)
    # the cluster's float64 components rounded to float32 (half an ulp, 6e-8 relative)
    np.testing.assert_allclose(model.components_, ref.components_, rtol=1e-6, atol=1e-7)
    emb = root / "mvmd-f32-emb"
    assert main(["transform", str(model_dir), str(store), "--out", str(emb), "--scheduler",
                 address, "--quiet"]) == 0
    Z = read_embeddings(emb)
    Z_ref = ref.transform(open_store(store).X).compute()
    np.testing.assert_allclose(Z, Z_ref, rtol=0, atol=1e-5 * np.abs(Z_ref).max())
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["fit", str(store), "--method", "pca", "--components-dtype", "float16",
              "--out", str(root / "never"), "--quiet"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--components-dtype: invalid choice: 'float16'" in err and "'float32'" in err


@pytest.mark.parametrize("limit", [None, "0"])
def test_fit_dual_route_reads_a_small_store_to_the_driver(work, monkeypatch, limit):
    # the session's cluster has 2 threads; a driver with as many reads the small X to
    # itself unless --max-gather-bytes 0 keeps the Gram and map-back passes
    root, store, address = work
    monkeypatch.setenv("DMLFE_DRIVER_THREADS", "2")
    out = root / f"dual-{limit}"
    extra = [] if limit is None else ["--max-gather-bytes", limit]
    assert main(["fit", str(store), "--method", "pca", "--dim", "3", "--route", "dual",
                 "--out", str(out), "--scheduler", address, "--quiet", *extra]) == 0
    model = load_model(out)
    assert model.route_ == "dual"
    assert ("read by the driver" in model.route_reason_) == (limit is None)
    assert model.get_params()["max_gather_bytes"] == (2**30 if limit is None else 0)
    ref = load_model(root / "dual-None") if limit is not None else model
    np.testing.assert_allclose(model.components_, ref.components_, atol=1e-12)
