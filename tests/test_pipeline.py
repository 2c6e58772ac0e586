"""`dmlfe run`: pipeline files, the stage cache, resuming, reports, ranks and splits."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from dmlfe.pipeline import (
    PipelineConfigError,
    compare,
    critical_difference,
    friedman,
    load_config,
    q_alpha,
    rank_matrix,
    run_pipeline,
    split_roles,
    stratified_split,
)

ROOT = Path(__file__).resolve().parents[1]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Two small synthetic data sets: one with the store's own train/test split, one cut
# into label-stratified thirds (the MOPE protocol: validation chooses d).
TINY = {
    "name": "tiny",
    "datasets": [
        {"name": "syn", "format": "synthetic", "chunk_rows": 200,
         "options": {"n_docs": 600, "n_labels": 6, "seed": 1, "max_features": 150,
                     "fit_split": "train"}},
        {"name": "syn3", "format": "synthetic", "chunk_rows": 200,
         "options": {"n_docs": 600, "n_labels": 6, "seed": 2, "max_features": 150},
         "split": {"stratified": {"train": 1, "validation": 1, "test": 1}, "seed": 0}},
    ],
    "methods": ["none", {"name": "pca", "d": [5, 10]}, {"name": "mddm_p", "t": 0.99},
                {"name": "mvmd", "beta": 0.5, "t": 0.99}],
    "classifiers": ["ridge"],
    "metrics": ["hamming_loss", "example_f1", "micro_f1"],
    "d_curve": [2, 4],
}
# per data set: none 1 classify; pca fit + transform + 2 classify + 2 d-curve classify;
# mddm_p and mvmd fit + transform + 1 classify + 2 d-curve classify each; ingest on both;
# the stratified split on the second
N_STAGES = 2 * (1 + 1 + 6 + 5 + 5) + 1


def _write(tmp: Path, cfg: dict, name: str = "p.yaml") -> Path:
    p = tmp / name
    p.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    return p


def _numbers(report: dict) -> dict:
    return {(r["dataset"], r["method"], r["d"]): r["metrics"] for r in report["results"]}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    import dask

    tmp = tmp_path_factory.mktemp("pipe")
    cfg = _write(tmp, TINY)
    with dask.config.set(scheduler="threads"):
        res = run_pipeline(cfg, work_dir=tmp / "work", progress=False)
    return tmp, cfg, res


def test_complete_report(first_run):
    tmp, _cfg, res = first_run
    assert len(res.stages) == N_STAGES and len(res.ran) == N_STAGES
    rep_dir = tmp / "work" / "report"
    rep = json.loads((rep_dir / "report.json").read_text())
    assert rep == json.loads(json.dumps(res.report))
    # every method x data set has test figures of the shown metrics, as fractions
    for ds in ("syn", "syn3"):
        for m in ("hamming_loss", "example_f1", "micro_f1"):
            row = rep["tables"]["ridge"][m][ds]
            assert set(row) == {"none", "pca", "mddm_p", "mvmd"}
            assert all(0.0 <= v <= 1.0 for v in row.values())
    # the stratified data set chose pca's d on validation, the other on test
    chosen = {(c["dataset"], c["method"]): c for c in rep["chosen"]}
    assert chosen[("syn3", "pca")]["selected_on"] == "validation"
    assert chosen[("syn", "pca")]["selected_on"] == "test"
    pca3 = [r for r in rep["results"] if r["dataset"] == "syn3" and r["method"] == "pca"
            and not r["curve"]]
    best = max(pca3, key=lambda r: r["metrics"]["validation"]["micro_f1"])
    assert chosen[("syn3", "pca")]["d"] == best["d"]
    assert {r["d"] for r in pca3} == {5, 10}
    # metric versus d for every reduction, not only the one with a d grid: the d-curve
    # points (d = 2, 4) beside each method's own d, on the roles of the data set
    fitted_d = {(f["dataset"], f["method"]): f["n_components"] for f in rep["fits"]}
    for ds, roles in (("syn", {"test"}), ("syn3", {"validation", "test"})):
        curves = rep["curves"][ds]
        assert set(curves) == {"pca", "mddm_p", "mvmd"}
        for method, by_role in curves.items():
            assert set(by_role) == roles
            ds_seen = [d for d, _ in by_role["test"]]
            own = {5, 10} if method == "pca" else {fitted_d[(ds, method)]}
            assert set(ds_seen) == {min(2, max(own)), min(4, max(own))} | own, (ds, method)
            assert all(0.0 <= v <= 1.0 for _, v in by_role["test"])
        # the curve's point at the method's own d is the table's test figure
        for method in ("mddm_p", "mvmd"):
            pts = dict(curves[method]["test"])
            row = rep["tables"]["ridge"]["micro_f1"][ds]
            assert pts[fitted_d[(ds, method)]] == row[method]
    # the classifier on the raw features is the metric-vs-d plot's baseline
    for ds in ("syn", "syn3"):
        base = rep["baselines"][ds]["none"]
        assert base["test"] == rep["tables"]["ridge"]["micro_f1"][ds]["none"]
        assert set(base) == ({"test"} if ds == "syn" else {"validation", "test"})
    # thirds of 600 documents
    assert sum(rep["splits"]["syn3"]["counts"].values()) == 600
    assert all(190 <= v <= 210 for v in rep["splits"]["syn3"]["counts"].values())
    # average ranks over the two data sets, recomputed here from the table
    tbl = rep["tables"]["ridge"]["micro_f1"]
    methods = ["none", "pca", "mddm_p", "mvmd"]
    S = np.array([[float(f"{tbl[d][m]:.4f}") for m in methods] for d in ("syn", "syn3")])
    expect = stats.rankdata(-S, axis=1).mean(axis=0)  # ranked as shown, to 4 digits
    got = rep["ranks"]["ridge"]["micro_f1"]["average_ranks"]
    np.testing.assert_allclose([got[m] for m in methods], expect)
    md = (rep_dir / "report.md").read_text()
    for word in ("syn3", "mvmd", "avg rank", "Friedman", "CD ="):
        assert word in md
    pngs = sorted(p.name for p in rep_dir.glob("*.png"))
    for prefix in ("spectrum-syn", "spectrum-syn3", "metric-vs-d-syn", "metric-vs-d-syn3",
                   "methods-syn",
                   "ranks-ridge-micro_f1"):
        assert f"{prefix}.png" in pngs
    for p in rep_dir.glob("*.png"):
        data = p.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 2000, p
        assert p.name in md


def test_second_run_reuses_everything(first_run):
    import dask

    tmp, cfg, res = first_run
    with dask.config.set(scheduler="threads"):
        again = run_pipeline(cfg, work_dir=tmp / "work", progress=False)
    assert again.ran == []
    assert len(again.reused) == N_STAGES
    assert _numbers(again.report) == _numbers(res.report)


def test_changed_parameter_reruns_dependants_only(first_run, tmp_path, cluster_client, capsys):
    """Through the CLI entry point, on the session's LocalCluster."""
    from dmlfe.pipeline.cli import add_run_parser

    tmp, _cfg, res = first_run
    work = tmp_path / "work"
    shutil.copytree(tmp / "work", work)
    cfg = json.loads(json.dumps(TINY))
    cfg["methods"][3]["beta"] = 0.25
    path = _write(tmp_path, cfg)
    parser = argparse.ArgumentParser(prog="dmlfe")
    add_run_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["run", str(path), "--work-dir", str(work), "--scheduler",
                              cluster_client.scheduler.address])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    assert "report:" in out and "12 ran" not in out
    rep = json.loads((work / "report" / "report.json").read_text())
    ran = [s for s in rep["stages"] if s["status"] == "ran"]
    # mvmd's fit, transform, classify and two d-curve classify on each of the two data sets
    assert sorted(s["kind"] for s in ran) == sorted((["fit", "transform"] + ["classify"] * 3)
                                                    * 2)
    assert all(" mvmd " in s["label"] and "beta=0.25" in s["label"] for s in ran)
    assert re.search(rf"stage +1/{N_STAGES} ingest +syn: cached", err), err
    assert re.search(rf"stage +{N_STAGES}/{N_STAGES} classify .*mvmd.*: ran in", err), err
    old, new = _numbers(res.report), _numbers(rep)
    for k, v in new.items():
        if k[1] != "mvmd":
            assert old[k] == v


