"""``dmlfe run``: the stages of a pipeline, cached, resumable, on one client.

Stages, in order for each data set (see :mod:`dmlfe.pipeline.config`):

* ``ingest``   corpus -> store (skipped for ``store: PATH``); a corpus that grew since
  is appended to the store instead (:mod:`dmlfe.pipeline.sources`), and the stages
  after it are keyed again by the store's content once it is up to date;
* ``split``    the label-stratified parts (``split: {stratified: ...}`` only);
* ``fit``      one estimator setting on the training documents -> saved model;
* ``transform`` the model's embeddings of the training/validation/test documents;
* ``classify`` a classifier on the first d embedding columns (or the raw features for
  method ``none``), its predictions scored on validation and test -> a JSON record;
* ``select``   (with a ``selection`` block) one selector's ranking of the raw training
  features and the classifier on its top m = 1..max_features, scored on validation and
  test (:func:`dmlfe.selection.curves.selection_curves`) -> a JSON record.

The plan (every stage with its key) is made before anything runs, so progress
reads ``stage i/N``. A stage whose record exists is reused; the report is rebuilt
from the records at the end of every run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import DataFormatError, InputError
from dmlfe.estimators import make_estimator
from dmlfe.evaluation.registry import get_classifier
from dmlfe.ingestion import DEFAULT_CHUNK_ROWS, append, ingest
from dmlfe.io.embeddings import embedding_obs, read_embeddings, write_embeddings
from dmlfe.labels import sparse_labels
from dmlfe.metrics import metric_report
from dmlfe.model_io import load_model
from dmlfe.pipeline.cache import RECORD, StageCache, stage_key, to_json, write_json_atomic
from dmlfe.pipeline.config import (
    ClassifierSpec,
    DatasetSpec,
    PipelineConfig,
    PipelineConfigError,
    SelectorSpec,
    load_config,
)
from dmlfe.pipeline.report import write_report
from dmlfe.pipeline.sources import (
    SourceUpdate,
    file_state,
    plan_update,
    read_record,
    same_cheaply,
    vectoriser_change,
    write_record,
)
from dmlfe.pipeline.splits import split_roles
from dmlfe.store import open_store

#: Up to this many labels a report's data set record keeps every label's document count;
#: above it only the compact label statistics (``Store.info()["label_stats"]``).
REPORT_LABEL_COUNTS = 1000


@dataclass
class Stage:
    """One planned unit of work."""

    kind: str
    key: str
    label: str
    action: Callable[[Path], dict[str, Any]] = field(repr=False)
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class StageRun:
    kind: str
    key: str
    label: str
    status: str  # "ran" or "cached"
    seconds: float


@dataclass
class RunResult:
    """What :func:`run_pipeline` did: the stages (ran or reused) and the report."""

    work_dir: Path
    report_dir: Path
    stages: list[StageRun]
    report: dict[str, Any]

    @property
    def ran(self) -> list[StageRun]:
        return [s for s in self.stages if s.status == "ran"]

    @property
    def reused(self) -> list[StageRun]:
        return [s for s in self.stages if s.status == "cached"]


def _dense(a: Any) -> np.ndarray:
    """A classifier's output as an ndarray (a scipy.sparse one densified)."""
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def make_classifier(spec: ClassifierSpec) -> Any:
    """The classifier of a ``classifiers`` entry (:mod:`dmlfe.evaluation.registry`)."""
    return get_classifier(spec.name).make(spec.params)


def _raw_features(view: Any) -> Any:
    """A view's X in memory as one CSR matrix (method ``none``)."""
    parts = [b["X"] for b in view.iter_blocks()]
    return sp.vstack(parts, format="csr") if parts else sp.csr_matrix((0, view.n_features))


def _setting_text(params: dict[str, Any], d: int | None) -> str:
    p = {k: v for k, v in params.items() if k != "n_components"}
    nc = params.get("n_components")
    if d is not None:
        p["d"] = d
    elif isinstance(nc, float):
        p["t"] = nc
    elif nc is not None:
        p["d"] = nc
    return ", ".join(f"{k}={v}" for k, v in p.items())


