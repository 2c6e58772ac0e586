"""Pipeline files: the YAML schema, its validation and the expanded plan inputs.

A pipeline file::

    name: demo                          # default: the file's stem
    work_dir: dmlfe-work/demo           # default dmlfe-work/NAME (relative to the cwd)
    data_dir: ../../shared/data         # relative sources are read from here; relative to
                                        # this file; the env var DMLFE_DATA overrides it
    datasets:
      - name: scene
        format: mulan                   # any dmlfe.ingest format ...
        source: [mulan/scene-train.arff, mulan/scene-test.arff]
        options: {labels: mulan/scene.xml}   # reader / vectoriser options of ingest
        chunk_rows: 10000
        split: {train: train, test: test}    # roles -> the store's split names
      - name: r10-mope
        store: path/to/existing.zarr    # ... or an existing store (relative to this file)
        split: {stratified: {train: 1, validation: 1, test: 1}, seed: 0}
    defaults: {t: 0.999, beta: 0.5}     # method parameters, applied where a method takes them
    methods:
      - none                            # the classifier on the raw features
      - {name: pca, d: [10, 20, 50]}    # lists are grids; d = number of components
      - {name: mvmd, t: 0.999, beta: [0.25, 0.5]}   # t = eigenvalue-sum threshold
    classifiers: [ridge]                # ridge, mlknn, knn-vote, br, flda, ppml (+ parameters)
    metrics: [hamming_loss, micro_f1]   # shown in the report (all are computed)
    select: {metric: micro_f1}          # picks a method's setting on the validation split
    d_curve: [2, 5, 10, 20, 50]         # metric-vs-d points of every reduction (the
                                        # default; first classifier; [] = none)
    selection:                          # optional: feature selection curves (raw features)
      selectors: [grroor, chi2]         # or {name: grroor, alpha: 1.0, beta: 10.0, ...}
      max_features: 50                  # the classifier on the top m = 1..50 features
      classifier: {name: mlknn, k: 10, s: 1.0}   # a classifiers entry (default mlknn)
      metrics: [average_precision, ranking_loss] # plotted against m (all are computed)

``methods`` may be left out when ``selection`` is given.

Every error names the file and the key path (``methods[2].beta``) and says what
is accepted.
"""

from __future__ import annotations

import itertools
import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlfe.errors import DmlfeError
from dmlfe.evaluation.registry import ClassifierTable, get_classifier
from dmlfe.fit.params import COMMON
from dmlfe.ingestion import format_options
from dmlfe.methods.registry import all_methods, resolve_method
from dmlfe.params import Check, Predicate, Worded, interval
from dmlfe.readers.registry import get_reader, reader_names
from dmlfe.solvers.dimension import check_n_components
from dmlfe.yamlfiles import read_yaml

#: Metric names of :func:`dmlfe.metrics.metric_report`, and whether lower is better.
METRICS: dict[str, bool] = {
    "hamming_loss": True, "example_accuracy": False, "example_precision": False,
    "example_recall": False, "example_f1": False, "subset_accuracy": False,
    "micro_f1": False, "macro_f1": False, "ranking_loss": True, "one_error": True,
    "coverage": True, "average_precision": False, "macro_auc": False,
}
#: The MVMD paper's six instance-based measures (mvmd eq. 48-53).
INSTANCE_METRICS = ["hamming_loss", "example_accuracy", "example_precision", "example_recall",
                    "example_f1", "subset_accuracy"]

ROLES = ("train", "validation", "test")

#: Classifier name -> (class name, default parameters), read from the classifier
#: registry (:mod:`dmlfe.evaluation.registry`) at each access.
CLASSIFIERS: Mapping[str, tuple[str, dict[str, Any]]] = ClassifierTable()

#: Estimator parameters the pipeline sets itself (not from a pipeline file).
_RESERVED = {"n_components", "client", "split", "progress", "cache", "variant"}

#: d values at which every reduction is also scored (first classifier) for the
#: metric-vs-d plot, when the pipeline file gives no ``d_curve``.
DEFAULT_D_CURVE = (2, 5, 10, 20, 50)
#: The GRROOR paper's measures (section 5.3), the selection stage's default plots.
SELECTION_METRICS = ["average_precision", "ranking_loss", "coverage", "hamming_loss",
                     "macro_f1", "micro_f1"]


