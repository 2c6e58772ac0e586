"""The saved-model format: a directory of JSON + npz, never pickle.

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

This module writes a model (:func:`save_model`) and reads the files back
(:func:`read_model_files`); :func:`dmlfe.model_io.load_model` turns them into an
estimator. The directory is written under a temporary name beside the target and
renamed into place, so a model is only ever seen complete.
"""

from __future__ import annotations

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
from dmlfe.methods.registry import all_methods

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
PARAM_PREFIX = "param."

#: Prefix of npz entries of the relation route (prototypes, their indices and scales).
RELATION_PREFIX = "relation."

#: Constructor parameters that describe where to run, not the model.
_RUNTIME_PARAMS = ("client",)



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
    names = sorted({s.estimator for s in all_methods().values()})
    name = type(estimator).__name__
    if name not in names or type(estimator).__module__ != "dmlfe.estimators":
        raise TypeError(f"save_model saves dmlfe estimators ({', '.join(names)}); got {name}")
    if not hasattr(estimator, "components_"):
        raise ValueError(f"this {name} is not fitted yet; call fit before saving it")
    out = Path(path)
    _check_target(out, overwrite)

    arrays: dict[str, np.ndarray] = {
        k: np.ascontiguousarray(getattr(estimator, k), dtype=np.float64) for k in FITTED_ARRAYS
    }
    rmap = getattr(estimator, "relation_map_", None)
    if rmap is not None:
        arrays.update(rmap.to_arrays(RELATION_PREFIX))
        idx = getattr(estimator, "prototype_indices_", None)
        if idx is not None:
            arrays[RELATION_PREFIX + "prototype_indices"] = np.asarray(idx, dtype=np.int64)
    params: dict[str, Any] = {}
    for key, value in estimator.get_params(deep=False).items():
        if key in _RUNTIME_PARAMS:
            continue
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biuf":
                raise TypeError(f"parameter {key} is an array of {value.dtype}; only numeric "
                                "arrays can be saved")
            arrays[PARAM_PREFIX + key] = np.ascontiguousarray(value)
            params[key] = {"__array__": PARAM_PREFIX + key}
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
# Reading
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


def read_model_files(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(model.json contents, arrays.npz contents) of a saved model, format checked.

    Raises
    ------
    FileNotFoundError
        Nothing at ``path``.
    ValueError
        Not a dmlfe model, a newer format version, or unreadable files.
    """
    path = Path(path)
    meta = _read_meta(path)
    try:
        with np.load(path / ARRAYS_NPZ, allow_pickle=False) as z:
            arrays = {k: np.array(z[k]) for k in z.files}
    except FileNotFoundError:
        raise ValueError(f"{path} is not a complete dmlfe model: {ARRAYS_NPZ} is missing") \
            from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path / ARRAYS_NPZ} ({exc}); the model is damaged") \
            from None
    return meta, arrays
