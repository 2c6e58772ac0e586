"""The saved-model format: a directory of JSON + npz, never pickle, and its schema.

A saved model is a directory::

    model/
      model.json   -- format name and version, dmlfe version, estimator class and
                      method, the constructor parameters (``get_params()`` without
                      ``client``), the fitted scalars (n_components_, solver_, ...)
                      and, when fitted from a store, the training provenance
      arrays.npz   -- components_ (float64, or float32 for a model fitted with
                      components_dtype="float32"), eigenvalues_, mean_ (float64);
                      since format version 2, when the fit kept its components on
                      the columns some training document uses, components_ holds
                      those columns only and component_columns names them (the
                      others are zero, so a file of hashed text is about the used
                      columns' share of a whole one); and any array-valued
                      parameter (e.g. an explicit MDDM label kernel); for the relation
                      route also the prototypes as CSR parts
                      (relation.prototypes.data / .indices / .indptr), their training
                      row indices (relation.prototype_indices) and, for the local-scaling
                      similarity, their scales (relation.prototype_scales)

The relation route's similarity parameters (similarity, tau, n_neighbors, p, D,
selection, seed) are the fitted scalar ``relation_`` in model.json, next to
``route_`` and ``route_reason_``.

Every key of model.json and every array of arrays.npz is declared once, below
(:data:`META_SCHEMA`, :data:`FITTED_SCHEMA`, :data:`RELATION_SCHEMA`,
:data:`TRAINING_STORE_SCHEMA`; :data:`ARRAY_SCHEMA`, :data:`COLUMNS_SPEC`,
:data:`RELATION_ARRAY_SCHEMA`, :data:`PARAM_ARRAY`): its JSON type or dtype kind, its
range or shape, and, for a key that models written before it existed lack, the value
such models load with. :func:`check_model` checks a model against it, both before it is written
(:func:`save_model`) and when it is read (:func:`read_model_files`); the constructor
parameters are checked with the estimator class's own declarations
(:func:`model_params`). Every failure is a :class:`dmlfe.errors.ModelFormatError` whose
message names the file, the key and what is wrong, so that no damaged or tampered
model loads (NaN components would give NaN embeddings) or ends in a raw traceback.

This module is the whole format: it writes a model (:func:`save_model`), reads the files
back (:func:`read_model_files`) and sets a fitted estimator's state from them
(:func:`restore_model`), so that a change of the format is a change of this module (and
its test). :func:`dmlfe.model_io.load_model` only adds the look-up of the estimator
class by name, which needs :mod:`dmlfe.estimators`, whose ``save`` calls this module. The
directory is written under a temporary name beside the target
(:func:`dmlfe.tempfiles.temp_sibling`; those a killed save left are removed first) and
renamed into place, so a model is only ever seen complete.
"""

from __future__ import annotations

import json
import numbers
import os
import shutil
import zipfile
import zlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.npyio import NpzFile

from dmlfe._version import __version__
from dmlfe.compute import kept_float_dtype
from dmlfe.errors import MissingPathError, ModelFormatError
from dmlfe.io.schema import (
    ArraySpec,
    Key,
    array_error,
    fail,
    json_type,
    key_error,
    non_finite_key,
    short,
    with_defaults,
)
from dmlfe.methods.registry import all_methods
from dmlfe.params import interval, one_of, validate
from dmlfe.relation import RelationMap
from dmlfe.relation.similarities import relation_similarity
from dmlfe.tempfiles import link_note, move_into_place, remove_stale, temp_sibling

#: Name written into every model.json, so that other JSON files are not mistaken for models.
FORMAT_NAME = "dmlfe-model"
#: Bumped whenever the meaning or layout of a saved model changes; load_model reads
#: every version up to this one (2: components_ may be kept on component_columns).
FORMAT_VERSION = 2

MODEL_JSON = "model.json"
ARRAYS_NPZ = "arrays.npz"

#: Prefix of npz entries holding array-valued constructor parameters.
PARAM_PREFIX = "param."

