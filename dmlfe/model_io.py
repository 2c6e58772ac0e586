"""Loading saved models, and checking that a store fits a model's feature space.

The format (JSON + npz, never pickle) is described, written, read and restored by
:mod:`dmlfe.io.model`; ``estimator.save(path)`` and :func:`save_model` write it. This
module adds what needs the estimator classes (:mod:`dmlfe.estimators`, whose ``save``
imports the format): :func:`load_model` looks the class up by name among dmlfe's own
estimators and lets :func:`dmlfe.io.model.restore_model` set its state. Loading never
unpickles: the npz is read with ``allow_pickle=False``, and the files are checked against
the schema (:func:`dmlfe.io.model.check_model`) before anything is built.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sklearn.pipeline import Pipeline

from dmlfe.errors import InputError, ModelFormatError
from dmlfe.estimators import estimator_classes
from dmlfe.io.model import (
    ARRAYS_NPZ,
    FORMAT_NAME,
    FORMAT_VERSION,
    MODEL_JSON,
    read_model_files,
    restore_model,
    save_model,
)
from dmlfe.store import open_store

__all__ = ["ARRAYS_NPZ", "FORMAT_NAME", "FORMAT_VERSION", "MODEL_JSON", "check_compatible",
           "load_model", "save_model"]


def check_compatible(model: Any, store: Any) -> None:
    """Raise InputError (a ValueError) when ``store`` is not in the feature space ``model``
    was fitted on.

    Checks the number of features always and, when the model was fitted from a
    store, the vocabulary (by hash) or the hashing parameters.
    """
    where = getattr(store, "path", "the store")
    if int(store.n_features) != int(model.n_features_in_):
        raise InputError(
            f"{where} has {store.n_features} features but the model was fitted on "
            f"{model.n_features_in_}; project with a model fitted on the same feature space "
            "(same vocabulary or hashing parameters)")
    train = getattr(model, "training_store_", None)
    if not train:
        return
    kind = store.feature_kind
    if train.get("features") and kind != train["features"]:
        words = {"names": "a vocabulary", "hashing": "hashed features",
                 "numbered": "numbered (unnamed) features"}
        raise InputError(
            f"{where} has {words.get(kind, kind)}, but the model was fitted on "
            f"{words.get(train['features'], train['features'])} (training store "
            f"{train.get('path')}): the columns mean different things. Ingest the new "
            "documents the way the training store was ingested")
    if train.get("feature_names_sha256") is not None:
        names_sha = store.feature_names_sha256
        if names_sha is not None and names_sha != train["feature_names_sha256"]:
            raise InputError(
                f"{where} has a different vocabulary from the training store "
                f"{train.get('path')} (same size {store.n_features}, different feature names): "
                "its columns mean other words, so the projection would be meaningless. "
                "Ingest the new documents with the training store's vocabulary")
    if train.get("hashing") is not None and store.hashing is not None:
        if json.loads(json.dumps(store.hashing)) != train["hashing"]:
            raise InputError(
                f"{where} was hashed with {store.hashing} but the model's training store "
                f"{train.get('path')} with {train['hashing']}; ingest with the same hashing "
                "parameters")


def load_model(path: str | os.PathLike[str]) -> Any:
    """Load a model written by :func:`save_model`; returns a fitted estimator.

    The files are checked against the schema of :mod:`dmlfe.io.model` and the
    parameters against the estimator class's declarations, so a damaged or tampered
    model is refused rather than loaded (or half-loaded).

    Raises
    ------
    MissingPathError
        Nothing at ``path`` (a FileNotFoundError).
    ModelFormatError
        Not a dmlfe model, a newer format version, unreadable files or inconsistent
        contents (a ValueError); the message names the file, the key and what is wrong.
    """
    path = Path(path)
    meta, arrays = read_model_files(path)
    name = meta["estimator"]
    cls = estimator_classes().get(name)
    if cls is None:  # registered methods changed between the check and here
        raise ModelFormatError(f"{path / MODEL_JSON}: estimator: {name!r} is not one of dmlfe's")
    return restore_model(cls, meta, arrays, path)


def text_pipeline(model: Any, classifier: Any = None,
                  store: str | os.PathLike[str] | None = None) -> Pipeline:
    """Raw documents -> ``model``'s embeddings (-> ``classifier``): a fitted Pipeline.

    Parameters
    ----------
    model : fitted dmlfe projection (e.g. from :func:`dmlfe.load_model`)
    classifier : fitted classifier on the model's embeddings, optional
    store : path, optional
        The store whose vectoriser to use; default the model's training store
        (``model.training_store_["path"]``).

    Returns
    -------
    sklearn.pipeline.Pipeline
        Steps "vectorize", "project" (and "classify"); ``transform(list of str)`` gives
        embeddings, ``predict``/``predict_proba`` label sets when a classifier is given.
    """
    if store is None:
        prov = getattr(model, "training_store_", None)
        if not prov:
            raise InputError("the model does not record its training store (it was fitted "
                             "on arrays); pass store= the store whose vectoriser to use")
        store = prov["path"]
    opened = open_store(store)
    check_compatible(model, opened)
    steps = [("vectorize", opened.text_vectorizer()), ("project", model)]
    if classifier is not None:
        steps.append(("classify", classifier))
    return Pipeline(steps)