@dataclass(frozen=True)
class KeyDoc:
    """One key of a pipeline file: its name, the YAML type it takes, its default and
    what it means (docs/pipeline_format.rst is generated from these)."""

    name: str
    type: str
    default: str
    meaning: str


#: Every key of a pipeline file, by where it appears (``datasets[i]``: an entry of the
#: ``datasets`` list). Validation accepts these keys and no others, and the
#: documentation's pipeline format page lists them, so a key cannot be accepted and
#: undocumented. Method parameters (``methods[i]`` and ``defaults``), classifier
#: parameters and ``options`` are generated from the registries they come from.
PIPELINE_KEYS: dict[str, tuple[KeyDoc, ...]] = {
    "": (
        KeyDoc("name", "string", "the file's stem", "the pipeline's name (report titles)"),
        KeyDoc("description", "string", "none", "free text, kept in the report"),
        KeyDoc("work_dir", "path", "dmlfe-work/NAME", "stage cache and report folder, "
               "relative to the current directory (``dmlfe run --work-dir`` overrides it)"),
        KeyDoc("data_dir", "path", "the file's folder", "where relative ``source`` and "
               "``options.labels`` paths are read from, relative to the file; the "
               "environment variable DMLFE_DATA overrides it"),
        KeyDoc("datasets", "list of mappings", "required", "the data sets (see "
               "``datasets[i]``)"),
        KeyDoc("defaults", "mapping", "{}", "method parameters applied to every method "
               "that takes them (``t`` and any parameter of a registered method), unless "
               "its ``methods`` entry sets it; ``d`` is per method"),
        KeyDoc("methods", "list of names or mappings", "required unless ``selection``",
               "the reductions compared (see ``methods[i]``); ``none`` is the classifier "
               "on the raw features"),
        KeyDoc("classifiers", "list of names or mappings", "[ridge]", "the classifiers "
               "run on every embedding (see ``classifiers[i]``)"),
        KeyDoc("metrics", "list of metric names", "all 13", "the measures shown in the "
               "report's tables (all are computed)"),
        KeyDoc("select", "mapping", "{metric: micro_f1}", "how a method's setting (its "
               "d, t or parameter grid) is chosen (see ``select``)"),
        KeyDoc("d_curve", "list of integers", str(list(DEFAULT_D_CURVE)), "d values at "
               "which every reduction's embeddings (fitted once) are truncated and scored "
               "with the first classifier, for the metric-vs-d plots; [] = none"),
        KeyDoc("selection", "mapping", "none", "feature selection curves on the raw "
               "features (see ``selection``)"),
    ),
    "datasets[i]": (
        KeyDoc("name", "string without /", "required", "the data set's name in the "
               "report"),
        KeyDoc("format", "string", "required unless ``store``", "an ingest format: "
               + ", ".join(reader_names())),
        KeyDoc("source", "path or list of paths", "required unless ``store`` or "
               "synthetic", "the corpus file(s), relative to ``data_dir``; MULAN/MEKA "
               "files name their split (``Corel5k-train-sparse.arff``: train); new "
               "lines or files are appended to the pipeline's store (see the "
               "incremental page)"),
        KeyDoc("options", "mapping", "{}", "ingest options of the format (see "
               "``datasets[i].options``)"),
        KeyDoc("chunk_rows", "integer", "10000", "documents per store chunk"),
        KeyDoc("store", "path", "none", "an existing store to use instead of ``format``/"
               "``source`` (relative to the file)"),
        KeyDoc("split", "mapping", "{train: train, test: test}", "which documents train, "
               "validate and test (see ``datasets[i].split``)"),
    ),
    "datasets[i].split": (
        KeyDoc("train", "string", "train", "the store's split name of the training "
               "documents (with ``stratified``: that part's share)"),
        KeyDoc("validation", "string", "none", "the split name of the validation "
               "documents, on which ``select`` chooses each method's setting; without it "
               "the setting is chosen on test"),
        KeyDoc("test", "string", "test", "the split name of the test documents"),
        KeyDoc("stratified", "mapping role -> share", "none", "instead of split names: cut "
               "the documents into label-stratified parts, e.g. {train: 1, validation: 1, "
               "test: 1}"),
        KeyDoc("seed", "integer", "0", "with ``stratified``: the seed of the cut"),
    ),
    "methods[i]": (
        KeyDoc("name", "string", "required", "a method name or alias (see the methods "
               "page), or ``none``; a bare string is ``{name: ...}``"),
        KeyDoc("label", "string", "the name", "the method's name in the report (to "
               "compare two settings of one method)"),
        KeyDoc("d", "integer or list", "none", "number of components; a list is fitted "
               "once at its largest d and scored at each"),
        KeyDoc("t", "number or list", "0.999 (or ``defaults.t``)", "eigenvalue-sum "
               "threshold in (0, 1]: the smallest d holding this share; not with d"),
        KeyDoc("(parameter)", "value or list", "the method's own", "any parameter of the "
               "method; a list is a grid, each value fitted and ``select`` chooses"),
    ),
    "classifiers[i]": (
        KeyDoc("name", "string", "required", ", ".join(CLASSIFIERS) + "; a bare string is "
               "``{name: ...}``"),
        KeyDoc("label", "string", "the name", "the classifier's name in the report"),
        KeyDoc("(parameter)", "value", "see below", "a parameter of the classifier"),
    ),
    "select": (
        KeyDoc("metric", "metric name", "micro_f1", "the measure on the validation split "
               "(else test) that chooses each method's setting"),
    ),
    "selection": (
        KeyDoc("selectors", "list of names or mappings", "required", "feature rankers "
               "such as grroor or chi2; a mapping gives ``name``, ``label`` and parameters"),
        KeyDoc("max_features", "integer", "50", "the classifier runs on the top m = 1 .. "
               "max_features features"),
        KeyDoc("classifier", "name or mapping", "mlknn", "a ``classifiers[i]`` entry"),
        KeyDoc("metrics", "list of metric names", ", ".join(SELECTION_METRICS),
               "the measures plotted against m (all are computed)"),
    ),
}


