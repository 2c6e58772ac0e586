"""Saving and loading fitted estimators in a safe format (JSON + npz, never pickle).

A saved model is a directory::

    model/
      model.json   -- format name and version, dmlfe version, estimator class and
                      method, the constructor parameters (``get_params()`` without
                      ``client``), the fitted scalars (n_components_, solver_, ...)
                      and, when fitted from a store, the training provenance
      arrays.npz   -- components_, eigenvalues_, mean_ (float64) and any array-valued
                      parameter (e.g. an explicit MDDM label kernel); for the relation
                      route also the prototypes as CSR parts
                      (relation.prototypes.data / .indices / .indptr), their training
                      row indices (relation.prototype_indices) and, for the local-scaling
                      similarity, their scales (relation.prototype_scales)

The relation route's similarity parameters (similarity, tau, n_neighbors, p, D,
selection, seed) are the fitted scalar ``relation_`` in model.json, next to
``route_`` and ``route_reason_``.

Loading never unpickles: the npz is read with ``allow_pickle=False`` and the
estimator class is looked up by name among dmlfe's own estimators. The
directory is written under a temporary name beside the target and renamed into
place, so a model is only ever seen complete.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from dmlfe._version import __version__

#: Name written into every model.json, so that other JSON files are not mistaken for models.
FORMAT_NAME = "dmlfe-model"
#: Bumped whenever the meaning or layout of a saved model changes; load_model reads
#: every version up to this one.
FORMAT_VERSION = 1

MODEL_JSON = "model.json"
ARRAYS_NPZ = "arrays.npz"

#: Fitted scalar attributes kept in model.json.
FITTED_SCALARS = (
    "n_components_", "solver_", "n_passes_", "regularization_", "centred_", "n_features_in_",
    "n_samples_", "n_genuine_", "method_params_", "training_store_", "route_", "route_reason_",
    "relation_", "converged_", "stats_from_cache_",
)
#: Fitted arrays kept in arrays.npz.
FITTED_ARRAYS = ("components_", "eigenvalues_", "mean_")

#: Prefix of npz entries holding array-valued constructor parameters.
_PARAM_PREFIX = "param."

#: Prefix of npz entries of the relation route (prototypes, their indices and scales).
_RELATION_PREFIX = "relation."

#: Constructor parameters that describe where to run, not the model.
_RUNTIME_PARAMS = ("client",)


# --------------------------------------------------------------------------- #
# Training provenance
# --------------------------------------------------------------------------- #
def _names_sha256(names: list[str]) -> str:
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode("utf-8"))
        h.update(b"\0")  # separator: ["ab", "c"] and ["a", "bc"] must differ
    return h.hexdigest()


def _feature_kind(store: Any) -> str:
    """How a store's columns are defined: "names" (a vocabulary), "hashing" or "numbered"."""
    if store.feature_names is not None:
        return "names"
    return "hashing" if store.hashing is not None else "numbered"


def store_provenance(path: str | os.PathLike[str], split: Any = None) -> dict[str, Any]:
    """What a model fitted on the store at ``path`` (documents of ``split``) must remember.

    The feature space (vocabulary hash or hashing parameters) is recorded so that
    projecting another store can be checked against it (:func:`check_compatible`).
    The store's provenance attributes are kept except the reader report.
    """
    from dmlfe.store import open_store

    store = open_store(path)
    names = store.feature_names
    uid = getattr(store, "_uid", None)
    return _jsonable({
        "path": str(Path(path).resolve()),
        "uuid": None if uid is None else str(uid),
        "split": split,
        "n_docs": store.n_docs,
        "n_features": store.n_features,
        "n_labels": store.n_labels,
        "label_names": list(store.label_names),
        "features": _feature_kind(store),
        "feature_names_sha256": None if names is None else _names_sha256(list(names)),
        "hashing": store.hashing,
        "attrs": {k: v for k, v in store.attrs.items() if k != "report"},
    }, "training store provenance")


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
    kind = _feature_kind(store)
    if train.get("features") and kind != train["features"]:
        words = {"names": "a vocabulary", "hashing": "hashed features",
                 "numbered": "numbered (unnamed) features"}
        raise ValueError(
            f"{where} has {words.get(kind, kind)}, but the model was fitted on "
            f"{words.get(train['features'], train['features'])} (training store "
            f"{train.get('path')}): the columns mean different things. Ingest the new "
            "documents the way the training store was ingested")
    if train.get("feature_names_sha256") is not None:
        names = store.feature_names
        if names is not None and _names_sha256(list(names)) != train["feature_names_sha256"]:
            raise ValueError(
                f"{where} has a different vocabulary from the training store "
                f"{train.get('path')} (same size {store.n_features}, different feature names): "
                "its columns mean other words, so the projection would be meaningless. "
                "Ingest the new documents with the training store's vocabulary")
    if train.get("hashing") is not None and store.hashing is not None:
        if _jsonable(store.hashing, "hashing") != train["hashing"]:
            raise ValueError(
                f"{where} was hashed with {store.hashing} but the model's training store "
                f"{train.get('path')} with {train['hashing']}; ingest with the same hashing "
                "parameters")