def test_interrupted_run_resumes(first_run, tmp_path):
    import dask

    tmp, cfg, res = first_run
    work = tmp_path / "work"
    shutil.copytree(tmp / "work", work)
    stages = res.stages
    # an interruption at stage 18: the later stages never completed (no record); one of
    # them left a partial output folder behind
    for s in stages[17:]:
        (work / "cache" / s.kind / s.key / "stage.json").unlink()
    (work / "cache" / stages[19].kind / stages[19].key / "junk").write_text("partial")

    calls = []

    def crash_on_third(stage):
        calls.append(stage.key)
        if len(calls) == 3:
            raise KeyboardInterrupt("simulated interruption")

    with dask.config.set(scheduler="threads"), pytest.raises(KeyboardInterrupt):
        run_pipeline(cfg, work_dir=work, progress=False, stage_hook=crash_on_third)
    with dask.config.set(scheduler="threads"):
        resumed = run_pipeline(cfg, work_dir=work, progress=False)
    assert len(resumed.reused) == 17 + 2
    assert [s.key for s in resumed.ran] == [s.key for s in stages[19:]]
    assert not (work / "cache" / stages[19].kind / stages[19].key / "junk").exists()
    assert _numbers(resumed.report) == _numbers(res.report)


def _config_error(tmp_path, cfg, edit, key) -> str:
    """The error of loading ``cfg`` after ``edit``: it names the file and ``key``."""
    edit(cfg)
    path = _write(tmp_path, cfg, "bad.yaml")
    with pytest.raises(PipelineConfigError) as info:
        load_config(path)
    msg = str(info.value)
    assert str(path) in msg and f": {key}:" in msg, msg
    return msg


