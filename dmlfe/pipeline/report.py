"""The report of a pipeline run: report.json, report.md and PNG plots.

Which setting of a method is reported: for each data set, method and classifier,
the setting (parameters and d) with the best value of ``select.metric`` on the
validation documents when the data set has a validation split (the MOPE protocol),
else on the test documents -- which the report then says, since a choice made on
the test set flatters the method. The tables show the test figures of the
chosen settings; every setting's figures are in report.json.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from dmlfe._version import __version__
from dmlfe.pipeline import plots
from dmlfe.pipeline.cache import to_json, write_json_atomic
from dmlfe.pipeline.config import METRICS, PipelineConfig
from dmlfe.pipeline.ranks import compare
from dmlfe.solvers.dimension import ROUNDOFF_RTOL, n_genuine


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", s).strip("_") or "x"


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if not np.isfinite(v):
            return str(v)
        return f"{v:.{digits}f}"
    return str(v)


def _shown(v: float, digits: int = 4) -> float:
    """``v`` as the tables print it: ranks and bold go by the figures shown, so that
    equal printed figures tie."""
    return float(_fmt(float(v), digits)) if np.isfinite(v) else float(v)


def _better(a: float, b: float, lower: bool) -> bool:
    if np.isnan(b):
        return not np.isnan(a)
    return a < b if lower else a > b


def collect(done: list[tuple[Any, Any, dict[str, Any]]]) -> dict[str, Any]:
    """Records of the stages grouped by kind: ingest/split per data set, fits, results."""
    out: dict[str, Any] = {"datasets": {}, "splits": {}, "fits": {}, "results": [],
                           "selection": []}
    for st, _run, rec in done:
        # this run's stage: a record reused from the cache may come from another pipeline
        # file (same work, other labels), so its own meta is not this file's
        meta = to_json(st.meta)
        if st.kind == "ingest":
            out["datasets"][meta["dataset"]] = rec.get("info", {})
        elif st.kind == "split":
            out["splits"][meta["dataset"]] = {"counts": rec["counts"],
                                              "label_counts": rec["label_counts"]}
        elif st.kind == "fit":
            out["fits"][st.key] = {
                "key": st.key, "dataset": meta["dataset"], "method": meta["method_label"],
                "estimator": meta["method"], "params": meta["params"],
                **{k: rec[k] for k in ("n_components", "threshold", "eigenvalues", "solver",
                                       "n_passes", "n_samples", "n_features", "seconds")},
                "eigenvalue_total": rec.get("eigenvalue_total"),
                "whole_spectrum": rec.get("whole_spectrum"),
            }
            out["fits"][st.key].update(spectrum_shares(out["fits"][st.key]))
        elif st.kind == "select":
            out["selection"].append({
                "key": st.key, "dataset": meta["dataset"], "selector": meta["selector"],
                "name": meta["name"], "params": meta["params"],
                "classifier": meta["classifier"],
                **{k: rec[k] for k in ("n_train", "n_features", "fit", "m", "metrics",
                                       "redundancy", "selected", "seconds")},
            })
        elif st.kind == "classify":
            out["results"].append({
                "key": st.key, "dataset": meta["dataset"], "method": meta["method_label"],
                "estimator": meta["method"], "params": meta["params"],
                "d_requested": meta["d"], "d": rec["d"], "classifier": meta["classifier"],
                "fit_key": meta["fit_key"], "metrics": rec["metrics"],
                "seconds": rec["seconds"], "curve": bool(meta.get("curve", False)),
            })
    return out


def spectrum_shares(fit: dict[str, Any]) -> dict[str, Any]:
    """The denominator of a fit's cumulative eigenvalue shares and what it says of d.

    The denominator is the one of the threshold rule
    (:func:`dmlfe.solvers.dimension.choose_dimension`): tr(A), the sum of all
    eigenvalues, when only the leading ones were computed (``eigenvalue_total``), else
    the sum of the genuine positive eigenvalues of the whole spectrum. A fit record
    written before the total was recorded, with fewer eigenvalues than features, has
    no known denominator (None).

    Returns
    -------
    dict
        ``share_total`` (the denominator or None), ``share_at_d`` (the cumulative share
        of the d kept, or None) and ``capped`` (a threshold t that the d kept does not
        reach: the number of computed pairs stopped it short).
    """
    w = np.asarray(fit["eigenvalues"], dtype=np.float64)
    total = fit.get("eigenvalue_total")
    if total is None and (fit.get("whole_spectrum") or w.size >= int(fit["n_features"])):
        k = n_genuine(w, ROUNDOFF_RTOL) if w.size else 0
        total = float(w[:k].sum()) if k else None
    if total is None or not total > 0:
        return {"share_total": None, "share_at_d": None, "capped": False}
    d = int(fit["n_components"])
    share = float(np.clip(w[:d], 0.0, None).sum() / total)
    t = fit.get("threshold")
    capped = t is not None and share < float(t) - ROUNDOFF_RTOL
    return {"share_total": float(total), "share_at_d": share, "capped": bool(capped)}


def choose(results: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """The chosen setting of each (data set, method, classifier); see the module docstring.

    The d-curve points (``curve``) only draw the metric-vs-d plot: they are not settings.
    """
    lower = METRICS[metric]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r.get("curve"):
            continue
        groups[(r["dataset"], r["method"], r["classifier"])].append(r)
    chosen = []
    for (_ds, _m, _c), rs in groups.items():
        role = "validation" if "validation" in rs[0]["metrics"] else "test"
        best = None
        for r in rs:
            v = float(r["metrics"][role].get(metric, np.nan))
            if best is None or _better(v, best[0], lower):
                best = (v, r)
        assert best is not None
        chosen.append({**best[1], "selected_on": role, "selected_by": metric,
                       "selection_value": best[0], "n_settings": len(rs)})
    return chosen


def _setting(r: dict[str, Any]) -> str:
    p = {k: v for k, v in (r["params"] or {}).items() if k != "n_components"}
    nc = (r["params"] or {}).get("n_components")
    if isinstance(nc, float) and r["d_requested"] is None:
        p["t"] = nc
        if r.get("capped"):
            # the d kept does not reach t: say so, with the share it does reach
            p["t"] = f"{nc} not reached ({_fmt(r.get('share_at_d'))} at d = {r['d']}, capped)"
    if r["estimator"] != "none":
        p["d"] = r["d"]
    return ", ".join(f"{k}={v}" for k, v in p.items()) or "–"


def write_report(cfg: PipelineConfig, done: list[tuple[Any, Any, dict[str, Any]]],
                 out_dir: str | Path, *, work_dir: str | Path) -> dict[str, Any]:
    """Write report.json, report.md and the PNGs under ``out_dir``; returns the JSON dict."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.png"):
        old.unlink()  # plots of an earlier run with other data sets or methods
    col = collect(done)
    for r in col["results"]:
        f = col["fits"].get(r["fit_key"]) if r["fit_key"] else None
        if f is not None and r["d_requested"] is None:
            r["capped"], r["share_at_d"] = f["capped"], f["share_at_d"]
    chosen = choose(col["results"], cfg.select_metric)
    datasets = [d.name for d in cfg.datasets]
    methods = [m.label for m in cfg.methods]
    classifiers = [c.label for c in cfg.classifiers]

    # tables[classifier][metric][dataset][method] = test value of the chosen setting
    tables: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for c in classifiers:
        tables[c] = {m: {d: {} for d in datasets} for m in METRICS}
        for r in chosen:
            if r["classifier"] != c:
                continue
            for m in METRICS:
                v = r["metrics"].get("test", {}).get(m)
                if v is not None:
                    tables[c][m][r["dataset"]][r["method"]] = float(v)
    ranks = {c: {m: compare({d: {meth: _shown(v) for meth, v in tables[c][m][d].items()}
                             for d in datasets if tables[c][m][d]},
                            lower_is_better=METRICS[m])
                 for m in cfg.metrics}
             for c in classifiers}

    plot_files: list[str] = []

    def rel(p: Path) -> str:
        plot_files.append(p.name)
        return p.name

    figures: dict[str, Any] = {"spectrum": {}, "metric_vs_d": {}, "methods": {}, "ranks": {},
                               "selection": {}}
    sel_means = _selection_means(col["selection"])
    if cfg.selection is not None:
        shown = [*cfg.selection.metrics, "redundancy"]
        for ds in datasets:
            recs = [r for r in col["selection"] if r["dataset"] == ds]
            if not recs:
                continue
            panels: dict[str, dict[str, dict[str, list[tuple[int, float]]]]] = {}
            for metric in shown:
                for r in recs:
                    by_role = ({"train": r["redundancy"]} if metric == "redundancy" else
                               {role: v[metric] for role, v in r["metrics"].items()})
                    panels.setdefault(metric, {})[r["selector"]] = {
                        role: list(zip(r["m"], vals, strict=True))
                        for role, vals in by_role.items()}
            clf = recs[0]["classifier"]
            figures["selection"][ds] = rel(plots.metric_panels(
                panels, f"{ds}: {clf} on the top m selected features",
                out_dir / f"selection-{_slug(ds)}.png", "number of selected features m",
                {**METRICS, "redundancy": True}))
    # curves[data set][method][role] = [(d, select metric), ...]: what metric-vs-d draws
    curves: dict[str, Any] = {}
    # baselines[data set][label][role] = select metric of the classifier on raw features
    baselines: dict[str, Any] = {}
    for ds in datasets:
        keys = []
        for r in chosen:
            if r["dataset"] == ds and r["fit_key"] and r["fit_key"] not in keys \
                    and r["classifier"] == classifiers[0]:
                keys.append(r["fit_key"])
        fits = [{**col["fits"][k], "label": col["fits"][k]["method"]} for k in keys
                if k in col["fits"]]
        fits.sort(key=lambda f: methods.index(f["method"]))
        if fits:
            figures["spectrum"][ds] = rel(plots.spectrum(
                fits, f"{ds}: eigenvalue spectra (d kept marked)",
                out_dir / f"spectrum-{_slug(ds)}.png"))
        # metric versus d: every reduction with more than one d on this data set (its d
        # grid and the d-curve points, cfg.d_curve)
        series: dict[str, dict[str, list[tuple[int, float]]]] = {}
        for m in methods:
            rs = [r for r in col["results"] if r["dataset"] == ds and r["method"] == m
                  and r["classifier"] == classifiers[0] and r["estimator"] != "none"]
            if len({r["d"] for r in rs}) < 2:
                continue
            # one point per d: the best other parameters at that d (on the same role)
            for role in ("validation", "test"):
                best: dict[int, float] = {}
                for r in rs:
                    if role not in r["metrics"]:
                        continue
                    v = float(r["metrics"][role][cfg.select_metric])
                    if r["d"] not in best or _better(v, best[r["d"]], METRICS[cfg.select_metric]):
                        best[r["d"]] = v
                if best:
                    series.setdefault(m, {})[role] = sorted(best.items())
        # the classifier on the raw features ("none"): a horizontal line per role
        base: dict[str, dict[str, float]] = {}
        for r in col["results"]:
            if r["dataset"] == ds and r["estimator"] == "none" \
                    and r["classifier"] == classifiers[0]:
                base[r["method"]] = {role: float(v[cfg.select_metric])
                                     for role, v in r["metrics"].items()
                                     if cfg.select_metric in v}
        if series:
            curves[ds] = series
            if base:
                baselines[ds] = base
            figures["metric_vs_d"][ds] = rel(plots.metric_vs_d(
                series, cfg.select_metric, f"{ds}: {cfg.select_metric} versus d "
                f"({classifiers[0]})", out_dir / f"metric-vs-d-{_slug(ds)}.png",
                baselines=base))
        vals = {m: {meth: tables[classifiers[0]][m][ds][meth] for meth in methods
                    if meth in tables[classifiers[0]][m][ds]} for m in cfg.metrics}
        if any(vals.values()):
            figures["methods"][ds] = rel(plots.method_bars(
                vals, f"{ds}: test figures ({classifiers[0]})",
                out_dir / f"methods-{_slug(ds)}.png", METRICS))
    for c in classifiers:
        for m in cfg.metrics:
            rk = ranks[c][m]
            if rk.get("friedman"):
                figures["ranks"].setdefault(c, {})[m] = rel(plots.cd_diagram(
                    rk["average_ranks"], rk["friedman"]["cd"],
                    f"{m}, {c}: average ranks over {len(rk['datasets'])} data sets "
                    f"(Nemenyi CD, alpha {rk['friedman']['alpha']})",
                    out_dir / f"ranks-{_slug(c)}-{_slug(m)}.png"))

    stages = [{"kind": r.kind, "key": r.key, "label": r.label, "status": r.status,
               "seconds": r.seconds} for _, r, _ in done]
    report = {
        "pipeline": cfg.name, "file": str(cfg.path), "dmlfe_version": __version__,
        "generated": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "work_dir": str(Path(work_dir).resolve()), "config": cfg.raw,
        "select_metric": cfg.select_metric, "metrics_shown": cfg.metrics,
        "datasets": col["datasets"], "splits": col["splits"],
        "fits": list(col["fits"].values()), "results": col["results"], "chosen": chosen,
        "tables": tables, "ranks": ranks, "figures": figures, "curves": curves,
        "baselines": baselines,
        "stages": stages, "selection": col["selection"], "selection_means": sel_means,
    }
    write_json_atomic(out_dir / "report.json", report)
    md = _markdown(cfg, report, datasets, methods, classifiers)
    (out_dir / "report.md").write_text(md, encoding="utf-8")
    return to_json(report)