def keys_at(where: str) -> set[str]:
    """The keys declared in :data:`PIPELINE_KEYS` at ``where`` (no placeholders)."""
    return {k.name for k in PIPELINE_KEYS[where] if not k.name.startswith("(")}


_TOP_KEYS = keys_at("")
_DATASET_KEYS = keys_at("datasets[i]")
_SELECTION_KEYS = keys_at("selection")
_METHOD_KEYS = keys_at("methods[i]")
_CLASSIFIER_KEYS = keys_at("classifiers[i]")


class PipelineConfigError(DmlfeError, ValueError):
    """A pipeline file is invalid; the message names the file and the key path."""


def _err(path: Path | str, key: str, msg: str) -> PipelineConfigError:
    return PipelineConfigError(f"{path}: {key}: {msg}")


@dataclass
class SplitSpec:
    """How a data set's documents become training / validation / test sets.

    ``by="store"``: ``roles`` maps each role to a split name of the store.
    ``by="stratified"``: ``fractions`` maps each role to its share; the parts come from
    :func:`dmlfe.pipeline.splits.stratified_split` with ``seed``.
    """

    by: str = "store"
    roles: dict[str, str] = field(default_factory=lambda: {"train": "train", "test": "test"})
    fractions: dict[str, float] = field(default_factory=dict)
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        if self.by == "store":
            return {"by": "store", "roles": dict(self.roles)}
        return {"by": "stratified", "fractions": dict(self.fractions), "seed": self.seed}

    @property
    def role_names(self) -> list[str]:
        names = self.roles if self.by == "store" else self.fractions
        return [r for r in ROLES if r in names]


@dataclass
class DatasetSpec:
    name: str
    format: str | None = None
    source: list[str] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    chunk_rows: int | None = None
    store: str | None = None
    split: SplitSpec = field(default_factory=SplitSpec)


@dataclass
class MethodSetting:
    """One fit: the estimator parameters (``n_components`` included) and the grid of d
    evaluated on its embeddings (leading columns; None = all of them)."""

    params: dict[str, Any]
    d_grid: list[int] | None = None


@dataclass
class MethodSpec:
    label: str
    method: str  # "none" or a dmlfe.estimators.make_estimator name
    settings: list[MethodSetting]


@dataclass
class ClassifierSpec:
    label: str
    name: str
    params: dict[str, Any]


@dataclass
class SelectorSpec:
    label: str
    name: str  # a dmlfe.selection.curves.SELECTORS name
    params: dict[str, Any]


@dataclass
class SelectionSpec:
    """Feature selection curves: each selector's ranking of the raw features, and the
    classifier on the top m = 1..max_features of them."""

    selectors: list[SelectorSpec]
    max_features: int
    classifier: ClassifierSpec
    metrics: list[str]