#: Prefix of npz entries of the relation route (prototypes, their indices and scales).
RELATION_PREFIX = "relation."

#: Constructor parameters that describe where to run, not the model.
_RUNTIME_PARAMS = ("client",)


# --------------------------------------------------------------------------- #
# The schema
# --------------------------------------------------------------------------- #
def _array_shapes(key: str, v: dict) -> dict:
    for name, shape in v.items():
        if not (isinstance(shape, list) and all(
                isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)):
            raise ValueError(f"the shape of {name} must be a list of non-negative integers, "
                             f"got {shape!r}")
    return v


_AT_LEAST_0 = interval(0, None)
_AT_LEAST_1 = interval(1, None)


#: Every key of model.json.
META_SCHEMA: dict[str, Key] = {
    "format": Key(("string",), f"always {FORMAT_NAME!r}", check=one_of(FORMAT_NAME)),
    "format_version": Key(("integer",), f"1..{FORMAT_VERSION}; newer ones need a newer dmlfe",
                          check=_AT_LEAST_1),
    "dmlfe_version": Key(("string",), "the dmlfe that wrote the model"),
    "created": Key(("string",), "when (ISO 8601, UTC)", required=False),
    "estimator": Key(("string",), "the estimator class, one of dmlfe's (dmlfe.estimators)"),
    "method": Key(("string",), "the registered method (dmlfe.methods.registry) of that "
                  "estimator that the parameters select"),
    "params": Key(("object",), "the constructor parameters, checked with the estimator "
                  "class's declarations (see model_params); an array-valued one is "
                  "{'__array__': 'param.<name>'}"),
    "fitted": Key(("object",), "the fitted scalars (FITTED_SCHEMA)"),
    "arrays": Key(("object",), "name -> shape of every array in arrays.npz",
                  check=_array_shapes),
}

#: Top-level keys every model.json has.
REQUIRED_KEYS = tuple(k for k, spec in META_SCHEMA.items() if spec.required)


#: fitted.relation_ (the relation map's parameters, RelationMap.params() + selection).
RELATION_SCHEMA: dict[str, Key] = {
    "similarity": Key(("string",), "the similarity", check=relation_similarity),
    "tau": Key(("number", "null"), "its width (gaussian, inverse_normalized_distance)",
               required=False, check=interval(0, None, closed="neither")),
    "n_neighbors": Key(("integer", "null"), "K of local_scaling", required=False,
                       check=_AT_LEAST_1),
    "n_prototypes": Key(("integer",), "p, the prototypes: the columns of components_",
                        check=_AT_LEAST_1),
    "n_features": Key(("integer",), "the prototypes' features (= n_features_in_)",
                      check=_AT_LEAST_1),
    "prototype_selection": Key(("string",), "how they were chosen", required=False),
    "random_state": Key(("integer",), "the selection's seed", required=False),
}

#: fitted.training_store_: the keys dmlfe.model_io.check_compatible reads (others are
#: the store's provenance, kept as they are).
TRAINING_STORE_SCHEMA: dict[str, Key] = {
    "path": Key(("string", "null"), "the training store", required=False),
    "features": Key(("string", "null"), "names, hashing or numbered", required=False),
    "feature_names_sha256": Key(("string", "null"), "the vocabulary's hash",
                                required=False),
    "hashing": Key(("object", "null"), "the hashing parameters", required=False),
    "n_features": Key(("integer",), "its features", required=False, check=_AT_LEAST_1),
}