def _selection_means(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each selector's measures averaged over m = 1..M (the GRROOR paper's Tables 4-5)
    on the test documents (validation where there is no test role), and redundancy."""
    rows = []
    for r in recs:
        role = "test" if "test" in r["metrics"] else next(iter(r["metrics"]), None)
        means = {k: float(np.mean(v)) for k, v in (r["metrics"].get(role) or {}).items()
                 if k in METRICS}
        means["redundancy"] = float(np.mean(r["redundancy"]))
        rows.append({"dataset": r["dataset"], "selector": r["selector"], "role": role,
                     "m_max": len(r["m"]), "means": means})
    return rows


def _selection_markdown(cfg: PipelineConfig, rep: dict[str, Any], datasets: list[str]
                        ) -> list[str]:
    sel = cfg.selection
    if sel is None or not rep["selection"]:
        return []
    shown = [*sel.metrics, "redundancy"]
    lower = {**METRICS, "redundancy": True}
    L = [f"## Feature selection: `{sel.classifier.label}` on the top m = 1..{sel.max_features} "
         "raw features", "",
         "Each selector ranks the training documents' features; the classifier is fitted on "
         "the m best and scored on the held-out documents for every m. The table gives "
         "each measure's mean over m (as the GRROOR paper's Tables 4-5) on the test "
         "documents; redundancy is eq. 38 of the selected set (mean squared cosine of the "
         "centred training features). Best per data set in bold.", ""]
    L.append("| data set | selector | " + " | ".join(
        f"{m} {'↓' if lower[m] else '↑'}" for m in shown) + " | fit |")
    L.append("|---|---|" + "---:|" * len(shown) + "---|")
    fits = {(r["dataset"], r["selector"]): r["fit"] for r in rep["selection"]}
    for ds in datasets:
        rows = [r for r in rep["selection_means"] if r["dataset"] == ds]
        for r in rows:
            cells = []
            for m in shown:
                vs = [_shown(x["means"].get(m, np.nan)) for x in rows]
                best = np.nanmin(vs) if lower[m] else np.nanmax(vs)
                v = r["means"].get(m)
                cells.append(f"**{_fmt(v)}**" if v is not None and _shown(v) == best
                             and len(rows) > 1 else _fmt(v))
            f = fits[(ds, r["selector"])]
            how = (f"{f['n_iter']} iterations, " + ("converged" if f["converged"] else
                                                      "**not converged**") + ", "
                   if "n_iter" in f else "") + f"{f['seconds']:.1f} s"
            L.append(f"| {ds} | {r['selector']} | " + " | ".join(cells) + f" | {how} |")
    L.append("")
    for ds, fig in rep["figures"]["selection"].items():
        L += [f"### Feature selection curves: {ds}", "", f"![selection {ds}]({fig})", ""]
    return L


def _markdown(cfg: PipelineConfig, rep: dict[str, Any], datasets: list[str],
              methods: list[str], classifiers: list[str]) -> str:
    L: list[str] = [f"# Pipeline `{cfg.name}`", ""]
    n_ran = sum(s["status"] == "ran" for s in rep["stages"])
    L += [f"File `{cfg.path}`, dmlfe {rep['dmlfe_version']}, {rep['generated']}. "
          f"Stages: {len(rep['stages'])} ({n_ran} ran, {len(rep['stages']) - n_ran} reused "
          "from the cache).", ""]
    L += ["## Data sets", "", "| data set | documents | features | labels | documents per "
          "label (median / max) | labels per document (mean / max) | splits |",
          "|---|---:|---:|---:|---:|---:|---|"]
    for ds in datasets:
        info = rep["datasets"].get(ds, {})
        shape = info.get("shape", ["?", "?"])
        spl = rep["splits"].get(ds, {}).get("counts") or info.get("splits") or {}
        how = ("stratified " if ds in rep["splits"] else "") + ", ".join(
            f"{k} {v}" for k, v in spl.items())
        stats = info.get("label_stats") or {}
        per_label = stats.get("docs_per_label") or {}
        per_doc = stats.get("labels_per_doc") or {}
        label_cells = (f"{per_label['median']:g} / {per_label['max']}" if per_label else "?",
                       f"{per_doc['mean']:.2f} / {per_doc['max']}" if per_doc else "?")
        L.append(f"| {ds} | {shape[0]} | {shape[1]} | {info.get('n_labels', '?')} | "
                 f"{label_cells[0]} | {label_cells[1]} | {how} |")
    L.append("")
    sel = rep["select_metric"]
    on = {r["selected_on"] for r in rep["chosen"]}
    multi = any(r["n_settings"] > 1 for r in rep["chosen"])
    for c in (classifiers if rep["results"] else []):
        L += [f"## Results: classifier `{c}`, test figures", ""]
        if multi:
            on_test = sorted({r["dataset"] for r in rep["chosen"]
                              if r["n_settings"] > 1 and r["selected_on"] == "test"})
            L += [f"Where a method has several settings, the one with the best {sel} on the "
                  "validation documents is shown"
                  + (f"; {', '.join(on_test)} ha{'s' if len(on_test) == 1 else 've'} no "
                     "validation split, so the choice there was made on the test documents "
                     "(optimistic)" if on_test else "") + ".", ""]
        for m in cfg.metrics:
            tbl = rep["tables"][c][m]
            rk = rep["ranks"][c][m]
            lower = METRICS[m]
            L += [f"### {m} ({'lower' if lower else 'higher'} is better)", ""]
            have = [d for d in datasets if tbl.get(d)]
            L.append("| method | " + " | ".join(have) + " | avg rank |")
            L.append("|---|" + "---:|" * (len(have) + 1))
            best = {}
            for d in have:
                vs = [_shown(v) for v in tbl[d].values()]
                best[d] = min(vs) if lower else max(vs)
            for meth in methods:
                cells = []
                for d in have:
                    v = tbl[d].get(meth)
                    s = _fmt(v)
                    cells.append(f"**{s}**" if v is not None and _shown(v) == best[d] else s)
                ar = rk.get("average_ranks", {}).get(meth)
                L.append(f"| {meth} | " + " | ".join(cells) + f" | {_fmt(ar, 2)} |")
            fr = rk.get("friedman")
            if fr:
                L += ["", f"Friedman over N = {fr['n']} data sets, k = {fr['k']} methods: "
                      f"chi2_F = {fr['chi2']:.3f} (p = {fr['p_chi2']:.3g}), Iman-Davenport "
                      f"F_F = {fr['ff']:.3f} with ({fr['df1']}, {fr['df2']}) d.f. "
                      f"(p = {fr['p_ff']:.3g}); Nemenyi critical difference "
                      f"CD = {fr['cd']:.3f} (alpha = {fr['alpha']})."]
                fig = rep["figures"]["ranks"].get(c, {}).get(m)
                if fig:
                    L += ["", f"![{m} ranks]({fig})"]
            L.append("")
    L += _selection_markdown(cfg, rep, datasets)
    L += ["## Chosen settings", "",
          f"| data set | method | classifier | setting | {sel} ({'/'.join(sorted(on))}) | "
          "candidates |", "|---|---|---|---|---:|---:|"]
    for r in rep["chosen"]:
        L.append(f"| {r['dataset']} | {r['method']} | {r['classifier']} | {_setting(r)} | "
                 f"{_fmt(r['selection_value'])} | {r['n_settings']} |")
    L.append("")
    if multi:
        L += ["## Every setting", "", f"| data set | method | classifier | setting | "
              f"{sel} (validation) | {sel} (test) |", "|---|---|---|---|---:|---:|"]
        for r in rep["results"]:
            if r.get("curve"):
                continue  # drawn in the metric-vs-d plot
            val = r["metrics"].get("validation", {}).get(sel)
            L.append(f"| {r['dataset']} | {r['method']} | {r['classifier']} | {_setting(r)} | "
                     f"{_fmt(val)} | {_fmt(r['metrics']['test'].get(sel))} |")
        L.append("")
    L += ["## Fits", "", "The share is the eigenvalue sum of the d kept over tr(A), the sum "
          "of all eigenvalues (of the positive ones where A is indefinite); a threshold "
          "that the computed pairs could not reach is marked **capped**.", "",
          "| data set | method | d | threshold | share at d | solver | passes | seconds |",
          "|---|---|---:|---:|---:|---|---:|---:|"]
    for f in rep["fits"]:
        thr = _fmt(f["threshold"], 4)
        if f.get("capped"):
            thr += " **capped**"
        L.append(f"| {f['dataset']} | {f['method']} | {f['n_components']} | {thr} | "
                 f"{_fmt(f.get('share_at_d'))} | {f['solver']} | {f['n_passes']} | "
                 f"{f['seconds']:.2f} |")
    if any(f.get("capped") for f in rep["fits"]):
        L += ["", "Capped: d is the number of pairs computed (max_components, or the pairs "
              "that threshold_memory holds), below the threshold t; raise the cap or give "
              "an int d."]
    L.append("")
    L += ["## Plots", ""]
    for kind, title in (("spectrum", "Eigenvalue spectra"), ("metric_vs_d", f"{sel} versus d"),
                        ("methods", "Method comparison")):
        for ds, fig in rep["figures"][kind].items():
            L += [f"### {title}: {ds}", "", f"![{kind} {ds}]({fig})", ""]
    return "\n".join(L)