@dataclass
class PipelineConfig:
    name: str
    path: Path
    raw: dict[str, Any]
    work_dir: str | None
    data_dir: Path
    datasets: list[DatasetSpec]
    methods: list[MethodSpec]
    classifiers: list[ClassifierSpec]
    metrics: list[str]
    select_metric: str
    #: the metric-vs-d points of every reduction: its embeddings (fitted once) truncated
    #: to each d and classified with the first classifier; not used to choose settings
    d_curve: list[int] = field(default_factory=lambda: list(DEFAULT_D_CURVE))
    selection: SelectionSpec | None = None


# --------------------------------------------------------------------------- helpers
def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, list | tuple) else [v]


def _check_keys(path: Path, where: str, d: dict, allowed: set[str]) -> None:
    extra = sorted(set(d) - allowed)
    if extra:
        prefix = f"{where}." if where else ""
        raise _err(path, f"{prefix}{extra[0]}",
                   f"unknown key; allowed keys here: {', '.join(sorted(allowed))}")


# Constraint objects of dmlfe.params, worded for a key path (_checked names the file and key)
_MAPPING = Predicate(lambda v: isinstance(v, dict), "must be a mapping, got {type} {value!r}")
_SHARE = Predicate(lambda x: isinstance(x, numbers.Real) and not isinstance(x, bool) and x > 0,
                   "must be a positive number (the part's share), got {value!r}")


def _at_least(lo: int) -> Worded:
    return Worded(interval(lo, None, integer=True), f"must be an integer >= {lo}, got {{value!r}}")


def _checked(path: Path, key: str, check: Check, v: Any) -> Any:
    """``check(key, v)``; its ValueError / TypeError as a :class:`PipelineConfigError`."""
    try:
        return check(key, v)
    except (TypeError, ValueError) as exc:
        raise _err(path, key, str(exc)) from None


def _mapping(path: Path, key: str, v: Any) -> dict:
    return _checked(path, key, _MAPPING, v)


def _resolve(base: Path, p: str) -> str:
    q = Path(os.path.expanduser(str(p)))
    return str(q if q.is_absolute() else (base / q).resolve())


def _int(path: Path, key: str, v: Any, lo: int = 1) -> int:
    return _checked(path, key, _at_least(lo), v)


def _n_components(path: Path, key: str, v: Any, kind: type) -> int | float:
    """A d (``kind`` Integral) or t (float) entry, by the one n_components rule."""
    if kind is float and isinstance(v, numbers.Real) and not isinstance(v, bool):
        v = float(v)  # t: 1 in YAML is the threshold 1.0
    if isinstance(v, bool) or not isinstance(v, kind):
        what = "an integer d" if kind is numbers.Integral else "a float threshold t"
        raise _err(path, key, f"must be {what}, got {v!r}")
    try:
        return check_n_components(v)
    except (TypeError, ValueError) as exc:
        raise _err(path, key, str(exc)) from None


# --------------------------------------------------------------------------- parts
def _split(path: Path, key: str, v: Any) -> SplitSpec:
    if v is None:
        return SplitSpec()
    v = _mapping(path, key, v)
    if "stratified" in v:
        _check_keys(path, key, v, keys_at("datasets[i].split") - set(ROLES))
        fr = _mapping(path, f"{key}.stratified", v["stratified"])
        _check_keys(path, f"{key}.stratified", fr, set(ROLES))
        for role, x in fr.items():
            _checked(path, f"{key}.stratified.{role}", _SHARE, x)
        for role in ("train", "test"):
            if role not in fr:
                raise _err(path, f"{key}.stratified", f"needs a {role!r} share")
        seed = _int(path, f"{key}.seed", v.get("seed", 0), lo=0)
        return SplitSpec(by="stratified", roles={}, fractions={k: float(x) for k, x in fr.items()},
                         seed=seed)
    _check_keys(path, key, v, keys_at("datasets[i].split") - {"stratified", "seed"})
    for role in ("train", "test"):
        if role not in v:
            raise _err(path, key, f"needs a {role!r} entry (the store's split name for the "
                       f"{role} documents), or use {{stratified: {{train: .., test: ..}}}}")
    for role, x in v.items():
        if not isinstance(x, str):
            raise _err(path, f"{key}.{role}", f"must be a split name (str), got {x!r}")
    return SplitSpec(by="store", roles=dict(v))


