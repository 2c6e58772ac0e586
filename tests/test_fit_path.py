"""The fit path: a pure plan, parameters checked before any pass, one store seam, and a
method added through the registry alone (estimator, CLI and saved model follow)."""

from __future__ import annotations

import json
from pathlib import Path

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import CountingScheduler, labels_dask, sparse_dask, write_store
from test_estimators import sparse_data

import dmlfe
import dmlfe.store.reader as reader
from dmlfe.cli import main
from dmlfe.estimators import MDDM, MVMD, PCA, estimator_class, make_estimator
from dmlfe.fit import DataShape, Limits, plan_fit
from dmlfe.fit.params import COMMON, N_COMPONENTS
from dmlfe.methods.registry import (
    MethodSpec,
    get_method,
    method_choices,
    register_method,
    unregister_method,
)
from dmlfe.methods.template import TraceTemplate
from dmlfe.model_io import load_model
from dmlfe.params import FROM_BUILDER, Param, interval
from dmlfe.stats.cache import stats_dir_for
from dmlfe.store import open_store


def params_for(method: str, **over):
    """Every parameter of the method's estimator at its default, with ``over`` applied."""
    est = make_estimator(method, **over)
    return {p.name: getattr(est, p.name) for p in type(est)._declared}


def plan(method: str, n: int, D: int, q: int = 5, limit: int = 20_000, **over):
    return plan_fit(get_method(method), params_for(method, **over), DataShape(n, D, q),
                    Limits(max_dense_features=limit))


# --------------------------------------------------------------------------- plan (no data)
def test_plan_chooses_route_solver_and_statistics_with_reasons():
    big = 2**20
    p = plan("mvmd", n=6490, D=big)  # D huge, n moderate: the exact dual route
    assert (p.route, p.solver) == ("dual", "dual") and "max_dual_samples" in p.route_reason
    assert not p.stats.need_xtx and not p.stats.need_xtwx
    # too many documents for the dual route: MVMD matrix-free, CCA on relation features
    p = plan("mvmd", n=50_000, D=big)
    assert (p.route, p.solver) == ("feature", "randomized")
    p = plan("cca", n=50_000, D=big, n_prototypes=2000, prototype_selection="random")
    assert (p.route, p.solver, p.problem_size) == ("relation", "dense", 2000)
    assert "needs X^T X" in p.route_reason and p.stats.need_xtx
    p = plan("mvmd", n=6490, D=big, route="feature")
    assert (p.route, p.solver) == ("feature", "randomized")
    assert not p.stats.need_xtx and not p.dense_template
    p = plan("mddm_p", n=6490, D=big)
    assert (p.route, p.solver) == ("feature", "lowrank") and "any D" in p.route_reason
    assert not p.stats.need_xtx and not p.dense_template
    p = plan("cca", n=500, D=3000)
    assert (p.route, p.solver) == ("feature", "dense") and p.stats.need_xtx
    assert "3000 <= max_dense_features" in p.route_reason
    p = plan("mlda", n=500, D=3000)
    assert p.stats.need_xtwx and p.stats.labels == "mlda_weighted" and not p.stats.need_xtx
    p = plan("kmddm_f", n=300, D=big)
    assert (p.route, p.solver, p.problem_size) == ("relation", "dense", 300)
    assert p.relation.similarity == "gaussian" and p.stats.need_xtx
    p = plan("mvmd", n=6490, D=big, n_prototypes=500, prototype_selection="random",
             route="relation")
    assert p.problem_size == 500 and p.relation.n_prototypes == 500
    assert set(p.describe()) >= {"route", "route_reason", "solver", "solver_reason"}


def test_plan_refuses_what_cannot_run():
    with pytest.raises(ValueError, match=r"cca needs D x D matrices .*route='auto' or 'dual' "
                       r"\(the same problem solved exactly.*route='relation'"):
        plan("cca", n=500, D=50_000, route="feature")
    # a graph method has no dual route: the message does not offer it
    with pytest.raises(ValueError, match="lpp needs D x D matrices") as refused:
        plan("lpp", n=500, D=50_000, route="feature")
    assert "dual" not in str(refused.value) and "route='relation'" in str(refused.value)
    with pytest.raises(ValueError, match="needs the dense solver"):
        plan("mlsi", n=50, D=100, solver="randomized")
    with pytest.raises(ValueError, match=r"n_components=6 .*min\(D, q\) = 5"):
        plan("mddm_p", n=50, D=100, q=5, n_components=6)
    with pytest.raises(ValueError, match="n_components=101 .*problem size 100"):
        plan("pca", n=50, D=100, n_components=101)
    with pytest.raises(ValueError, match="p = 30000 prototypes exceed max_dense_features"):
        plan("cca", n=30_000, D=2**20, route="relation", n_prototypes=None)
    # the default p = min(n, MAX_AUTO_PROTOTYPES) fits (issue 33)
    capped = plan("cca", n=30_000, D=2**20, route="relation")
    assert capped.problem_size == 2000 and capped.relation.selection == "stratified"
    with pytest.raises(ValueError, match="needs route='relation'"):
        plan("kmddm_p", n=50, D=100, route="feature")
    with pytest.raises(ValueError, match="no documents"):
        plan("pca", n=0, D=100)