#: The fitted scalars in model.json (fitted.<key>); the estimator attributes of the same
#: name (see dmlfe.fit.run.FittedProjection). Keys added after format version 1 was
#: first written are optional, with the value the estimator had before they existed.
FITTED_SCHEMA: dict[str, Key] = {
    "n_components_": Key(("integer",), "d, the number of components", check=_AT_LEAST_1),
    "solver_": Key(("string",), "the eigensolver used"),
    "n_passes_": Key(("integer",), "passes over the data", check=_AT_LEAST_0),
    "regularization_": Key(("number",), "ridge added to the constraint", check=_AT_LEAST_0),
    "centred_": Key(("boolean",), "whether transform subtracts mean_"),
    "n_features_in_": Key(("integer",), "D, the training features", check=_AT_LEAST_1),
    "n_samples_": Key(("integer",), "training documents", check=_AT_LEAST_1),
    "n_genuine_": Key(("integer",), "eigenvalues above round-off", check=_AT_LEAST_0),
    "method_params_": Key(("object",), "the method's parameters as used"),
    "training_store_": Key(("object", "null"), "the training store's provenance "
                           "(TRAINING_STORE_SCHEMA); null when X was not a store",
                           fields=TRAINING_STORE_SCHEMA, closed=False),
    "route_": Key(("string", "null"), "'feature', 'relation' or 'dual' (null or absent: "
                  "'feature')", required=False, default="feature",
                  check=one_of("feature", "relation", "dual")),
    "route_reason_": Key(("string", "null"), "why that route", required=False),
    "relation_": Key(("object", "null"), "the relation route's similarity "
                     "(RELATION_SCHEMA); null on the feature route", required=False,
                     fields=RELATION_SCHEMA),
    "converged_": Key(("boolean", "null"), "whether the eigensolver converged",
                      required=False),
    "stats_from_cache_": Key(("boolean", "null"), "whether the statistics came from the "
                             "cache", required=False),
    "max_residual_": Key(("number", "null"), "largest relative residual of the components "
                         "where the solver measured it (matrix-free); null otherwise",
                         required=False),
    "solver_info_": Key(("object", "null"), "the n-space route's block, passes, restarts "
                        "and time per slot and on the driver; null otherwise",
                        required=False),
    "eigenvalue_total_": Key(("number", "null"), "tr(A), the sum of all eigenvalues, when "
                             "only the leading ones were computed; null otherwise",
                             required=False),
    "rows_read_": Key(("integer", "null"), "documents the fit read from the data (0 when "
                      "cached statistics made it; the appended ones after an append)",
                      required=False, check=_AT_LEAST_0),
}
#: Fitted scalar attributes kept in model.json.
FITTED_SCALARS = tuple(FITTED_SCHEMA)

def _enough_eigenvalues(a: np.ndarray, dims: dict[str, int]) -> None:
    if a.shape[0] < dims["d"]:
        raise ValueError(f"holds {a.shape[0]} eigenvalues, fewer than fitted.n_components_ = "
                         f"{dims['d']} (model.json)")


def _row_pointers(a: np.ndarray, dims: dict[str, int]) -> None:
    if a[0] != 0 or np.any(np.diff(a) < 0) or a[-1] != dims["nnz"]:
        raise ValueError("is not a CSR row pointer (it must rise from 0 to the length of "
                         f"relation.prototypes.data, {dims['nnz']}, never falling)")


def _column_indices(a: np.ndarray, dims: dict[str, int]) -> None:
    if a.size and (a.min() < 0 or a.max() >= dims["n_features"]):
        raise ValueError(f"holds column indices outside [0, {dims['n_features']}) "
                         "(fitted.relation_.n_features, model.json)")


def _training_rows(a: np.ndarray, dims: dict[str, int]) -> None:
    if a.size and (a.min() < 0 or a.max() >= dims["n"]):
        raise ValueError(f"holds row indices outside [0, {dims['n']}) (fitted.n_samples_, "
                         "model.json)")


def _non_negative(a: np.ndarray, dims: dict[str, int]) -> None:
    if a.size and a.min() < 0:
        raise ValueError("holds negative scales")


#: The names of the dimensions in ARRAY_SCHEMA / RELATION_ARRAY_SCHEMA.
DIMENSIONS = {
    "d": "fitted.n_components_",
    "D": "fitted.n_features_in_ on the feature route, fitted.relation_.n_prototypes on the "
         "relation route",
    "c": "the length of component_columns",
    "k": "any, at least d",
    "p": "fitted.relation_.n_prototypes",
    "p+1": "fitted.relation_.n_prototypes + 1",
    "nnz": "the length of relation.prototypes.data",
}