@pytest.mark.parametrize(("edit", "key"), [
    (lambda c: c["methods"].append({"name": "mvmd", "betta": 0.5, "label": "x"}),
     "methods[4].betta"),
    (lambda c: c["methods"].append({"name": "pca", "d": 10, "t": 0.9, "label": "y"}),
     "methods[4].t"),
    (lambda c: c["methods"].append({"name": "nosuch"}), "methods[4].name"),
    (lambda c: c["datasets"][1].update(format="csv"), "datasets[1].format"),
    (lambda c: c["datasets"][1]["split"]["stratified"].update(test=-1),
     "datasets[1].split.stratified.test"),
    (lambda c: c.update(metrics=["micro_f1", "f2"]), "metrics[1]"),
    (lambda c: c.update(classifiers=[{"name": "svm"}]), "classifiers[0].name"),
    (lambda c: c.update(select={"metric": "accuracy"}), "select.metric"),
    (lambda c: c.update(method=[]), "method"),
    (lambda c: c["methods"].append({"name": "pca", "d": [10, 0], "label": "z"}),
     "methods[4].d"),
])
def test_config_errors_name_file_and_key(tmp_path, edit, key):
    _config_error(tmp_path, json.loads(json.dumps(TINY)), edit, key)


def test_method_bars_start_at_zero_with_value_labels_and_spread():
    from dmlfe.pipeline.plots import _plt, method_bars_figure

    values = {"micro_f1": {"pca": 0.81234, "mvmd": 0.81244},  # a 1e-4 difference
              "hamming_loss": {"pca": 0.031, "mvmd": 0.029}}
    fig = method_bars_figure(values, "t", {"hamming_loss": True},
                             spread={"micro_f1": {"pca": 0.01, "mvmd": 0.02}})
    try:
        for ax, metric in zip(fig.axes, values, strict=True):
            lo, hi = ax.get_ylim()
            top = max(values[metric].values())
            assert lo == 0.0 and hi >= top
            # bars from 0: a 1e-4 difference stays a small fraction of the axis
            heights = [p.get_height() for p in ax.patches]
            assert abs(heights[0] - heights[1]) / (hi - lo) < 0.1
            assert [t.get_text() for t in ax.texts] == [f"{v:.4f}"
                                                        for v in values[metric].values()]
        assert fig.axes[0].get_ylim()[1] >= 0.81244 + 0.02  # room for the error bar
        from matplotlib.container import ErrorbarContainer

        errorbars = [any(isinstance(c, ErrorbarContainer) for c in ax.containers)
                     for ax in fig.axes]
        assert errorbars == [True, False]  # a spread only where one is given
    finally:
        _plt().close(fig)