def test_plan_mddm_with_an_indefinite_label_kernel():
    indefinite = np.array([[1.0, 2.0], [2.0, 1.0]])  # eigenvalues 3 and -1
    p = plan("mddm_p", n=50, D=100, q=2, label_kernel=indefinite)
    assert p.solver == "dense" and p.dense_template  # no F F^T form: A formed densely
    with pytest.raises(ValueError, match="not positive semi-definite"):
        plan("mddm_p", n=50, D=100, q=2, label_kernel=indefinite, limit=50)
    assert plan("mddm_p", n=50, D=100, q=2, label_kernel=np.eye(2), limit=50).solver == "lowrank"


# --------------------------------------------------------------------------- validation first
@pytest.mark.parametrize(("make", "match"), [
    (lambda: MVMD(beta=2.0), r"MVMD parameter beta=2\.0 must be a number in \[0\.0, 1\.0\]"),
    (lambda: MDDM(mu=1.5), "mu=1.5"),  # checked even for variant 'p'
    (lambda: make_estimator("cca", gamma_x=-1), "gamma_x=-1"),
    (lambda: make_estimator("mlsi", gamma_xy=0.0), "gamma_xy=0.0"),
    (lambda: MDDM(label_kernel="cosine"), "label_kernel='cosine'"),
    (lambda: PCA(max_components=0), "max_components=0"),
    (lambda: PCA(route="sideways"), "route='sideways'"),
    (lambda: PCA(similarity="gauss"), "similarity='gauss'"),
    (lambda: PCA(n_prototypes=2.5), "n_prototypes=2.5"),
    (lambda: PCA(cache="yes"), "cache='yes'"),
    (lambda: MDDM(variant="x"), "MDDM variant must be 'p' or 'f'"),
    (lambda: make_estimator("kmddm", similarity="eq9"), "positive semi-definite kernel"),
])
def test_invalid_parameters_raise_before_any_compute(make, match, small_store_path):
    _, Xs, Y = sparse_data()
    Xd, Yd = sparse_dask(Xs, 16), labels_dask(Y.astype(np.uint8), 16)
    counter = CountingScheduler()
    with dask.config.set(scheduler=counter):
        with pytest.raises((ValueError, TypeError), match=match):
            make().fit(Xd, Yd)
        with pytest.raises((ValueError, TypeError), match=match):
            make().fit(small_store_path)
    assert counter.count == 0


@pytest.fixture(scope="module")
def small_store_path(tmp_path_factory):
    _, Xs, Y = sparse_data(n=60)
    splits = np.where(np.arange(60) % 3 == 0, "test", "train")
    return write_store(tmp_path_factory.mktemp("fitpath") / "s.zarr", Xs, Y, splits)


# --------------------------------------------------------------------------- one store seam
@pytest.mark.parametrize("kw", [{}, {"route": "relation", "n_prototypes": 12,
                                     "prototype_selection": "random"}],
                         ids=["feature", "relation"])
def test_a_fit_opens_the_store_once_and_uses_one_fingerprint(kw, tmp_path, monkeypatch):
    _, Xs, Y = sparse_data(n=60)
    splits = np.where(np.arange(60) % 3 == 0, "test", "train")
    path = write_store(tmp_path / "f.zarr", Xs, Y, splits)
    fingerprint = open_store(path).fingerprint
    opened = []
    real = reader._read_root_meta
    monkeypatch.setattr(reader, "_read_root_meta", lambda p: opened.append(p) or real(p))
    est = MVMD(n_components=2, split="train", **kw).fit(path)
    assert len(opened) == 1
    entry = json.loads(next(stats_dir_for(path).glob("*.json")).read_text())
    assert entry["params"]["data"] == fingerprint  # the statistics cache's identity
    assert est.training_store_["fingerprint"] == fingerprint  # the model's provenance
    assert est.training_store_["split"] == "train" and est.route_ == kw.get("route", "feature")


def test_reblock_keeps_the_rows_in_smaller_blocks(tmp_path):
    _, Xs, Y = sparse_data(n=60)
    splits = np.where(np.arange(60) % 3 == 0, "test", "train")
    store = open_store(write_store(tmp_path / "r.zarr", Xs, Y, splits, chunk_rows=16))
    train = store.subset("train")
    for view, rows in ((store, slice(None)), (train, splits == "train")):
        small = view.reblock(5)
        assert max(small.X.chunks[0]) <= 5 and len(small.X.chunks[0]) > len(view.X.chunks[0])
        X_small = small.X.compute(scheduler="sync")
        np.testing.assert_array_equal(sp.csr_matrix(X_small).toarray(), Xs[rows].toarray())
        np.testing.assert_array_equal(small.Y.compute(scheduler="sync").toarray(), Y[rows])
        assert small.fingerprint == store.fingerprint and small.selection == view.selection


