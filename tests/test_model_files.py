"""Saved models: every tampered or damaged model is refused with a ModelFormatError that
names the file (model.json or arrays.npz), the key and what is wrong; nothing loads a
model whose arrays would give wrong embeddings, and nothing ends in a raw traceback.

Each case in :data:`CASES` takes a freshly saved model (a feature-route MVMD, a
relation-route MVMD with local scaling, or an MDDM with an explicit label kernel),
damages it one way, and expects ``load_model`` to refuse it.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import sparse_dask, write_store
from test_estimators import sparse_data

from dmlfe.cli import main
from dmlfe.errors import DmlfeError, ModelFormatError
from dmlfe.estimators import MDDM, MVMD
from dmlfe.model_files import (
    ARRAYS_NPZ,
    FITTED_SCHEMA,
    MODEL_JSON,
    REQUIRED_KEYS,
    read_model_files,
    save_model,
)
from dmlfe.model_io import load_model

OLD_MODELS = Path(__file__).parent / "data" / "models-88e94a1"
KERNEL = np.array([[1.0, 0.5, 0.0, 0.0], [0.5, 1.0, 0.0, 0.0],
                   [0.0, 0.0, 1.0, 0.2], [0.0, 0.0, 0.2, 1.0]])


# --------------------------------------------------------------------------- models
def fit_model(kind: str):
    X, Xs, Y = sparse_data(n=60)
    if kind == "feature":
        return MVMD(n_components=3).fit(Xs, Y)
    if kind == "relation":
        return MVMD(n_components=3, route="relation", n_prototypes=20,
                    prototype_selection="random", similarity="local_scaling",
                    n_neighbors=4).fit(Xs, Y)
    if kind == "kernel":
        return MDDM(n_components=2, label_kernel=KERNEL).fit(Xs, Y)
    if kind == "compact":  # the dual route keeps the components on the used columns
        wide = sp.hstack([Xs, sp.csr_matrix((Xs.shape[0], 40))]).tocsr()
        est = MVMD(n_components=3, route="dual").fit(wide, Y)
        assert est._kept_components()[1].size == Xs.shape[1] - np.sum(Xs.getnnz(axis=0) == 0)
        return est
    raise AssertionError(kind)


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, Path]:
    """One saved model of each kind; cases copy them before damaging them."""
    root = tmp_path_factory.mktemp("models")
    return {kind: fit_model(kind).save(root / kind)
            for kind in ("feature", "relation", "kernel", "compact")}


# --------------------------------------------------------------------------- tampering
def edit_json(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def tamper(model: Path) -> None:
        meta = json.loads((model / MODEL_JSON).read_text())
        change(meta)
        (model / MODEL_JSON).write_text(json.dumps(meta))
    return tamper


def edit_npz(change: Callable[[dict], None], *, manifest: bool = True) -> Callable[[Path], None]:
    """Change the arrays; with ``manifest`` model.json's list of shapes follows, so that
    only the array itself is wrong."""
    def tamper(model: Path) -> None:
        with np.load(model / ARRAYS_NPZ) as z:
            arrays = {k: z[k] for k in z.files}
        change(arrays)
        np.savez(model / ARRAYS_NPZ, **arrays)
        if manifest:
            meta = json.loads((model / MODEL_JSON).read_text())
            meta["arrays"] = {k: list(np.shape(v)) for k, v in arrays.items()}
            (model / MODEL_JSON).write_text(json.dumps(meta))
    return tamper


def write_bytes(data: bytes | Callable[[bytes], bytes]) -> Callable[[Path], None]:
    def tamper(model: Path) -> None:
        p = model / ARRAYS_NPZ
        p.write_bytes(data(p.read_bytes()) if callable(data) else data)
    return tamper


def _remove(model: Path) -> None:
    (model / ARRAYS_NPZ).unlink()


def _empty_zip(model: Path) -> None:
    with zipfile.ZipFile(model / ARRAYS_NPZ, "w"):
        pass


def _corrupt_member(model: Path) -> None:
    # a zip whose directory is intact but whose components_ bytes are not an npy array
    with np.load(model / ARRAYS_NPZ) as z:
        arrays = {k: z[k] for k in z.files}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for k, v in arrays.items():
            member = io.BytesIO()
            np.save(member, v)
            zf.writestr(f"{k}.npy", b"garbage" if k == "components_" else member.getvalue())
    (model / ARRAYS_NPZ).write_bytes(buf.getvalue())


def _flip_middle(data: bytes) -> bytes:
    mid = len(data) // 2  # inside an array's bytes: the zip directory at the end is intact
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 16]) + data[mid + 16:]


def _huge_member(model: Path) -> None:
    # components_'s npy header claims 10**12 float64 (8 TB) but holds 8 bytes
    with np.load(model / ARRAYS_NPZ) as z:
        arrays = {k: z[k] for k in z.files}
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for k, v in arrays.items():
            member = io.BytesIO()
            np.save(member, v)
            data = header.getvalue() + bytes(8) \
                if k == "components_" else member.getvalue()
            zf.writestr(f"{k}.npy", data)
    (model / ARRAYS_NPZ).write_bytes(buf.getvalue())


def _object_array(model: Path) -> None:
    with np.load(model / ARRAYS_NPZ) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["components_"] = np.array([{"a": 1}, None], dtype=object)
    np.savez(model / ARRAYS_NPZ, **arrays)  # np.savez pickles it; loading must not


def _set(path: str, value) -> Callable[[dict], None]:
    """Set meta[a][b]... = value for ``path`` "a.b..."."""
    *head, last = path.split(".")

    def change(meta: dict) -> None:
        d = meta
        for k in head:
            d = d[k]
        d[last] = value
    return change


def _drop(path: str) -> Callable[[dict], None]:
    *head, last = path.split(".")

    def change(meta: dict) -> None:
        d = meta
        for k in head:
            d = d[k]
        del d[last]
    return change


def _arr(key: str, value) -> Callable[[dict], None]:
    def change(arrays: dict) -> None:
        arrays[key] = value(arrays[key]) if callable(value) else value
    return change


def _with(a: np.ndarray, index, value) -> np.ndarray:
    a = a.copy()
    a[index] = value
    return a


def _del_arr(key: str) -> Callable[[dict], None]:
    def change(arrays: dict) -> None:
        del arrays[key]
    return change


def _add_arr(key: str, value) -> Callable[[dict], None]:
    def change(arrays: dict) -> None:
        arrays[key] = value
    return change


#: (id, model kind, tamper, file named in the message, text the message must contain)
CASES: list[tuple[str, str, Callable[[Path], None], str, str]] = [
    # arrays.npz as a file
    ("npz-truncated", "feature", write_bytes(lambda b: b[: len(b) // 2]), ARRAYS_NPZ,
     "not a readable npz"),
    ("npz-empty-file", "feature", write_bytes(b""), ARRAYS_NPZ, "not a readable npz"),
    ("npz-garbage", "feature", write_bytes(b"this is not an npz archive\n" * 20), ARRAYS_NPZ,
     "not a readable npz"),
    ("npz-missing", "feature", _remove, ARRAYS_NPZ, "missing"),
    ("npz-no-arrays", "feature", _empty_zip, ARRAYS_NPZ, "components_"),
    ("npz-member-garbage", "feature", _corrupt_member, ARRAYS_NPZ, "not a readable npz"),
    ("npz-object-array", "feature", _object_array, ARRAYS_NPZ, "not a readable npz"),
    ("npz-bytes-flipped", "feature", write_bytes(_flip_middle), ARRAYS_NPZ,
     "not a readable npz"),
    ("npz-member-claims-8TB", "feature", _huge_member, ARRAYS_NPZ, "not a readable npz"),
    # model.json as a whole
    ("json-not-json", "feature", lambda m: (m / MODEL_JSON).write_text("{'format': 1"),
     MODEL_JSON, "not valid JSON"),
    ("json-not-utf8", "feature", lambda m: (m / MODEL_JSON).write_bytes(b"\xff\xfe{}"),
     MODEL_JSON, "UTF-8"),
    ("json-a-list", "feature", lambda m: (m / MODEL_JSON).write_text("[1, 2]"), MODEL_JSON,
     "not a dmlfe model file"),
    ("json-nan-literal", "feature",
     lambda m: (m / MODEL_JSON).write_text((m / MODEL_JSON).read_text().replace(
         '"regularization_": 0.0', '"regularization_": NaN')), MODEL_JSON, "NaN"),
    # each required key of model.json in turn (format is the file's signature)
    *[(f"json-without-{key}", "feature", edit_json(_drop(key)), MODEL_JSON, key)
      for key in REQUIRED_KEYS],
    # wrong JSON types at the top level
    ("fitted-a-list", "feature", edit_json(_set("fitted", [1])), MODEL_JSON, "fitted"),
    ("params-a-list", "feature", edit_json(_set("params", [1, 2])), MODEL_JSON, "params"),
    ("arrays-a-string", "feature", edit_json(_set("arrays", "all")), MODEL_JSON, "arrays"),
    ("estimator-a-number", "feature", edit_json(_set("estimator", 3)), MODEL_JSON, "estimator"),
    ("format-version-text", "feature", edit_json(_set("format_version", "1")), MODEL_JSON,
     "format_version"),
    ("method-mismatch", "feature", edit_json(_set("method", "pca")), MODEL_JSON, "method"),
    # constructor parameters, checked with the estimator's own declarations
    ("param-beta-high", "feature", edit_json(_set("params.beta", "high")), MODEL_JSON, "beta"),
    ("param-beta-out-of-range", "feature", edit_json(_set("params.beta", 7.5)), MODEL_JSON,
     "beta"),
    ("param-unknown", "feature", edit_json(_set("params.alpha", 1.0)), MODEL_JSON, "alpha"),
    ("param-client", "feature", edit_json(_set("params.client", "tcp://x:1")), MODEL_JSON,
     "client"),
    ("param-array-ref-missing", "kernel",
     edit_json(_set("params.label_kernel", {"__array__": "param.nothing"})), MODEL_JSON,
     "label_kernel"),
    ("param-array-not-symmetric", "kernel",
     edit_npz(_arr("param.label_kernel", lambda a: _with(a, (0, 1), 0.9))), MODEL_JSON,
     "label_kernel"),
    ("param-array-nan", "kernel",
     edit_npz(_arr("param.label_kernel", lambda a: _with(a, (0, 0), np.nan))), ARRAYS_NPZ,
     "param.label_kernel"),
    # fitted scalars: types and ranges
    *[(f"fitted-without-{key}", "feature", edit_json(_drop(f"fitted.{key}")), MODEL_JSON, key)
      for key, spec in FITTED_SCHEMA.items() if spec.required],
    ("fitted-n-components-text", "feature", edit_json(_set("fitted.n_components_", "3")),
     MODEL_JSON, "n_components_"),
    ("fitted-n-components-zero", "feature", edit_json(_set("fitted.n_components_", 0)),
     MODEL_JSON, "n_components_"),
    ("fitted-n-components-bool", "feature", edit_json(_set("fitted.n_components_", True)),
     MODEL_JSON, "n_components_"),
    ("fitted-centred-number", "feature", edit_json(_set("fitted.centred_", 1)), MODEL_JSON,
     "centred_"),
    ("fitted-regularization-negative", "feature",
     edit_json(_set("fitted.regularization_", -1.0)), MODEL_JSON, "regularization_"),
    ("fitted-route-unknown", "feature", edit_json(_set("fitted.route_", "sideways")),
     MODEL_JSON, "route_"),
    ("fitted-training-store-list", "feature", edit_json(_set("fitted.training_store_", [1])),
     MODEL_JSON, "training_store_"),
    ("fitted-relation-on-feature-route", "feature",
     edit_json(_set("fitted.relation_", {"similarity": "linear", "n_prototypes": 3,
                                         "n_features": 9})), MODEL_JSON, "relation_"),
    ("fitted-unknown-key", "feature", edit_json(_set("fitted.secret_", 1)), MODEL_JSON,
     "secret_"),
    # fitted arrays: finite, numeric, shapes
    ("components-nan", "feature", edit_npz(_arr("components_", lambda a: _with(a, (0, 0),
                                                                               np.nan))),
     ARRAYS_NPZ, "components_"),
    ("components-inf", "feature", edit_npz(_arr("components_", lambda a: _with(a, (1, 2),
                                                                               np.inf))),
     ARRAYS_NPZ, "components_"),
    ("components-strings", "feature", edit_npz(_arr("components_", lambda a: a.astype(str))),
     ARRAYS_NPZ, "components_"),
    ("components-wrong-shape", "feature", edit_npz(_arr("components_", lambda a: a[:, :-1])),
     ARRAYS_NPZ, "components_"),
    ("components-1d", "feature", edit_npz(_arr("components_", lambda a: a.ravel())),
     ARRAYS_NPZ, "components_"),
    ("components-missing", "feature", edit_npz(_del_arr("components_")), ARRAYS_NPZ,
     "components_"),
    ("eigenvalues-short", "feature", edit_npz(_arr("eigenvalues_", lambda a: a[:2])),
     ARRAYS_NPZ, "eigenvalues_"),
    ("eigenvalues-nan", "feature", edit_npz(_arr("eigenvalues_", lambda a: _with(a, 0,
                                                                                 np.nan))),
     ARRAYS_NPZ, "eigenvalues_"),
    ("mean-wrong-length", "feature", edit_npz(_arr("mean_", lambda a: a[:-1])), ARRAYS_NPZ,
     "mean_"),
    ("mean-inf", "feature", edit_npz(_arr("mean_", lambda a: _with(a, 0, -np.inf))),
     ARRAYS_NPZ, "mean_"),
    ("unexpected-array", "feature", edit_npz(_add_arr("payload", np.zeros(3))), ARRAYS_NPZ,
     "payload"),
    ("manifest-disagrees", "feature", edit_npz(_arr("mean_", lambda a: a[:-1]),
                                               manifest=False), MODEL_JSON, "arrays"),
    # components kept on the used columns (format version 2)
    ("columns-out-of-range", "compact",
     edit_npz(_arr("component_columns", lambda a: _with(a, -1, 10_000))), ARRAYS_NPZ,
     "component_columns"),
    ("columns-negative", "compact",
     edit_npz(_arr("component_columns", lambda a: _with(a, 0, -1))), ARRAYS_NPZ,
     "component_columns"),
    ("columns-not-increasing", "compact",
     edit_npz(_arr("component_columns", lambda a: _with(a, 1, a[0]))), ARRAYS_NPZ,
     "component_columns"),
    ("columns-float", "compact",
     edit_npz(_arr("component_columns", lambda a: a.astype(float))), ARRAYS_NPZ,
     "component_columns"),
    ("columns-fewer-than-components", "compact",
     edit_npz(_arr("component_columns", lambda a: a[:-1])), ARRAYS_NPZ, "components_"),
    ("columns-missing", "compact", edit_npz(_del_arr("component_columns")), ARRAYS_NPZ,
     "components_"),
    ("columns-in-format-1", "compact", edit_json(_set("format_version", 1)), MODEL_JSON,
     "format_version"),
    # the relation route
    ("relation-indptr-short", "relation",
     edit_npz(_arr("relation.prototypes.indptr", lambda a: a[:-1])), ARRAYS_NPZ,
     "relation.prototypes.indptr"),
    ("relation-indptr-decreasing", "relation",
     edit_npz(_arr("relation.prototypes.indptr", lambda a: _with(a, 1, a[-1]))), ARRAYS_NPZ,
     "relation.prototypes.indptr"),
    ("relation-index-out-of-range", "relation",
     edit_npz(_arr("relation.prototypes.indices", lambda a: _with(a, 0, 10_000))), ARRAYS_NPZ,
     "relation.prototypes.indices"),
    ("relation-data-nan", "relation",
     edit_npz(_arr("relation.prototypes.data", lambda a: _with(a, 0, np.nan))), ARRAYS_NPZ,
     "relation.prototypes.data"),
    ("relation-data-short", "relation",
     edit_npz(_arr("relation.prototypes.data", lambda a: a[:-1])), ARRAYS_NPZ,
     "relation.prototypes.data"),
    ("relation-prototypes-missing", "relation", edit_npz(_del_arr("relation.prototypes.data")),
     ARRAYS_NPZ, "relation.prototypes.data"),
    ("relation-scales-wrong-length", "relation",
     edit_npz(_arr("relation.prototype_scales", lambda a: a[:-1])), ARRAYS_NPZ,
     "relation.prototype_scales"),
    ("relation-indices-float", "relation",
     edit_npz(_arr("relation.prototype_indices", lambda a: a.astype(float))), ARRAYS_NPZ,
     "relation.prototype_indices"),
    ("relation-n-prototypes-mismatch", "relation",
     edit_json(_set("fitted.relation_.n_prototypes", 19)), ARRAYS_NPZ, "n_prototypes"),
    ("relation-n-features-mismatch", "relation",
     edit_json(_set("fitted.relation_.n_features", 31)), MODEL_JSON, "n_features"),
    ("relation-similarity-unknown", "relation",
     edit_json(_set("fitted.relation_.similarity", "telepathy")), MODEL_JSON, "similarity"),
    ("relation-missing", "relation", edit_json(_set("fitted.relation_", None)), MODEL_JSON,
     "relation_"),
]


def test_cases_are_named_once():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize(("case", "kind", "tamper", "file", "text"), CASES,
                         ids=[c[0] for c in CASES])
def test_tampered_model_is_refused(case, kind, tamper, file, text, saved, tmp_path):
    model = shutil.copytree(saved[kind], tmp_path / "model")
    load_model(model)  # the untouched copy loads
    tamper(model)
    with pytest.raises(ModelFormatError) as info:
        load_model(model)
    msg = str(info.value)
    assert file in msg and text in msg, msg
    assert "\n" not in msg


def test_refusals_are_value_errors_and_dmlfe_errors(saved, tmp_path):
    model = shutil.copytree(saved["feature"], tmp_path / "model")
    write_bytes(b"")(model)
    with pytest.raises(ValueError):
        load_model(model)
    with pytest.raises(DmlfeError):
        read_model_files(model)


def test_missing_model_and_folders_that_are_not_models(tmp_path):
    with pytest.raises(FileNotFoundError, match="no model at"):
        load_model(tmp_path / "absent")
    with pytest.raises(ModelFormatError, match="model.json is missing"):
        load_model(tmp_path)
    (tmp_path / "f").write_text("x")
    with pytest.raises(ModelFormatError, match="not a directory"):
        load_model(tmp_path / "f")


# --------------------------------------------------------------------------- what still loads
def test_models_of_the_previous_version_load():
    for name in ("mddm_f", "mvmd_rel"):
        est = load_model(OLD_MODELS / name)
        assert np.all(np.isfinite(est.components_))


@pytest.mark.parametrize("kind", ["feature", "relation"])
def test_float32_models_round_trip_as_float32(kind, tmp_path):
    X, Xs, Y = sparse_data(n=60)
    kw = {"route": "relation", "n_prototypes": 20, "prototype_selection": "random",
          "similarity": "local_scaling", "n_neighbors": 4} if kind == "relation" else {}
    est = MVMD(n_components=3, components_dtype="float32", **kw).fit(Xs, Y)
    model = est.save(tmp_path / "m")
    with np.load(model / ARRAYS_NPZ, allow_pickle=False) as z:
        assert z["components_"].dtype == np.float32
        assert z["components_"].shape == est.components_.shape
        np.testing.assert_array_equal(z["components_"], est.components_)
        assert z["mean_"].dtype == z["eigenvalues_"].dtype == np.float64
    meta = json.loads((model / MODEL_JSON).read_text())
    assert meta["params"]["components_dtype"] == "float32"
    back = load_model(model)
    assert back.components_dtype == "float32" and back.components_.dtype == np.float32
    assert back.components_.T.flags.c_contiguous  # the layout of a fit
    np.testing.assert_array_equal(back.components_, est.components_)
    assert back.mean_.dtype == back.eigenvalues_.dtype == np.float64
    for A in (Xs, X):
        Z = back.transform(A)
        assert Z.dtype == np.float32
        np.testing.assert_array_equal(Z, est.transform(A))
    Zd = back.transform(sparse_dask(Xs, 16)).compute()
    assert Zd.dtype == np.float32
    np.testing.assert_array_equal(Zd, est.transform(sparse_dask(Xs, 16)).compute())


def test_float64_models_save_and_load_as_before(saved):
    """A float64 model's files hold float64 arrays, and load with the fit's layout."""
    est = load_model(saved["feature"])
    with np.load(saved["feature"] / ARRAYS_NPZ, allow_pickle=False) as z:
        assert all(z[k].dtype == np.float64 for k in ("components_", "eigenvalues_", "mean_"))
    assert est.components_dtype == "float64" and est.components_.dtype == np.float64
    assert est.components_.T.flags.c_contiguous
    for name in ("mddm_f", "mvmd_rel"):  # written before components_dtype existed
        old = load_model(OLD_MODELS / name)
        assert old.components_dtype == "float64" and old.components_.dtype == np.float64
        assert old.components_.T.flags.c_contiguous


def test_first_format_1_models_without_the_later_keys_load(saved, tmp_path):
    """Models written before the relation route (no route_, relation_, converged_,
    stats_from_cache_ and none of the relation parameters) load with their defaults."""
    model = shutil.copytree(saved["feature"], tmp_path / "model")
    later = ("route_", "route_reason_", "relation_", "converged_", "stats_from_cache_",
             "max_residual_")
    later_params = ("route", "n_prototypes", "prototype_selection", "similarity", "tau",
                    "n_neighbors")

    def strip(meta: dict) -> None:
        for k in later:
            del meta["fitted"][k]
        for k in later_params:
            del meta["params"][k]
    edit_json(strip)(model)
    est = load_model(model)
    assert est.route_ == "feature" and est.relation_ is None and est.relation_map_ is None
    assert est.route == "auto" and est.similarity == "linear"
    assert not any(spec.required for k, spec in FITTED_SCHEMA.items() if k in later)


# --------------------------------------------------------------------------- saving
def test_save_refuses_non_finite_arrays(tmp_path):
    for key, index in (("components_", (0, 0)), ("eigenvalues_", 0), ("mean_", 1)):
        est = fit_model("feature")
        getattr(est, key)[index] = np.nan if key != "mean_" else np.inf
        with pytest.raises(ModelFormatError, match=f"{key}.*non-finite"):
            est.save(tmp_path / "m")
        assert list(tmp_path.iterdir()) == []  # nothing written, no temporary left


def test_save_refuses_parameters_that_would_not_load(tmp_path):
    est = fit_model("feature")
    est.beta = "high"
    with pytest.raises(ModelFormatError, match="beta"):
        save_model(est, tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_save_removes_stale_temporaries_of_its_target(tmp_path):
    stale = tmp_path / ".m.tmp-999999999-0123456789ab"  # a pid no process has
    stale.mkdir()
    (stale / ARRAYS_NPZ).write_bytes(b"half")
    other = tmp_path / ".other.tmp-999999999-0123456789ab"
    other.mkdir()
    with pytest.warns(RuntimeWarning, match="interrupted"):
        fit_model("feature").save(tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "m"]
    load_model(tmp_path / "m")


# --------------------------------------------------------------------------- command line
def test_transform_refuses_a_nan_model_and_writes_nothing(tmp_path, capsys):
    X, Xs, Y = sparse_data(n=60)
    store = write_store(tmp_path / "s.zarr", Xs, Y, ["train"] * 60)
    model = MVMD(n_components=3).fit(store).save(tmp_path / "model")
    edit_npz(_arr("components_", lambda a: _with(a, (0, 0), np.nan)))(model)
    capsys.readouterr()
    out = tmp_path / "z.zarr"
    rc = main(["transform", str(model), str(store), "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "arrays.npz" in lines[0] and "components_" in lines[0], lines
    assert captured.out == ""
    assert not [p.name for p in tmp_path.iterdir() if "z.zarr" in p.name]  # nor a temporary