def test_shipped_pipelines_validate():
    for name in ("demo", "reuters21578", "mulan", "imdb"):
        cfg = load_config(ROOT / "pipelines" / f"{name}.yaml")
        assert cfg.name == name
    mulan = load_config(ROOT / "pipelines" / "mulan.yaml")
    assert [m.label for m in mulan.methods] == ["pca", "mddm_p", "mddm_f", "cca", "mlsi",
                                                "mlda", "dmlda", "mvmd", "none"]
    mvmd = mulan.methods[7].settings[0].params
    assert mvmd == {"n_components": 0.999, "beta": 0.5}
    sel = mulan.selection
    assert [s.name for s in sel.selectors] == ["grroor", "chi2"] and sel.max_features == 50
    assert (sel.classifier.name, sel.classifier.params) == ("mlknn", {"k": 10, "s": 1.0})


# --------------------------------------------------------------------------- ranks
def test_demsar_worked_example():
    """Demšar (2006), section 3.2.2: four C4.5 variants on 14 data sets."""
    fr = friedman([3.143, 2.000, 2.893, 1.964], n=14)  # sums to k(k+1)/2 = 10
    assert fr.chi2 == pytest.approx(9.28, abs=0.01)
    assert fr.ff == pytest.approx(3.69, abs=0.01)
    assert (fr.df1, fr.df2) == (3, 39)
    assert fr.cd == pytest.approx(1.25, abs=0.005)
    # Demšar's table 5(a), q_0.05 for k = 2..10
    table = [1.960, 2.343, 2.569, 2.728, 2.850, 2.949, 3.031, 3.102, 3.164]
    for k, q in zip(range(2, 11), table, strict=True):
        assert q_alpha(k) == pytest.approx(q, abs=0.002)
    assert critical_difference(4, 14) == pytest.approx(2.569 * np.sqrt(20 / 84), abs=1e-3)


def test_ranks_with_ties_and_direction():
    S = np.array([[0.9, 0.8, 0.8], [0.1, 0.3, 0.2]])
    np.testing.assert_array_equal(rank_matrix(S), [[1, 2.5, 2.5], [3, 1, 2]])
    np.testing.assert_array_equal(rank_matrix(S, lower_is_better=True), [[3, 1.5, 1.5],
                                                                         [1, 3, 2]])


def test_compare_matches_scipy_friedman():
    rng = np.random.default_rng(3)
    S = rng.random((8, 4))  # no ties: scipy's tie correction is then 1
    table = {f"d{i}": {f"m{j}": S[i, j] for j in range(4)} for i in range(8)}
    res = compare(table)
    chi2, p = stats.friedmanchisquare(*S.T)
    assert res["friedman"]["chi2"] == pytest.approx(chi2)
    assert res["friedman"]["p_chi2"] == pytest.approx(p)
    R = stats.rankdata(-S, axis=1).mean(axis=0)
    np.testing.assert_allclose(list(res["average_ranks"].values()), R)


