"""Embeddings written in anndata's layout: ``anndata.read_zarr`` opens them with the
document ids, split and labels of the store and the model's method in ``uns``; the
parquet output carries the same obs, and ``read_embeddings`` returns it alike."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from helpers import data_path

import dmlfe
from dmlfe.projection import embedding_obs, read_embeddings, write_embeddings


@pytest.fixture(scope="module")
def medical(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("medical")
    files = [data_path("mulan", "medical-train.arff"), data_path("mulan", "medical-test.arff")]
    xml = data_path("mulan", "medical.xml")
    store = dmlfe.ingest(files, format="mulan", labels=xml, out=tmp / "s.zarr", chunk_rows=200)
    return tmp, store, xml


def _xml_label_names(xml) -> list[str]:
    # the MULAN XML's own order, read here independently of the reader
    return [el.get("name") for el in ET.parse(xml).getroot().iter()
            if el.tag.split("}")[-1] == "label"]


def test_anndata_opens_the_embeddings_with_ids_split_and_labels(medical):
    anndata = pytest.importorskip("anndata")
    tmp, path, xml = medical
    store = dmlfe.open_store(path)
    model = dmlfe.MVMD(n_components=4, split="train").fit(path)
    out = write_embeddings(model.transform(store.X), tmp / "e.zarr", ids=store.ids,
                           **embedding_obs(model, store))
    adata = anndata.read_zarr(out)

    blocks = list(store.iter_blocks())  # the store read block by block, without dask
    X = sp.vstack([b["X"] for b in blocks]).tocsr()
    assert adata.n_obs == X.shape[0] == 978
    np.testing.assert_allclose(adata.obsm["X_mvmd"], model.transform(X), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(read_embeddings(out), adata.obsm["X_mvmd"])
    assert list(adata.obs.index) == [str(i) for b in blocks for i in b["ids"]]
    split = [str(s) for b in blocks for s in b["split"]]
    assert list(adata.obs["split"].astype(str)) == split
    assert split.count("train") == 333 and split.count("test") == 645
    assert list(adata.obs["split"].cat.categories) == store.split_categories
    assert sp.issparse(adata.obsm["Y"])  # the labels stay CSR in the embeddings zarr
    np.testing.assert_array_equal(adata.obsm["Y"].toarray(),
                                  np.vstack([b["Y"].toarray() for b in blocks]))
    assert list(adata.uns["label_names"]) == _xml_label_names(xml) == store.label_names
    assert adata.uns["method"] == "mvmd" and int(adata.uns["n_components"]) == 4
    assert json.loads(adata.uns["params"])["split"] == "train"


def test_new_documents_get_row_numbers_and_no_labels(tmp_path):
    anndata = pytest.importorskip("anndata")
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((7, 3))
    out = write_embeddings(Z, tmp_path / "e.zarr", method="pca", uns={"note": "x"})
    adata = anndata.read_zarr(out)
    np.testing.assert_array_equal(adata.obsm["X_pca"], Z)
    assert list(adata.obs.index) == [str(i) for i in range(7)]
    assert "Y" not in adata.obsm and "split" not in adata.obs
    assert adata.uns["note"] == "x"


def test_labels_need_their_names(tmp_path):
    with pytest.raises(ValueError, match="label_names"):
        write_embeddings(np.zeros((3, 2)), tmp_path / "e.zarr", labels=np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"expected \(3, 1\)"):
        write_embeddings(np.zeros((3, 2)), tmp_path / "e.zarr", labels=np.zeros((3, 2)),
                         label_names=["a"])


def test_parquet_carries_the_zarr_obs(medical, cluster_client):
    anndata = pytest.importorskip("anndata")
    tmp, path, xml = medical
    store = dmlfe.open_store(path)
    model = dmlfe.MVMD(n_components=4, split="train").fit(path)
    Z = model.transform(store.X)  # lazy: the workers compute and write their chunks
    kw = {"ids": store.ids, "client": cluster_client, **embedding_obs(model, store)}
    zout = write_embeddings(Z, tmp / "c.zarr", **kw)
    pout = write_embeddings(Z, tmp / "c.parquet", format="parquet", **kw)
    assert len(list(pout.glob("part-*.parquet"))) == 5  # 978 rows in chunks of 200
    Zz, obs_z = read_embeddings(zout, obs=True)
    Zp, obs_p = read_embeddings(pout, obs=True)
    np.testing.assert_array_equal(Zp, Zz)
    pd.testing.assert_frame_equal(obs_p, obs_z)

    # against the store read block by block (no dask), the MULAN XML's label order and
    # anndata's own reading of the zarr
    blocks = list(store.iter_blocks())
    names = _xml_label_names(xml)
    label_cols = [f"label:{x}" for x in names]
    assert list(obs_p.columns) == ["split", *label_cols]
    assert list(obs_p.index) == [str(i) for b in blocks for i in b["ids"]]
    assert list(obs_p["split"].astype(str)) == [str(s) for b in blocks for s in b["split"]]
    assert list(obs_p["split"].cat.categories) == store.split_categories
    Y = np.vstack([b["Y"].toarray() for b in blocks])
    np.testing.assert_array_equal(obs_p[label_cols].to_numpy(), Y)
    X = sp.vstack([b["X"] for b in blocks]).tocsr()
    np.testing.assert_allclose(Zp, model.transform(X), rtol=0, atol=1e-12)
    adata = anndata.read_zarr(zout)
    np.testing.assert_array_equal(adata.obsm["Y"].toarray(), obs_z[label_cols].to_numpy())
    assert list(adata.obs["split"].astype(str)) == list(obs_z["split"].astype(str))

    # a plain parquet reader sees one table: ids, obs, then the embeddings
    table = pq.read_table(pout)
    assert table.column_names == ["id", "split", *label_cols, "z0", "z1", "z2", "z3"]
    np.testing.assert_array_equal(read_embeddings(pout, 2), Zz[:, :2])


def test_parquet_and_zarr_obs_of_new_documents(tmp_path):
    Z = np.random.default_rng(1).standard_normal((7, 3))
    got = [read_embeddings(write_embeddings(Z, tmp_path / f"e.{f}", format=f), obs=True)
           for f in ("zarr", "parquet")]
    (Zz, obs_z), (Zp, obs_p) = got
    np.testing.assert_array_equal(Zz, Z)
    np.testing.assert_array_equal(Zp, Z)
    pd.testing.assert_frame_equal(obs_p, obs_z)
    assert list(obs_p.index) == [str(i) for i in range(7)] and obs_p.columns.empty
