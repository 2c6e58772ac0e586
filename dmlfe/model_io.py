"""Loading saved models, and checking that a store fits a model's feature space.

The format (JSON + npz, never pickle) is described and written by
:mod:`dmlfe.model_files`; ``estimator.save(path)`` and :func:`save_model` write it.
Loading never unpickles: the npz is read with ``allow_pickle=False`` and the estimator
class is looked up by name among dmlfe's own estimators.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dmlfe.estimators import estimator_classes
from dmlfe.model_files import (
    ARRAYS_NPZ,
    FITTED_ARRAYS,
    FITTED_SCALARS,
    FORMAT_NAME,
    FORMAT_VERSION,
    MODEL_JSON,
    RELATION_PREFIX,
    read_model_files,
    save_model,
)
from dmlfe.relation import RelationMap

__all__ = ["ARRAYS_NPZ", "FORMAT_NAME", "FORMAT_VERSION", "MODEL_JSON", "check_compatible",
           "load_model", "save_model"]


def check_compatible(model: Any, store: Any) -> None:
    """Raise ValueError when ``store`` is not in the feature space ``model`` was fitted on.

    Checks the number of features always and, when the model was fitted from a
    store, the vocabulary (by hash) or the hashing parameters.
    """
    where = getattr(store, "path", "the store")
    if int(store.n_features) != int(model.n_features_in_):
        raise ValueError(
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
        raise ValueError(
            f"{where} has {words.get(kind, kind)}, but the model was fitted on "
            f"{words.get(train['features'], train['features'])} (training store "
            f"{train.get('path')}): the columns mean different things. Ingest the new "
            "documents the way the training store was ingested")
    if train.get("feature_names_sha256") is not None:
        names_sha = store.feature_names_sha256
        if names_sha is not None and names_sha != train["feature_names_sha256"]:
            raise ValueError(
                f"{where} has a different vocabulary from the training store "
                f"{train.get('path')} (same size {store.n_features}, different feature names): "
                "its columns mean other words, so the projection would be meaningless. "
                "Ingest the new documents with the training store's vocabulary")
    if train.get("hashing") is not None and store.hashing is not None:
        if json.loads(json.dumps(store.hashing)) != train["hashing"]:
            raise ValueError(
                f"{where} was hashed with {store.hashing} but the model's training store "
                f"{train.get('path')} with {train['hashing']}; ingest with the same hashing "
                "parameters")


def load_model(path: str | os.PathLike[str]) -> Any:
    """Load a model written by :func:`save_model`; returns a fitted estimator.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        Not a dmlfe model, a newer format version, or inconsistent contents.
    """
    path = Path(path)
    meta, arrays = read_model_files(path)
    where = path / MODEL_JSON
    classes = estimator_classes()
    name = meta.get("estimator")
    if name not in classes:
        raise ValueError(f"{where}: estimator {name!r} is not one of dmlfe's "
                         f"({', '.join(sorted(classes))})")

    params = {}
    for key, value in dict(meta.get("params") or {}).items():
        if isinstance(value, dict) and set(value) == {"__array__"}:
            if value["__array__"] not in arrays:
                raise ValueError(f"{where}: parameter {key} refers to array "
                                 f"{value['__array__']!r}, which {ARRAYS_NPZ} lacks")
            value = arrays[value["__array__"]]
        params[key] = value
    try:
        est = classes[name](**params)
    except TypeError as exc:
        raise ValueError(f"{where}: the saved parameters do not fit {name} ({exc})") from None
    if est._method != meta.get("method"):
        raise ValueError(f"{where}: method {meta.get('method')!r} does not match {name} with "
                         f"these parameters ({est._method!r})")

    for key in FITTED_ARRAYS:
        if key not in arrays:
            raise ValueError(f"{path / ARRAYS_NPZ} lacks {key}; the model is damaged")
        setattr(est, key, arrays[key])
    fitted = dict(meta.get("fitted") or {})
    for key in FITTED_SCALARS:
        setattr(est, key, fitted.get(key))

    est.route_ = est.route_ or "feature"  # models of format version 1
    est.relation_map_, est.prototype_indices_ = None, None
    if est.relation_ is not None:
        try:
            est.relation_map_ = RelationMap.from_arrays(est.relation_, arrays, RELATION_PREFIX)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: the relation route's prototypes cannot be rebuilt "
                             f"({exc!r}); the model is damaged") from None
        est.prototype_indices_ = arrays.get(RELATION_PREFIX + "prototype_indices")
        if est.relation_map_.n_features != int(est.n_features_in_):
            raise ValueError(f"{path}: the prototypes have {est.relation_map_.n_features} "
                             f"features but n_features_in_ = {est.n_features_in_}")

    d = int(est.n_components_)
    D = int(est.n_features_in_) if est.relation_map_ is None else est.relation_map_.n_prototypes
    if est.components_.shape != (d, D) or est.mean_.shape != (D,) or est.eigenvalues_.ndim != 1:
        raise ValueError(
            f"{path}: inconsistent model: components_ {est.components_.shape}, mean_ "
            f"{est.mean_.shape}, eigenvalues_ {est.eigenvalues_.shape} for n_components_={d}, "
            f"{D} columns (n_features_in_, or p prototypes on the relation route)")
    return est