# --------------------------------------------------------------------------- splits
def _labels(n=3000, q=12, seed=0):
    rng = np.random.default_rng(seed)
    p = np.linspace(0.01, 0.4, q)
    Y = (rng.random((n, q)) < p).astype(np.uint8)
    return Y


def test_stratified_split_is_deterministic_and_balanced():
    Y = _labels()
    a = stratified_split(Y, [1, 1, 1], seed=7)
    b = stratified_split(Y, [1, 1, 1], seed=7)
    c = stratified_split(Y, [1, 1, 1], seed=8)
    np.testing.assert_array_equal(a, b)
    assert (a != c).any()
    assert set(np.unique(a)) == {0, 1, 2}
    sizes = np.bincount(a, minlength=3)
    assert np.abs(sizes - 1000).max() <= 5
    for lab in range(Y.shape[1]):
        per_part = np.bincount(a[Y[:, lab] == 1], minlength=3)
        # each label's documents split in thirds, up to a couple of documents
        assert np.abs(per_part - Y[:, lab].sum() / 3).max() <= 2.5, (lab, per_part)
    # a plain random split is much less even on the rarest label
    roles = split_roles(Y, {"train": 0.6, "test": 0.4}, seed=0)
    assert sorted(np.concatenate(list(roles.values()))) == list(range(len(Y)))
    assert abs(roles["train"].size - 1800) <= 2


def test_selection_stage_on_emotions(tmp_path, shared_data):
    """The select stage on real data (MULAN emotions, the store's train/test split):
    GRROOR and the summed-chi² filter each rank the raw training features, ML-kNN runs
    on the top m = 1..6, and the report carries the curves, their table and the PNG.
    The curves are checked against ML-kNN and the metrics computed here."""
    from dmlfe import MLkNN, metrics
    from dmlfe.pipeline.runner import PipelineRun
    from dmlfe.selection.curves import chi2_scores

    cfg = {
        "name": "sel",
        "datasets": [{"name": "emotions", "format": "mulan",
                      "source": [str(shared_data / "mulan" / "emotions-train.arff"),
                                 str(shared_data / "mulan" / "emotions-test.arff")],
                      "options": {"labels": str(shared_data / "mulan" / "emotions.xml")}}],
        "selection": {"selectors": ["chi2", {"name": "grroor", "label": "GRROOR",
                                             "max_iter": 100}],
                      "max_features": 6, "classifier": {"name": "mlknn", "k": 5},
                      "metrics": ["average_precision", "hamming_loss"]},
    }
    res = run_pipeline(_write(tmp_path, cfg), work_dir=tmp_path / "w", progress=False)
    rep = res.report
    assert [s.kind for s in res.stages] == ["ingest", "select", "select"]
    recs = {r["selector"]: r for r in rep["selection"]}
    assert set(recs) == {"chi2", "GRROOR"}
    g = recs["GRROOR"]
    assert g["fit"]["converged"] and g["fit"]["objective_monotone"]
    assert g["m"] == list(range(1, 7)) and len(g["metrics"]["test"]["average_precision"]) == 6
    assert all(0.0 <= v <= 1.0 for v in g["redundancy"])

    # an independent recomputation of the chi² curve at m = 3 from the store's documents
    pr = PipelineRun(load_config(tmp_path / "p.yaml"), tmp_path / "w", progress=False)
    pr.plan()
    ds = pr.cfg.datasets[0]
    Xtr, Ytr = pr.raw(ds, "train"), pr.labels(ds, "train")
    Xte, Yte = pr.raw(ds, "test"), pr.labels(ds, "test")
    c = recs["chi2"]
    top = np.argsort(-chi2_scores(Xtr, Ytr), kind="stable")[:3]
    assert c["selected"][:3] == top.tolist()
    clf = MLkNN(k=5).fit(Xtr[:, top].toarray(), Ytr)
    S = clf.decision_function(Xte[:, top].toarray())
    assert c["metrics"]["test"]["average_precision"][2] == pytest.approx(
        metrics.average_precision(Yte, S), abs=1e-12)
    Xc = Xtr[:, top].toarray() - Xtr[:, top].toarray().mean(0)
    Cn = Xc / np.linalg.norm(Xc, axis=0)
    A = (Cn.T @ Cn) ** 2
    assert c["redundancy"][2] == pytest.approx((A.sum() - np.trace(A)) / 6, abs=1e-12)

    md = (res.report_dir / "report.md").read_text(encoding="utf-8")
    assert "## Feature selection: `mlknn` on the top m = 1..6" in md
    assert re.search(r"\| emotions \| GRROOR \| .*iterations, converged", md)
    fig = rep["figures"]["selection"]["emotions"]
    assert (res.report_dir / fig).read_bytes()[:8] == PNG_MAGIC
    assert f"![selection emotions]({fig})" in md
    # a second run reuses both select stages
    again = run_pipeline(_write(tmp_path, cfg), work_dir=tmp_path / "w", progress=False)
    assert [s.status for s in again.stages] == ["cached"] * 3