# --------------------------------------------------------------------------- #
# JSON helpers
# --------------------------------------------------------------------------- #
def _jsonable(value: Any, what: str) -> Any:
    """``value`` with numpy scalars and tuples turned into JSON types; TypeError otherwise."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist(), what)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, f"{what}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v, what) for v in value]
    raise TypeError(f"{what} = {value!r} (type {type(value).__name__}) cannot be saved in a "
                    "dmlfe model; use numbers, strings, lists or arrays")


def _estimator_classes() -> dict[str, type]:
    from dmlfe.estimators import ESTIMATORS

    return {cls.__name__: cls for cls in ESTIMATORS.values()}


# --------------------------------------------------------------------------- #
# Saving
# --------------------------------------------------------------------------- #
def _is_model_dir(path: Path) -> bool:
    return path.is_dir() and (path / MODEL_JSON).is_file()


def _check_target(out: Path, overwrite: bool) -> None:
    if not out.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True (--overwrite) to replace it")
    if not _is_model_dir(out):
        raise FileExistsError(
            f"{out} exists and is not a dmlfe model (no {MODEL_JSON} in it), so it is not "
            "replaced even with overwrite; choose another path or remove it yourself")


def save_model(estimator: Any, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Save a fitted dmlfe estimator to the directory ``path`` (model.json + arrays.npz).

    Parameters
    ----------
    estimator : MultiLabelProjection
        A fitted dmlfe estimator (PCA, ..., DMLDA).
    path : path-like
        The model directory to write; it appears only once complete.
    overwrite : bool
        Replace an existing model at ``path`` (only after the new one is written;
        a path that is not a dmlfe model is never replaced).

    Returns
    -------
    pathlib.Path
        ``path``.
    """
    classes = _estimator_classes()
    name = type(estimator).__name__
    if classes.get(name) is not type(estimator):
        raise TypeError(f"save_model saves dmlfe estimators ({', '.join(sorted(classes))}); "
                        f"got {name}")
    if not hasattr(estimator, "components_"):
        raise ValueError(f"this {name} is not fitted yet; call fit before saving it")
    out = Path(path)
    _check_target(out, overwrite)

    arrays: dict[str, np.ndarray] = {
        k: np.ascontiguousarray(getattr(estimator, k), dtype=np.float64) for k in FITTED_ARRAYS
    }
    rmap = getattr(estimator, "relation_map_", None)
    if rmap is not None:
        arrays.update(rmap.to_arrays(_RELATION_PREFIX))
        idx = getattr(estimator, "prototype_indices_", None)
        if idx is not None:
            arrays[_RELATION_PREFIX + "prototype_indices"] = np.asarray(idx, dtype=np.int64)
    params: dict[str, Any] = {}
    for key, value in estimator.get_params(deep=False).items():
        if key in _RUNTIME_PARAMS:
            continue
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biuf":
                raise TypeError(f"parameter {key} is an array of {value.dtype}; only numeric "
                                "arrays can be saved")
            arrays[_PARAM_PREFIX + key] = np.ascontiguousarray(value)
            params[key] = {"__array__": _PARAM_PREFIX + key}
        else:
            params[key] = _jsonable(value, f"parameter {key}")
    fitted = {k: _jsonable(getattr(estimator, k, None), k) for k in FITTED_SCALARS}
    meta = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "dmlfe_version": __version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "estimator": name,
        "method": estimator._method,
        "params": params,
        "fitted": fitted,
        "arrays": {k: list(v.shape) for k, v in arrays.items()},
    }
    text = json.dumps(meta, indent=2, sort_keys=True, allow_nan=False)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        with open(tmp / ARRAYS_NPZ, "wb") as f:
            np.savez(f, **arrays)
        (tmp / MODEL_JSON).write_text(text + "\n", encoding="utf-8")
        _commit(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``out``; an old model is removed only after the rename."""
    old = None
    if out.exists():
        _check_target(out, overwrite)  # it may have appeared while we were writing
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------- #
# Loading
# --------------------------------------------------------------------------- #
def _read_meta(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"no model at {path}")
    meta_path = path / MODEL_JSON
    if not meta_path.is_file():
        raise ValueError(f"{path} is not a dmlfe model: {MODEL_JSON} is missing")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{meta_path} is not valid JSON (line {exc.lineno}, column "
                         f"{exc.colno}: {exc.msg}); the model is damaged") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ValueError(f"{meta_path} is not a dmlfe model file (format is "
                         f"{meta.get('format') if isinstance(meta, dict) else None!r}, expected "
                         f"{FORMAT_NAME!r})")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError(f"{meta_path}: format_version = {version!r} is not an integer")
    if version > FORMAT_VERSION:
        raise ValueError(
            f"the model at {path} has format version {version} (written by dmlfe "
            f"{meta.get('dmlfe_version', '?')}), but this dmlfe {__version__} reads format "
            f"versions up to {FORMAT_VERSION}; upgrade dmlfe to load it")
    return meta


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
    meta = _read_meta(path)
    where = path / MODEL_JSON
    classes = _estimator_classes()
    name = meta.get("estimator")
    if name not in classes:
        raise ValueError(f"{where}: estimator {name!r} is not one of dmlfe's "
                         f"({', '.join(sorted(classes))})")
    try:
        with np.load(path / ARRAYS_NPZ, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
    except FileNotFoundError:
        raise ValueError(f"{path} is not a complete dmlfe model: {ARRAYS_NPZ} is missing") \
            from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path / ARRAYS_NPZ} ({exc}); the model is damaged") \
            from None

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
        from dmlfe.relation import RelationMap

        try:
            est.relation_map_ = RelationMap.from_arrays(est.relation_, arrays, _RELATION_PREFIX)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: the relation route's prototypes cannot be rebuilt "
                             f"({exc!r}); the model is damaged") from None
        est.prototype_indices_ = arrays.get(_RELATION_PREFIX + "prototype_indices")
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