# --------------------------------------------------------------------------- registry alone
def toy_scaled_pca(stats, scale: float = 1.0, dense: bool = True) -> TraceTemplate:
    """A toy method: PCA's scatter times ``scale``."""
    A = scale * stats.centred_xtx() if dense else None
    return TraceTemplate(method="toy", params={"scale": scale}, centred=True,
                         n_features=stats.n_features, A=A, xx_coef=scale, operator_form=True)


@pytest.fixture
def toy_method():
    register_method(MethodSpec(
        "toy", toy_scaled_pca, centred=True, needs_xtx=True, operator_form=True,
        lowrank_only=False, needs_weighted_xtx=False, labels="01", generalized=False,
        reference="a test", summary="Scaled PCA, registered by a test.",
        parameters=(Param("scale", FROM_BUILDER, interval(0.0, None, closed="neither"),
                          "float\n    Factor on the scatter.", flag={"type": float}),)))
    try:
        yield
    finally:
        unregister_method("toy")


def test_a_method_added_through_the_registry_alone(toy_method, tmp_path, capsys,
                                                    cluster_client):
    X, Xs, Y = sparse_data()
    cls = estimator_class("TOY")
    assert dmlfe.TOY is cls and dmlfe.estimators.TOY is cls
    assert [p.name for p in cls._declared] == ["n_components", "scale",
                                               *[p.name for p in COMMON]]
    assert cls().get_params()["scale"] == 1.0 and "scale : float" in cls.__doc__
    toy = make_estimator("toy", scale=3.0, n_components=3).fit(Xs, Y)
    pca = PCA(n_components=3).fit(Xs, Y)
    np.testing.assert_allclose(toy.eigenvalues_, 3.0 * pca.eigenvalues_, rtol=1e-10)
    np.testing.assert_allclose(toy.components_, pca.components_, atol=1e-10)
    assert toy.method_params_ == {"scale": 3.0}
    with pytest.raises(ValueError, match=r"TOY parameter scale=-1\.0"):
        cls(scale=-1.0).fit(Xs, Y)
    # the command line: --method choice, --scale flag, saved model loads back
    assert "toy" in method_choices()
    splits = np.where(np.arange(X.shape[0]) % 3 == 0, "test", "train")
    store = write_store(tmp_path / "toy.zarr", Xs, Y, splits)
    out = tmp_path / "toy-model"
    rc = main(["fit", str(store), "--method", "toy", "--scale", "2", "--dim", "2",
               "--split", "train", "--out", str(out), "--quiet",
               "--scheduler", cluster_client.scheduler.address])
    assert rc == 0, capsys.readouterr().err
    model = load_model(out)
    assert type(model) is cls and model.scale == 2.0 and model.n_components_ == 2
    ref = PCA(n_components=2).fit(Xs[splits == "train"], Y[splits == "train"])
    np.testing.assert_allclose(model.eigenvalues_, 2.0 * ref.eigenvalues_, rtol=1e-10)
    assert main(["fit", str(store), "--method", "pca", "--scale", "2", "--out",
                 str(tmp_path / "x"), "--quiet"]) == 2
    assert "--scale does not apply to method pca" in capsys.readouterr().err


def test_n_components_is_declared_once():
    assert N_COMPONENTS.default == 0.999
    for name, cls in dmlfe.estimators.estimator_classes().items():
        first = cls._declared[0]
        own = cls()._spec().estimator_defaults.get("n_components")
        if own is None:
            assert first is N_COMPONENTS
        else:  # e.g. OLPP, whose objective has no positive eigenvalue for a threshold
            assert (first.name, first.check, first.default) == ("n_components",
                                                                N_COMPONENTS.check, own)
            assert f"default {own}" in first.doc.partition("\n")[0], name


# --------------------------------------------------------------------------- old models
OLD_MODELS = Path(__file__).parent / "data" / "models-88e94a1"


def test_models_saved_before_the_registry_still_load():
    """Models written by dmlfe at 88e94a1 (before the estimators were generated from the
    registry) load into the generated classes and project as their arrays say."""
    X = sp.random(15, 30, density=0.3, format="csr", random_state=4)
    mddm = load_model(OLD_MODELS / "mddm_f")
    assert type(mddm) is MDDM and mddm._method == "mddm_f" and mddm.mu == 0.3
    assert mddm.label_kernel.shape == (4, 4) and mddm.route_ == "feature"
    np.testing.assert_allclose(mddm.transform(X),
                               (X.toarray() - mddm.mean_) @ mddm.components_.T, atol=1e-12)
    mvmd = load_model(OLD_MODELS / "mvmd_rel")
    assert type(mvmd) is MVMD and mvmd.route_ == "relation" and mvmd.n_prototypes == 20
    R = mvmd.relation_map_.transform(X)
    assert R.shape == (15, 20)
    np.testing.assert_allclose(mvmd.transform(X), (R - mvmd.mean_) @ mvmd.components_.T,
                               atol=1e-12)