def test_selection_block_errors(tmp_path):
    base = {"name": "e", "datasets": TINY["datasets"][:1]}
    for sel, where in (({"selectors": ["lasso"]}, "selection.selectors[0].name"),
                       ({"selectors": ["chi2"], "max_features": 0}, "selection.max_features"),
                       ({"selectors": ["chi2"], "metrics": ["nope"]}, "selection.metrics[0]"),
                       ({"selectors": [{"name": "grroor", "n_features_to_select": 3}]},
                        "selection.selectors[0].n_features_to_select"),
                       ({"selectors": ["chi2"], "classifier": "svm"},
                        "selection.classifier.name")):
        with pytest.raises(PipelineConfigError, match=re.escape(where)):
            load_config(_write(tmp_path, {**base, "selection": sel}))
    with pytest.raises(PipelineConfigError, match="methods.*selection"):
        load_config(_write(tmp_path, base))


# --------------------------------------------------------------------------- issue 36
# One small data set (the store's train/test split), few stages: the bugs of issue 36.
SMALL_DS = {"name": "syn", "format": "synthetic", "chunk_rows": 200,
            "options": {"n_docs": 300, "n_labels": 5, "seed": 1, "max_features": 60,
                        "fit_split": "train"}}


def _small(methods, **extra):
    return {"name": "small", "datasets": [json.loads(json.dumps(SMALL_DS))], "methods": methods,
            "classifiers": ["ridge"], "metrics": ["micro_f1"], "d_curve": [], **extra}


def test_alias_is_resolved_when_the_file_is_read(tmp_path):
    """``mddmf`` is ``mddm_f`` everywhere: its label, and a cache written by a file that
    spells it ``mddm_f`` (or labels a method otherwise) does not lose the report."""
    import dask

    cfg = load_config(_write(tmp_path, _small(["mddmf", {"name": "MDDM-P", "t": 0.9}])))
    assert [(m.label, m.method) for m in cfg.methods] == [("mddm_f", "mddm_f"),
                                                          ("mddm_p", "mddm_p")]
    work = tmp_path / "w"
    with dask.config.set(scheduler="threads"):
        first = run_pipeline(_write(tmp_path, _small(["mddm_f"])), work_dir=work,
                             progress=False)
        again = run_pipeline(_write(tmp_path, _small(["mddmf"])), work_dir=work,
                             progress=False)
        # the same fit under another label: the cached records carry the old one
        other = run_pipeline(_write(tmp_path, _small([{"name": "mddmf", "label": "F"}])),
                             work_dir=work, progress=False)
    assert again.ran == [] and other.ran == []
    assert set(first.report["tables"]["ridge"]["micro_f1"]["syn"]) == {"mddm_f"}
    assert set(again.report["tables"]["ridge"]["micro_f1"]["syn"]) == {"mddm_f"}
    assert set(other.report["tables"]["ridge"]["micro_f1"]["syn"]) == {"F"}
    assert {f["method"] for f in other.report["fits"]} == {"F"}