class PipelineRun:
    """Plans and runs one pipeline (use :func:`run_pipeline`)."""

    def __init__(self, cfg: PipelineConfig, work_dir: Path, *, client: Any = None,
                 fresh: bool = False, progress: bool = True,
                 stage_hook: Callable[[Stage], None] | None = None) -> None:
        self.cfg = cfg
        self.work_dir = Path(work_dir)
        self.cache = StageCache(self.work_dir / "cache")
        self.client = client
        self.fresh = fresh
        self.progress = progress
        self.stage_hook = stage_hook
        self._stores: dict[str, Path] = {}
        self._split_keys: dict[str, str] = {}
        self._views: dict[str, dict[str, Any]] = {}
        self._labels: dict[tuple[str, str], np.ndarray] = {}
        self._raw: dict[tuple[str, str], Any] = {}
        self._indices: dict[str, int] = {}

    # ------------------------------------------------------------------ plan
    def plan(self) -> list[Stage]:
        for i, c in enumerate(self.cfg.classifiers):
            try:
                make_classifier(c)
            except ImportError as exc:
                raise RuntimeError(f"the classifiers are not available ({exc})") from exc
            except (TypeError, ValueError) as exc:
                raise PipelineConfigError(f"{self.cfg.path}: classifiers[{i}]: {exc}") from None
        if self.cfg.selection is not None:
            try:
                make_classifier(self.cfg.selection.classifier)
            except (TypeError, ValueError) as exc:
                raise PipelineConfigError(f"{self.cfg.path}: selection.classifier: {exc}"
                                          ) from None
        stages: list[Stage] = []
        for i, ds in enumerate(self.cfg.datasets):
            stages += self._plan_dataset(i, ds)
        return stages

    def _plan_dataset(self, i: int, ds: DatasetSpec) -> list[Stage]:
        if ds.store is not None:
            try:
                store = open_store(ds.store)
            except (FileNotFoundError, ValueError) as exc:
                raise PipelineConfigError(f"{self.cfg.path}: datasets[{i}].store: {exc}") from None
            self._stores[ds.name] = Path(ds.store)
            return self._plan_downstream(i, ds, *self._store_keys(i, ds, store))
        src = self._source_files(i, ds)
        self._stores[ds.name] = src.folder / "store.zarr"
        self._indices[ds.name] = i
        stage = Stage("ingest", src.key, f"{ds.name}",
                      lambda d, ds=ds, src=src: self._ingest(ds, src, d), {"dataset": ds.name})
        if self.cache.done("ingest", src.key) and not self.fresh:
            keys = self._store_keys(i, ds, self._store(ds))
        else:
            # provisional keys: the stages after the ingest are planned again once the
            # store is up to date (execute), keyed by its content as for ``store: PATH``
            keys = (src.key, None)
        return [stage] + self._plan_downstream(i, ds, *keys)

    def _source_files(self, i: int, ds: DatasetSpec) -> SourceFiles:
        """The source files of a data set, the folder of its store and its ingest key."""
        paths = list(ds.source or [])
        opt_paths = [v for k, v in ds.options.items() if k == "labels"]
        for p in paths + opt_paths:
            if not Path(p).exists():
                raise FileNotFoundError(
                    f"{self.cfg.path}: datasets[{i}] ({ds.name}): {p} not found; set "
                    "DMLFE_DATA or the pipeline's data_dir to the folder of the corpora")
        files = [file_state(p) for p in paths]
        option_files = [file_state(p) for p in opt_paths]
        # the store's folder is named by the source's identity, not its content, so that
        # a grown corpus is appended to the store (and its statistics cache) in place
        conf = {"format": ds.format, "sources": paths, "options": ds.options,
                "chunk_rows": ds.chunk_rows}
        folder = self.cache.dir("source", stage_key("source", conf))
        key = stage_key("ingest", {**conf, "files": files, "option_files": option_files})
        if self.cache.done("ingest", key):
            record = read_record(folder)
            try:
                current = open_store(folder / "store.zarr").fingerprint["uuid"]
            except (FileNotFoundError, ValueError):
                current = None
            if record is None or record.get("store_uuid") != current \
                    or not same_cheaply(record.get("files", []), files):
                # the files are back to a state ingested before, but the store has moved on
                (self.cache.dir("ingest", key) / RECORD).unlink()
        return SourceFiles(folder, key, files, option_files)

    def _store_keys(self, i: int, ds: DatasetSpec, store: Any) -> tuple[str, str | None]:
        """The keys of a data set's content and of its training documents (None: the
        split's key stands for them)."""
        def identity(fingerprint: dict[str, Any]) -> dict[str, Any]:
            # a store of the work folder is known by its uuid, wherever the folder is moved
            if ds.store is None:
                return {k: v for k, v in fingerprint.items() if k != "path"}
            return fingerprint

        data_key = stage_key("store", identity(store.fingerprint))
        if ds.split.by != "store":
            return data_key, None
        try:
            train = store.subset(ds.split.roles["train"])
        except ValueError as exc:
            raise PipelineConfigError(f"{self.cfg.path}: datasets[{i}].split: {exc}") from None
        return data_key, stage_key("train", {"data": identity(train.content_fingerprint),
                                             "split": ds.split.to_dict()})

    def _plan_downstream(self, i: int, ds: DatasetSpec, data_key: str,
                         train_key: str | None) -> list[Stage]:
        """The stages after the ingest: split, select, fit, transform, classify."""
        stages: list[Stage] = []
        split_key = stage_key("split", ds.split.to_dict(), [data_key])
        self._split_keys[ds.name] = split_key
        # a fit reads the training documents only: keyed by them, an append of test
        # documents (dmlfe ingest --append, a grown source) leaves the fit stages cached
        train_key = train_key or split_key
        if ds.split.by == "stratified":
            stages.append(Stage("split", split_key, f"{ds.name} stratified",
                                lambda d, ds=ds: self._split(ds, d), {"dataset": ds.name}))
        sel = self.cfg.selection
        for sp_ in (sel.selectors if sel is not None else []):
            conf = {"selector": [sp_.name, sp_.params], "max_features": sel.max_features,
                    "classifier": [sel.classifier.name, sel.classifier.params]}
            key = stage_key("select", conf, [split_key])
            stages.append(Stage("select", key, f"{ds.name} {sp_.label} top 1..{sel.max_features}",
                                lambda d, ds=ds, sp_=sp_: self._select(ds, sp_, d),
                                {"dataset": ds.name, "selector": sp_.label,
                                 "name": sp_.name, "params": sp_.params,
                                 "classifier": sel.classifier.label}))
        for m in self.cfg.methods:
            for s in m.settings:
                base = {"dataset": ds.name, "method_label": m.label, "method": m.method,
                        "params": s.params}
                if m.method == "none":
                    for c in self.cfg.classifiers:
                        conf = {"method": "none", "classifier": [c.name, c.params]}
                        key = stage_key("classify", conf, [split_key])
                        stages.append(Stage(
                            "classify", key, f"{ds.name} none {c.label}",
                            lambda d, ds=ds, c=c: self._classify(ds, c, None, None, d),
                            {**base, "d": None, "classifier": c.label, "fit_key": None}))
                    continue
                text = _setting_text(s.params, None)
                fit_key = stage_key("fit", {"method": m.method, "params": s.params}, [train_key])
                stages.append(Stage("fit", fit_key, f"{ds.name} {m.label} ({text})",
                                    lambda d, ds=ds, m=m, s=s: self._fit(ds, m.method, s.params, d),
                                    dict(base)))
                tr_key = stage_key("transform", {"roles": ds.split.role_names,
                                                    "layout": "anndata"}, [fit_key, split_key])
                stages.append(Stage("transform", tr_key, f"{ds.name} {m.label} ({text})",
                                    lambda d, ds=ds, k=fit_key: self._transform(ds, k, d),
                                    {**base, "fit_key": fit_key}))
                grid = s.d_grid or [None]
                # the metric-vs-d points: the same embeddings truncated, first classifier only
                curve = [dd for dd in self.cfg.d_curve if dd not in grid]
                for dd, clfs, is_curve in ([(dd, self.cfg.classifiers, False) for dd in grid]
                                           + [(dd, self.cfg.classifiers[:1], True)
                                              for dd in curve]):
                    for c in clfs:
                        conf = {"classifier": [c.name, c.params], "d": dd}
                        key = stage_key("classify", conf, [tr_key])
                        stages.append(Stage(
                            "classify", key,
                            f"{ds.name} {m.label} ({_setting_text(s.params, dd)}) {c.label}"
                            + (" [d curve]" if is_curve else ""),
                            lambda d, ds=ds, c=c, k=tr_key, dd=dd: self._classify(ds, c, k, dd, d),
                            {**base, "d": dd, "classifier": c.label, "fit_key": fit_key,
                             "curve": is_curve}))
        return stages

    # ------------------------------------------------------------------ data
    def _store(self, ds: DatasetSpec) -> Any:
        return open_store(self._stores[ds.name])

    def views(self, ds: DatasetSpec) -> dict[str, Any]:
        """Role -> Store view (train, validation, test) of a data set."""
        if ds.name not in self._views:
            store = self._store(ds)
            if ds.split.by == "store":
                v = {role: store.subset(name) for role, name in ds.split.roles.items()}
            else:
                d = self.cache.dir("split", self._split_keys[ds.name])
                with np.load(d / "rows.npz") as z:
                    v = {role: store.take(z[role]) for role in ds.split.role_names}
            self._views[ds.name] = v
        return self._views[ds.name]

    def labels(self, ds: DatasetSpec, role: str) -> np.ndarray:
        if (ds.name, role) not in self._labels:
            # dense for the classifiers and metrics, which take dense labels for now
            Y = sparse_labels(self.views(ds)[role].Y.compute(scheduler="sync"))
            self._labels[(ds.name, role)] = Y.toarray()
        return self._labels[(ds.name, role)]

    def raw(self, ds: DatasetSpec, role: str) -> Any:
        if (ds.name, role) not in self._raw:
            self._raw[(ds.name, role)] = _raw_features(self.views(ds)[role])
        return self._raw[(ds.name, role)]

    # ------------------------------------------------------------------ stage actions
    def _ingest(self, ds: DatasetSpec, src: SourceFiles, d: Path) -> dict[str, Any]:
        out = src.folder / "store.zarr"
        try:
            store = open_store(out)
            attrs, uuid = store.attrs, store.fingerprint["uuid"]
        except (FileNotFoundError, ValueError):
            attrs = uuid = None
        if self.fresh:
            update = SourceUpdate("ingest")
        else:
            update = plan_update(read_record(src.folder), attrs, uuid, src.files,
                                 src.option_files, ds.format or "", ds.options)
        self._say_reingest(ds, update)
        appended: list[int] | None = None
        tail_copy: Path | None = None
        if update.kind == "append":
            paths: list[Any] = list(update.new_files)
            if update.tail is not None:
                path, start, stop = update.tail
                # the new bytes as a file of their own; the history names it and the range
                tail_copy = d / f"{Path(path).name}.bytes-{start}-{stop}"
                update.copy_tail(tail_copy)
                paths.insert(0, tail_copy)
            grown = update.tail[0] if update.tail is not None else paths[0]
            why = vectoriser_change(attrs or {}, ds.format or "", paths)
            if why is None:
                try:
                    entry = append(out, paths if len(paths) > 1 else paths[0],
                                   format=ds.format, client=self.client,
                                   progress=self.progress)
                    appended = entry["rows"]
                except (InputError, DataFormatError) as exc:
                    # the store is as it was (an append is atomic); a fresh ingest takes
                    # what an append refuses (a new label), or names the bad line
                    why = f"the append was refused ({exc})"
            if why is not None:
                update = SourceUpdate("ingest", f"{grown} grew, but {why}")
                self._say_reingest(ds, update)
            if tail_copy is not None:
                tail_copy.unlink()  # read by the append only
        if update.kind == "ingest":
            source: Any = ds.source
            if source is not None and len(source) == 1:
                source = source[0]
            src.folder.mkdir(parents=True, exist_ok=True)
            ingest(source, format=ds.format, out=out,
                   chunk_rows=ds.chunk_rows or DEFAULT_CHUNK_ROWS, client=self.client,
                   overwrite=True, progress=self.progress, **ds.options)
        store = open_store(out)
        write_record(src.folder, update.files or src.files, src.option_files,
                     store.fingerprint["uuid"])
        info = store.info()
        keep = ["shape", "nnz", "n_labels", "splits", "docs_without_labels",
                "empty_docs", "features", "label_stats"]
        if info["n_labels"] <= REPORT_LABEL_COUNTS:
            keep.append("labels")  # each label's count: compact only for few labels
        return {"store": str(out), "update": update.kind, "reason": update.reason,
                "appended_rows": appended, "info": {k: info[k] for k in keep}}

    def _say_reingest(self, ds: DatasetSpec, update: SourceUpdate) -> None:
        if update.reason is not None and self.progress:
            print(f"[dmlfe run] {ds.name}: ingesting the whole corpus again: {update.reason}",
                  file=sys.stderr, flush=True)

    def _split(self, ds: DatasetSpec, d: Path) -> dict[str, Any]:
        store = self._store(ds)
        Y = sparse_labels(store.Y.compute(scheduler="sync")).toarray()  # split_roles: dense
        parts = split_roles(Y, ds.split.fractions, seed=ds.split.seed)
        np.savez(d / "rows.npz", **parts)
        return {"rows": "rows.npz",
                "counts": {r: int(v.size) for r, v in parts.items()},
                "label_counts": {r: Y[v].sum(axis=0).astype(int).tolist()
                                 for r, v in parts.items()}}

    def _fit(self, ds: DatasetSpec, method: str, params: dict[str, Any], d: Path
             ) -> dict[str, Any]:
        t0 = time.perf_counter()
        if ds.split.by == "store":
            # the store path lets the fit reuse the statistics saved beside the store
            est = make_estimator(method, client=self.client, split=ds.split.roles["train"],
                                 **params)
            est.fit(str(self._stores[ds.name]))
        else:
            view = self.views(ds)["train"]
            est = make_estimator(method, client=self.client, **params)
            est.fit(view.X, view.Y)
        seconds = time.perf_counter() - t0
        est.set_params(client=None)
        est.save(d / "model", overwrite=True)
        nc = params.get("n_components")
        total = getattr(est, "eigenvalue_total_", None)
        return {"model": "model", "n_components": int(est.n_components_),
                "threshold": nc if isinstance(nc, float) else None,
                "eigenvalues": np.asarray(est.eigenvalues_, dtype=np.float64).tolist(),
                # the denominator of the cumulative shares (report.spectrum_shares)
                "eigenvalue_total": None if total is None else float(total),
                "whole_spectrum": total is None,
                "solver": est.solver_, "n_passes": int(est.n_passes_),
                "rows_read": getattr(est, "rows_read_", None),
                "n_samples": int(est.n_samples_), "n_features": int(est.n_features_in_),
                "seconds": round(seconds, 3)}

    def _transform(self, ds: DatasetSpec, fit_key: str, d: Path) -> dict[str, Any]:
        model = load_model(self.cache.dir("fit", fit_key) / "model")
        roles = {}
        for role, view in self.views(ds).items():
            Z = model.transform(view.X)
            write_embeddings(Z, d / f"{role}.zarr", ids=view.ids, client=self.client,
                             overwrite=True, attrs={"role": role, "dataset": ds.name},
                             **embedding_obs(model, view))
            roles[role] = {"path": f"{role}.zarr", "n": int(Z.shape[0]), "d": int(Z.shape[1])}
        return {"roles": roles}

    def _embeddings(self, tr_key: str, role: str, d: int | None) -> np.ndarray:
        return read_embeddings(self.cache.dir("transform", tr_key) / f"{role}.zarr", d)

    def _classify(self, ds: DatasetSpec, c: ClassifierSpec, tr_key: str | None, d: int | None,
                  out: Path) -> dict[str, Any]:
        def features(role: str) -> Any:
            return self.raw(ds, role) if tr_key is None else self._embeddings(tr_key, role, d)

        t0 = time.perf_counter()
        Ztr = features("train")
        clf = make_classifier(c)
        clf.fit(Ztr, self.labels(ds, "train"))
        metrics = {}
        for role in ds.split.role_names:
            if role == "train":
                continue
            Z = features(role)
            # a classifier with sparse outputs (knn-vote: CSR) is densified for the metrics
            P = _dense(clf.predict(Z))
            S = _dense(clf.decision_function(Z)).astype(np.float64, copy=False)
            rep = metric_report(self.labels(ds, role), P, S)
            metrics[role] = {k: float(v) for k, v in rep.items()}
        return {"d": int(Ztr.shape[1]), "n_train": int(Ztr.shape[0]), "metrics": metrics,
                "seconds": round(time.perf_counter() - t0, 3)}

    def _select(self, ds: DatasetSpec, spec: SelectorSpec, out: Path) -> dict[str, Any]:
        from dmlfe.selection.curves import feature_ranking, selection_curves

        sel = self.cfg.selection
        assert sel is not None
        Xtr, Ytr = self.raw(ds, "train"), self.labels(ds, "train")
        m_max = min(sel.max_features, Xtr.shape[1])
        ranking, info = feature_ranking(spec.name, Xtr, Ytr, m_max, spec.params)
        held = {role: (self.raw(ds, role), self.labels(ds, role))
                for role in ds.split.role_names if role != "train"}
        t0 = time.perf_counter()
        curves = selection_curves(ranking, Xtr, Ytr, held, m_max,
                                  lambda: make_classifier(sel.classifier))
        return {"n_train": int(Xtr.shape[0]), "n_features": int(Xtr.shape[1]),
                "fit": info, **curves, "seconds": round(time.perf_counter() - t0, 3)}

    def _replan(self, stages: list[Stage], after: int, dataset: str) -> None:
        """Key the stages after a data set's ingest (``stages[after:]``) by its store as
        it now is: same stages, so the plan's length and order do not change."""
        i = self._indices[dataset]
        ds = self.cfg.datasets[i]
        self._views.pop(ds.name, None)
        new = self._plan_downstream(i, ds, *self._store_keys(i, ds, self._store(ds)))
        old = stages[after:after + len(new)]
        assert [s.kind for s in old] == [s.kind for s in new], "replanned stages differ"
        stages[after:after + len(new)] = new

    # ------------------------------------------------------------------ run
    def execute(self, stages: list[Stage]) -> list[tuple[Stage, StageRun, dict[str, Any]]]:
        done = []
        n = len(stages)
        width = len(str(n))
        for i, st in enumerate(stages, 1):
            t0 = time.perf_counter()
            if self.cache.done(st.kind, st.key) and not self.fresh:
                status = "cached"
            else:
                if self.stage_hook is not None:
                    self.stage_hook(st)
                d = self.cache.start(st.kind, st.key)
                record = st.action(d)
                record = {"kind": st.kind, "key": st.key, "label": st.label,
                          "meta": to_json(st.meta), **record}
                self.cache.finish(st.kind, st.key, record)
                status = "ran"
                if st.kind == "ingest":
                    self._replan(stages, i, st.meta["dataset"])
            secs = time.perf_counter() - t0
            if self.progress:
                how = "cached" if status == "cached" else f"ran in {secs:.1f} s"
                print(f"[dmlfe run] stage {i:>{width}}/{n} {st.kind:<9} {st.label}: {how}",
                      file=sys.stderr, flush=True)
            done.append((st, StageRun(st.kind, st.key, st.label, status, round(secs, 3)),
                         self.cache.record(st.kind, st.key)))
        return done