def _dataset(path: Path, i: int, v: Any, data_dir: Path) -> DatasetSpec:
    key = f"datasets[{i}]"
    v = _mapping(path, key, v)
    _check_keys(path, key, v, _DATASET_KEYS)
    name = v.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise _err(path, f"{key}.name", f"needs a name without '/', got {name!r}")
    split = _split(path, f"{key}.split", v.get("split"))
    if "store" in v:
        extra = sorted({"format", "source", "options", "chunk_rows"} & set(v))
        if extra:
            raise _err(path, f"{key}.{extra[0]}", "does not apply with 'store' (an existing "
                       "store is used as it is); remove one of them")
        store = _resolve(path.parent, str(v["store"]))
        return DatasetSpec(name=name, store=store, split=split)
    fmt = v.get("format")
    if fmt not in reader_names():
        raise _err(path, f"{key}.format", f"must be one of {', '.join(reader_names())} (or give "
                   f"'store: PATH'), got {fmt!r}")
    src = v.get("source")
    if not get_reader(fmt).needs_source:
        if src is not None:
            raise _err(path, f"{key}.source", f"the {fmt} corpus takes no source")
        sources = None
    else:
        if src is None:
            raise _err(path, f"{key}.source", f"format {fmt!r} needs a source path (or a list)")
        sources = [_resolve(data_dir, str(s)) for s in _as_list(src)]
    options = dict(_mapping(path, f"{key}.options", v.get("options") or {}))
    _check_keys(path, f"{key}.options", options, dataset_options(fmt))
    for opt in get_reader(fmt).path_options:
        if isinstance(options.get(opt), str):
            options[opt] = _resolve(data_dir, options[opt])
    if isinstance(options.get("ngram_range"), list):
        options["ngram_range"] = tuple(options["ngram_range"])
    chunk_rows = v.get("chunk_rows")
    if chunk_rows is not None:
        chunk_rows = _int(path, f"{key}.chunk_rows", chunk_rows)
    return DatasetSpec(name=name, format=fmt, source=sources, options=options,
                       chunk_rows=chunk_rows, split=split)


def _estimator_params(method: str) -> set[str]:
    """The parameters a pipeline may set for ``method``: the common ones and its own."""
    spec = resolve_method(method)
    return ({p.name for p in COMMON} | set(spec.params)) - _RESERVED


def default_keys() -> set[str]:
    """The keys ``defaults:`` accepts: ``t`` and every parameter a registered method
    takes (each default is applied to the methods that take it)."""
    keys = {"t"}
    for name in all_methods():
        keys |= _estimator_params(name)
    return keys


def _defaults(path: Path, v: Any) -> dict[str, Any]:
    d = dict(_mapping(path, "defaults", v or {}))
    allowed = default_keys()
    for k in d:
        if k not in allowed:
            hint = " (d is per method: give it in a methods entry)" if k == "d" else ""
            raise _err(path, f"defaults.{k}", f"no method takes a parameter {k!r}{hint}; "
                       f"allowed keys here: {', '.join(sorted(allowed))}")
    return d


def classifier_params(name: str) -> set[str]:
    """The parameters a ``classifiers`` entry may give for classifier ``name``."""
    import inspect

    cls = get_classifier(name).cls
    return {p for p in inspect.signature(cls.__init__).parameters if p != "self"}


def dataset_options(fmt: str) -> set[str]:
    """The ``options`` keys of a data set of format ``fmt`` (reader, split names and
    vectoriser): those of :func:`dmlfe.ingest`."""
    return format_options(fmt)


def selector_params(name: str) -> set[str]:
    """The parameters a ``selection.selectors`` entry may give for selector ``name``."""
    if name == "grroor":
        from dmlfe.selection.grroor import GRROOR

        return set(GRROOR().get_params()) - {"n_features_to_select"}
    return set()