def test_report_crash_writes_the_stages_and_exits_1(tmp_path, cluster_client, capsys,
                                                    monkeypatch):
    """A failure after the stages is a bug (exit 1), not a user error (exit 2); what
    the stages computed is kept in report.json."""
    from dmlfe import cli
    from dmlfe.pipeline import runner

    def broken(*args, **kwargs):
        raise ValueError("'x' is not in list")

    monkeypatch.setattr(runner, "write_report", broken)
    path = _write(tmp_path, _small(["none"]))
    rc = cli.main(["run", str(path), "--work-dir", str(tmp_path / "w"), "--quiet",
                   "--scheduler", cluster_client.scheduler.address])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "internal error" in err and "bug" in err and "'x' is not in list" in err
    rep = json.loads((tmp_path / "w" / "report" / "report.json").read_text())
    assert "not in list" in rep["report_error"]
    assert [s["kind"] for s in rep["stages"]] == ["ingest", "classify"]
    assert 0.0 <= rep["stages"][1]["record"]["metrics"]["test"]["micro_f1"] <= 1.0
    assert "report failed" in (tmp_path / "w" / "report" / "report.md").read_text()


@pytest.mark.parametrize(("edit", "key", "valid"), [
    (lambda c: c.update(defaults={"treshold": 0.999}), "defaults.treshold", "beta"),
    (lambda c: c.update(defaults={"t": 0.99, "d": 5}), "defaults.d", "beta"),
    (lambda c: c["datasets"][0]["options"].update(n_doc=5), "datasets[0].options.n_doc",
     "n_docs"),
    (lambda c: c.update(classifiers=[{"name": "ridge", "alpah": 1.0}]),
     "classifiers[0].alpah", "alpha"),
    (lambda c: c.update(selection={"selectors": [{"name": "grroor", "lamda": 1}]}),
     "selection.selectors[0].lamda", "lam"),
    (lambda c: c.update(selection={"selectors": ["chi2"], "classifier": {"name": "mlknn",
                                                                        "kk": 3}}),
     "selection.classifier.kk", "k"),
])
def test_every_key_is_validated_when_read(tmp_path, edit, key, valid):
    msg = _config_error(tmp_path, _small(["none", {"name": "mvmd", "t": 0.9}]), edit, key)
    assert re.search(rf"\b{valid}\b", msg.split(f": {key}:")[1]), msg