#: The fitted arrays of every model.
ARRAY_SCHEMA: dict[str, ArraySpec] = {
    "components_": ArraySpec("f", ("d", "D"), "the projection's rows (float32 kept as such)"),
    "eigenvalues_": ArraySpec("f", ("k",), "every computed eigenvalue, descending",
                              check=_enough_eigenvalues),
    "mean_": ArraySpec("f", ("D",), "the training mean (zeros when not centred)"),
}
#: Fitted arrays kept in arrays.npz (components_ first).
FITTED_ARRAYS = tuple(ARRAY_SCHEMA)


def _sorted_columns(a: np.ndarray, dims: dict[str, int]) -> None:
    if a.min() < 0 or a.max() >= dims["D"]:
        raise ValueError(f"holds columns outside [0, {dims['D']})")
    if a.size > 1 and np.any(np.diff(a) <= 0):
        raise ValueError("is not strictly increasing")


#: The columns components_ holds when it is kept on them (format version 2; optional).
COLUMNS_ARRAY = "component_columns"
COLUMNS_SPEC = ArraySpec("iu", ("c",), "the columns of D that components_ holds, "
                         "increasing (the others are zero)", check=_sorted_columns)
#: components_ kept on those columns.
KEPT_COMPONENTS_SPEC = ArraySpec("f", ("d", "c"), "the projection's rows on "
                                 "component_columns (float32 kept as such)")

#: The relation route's arrays (only there); (spec, required).
RELATION_ARRAY_SCHEMA: dict[str, tuple[ArraySpec, bool]] = {
    RELATION_PREFIX + "prototypes.data": (ArraySpec("f", ("nnz",), "CSR values"), True),
    RELATION_PREFIX + "prototypes.indices": (
        ArraySpec("iu", ("nnz",), "CSR column indices", check=_column_indices), True),
    RELATION_PREFIX + "prototypes.indptr": (
        ArraySpec("iu", ("p+1",), "CSR row pointer", check=_row_pointers), True),
    RELATION_PREFIX + "prototype_indices": (
        ArraySpec("iu", ("p",), "the prototypes' training rows", check=_training_rows), False),
    RELATION_PREFIX + "prototype_scales": (
        ArraySpec("f", ("p",), "local_scaling's sigma of each prototype",
                  check=_non_negative), False),
}

#: An array-valued constructor parameter, ``param.<name>``, named in params as
#: {"__array__": "param.<name>"} (its shape is the parameter's own business).
PARAM_ARRAY = ArraySpec("biuf", None, "an array-valued constructor parameter")