def _method(path: Path, i: int, v: Any, defaults: dict[str, Any]) -> MethodSpec:
    key = f"methods[{i}]"
    if isinstance(v, str):
        v = {"name": v}
    v = dict(_mapping(path, key, v))
    name = v.pop("name", None)
    if not isinstance(name, str):
        raise _err(path, f"{key}.name", f"needs a method name, got {name!r}")
    method = name.lower().replace("-", "_")
    if method != "none":
        try:
            # the canonical name, once: labels, stage keys and the report all use it
            method = resolve_method(method).name
        except ValueError as exc:
            raise _err(path, f"{key}.name", f"{exc} (or 'none' for no reduction)") from None
    label = str(v.pop("label", method))
    if method == "none":
        if v:
            raise _err(path, f"{key}.{sorted(v)[0]}", "method 'none' (the classifier on the raw "
                       "features) takes no parameters")
        return MethodSpec(label=label, method="none", settings=[MethodSetting(params={})])
    accepted = _estimator_params(method)
    for k in v:
        if k not in accepted | (_METHOD_KEYS - {"name", "label"}):
            raise _err(path, f"{key}.{k}", f"{method} takes no parameter {k!r}; its parameters: "
                       f"{', '.join(sorted(accepted | {'d', 't'}))}")
    if "d" in v and "t" in v:
        raise _err(path, f"{key}.t", "give either d (number of components) or t (eigenvalue-sum "
                   "threshold), not both")
    params = {k: x for k, x in defaults.items() if k in accepted | {"t"}}
    if "d" in v:
        params.pop("t", None)
    params.update(v)
    d_grid = None
    if "d" in params:
        ds = [_n_components(path, f"{key}.d", d, numbers.Integral)
              for d in _as_list(params.pop("d"))]
        d_grid = sorted(set(ds))
    ts = None
    if "t" in params:
        ts = [_n_components(path, f"{key}.t", t, float) for t in _as_list(params.pop("t"))]
    grid_keys = [k for k in params if isinstance(params[k], list)]
    settings = []
    for combo in itertools.product(*[params[k] for k in grid_keys]):
        p = dict(params)
        p.update(zip(grid_keys, combo, strict=True))
        if d_grid is not None:
            settings.append(MethodSetting({**p, "n_components": max(d_grid)}, d_grid))
        elif ts is not None:
            settings += [MethodSetting({**p, "n_components": float(t)}) for t in ts]
        else:
            settings.append(MethodSetting(p))
    return MethodSpec(label=label, method=method, settings=settings)


def _classifier(path: Path, i: int | str, v: Any) -> ClassifierSpec:
    key = f"classifiers[{i}]" if isinstance(i, int) else i
    if isinstance(v, str):
        v = {"name": v}
    v = dict(_mapping(path, key, v))
    name = v.pop("name", None)
    if name not in CLASSIFIERS:
        raise _err(path, f"{key}.name", f"must be one of {', '.join(CLASSIFIERS)}, got {name!r}")
    label = str(v.pop("label", name))
    _check_keys(path, key, v, classifier_params(name) | _CLASSIFIER_KEYS)
    params = {**get_classifier(name).defaults, **v}
    return ClassifierSpec(label=label, name=name, params=params)


def _metric_names(path: Path | str, key: str, metrics: Any) -> list[str]:
    """A non-empty list of known metric names (the error names ``key[i]``)."""
    if not isinstance(metrics, list) or not metrics:
        raise _err(path, key, "needs a list of metric names")
    for i, m in enumerate(metrics):
        if m not in METRICS:
            raise _err(path, f"{key}[{i}]", f"unknown metric {m!r}; choose from "
                       f"{', '.join(METRICS)}")
    return list(metrics)


def _selection(path: Path, v: Any) -> SelectionSpec | None:
    from dmlfe.selection.curves import SELECTORS  # the selectors only when asked for

    if v is None:
        return None
    v = _mapping(path, "selection", v)
    _check_keys(path, "selection", v, _SELECTION_KEYS)
    raw = v.get("selectors")
    if not isinstance(raw, list) or not raw:
        raise _err(path, "selection.selectors", "needs a list of one or more selectors "
                   f"({', '.join(SELECTORS)})")
    selectors = []
    for i, x in enumerate(raw):
        key = f"selection.selectors[{i}]"
        x = dict(_mapping(path, key, {"name": x} if isinstance(x, str) else x))
        name = x.pop("name", None)
        if name not in SELECTORS:
            raise _err(path, f"{key}.name", f"must be one of {', '.join(SELECTORS)}, got "
                       f"{name!r}")
        label = str(x.pop("label", name))
        if label in {s.label for s in selectors}:
            raise _err(path, key, f"label {label!r} is used twice; give one of them "
                       "'label: OTHER'")
        if "n_features_to_select" in x:
            raise _err(path, f"{key}.n_features_to_select", "is set by "
                       "selection.max_features")
        _check_keys(path, key, x, selector_params(name) | {"name", "label"})
        selectors.append(SelectorSpec(label=label, name=name, params=x))
    m = _int(path, "selection.max_features", v.get("max_features", 50))
    clf = _classifier(path, "selection.classifier", v.get("classifier", "mlknn"))
    metrics = _metric_names(path, "selection.metrics", v.get("metrics", SELECTION_METRICS))
    return SelectionSpec(selectors=selectors, max_features=m, classifier=clf,
                         metrics=list(metrics))