@dataclass
class SourceFiles:
    """A data set's corpus: its store's folder, its ingest stage key, the file states."""

    folder: Path
    key: str
    files: list[dict[str, Any]]
    option_files: list[dict[str, Any]]


def _current_report(report_dir: Path, plan_key: str) -> dict[str, Any] | None:
    """The existing report when it was made from exactly these stages and this file."""
    try:
        rep = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if rep.get("plan_key") != plan_key or not (report_dir / "report.md").is_file():
        return None
    figs = [f for kind in rep.get("figures", {}).values() for v in kind.values()
            for f in (v.values() if isinstance(v, dict) else [v])]
    if not all((report_dir / f).is_file() for f in figs):
        return None
    for s in rep.get("stages", []):
        s["status"] = "cached"  # this run's view: nothing ran
    return rep


class ReportError(RuntimeError):
    """The stages ran but the report could not be made: a bug, not a user error (the
    command line exits 1). report.json then holds the stages' results."""


def _write_partial_report(cfg: PipelineConfig, done: list[tuple[Stage, StageRun,
                                                                dict[str, Any]]],
                          report_dir: Path, exc: BaseException) -> None:
    """What can be written when :func:`write_report` failed: report.json with every
    stage and its record, and report.md saying that the report failed."""
    report_dir.mkdir(parents=True, exist_ok=True)
    error = f"{type(exc).__name__}: {exc}"
    partial = {
        "pipeline": cfg.name, "file": str(cfg.path), "config": cfg.raw,
        "report_error": error,
        "stages": [{"kind": r.kind, "key": r.key, "label": r.label, "status": r.status,
                    "seconds": r.seconds, "meta": to_json(st.meta), "record": rec}
                   for st, r, rec in done],
    }
    write_json_atomic(report_dir / "report.json", to_json(partial))
    (report_dir / "report.md").write_text(
        f"# Pipeline `{cfg.name}`\n\nThe report failed ({error}); this is a bug in dmlfe. "
        f"The {len(done)} stages finished: report.json holds their results.\n",
        encoding="utf-8")