# --------------------------------------------------------------------------- #
# Checking a model against the schema
# --------------------------------------------------------------------------- #
def check_model(meta: Any, arrays: Mapping[str, np.ndarray],
                where: str | os.PathLike[str] | None = None) -> tuple[dict[str, Any],
                                                                       dict[str, np.ndarray]]:
    """Check a model's model.json contents and arrays against the schema.

    Everything except the constructor parameters' values, which need the estimator
    class (see :func:`model_params`). ``where`` is the model directory, for the
    messages (None: the bare file names).

    Returns
    -------
    meta : dict
        ``meta`` with the fitted scalars of older models filled in (their defaults).
    arrays : dict
        The arrays, floating-point ones as float64 (float32 ``components_`` kept as
        float32) and index arrays as int64.

    Raises
    ------
    ModelFormatError
        Naming the file (model.json or arrays.npz), the key and what is wrong.
    """
    js = MODEL_JSON if where is None else str(Path(where) / MODEL_JSON)
    nz = ARRAYS_NPZ if where is None else str(Path(where) / ARRAYS_NPZ)
    if not isinstance(meta, dict):
        fail(js, "(top level)", f"is {json_type(meta)}, expected an object: not a dmlfe "
              "model file")
    bad = non_finite_key(meta)
    if bad is not None:
        fail(js, bad, "is NaN or infinite, which no saved model holds (the file is damaged)")
    err = key_error(meta, META_SCHEMA, closed=True)
    if err is not None:
        fail(js, *err)

    # the estimator and its method
    methods = all_methods()
    estimators = sorted({s.estimator for s in methods.values()})
    if meta["estimator"] not in estimators:
        raise ModelFormatError(f"{js}: estimator {short(meta['estimator'])} is not one of "
                               f"dmlfe's ({', '.join(estimators)})")
    spec = methods.get(meta["method"])
    if spec is None or spec.estimator != meta["estimator"]:
        own = [s.name for s in methods.values() if s.estimator == meta["estimator"]]
        fail(js, "method", f"{short(meta['method'])} is not a method of "
              f"{meta['estimator']} ({', '.join(own)})")

    # the fitted scalars
    err = key_error(meta["fitted"], FITTED_SCHEMA, closed=True)
    if err is not None:
        fail(js, f"fitted.{err[0]}", err[1])
    fitted = with_defaults(meta["fitted"], FITTED_SCHEMA)
    route = fitted["route_"] or "feature"
    relation = fitted["relation_"]
    if route == "relation" and relation is None:
        fail(js, "fitted.relation_", "is missing or null, but fitted.route_ is 'relation': "
              "the prototypes' similarity is unknown")
    if route != "relation" and relation is not None:
        fail(js, "fitted.relation_", f"is given, but fitted.route_ is {route!r}")
    n_features = fitted["n_features_in_"]
    if relation is not None:
        if relation["n_features"] != n_features:
            fail(js, "fitted.relation_.n_features", f"= {relation['n_features']} but "
                  f"fitted.n_features_in_ = {n_features}")
        if relation["n_prototypes"] > fitted["n_samples_"]:
            fail(js, "fitted.relation_.n_prototypes", f"= {relation['n_prototypes']} is more "
                  f"than the training documents (fitted.n_samples_ = {fitted['n_samples_']})")

    # the parameters' arrays (their values are checked by model_params)
    refs = {}
    for key, value in meta["params"].items():
        if isinstance(value, dict):
            ref = value.get("__array__")
            if set(value) != {"__array__"} or not isinstance(ref, str) \
                    or not ref.startswith(PARAM_PREFIX):
                fail(js, f"params.{key}", f"= {short(value)}: an object parameter must be "
                      f"{{'__array__': '{PARAM_PREFIX}<name>'}}")
            if ref not in arrays:
                fail(js, f"params.{key}", f"refers to array {ref!r}, which {nz} lacks")
            refs[ref] = key

    # model.json's list of the arrays, and the arrays themselves
    listed = meta["arrays"]
    for name in sorted(set(listed) | set(arrays)):
        if name not in arrays:
            fail(js, "arrays", f"lists {name} (shape {listed[name]}) but {nz} has no such "
                  "array")
        if name not in listed or tuple(listed[name]) != arrays[name].shape:
            fail(js, "arrays", f"lists {name} with shape {listed.get(name)} but {nz} holds "
                  f"one of shape {list(arrays[name].shape)}")
    specs: dict[str, ArraySpec] = dict(ARRAY_SCHEMA)
    if COLUMNS_ARRAY in arrays:
        if meta["format_version"] < 2:
            fail(js, "format_version", f"= {meta['format_version']}, but {nz} holds "
                  f"{COLUMNS_ARRAY}, which format version 2 introduced")
        specs[COLUMNS_ARRAY] = COLUMNS_SPEC
        specs["components_"] = KEPT_COMPONENTS_SPEC
    if relation is not None:
        for name, (aspec, required) in RELATION_ARRAY_SCHEMA.items():
            if name in arrays or required:
                specs[name] = aspec
    specs.update(dict.fromkeys(refs, PARAM_ARRAY))
    for name in arrays:
        if name not in specs:
            what = ("belongs to the relation route, but this model is on the feature route"
                    if name in RELATION_ARRAY_SCHEMA else
                    "is named by no parameter" if name.startswith(PARAM_PREFIX) else
                    "is not an array of a dmlfe model")
            fail(nz, name, what)
    d = fitted["n_components_"]
    dims = {"d": d, "D": n_features, "n": fitted["n_samples_"]}
    names = {"d": "fitted.n_components_", "D": "fitted.n_features_in_"}
    if COLUMNS_ARRAY in arrays:
        dims["c"] = len(arrays[COLUMNS_ARRAY]) if arrays[COLUMNS_ARRAY].ndim == 1 else -1
    if relation is not None:
        p = relation["n_prototypes"]
        dims.update({"D": p, "p": p, "p+1": p + 1, "n_features": relation["n_features"]})
        names.update({"D": "fitted.relation_.n_prototypes", "p": "fitted.relation_.n_prototypes",
                      "p+1": "fitted.relation_.n_prototypes + 1"})
    out = {}
    for name, aspec in specs.items():
        if name not in arrays:
            fail(nz, name, f"is missing ({aspec.doc})")
        a = arrays[name]
        what = array_error(a, aspec, dims, {**DIMENSIONS, **names})
        if what:
            fail(nz, name, what)
        if name == RELATION_PREFIX + "prototypes.data":
            dims["nnz"] = a.shape[0]
        if aspec is PARAM_ARRAY:
            out[name] = a
        elif name == "components_":  # as a fit leaves it: the transpose of a C-ordered P
            out[name] = np.ascontiguousarray(a.T, dtype=kept_float_dtype(a)).T
        else:
            out[name] = np.ascontiguousarray(
                a, dtype=np.float64 if a.dtype.kind == "f" else np.int64)
    return {**meta, "fitted": fitted}, out