def test_yaml_syntax_error_names_the_pipeline_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nmethods: [pca, {name: mvmd\n", encoding="utf-8")
    with pytest.raises(PipelineConfigError) as info:
        load_config(path)
    assert str(path) in str(info.value)


@pytest.mark.filterwarnings("ignore:the top 3 computed eigenvalues hold:RuntimeWarning")
def test_spectrum_shares_are_of_the_trace_and_capped_d_is_said(tmp_path):
    """A fit that computed only its leading eigenvalues (matrix-free, d = 4) shows the
    share of tr(A) that they hold, the same as the whole spectrum's fit; a threshold
    stopped short by max_components is marked capped in the tables and on the plot."""
    import dask

    from dmlfe.pipeline.plots import _plt, spectrum_figure

    methods = [{"name": "pca", "d": [4], "label": "full"},
               {"name": "pca", "d": [4], "solver": "randomized", "label": "lead"},
               {"name": "pca", "t": 0.999, "max_components": 3, "solver": "randomized",
                "label": "cap"}]
    with dask.config.set(scheduler="threads"):
        res = run_pipeline(_write(tmp_path, _small(methods)), work_dir=tmp_path / "w",
                           progress=False)
    fits = {f["method"]: f for f in res.report["fits"]}
    assert len(fits["full"]["eigenvalues"]) == 60 and len(fits["lead"]["eigenvalues"]) == 4
    full = np.asarray(fits["full"]["eigenvalues"])
    expect = full[:4].sum() / full[full > 0].sum()
    assert expect < 0.9
    assert fits["full"]["share_at_d"] == pytest.approx(expect, rel=1e-9)
    assert fits["lead"]["share_at_d"] == pytest.approx(expect, rel=1e-6)
    assert not fits["lead"]["capped"] and fits["cap"]["capped"]
    assert fits["cap"]["n_components"] == 3 and fits["cap"]["share_at_d"] < 0.9
    fig = spectrum_figure([{**f, "label": k} for k, f in fits.items()], "t")
    try:
        for ax2, key in ((fig.axes[3], "full"), (fig.axes[4], "lead"), (fig.axes[5], "cap")):
            y = ax2.lines[0].get_ydata()
            d = fits[key]["n_components"]
            assert y[d - 1] == pytest.approx(fits[key]["share_at_d"], rel=1e-9), key
            assert y[-1] < 0.95, key  # a fixed d no longer ends at 1.0
        texts = [t.get_text() for ax in fig.axes for t in ax.texts]
        assert any("capped" in t for t in texts) and sum("capped" in t for t in texts) == 1
    finally:
        _plt().close(fig)
    md = (res.report_dir / "report.md").read_text()
    assert "0.9990 **capped**" in md
    assert re.search(r"t=0\.999 not reached \(0\.\d{4} at d = 3, capped\)", md), md
    assert "t=0.999, d=3" not in md


def test_tables_rank_and_bold_the_figures_shown(tmp_path):
    """Four methods at 0.0259 when printed tie: one rank, all bold (not ranks by the
    digits the table does not show)."""
    from dmlfe.pipeline.config import parse_config
    from dmlfe.pipeline.report import write_report
    from dmlfe.pipeline.runner import Stage, StageRun

    cfg = parse_config(_small([{"name": "none", "label": n} for n in "abcd"],
                              metrics=["hamming_loss"]), tmp_path / "p.yaml")
    values = {"a": 0.025904, "b": 0.025912, "c": 0.025899, "d": 0.02601}
    done = []
    for n, v in values.items():
        meta = {"dataset": "syn", "method_label": n, "method": "none", "params": {},
                "d": None, "classifier": "ridge", "fit_key": None}
        st = Stage("classify", f"k{n}", n, lambda d: {}, meta)
        rec = {"d": 60, "metrics": {"test": {"hamming_loss": v, "micro_f1": 0.5}},
               "seconds": 0.0}
        done.append((st, StageRun("classify", f"k{n}", n, "ran", 0.0), rec))
    rep = write_report(cfg, done, tmp_path / "r", work_dir=tmp_path)
    assert rep["ranks"]["ridge"]["hamming_loss"]["ranks"]["syn"] == {
        "a": 2.0, "b": 2.0, "c": 2.0, "d": 4.0}
    md = (tmp_path / "r" / "report.md").read_text()
    rows = {n: next(line for line in md.splitlines() if line.startswith(f"| {n} |"))
            for n in values}
    assert all("**0.0259**" in rows[n] for n in "abc"), rows
    assert "**" not in rows["d"] and "0.0260" in rows["d"]


def test_metric_vs_d_marks_coinciding_lines_and_draws_the_baseline():
    from dmlfe.pipeline.plots import _plt, metric_vs_d_figure

    pts = [(2, 0.5), (5, 0.6), (6, 0.61)]
    series = {"mddm_p": {"test": pts}, "mvmd": {"test": [(d, v + 1e-14) for d, v in pts]},
              "pca": {"test": [(2, 0.4), (5, 0.5)]}}
    fig = metric_vs_d_figure(series, "micro_f1", "t", baselines={"none": {"test": 0.55}})
    try:
        labels = fig.axes[0].get_legend_handles_labels()[1]
        assert labels == ["mddm_p (test)", "mvmd (test) (= mddm_p)", "pca (test)",
                          "none: no reduction (test)"]
        base = fig.axes[0].lines[-1]
        assert list(base.get_ydata()) == [0.55, 0.55]
    finally:
        _plt().close(fig)