# --------------------------------------------------------------------------- entry
def parse_config(raw: Any, path: str | os.PathLike[str] = "<pipeline>") -> PipelineConfig:
    """Validate a parsed pipeline mapping; ``path`` names the file in errors and anchors
    relative paths."""
    path = Path(path)
    if not isinstance(raw, dict):
        raise PipelineConfigError(f"{path}: the pipeline must be a YAML mapping, got "
                                  f"{type(raw).__name__}")
    _check_keys(path, "", raw, _TOP_KEYS)
    name = raw.get("name", path.stem)
    if not isinstance(name, str) or not name:
        raise _err(path, "name", f"must be a non-empty string, got {name!r}")
    base = path.parent.resolve()
    env = os.environ.get("DMLFE_DATA")
    if env:
        data_dir = Path(env).resolve()
    else:
        data_dir = Path(_resolve(base, str(raw.get("data_dir", "."))))

    datasets_raw = raw.get("datasets")
    if not isinstance(datasets_raw, list) or not datasets_raw:
        raise _err(path, "datasets", "needs a list of one or more data sets")
    datasets = [_dataset(path, i, d, data_dir) for i, d in enumerate(datasets_raw)]
    seen: set[str] = set()
    for i, d in enumerate(datasets):
        if d.name in seen:
            raise _err(path, f"datasets[{i}].name", f"{d.name!r} is used twice")
        seen.add(d.name)

    defaults = _defaults(path, raw.get("defaults"))
    selection = _selection(path, raw.get("selection"))
    methods_raw = raw.get("methods", [] if selection is not None else None)
    if not isinstance(methods_raw, list) or not (methods_raw or selection):
        raise _err(path, "methods", "needs a list of one or more methods (it may be left out "
                   "when a 'selection' block is given)")
    methods = [_method(path, i, m, defaults) for i, m in enumerate(methods_raw)]
    labels = [m.label for m in methods]
    for i, lab in enumerate(labels):
        if labels.index(lab) != i:
            raise _err(path, f"methods[{i}]", f"label {lab!r} is used twice; give one of them "
                       "'label: OTHER'")

    clf_raw = raw.get("classifiers", ["ridge"])
    if not isinstance(clf_raw, list) or not clf_raw:
        raise _err(path, "classifiers", "needs a list of one or more classifiers")
    classifiers = [_classifier(path, i, c) for i, c in enumerate(clf_raw)]

    metrics = _metric_names(path, "metrics", raw.get("metrics", list(METRICS)))
    select = _mapping(path, "select", raw.get("select") or {})
    _check_keys(path, "select", select, keys_at("select"))
    select_metric = select.get("metric", "micro_f1")
    if select_metric not in METRICS:
        raise _err(path, "select.metric", f"unknown metric {select_metric!r}; choose from "
                   f"{', '.join(METRICS)}")
    work_dir = raw.get("work_dir")
    if work_dir is not None and not isinstance(work_dir, str):
        raise _err(path, "work_dir", f"must be a path, got {work_dir!r}")
    curve = raw.get("d_curve", list(DEFAULT_D_CURVE))
    if not isinstance(curve, list):
        raise _err(path, "d_curve", f"needs a list of integers d (or []), got {curve!r}")
    d_curve = sorted({int(_n_components(path, f"d_curve[{i}]", d, numbers.Integral))
                      for i, d in enumerate(curve)})
    return PipelineConfig(name=name, path=path, raw=raw, work_dir=work_dir, data_dir=data_dir,
                          datasets=datasets, methods=methods, classifiers=classifiers,
                          metrics=list(metrics), select_metric=select_metric, d_curve=d_curve,
                          selection=selection)


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read and validate a pipeline file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"pipeline file {path} not found")
    raw = read_yaml(path, PipelineConfigError, "pipeline file")
    return parse_config(raw, path)