def model_params(meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray], cls: type,
                 where: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The constructor parameters of a checked model (:func:`check_model`) for ``cls``.

    Checked with the class's own declarations (``dmlfe.params.validate``); a parameter
    the model lacks (it was added after the model was written) takes its default, and
    one the class does not have is refused.

    Raises
    ------
    ModelFormatError
        Naming model.json, the parameter and what is wrong.
    """
    js = MODEL_JSON if where is None else str(Path(where) / MODEL_JSON)
    declared = {p.name: p for p in cls._declared}
    values = {name: p.default for name, p in declared.items()}
    for key, value in meta["params"].items():
        if key not in declared:
            fail(js, f"params.{key}", f"is not a parameter of {cls.__name__}")
        if key in _RUNTIME_PARAMS:
            if value is not None:
                fail(js, f"params.{key}", f"= {short(value)}: where to run is not part of "
                      "a saved model")
            continue
        if isinstance(value, dict):  # {"__array__": name}, checked by check_model
            value = arrays[value["__array__"]]
        values[key] = value
    try:
        validate(values, cls._declared, cls.__name__)
    except (TypeError, ValueError) as exc:
        fail(js, "params", " ".join(str(exc).split()))
    return values


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


def check_model_target(out: str | os.PathLike[str], overwrite: bool) -> None:
    """Refuse ``out`` as the directory of a new model unless it may be written there.

    Anything at ``out`` (a symbolic link too, even one that leads nowhere) is refused
    without ``overwrite``; with it, anything but a dmlfe model directory. The command
    line calls this before any work, :func:`save_model` again before writing and before
    the rename.

    Raises
    ------
    FileExistsError
        With one line naming ``out``.
    """
    out = Path(out)
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise FileExistsError(f"{out} exists{link_note(out)}; pass overwrite=True "
                              "(--overwrite) to replace it")
    if not _is_model_dir(out):
        raise FileExistsError(
            f"{out} exists{link_note(out)} and is not a dmlfe model (no {MODEL_JSON} in "
            "it), so it is not replaced even with overwrite; choose another path or remove "
            "it yourself")


def save_model(estimator: Any, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Save a fitted dmlfe estimator to the directory ``path`` (model.json + arrays.npz).

    The model is checked against the schema first (:func:`check_model`, and the
    parameters against the estimator's declarations), so that what is saved loads.

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

    Raises
    ------
    ModelFormatError
        The estimator would make a model that does not load: a non-finite fitted
        array (NaN or inf), a parameter its class refuses, inconsistent shapes.
    """
    names = sorted({s.estimator for s in all_methods().values()})
    name = type(estimator).__name__
    if name not in names or type(estimator).__module__ != "dmlfe.estimators":
        raise TypeError(f"save_model saves dmlfe estimators ({', '.join(names)}); got {name}")
    estimator._solve_pending()  # blocks given to partial_fit since the last solve
    if "_components" not in estimator.__dict__:  # components_ itself may build d x D
        raise ValueError(f"this {name} is not fitted yet; call fit before saving it")
    out = Path(path)
    check_model_target(out, overwrite)

    arrays: dict[str, np.ndarray] = {}
    # as kept: on the used columns when the fit kept them so (no d x D array is built)
    components, columns = estimator._kept_components()
    # components_ in its own layout (a fit's is the transpose of a C-ordered D x d
    # array): np.savez writes a Fortran-ordered array as such, without a copy
    arrays["components_"] = np.asarray(components, dtype=kept_float_dtype(components))
    for k in FITTED_ARRAYS[1:]:
        arrays[k] = np.ascontiguousarray(getattr(estimator, k), dtype=np.float64)
    if columns is not None:
        arrays[COLUMNS_ARRAY] = np.asarray(columns, dtype=np.int64)
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
    try:  # what is written must load
        check_model(meta, arrays)
        model_params(meta, arrays, type(estimator))
    except ModelFormatError as exc:
        raise ModelFormatError(f"cannot save {out}: {exc}") from None
    text = json.dumps(meta, indent=2, sort_keys=True, allow_nan=False)

    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)  # what killed saves to the same path left behind
    tmp = temp_sibling(out)
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
    check_model_target(out, overwrite)  # it may have appeared while we were writing
    move_into_place(tmp, out)


