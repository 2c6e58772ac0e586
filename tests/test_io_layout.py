"""The ``dmlfe.io`` package: the old module paths give its very objects, the model format
(schema, save, read, restore) is one module, and the store and the embeddings are laid out
by one AnnData skeleton (:func:`dmlfe.store.layout.create_anndata`)."""

from __future__ import annotations

import ast
import importlib
import inspect
import json

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import ROOT, write_store

import dmlfe
from dmlfe.io import embeddings, model
from dmlfe.io.embeddings import read_embeddings, write_embeddings
from dmlfe.io.model import read_model_files, restore_model, save_model
from dmlfe.model_io import load_model
from dmlfe.store import open_store


@pytest.mark.parametrize(("old", "new"), [
    ("dmlfe.model_files", "dmlfe.io.model"),
    ("dmlfe.classifier_files", "dmlfe.io.classifier"),
])
def test_old_module_paths_are_the_new_modules(old, new):
    old_mod, new_mod = importlib.import_module(old), importlib.import_module(new)
    assert old_mod is new_mod
    # every public name of the new module is read, as the same object, from the old path
    names = [n for n in vars(new_mod) if not n.startswith("_")]
    assert names
    for name in names:
        assert getattr(importlib.import_module(old), name) is getattr(new_mod, name)


def test_old_names_of_the_model_format_and_the_embeddings():
    from dmlfe.classifier_files import load_classifier, save_classifier
    from dmlfe.io.classifier import load_classifier as load_new
    from dmlfe.io.classifier import save_classifier as save_new
    from dmlfe.io.schema import ArraySpec, Key
    from dmlfe.model_files import ArraySpec as OldArraySpec
    from dmlfe.model_files import Key as OldKey
    from dmlfe.model_files import check_model_target
    from dmlfe.model_files import read_model_files as old_read
    from dmlfe.model_files import save_model as old_save
    from dmlfe.projection import (
        LABEL_PREFIX,
        embedding_key,
        embedding_obs,
        embedding_uns,
    )
    from dmlfe.projection import read_embeddings as old_read_emb
    from dmlfe.projection import write_embeddings as old_write_emb

    assert (OldKey, OldArraySpec) == (Key, ArraySpec)
    assert (old_save, old_read) == (save_model, read_model_files)
    assert check_model_target is model.check_model_target
    assert (load_classifier, save_classifier) == (load_new, save_new)
    assert (old_write_emb, old_read_emb) == (write_embeddings, read_embeddings)
    assert (LABEL_PREFIX, embedding_key, embedding_obs, embedding_uns) == (
        embeddings.LABEL_PREFIX, embeddings.embedding_key, embeddings.embedding_obs,
        embeddings.embedding_uns)
    assert dmlfe.load_model is load_model


def _imported_from(path, module: str) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and node.module == module for a in node.names}


def test_the_model_format_is_one_module():
    # save, read and restore (what loading does with the files) live together ...
    assert inspect.getmodule(save_model) is model
    assert inspect.getmodule(read_model_files) is model
    assert inspect.getmodule(restore_model) is model
    assert inspect.getmodule(model.check_model) is model
    # ... and load_model only adds the estimator class: it takes nothing of the schema
    # (no key, array name or prefix) and sets no attribute itself
    used = _imported_from(ROOT / "dmlfe" / "model_io.py", "dmlfe.io.model")
    assert {"read_model_files", "restore_model"} <= used
    schema_names = {n for n in vars(model) if n.isupper()} - {
        "MODEL_JSON", "ARRAYS_NPZ", "FORMAT_NAME", "FORMAT_VERSION"}
    assert not used & schema_names
    calls = {node.func.id for node in ast.walk(ast.parse(inspect.getsource(load_model)))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert "setattr" not in calls and "restore_model" in calls


def test_one_anndata_skeleton_writer():
    """Only the layout creates an AnnData root or its empty groups."""
    for rel in ("dmlfe/store/writer.py", "dmlfe/io/embeddings.py"):
        src = (ROOT / rel).read_text(encoding="utf-8")
        assert "create_anndata(" in src, rel
        for copy in ("zarr.create_group", "EMPTY_GROUPS", "dataframe_attrs", "ANNDATA_ENC"):
            assert copy not in src, (rel, copy)


def _node(path, name: str) -> dict:
    meta = json.loads((path / name / "zarr.json").read_text(encoding="utf-8"))
    # the same kind of node, with the same encodings and codecs (not the same sizes)
    return {k: v for k, v in meta.items() if k not in ("shape", "chunk_grid")}


def test_store_and_embeddings_have_the_same_anndata_skeleton(tmp_path, cluster_client):
    rng = np.random.default_rng(3)
    n, D, q = 50, 9, 4
    X = sp.random(n, D, density=0.4, format="csr", random_state=4)
    Y = (rng.random((n, q)) < 0.5).astype(np.uint8)
    splits = np.array(["train", "test", "dev"])[rng.integers(0, 3, n)]
    names = [f"L{j}" for j in range(q)]
    store = open_store(write_store(tmp_path / "s.zarr", X, Y, splits, chunk_rows=8,
                                   label_names=names))
    Z = rng.random((n, 3))
    ids = [f"doc{i:03d}" for i in range(n)]
    out = write_embeddings(da.from_array(Z, chunks=(8, 3)), tmp_path / "e.zarr", ids=ids,
                           method="pca", split=splits, split_categories=store.split_categories,
                           labels=da.from_array(Y, chunks=(8, q)), label_names=names,
                           client=cluster_client)
    shared = ("", "obs", "obs/_index", "obs/split", "obs/split/categories",
              "obs/split/codes", "obsm", "obsm/Y", "uns", "uns/label_names", "var",
              "var/_index", "layers", "obsp", "varm", "varp")
    for name in shared:
        s, e = _node(store.path, name), _node(out, name)
        if name == "":  # the root's dmlfe attributes differ: a store's and embeddings'
            s["attributes"].pop("dmlfe"), e["attributes"].pop("dmlfe")
        assert s == e, name
    # the per-document arrays of both hold the same documents (checked against the inputs)
    Zr, obs = read_embeddings(out, obs=True)
    np.testing.assert_array_equal(Zr, Z)
    assert list(obs.index) == ids
    assert list(obs["split"].astype(str)) == list(splits)
    np.testing.assert_array_equal(obs[[f"label:{x}" for x in names]].to_numpy(), Y)
    np.testing.assert_array_equal(store.Y.compute().toarray(), Y)
    np.testing.assert_array_equal(np.asarray(store.split).astype(str), splits)
    anndata = pytest.importorskip("anndata")
    a_store, a_emb = anndata.read_zarr(store.path), anndata.read_zarr(out)
    assert list(a_store.obs.columns) == list(a_emb.obs.columns) == ["split"]
    assert list(a_store.obs["split"].cat.categories) == \
        list(a_emb.obs["split"].cat.categories)
    np.testing.assert_array_equal(a_store.obsm["Y"].toarray(), a_emb.obsm["Y"].toarray())