def default_work_dir(cfg: PipelineConfig) -> Path:
    return Path(cfg.work_dir) if cfg.work_dir else Path("dmlfe-work") / cfg.name


def run_pipeline(config: str | os.PathLike[str] | PipelineConfig, *,
                 work_dir: str | os.PathLike[str] | None = None, client: Any = None,
                 fresh: bool = False, progress: bool = True,
                 stage_hook: Callable[[Stage], None] | None = None) -> RunResult:
    """Run a pipeline file: every stage not already cached, then the report.

    Parameters
    ----------
    config : path of a pipeline YAML file, or a parsed :class:`PipelineConfig`
    work_dir : path, optional
        Cache and report folder (default: the file's ``work_dir``, else
        ``dmlfe-work/NAME``).
    client : distributed.Client, optional
        Where every stage runs (one client for the whole run).
    fresh : bool
        Run every stage again, replacing its cached result.
    progress : bool
        ``stage i/N KIND LABEL: cached | ran in S s`` lines on stderr.
    stage_hook : callable, optional
        Called with each :class:`Stage` just before it runs (tests use it to
        interrupt a run).

    Returns
    -------
    RunResult
        ``stages`` (with ``ran`` / ``reused``), ``report`` (the report.json content)
        and ``report_dir``.
    """
    cfg = config if isinstance(config, PipelineConfig) else load_config(config)
    wd = Path(work_dir) if work_dir is not None else default_work_dir(cfg)
    wd.mkdir(parents=True, exist_ok=True)
    run = PipelineRun(cfg, wd, client=client, fresh=fresh, progress=progress,
                      stage_hook=stage_hook)
    stages = run.plan()
    done = run.execute(stages)
    report_dir = wd / "report"
    plan_key = stage_key("report", {"config": cfg.raw, "stages": [st.key for st in stages]})
    report = None
    if not any(r.status == "ran" for _, r, _ in done):
        report = _current_report(report_dir, plan_key)
    if report is None:
        try:
            report = write_report(cfg, done, report_dir, work_dir=wd)
        except Exception as exc:
            _write_partial_report(cfg, done, report_dir, exc)
            raise ReportError(
                f"the {len(done)} stages finished, but writing the report failed "
                f"({type(exc).__name__}: {exc}); {report_dir / 'report.json'} holds the "
                "stages' results") from exc
        report["plan_key"] = plan_key
        write_json_atomic(report_dir / "report.json", report)
    if progress:
        print(f"[dmlfe run] report: {report_dir / 'report.md'}", file=sys.stderr, flush=True)
    return RunResult(work_dir=wd, report_dir=report_dir,
                     stages=[r for _, r, _ in done], report=report)