# --------------------------------------------------------------------------- #
# Reading
# --------------------------------------------------------------------------- #
#: What numpy and zipfile raise on bytes that are not an npz archive of plain arrays
#: (truncated, garbage, a pickled object array, a member claiming more than it holds).
_UNREADABLE = (OSError, EOFError, ValueError, MemoryError, RuntimeError, NotImplementedError,
               zipfile.BadZipFile, zlib.error)


def _read_meta(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise MissingPathError(f"no model at {path}")
    meta_path = path / MODEL_JSON
    if not path.is_dir():
        raise ModelFormatError(f"{path} is not a dmlfe model: a model is a directory (with "
                               f"{MODEL_JSON} and {ARRAYS_NPZ}), not a directory but a file")
    if not meta_path.is_file():
        raise ModelFormatError(f"{path} is not a dmlfe model: {MODEL_JSON} is missing")
    try:
        text = meta_path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelFormatError(f"{meta_path}: is not UTF-8 text (byte {exc.start}); "
                               "the model is damaged") from None
    except OSError as exc:
        raise ModelFormatError(f"{meta_path}: cannot be read ({exc})") from None
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelFormatError(f"{meta_path} is not valid JSON (line {exc.lineno}, column "
                               f"{exc.colno}: {exc.msg}); the model is damaged") from None
    except RecursionError:
        raise ModelFormatError(f"{meta_path}: nested too deeply to be a dmlfe model") \
            from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise ModelFormatError(
            f"{meta_path} is not a dmlfe model file (format is "
            f"{short(meta.get('format')) if isinstance(meta, dict) else None}, expected "
            f"{FORMAT_NAME!r})")
    version = meta.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ModelFormatError(f"{meta_path}: format_version = {short(version)} is not an "
                               "integer")
    if version > FORMAT_VERSION:
        written = meta.get("dmlfe_version")
        written = written[:40] if isinstance(written, str) else "?"
        raise ModelFormatError(
            f"the model at {path} has format version {version} (written by dmlfe {written}), "
            f"but this dmlfe {__version__} reads format versions up to {FORMAT_VERSION}; "
            "upgrade dmlfe to load it")
    return meta


def _read_arrays(path: Path) -> dict[str, np.ndarray]:
    npz = path / ARRAYS_NPZ
    if not npz.exists():
        raise ModelFormatError(f"{npz}: is missing; {path} is not a complete dmlfe "
                               "model")
    try:
        is_zip = zipfile.is_zipfile(npz)
    except OSError as exc:
        raise ModelFormatError(f"{npz}: cannot be read ({exc})") from None
    if not is_zip:
        raise ModelFormatError(f"{npz}: not a readable npz archive (not a zip file: empty, "
                               "truncated or overwritten); the model is damaged")
    try:
        with open(npz, "rb") as f:
            z = np.load(f, allow_pickle=False)
            if not isinstance(z, NpzFile):
                raise ValueError("it holds a single array, not an npz archive")
            arrays = {}
            with z:
                for k in z.files:
                    a = z[k]
                    if not isinstance(a, np.ndarray):  # numpy hands back a member's raw bytes
                        raise ValueError(f"its member {k!r} is not an npy array")
                    arrays[k] = a
            return arrays
    except _UNREADABLE as exc:
        raise ModelFormatError(
            f"{npz}: not a readable npz archive of numeric arrays "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}); the model is damaged") \
            from None


def read_model_files(
    path: str | os.PathLike[str],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(model.json contents, arrays.npz contents) of a saved model, checked against the
    schema (:func:`check_model`: all but the parameters' values, see :func:`model_params`).

    The fitted scalars that older models lack are filled in with their defaults;
    floating-point arrays are float64 (float32 ``components_`` stay float32), index
    arrays int64.

    Raises
    ------
    MissingPathError
        Nothing at ``path`` (a FileNotFoundError).
    ModelFormatError
        Not a dmlfe model, a newer format version, unreadable files or contents that
        break the schema (a ValueError); the message names the file and the key.
    """
    path = Path(path)
    meta = _read_meta(path)
    arrays = _read_arrays(path)
    return check_model(meta, arrays, path)


def restore_model(cls: type, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                  where: str | os.PathLike[str] | None = None) -> Any:
    """A fitted ``cls`` with the state of a checked model (:func:`read_model_files`).

    ``cls`` is the estimator class that ``meta["estimator"]`` names; the parameters are
    checked with its declarations (:func:`model_params`). ``where`` is the model
    directory, for the messages.

    Raises
    ------
    ModelFormatError
        The parameters break the class's declarations, select another method than
        model.json's, or the relation route's prototypes cannot be rebuilt.
    """
    js = MODEL_JSON if where is None else str(Path(where) / MODEL_JSON)
    est = cls(**model_params(meta, arrays, cls, where))
    if est._method != meta["method"]:
        raise ModelFormatError(f"{js}: method: {meta['method']!r} does not match "
                               f"{meta['estimator']} with these parameters ({est._method!r})")

    # kept as saved: on component_columns, components_ builds the d x D array on first use
    est._keep_components(arrays["components_"], arrays.get(COLUMNS_ARRAY))
    for key in FITTED_ARRAYS[1:]:
        setattr(est, key, arrays[key])
    for key, value in meta["fitted"].items():
        setattr(est, key, value)
    est.route_ = est.route_ or "feature"  # models written before the relation route
    est.relation_map_, est.prototype_indices_ = None, None
    if est.relation_ is not None:
        try:
            est.relation_map_ = RelationMap.from_arrays(est.relation_, arrays, RELATION_PREFIX)
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelFormatError(
                f"{js}: fitted.relation_: the relation route's prototypes cannot be "
                f"rebuilt from it and {ARRAYS_NPZ} ({' '.join(str(exc).split())})") from None
        est.prototype_indices_ = arrays.get(RELATION_PREFIX + "prototype_indices")
    return est
