"""The ``dmlfe`` command line: a thin shell over the library."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import re
import signal
import sys
import threading
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from dask.utils import format_bytes

from dmlfe._version import __version__
from dmlfe.cli_flags import DEBUG, LABELS_SHOWN, add_common_flags, commands
from dmlfe.cluster import (
    client_from_args,
    cluster_words,
    describe_cluster_fault,
    positive_int,
    read_profile,
)
from dmlfe.cluster_profiles import check_profile
from dmlfe.demo import demo_pipeline_path
from dmlfe.embed import (
    input_formats,
    is_store,
    label_columns,
    label_sets,
    model_label_names,
    model_view,
    read_documents,
    store_predictions,
    training_classifier,
)
from dmlfe.errors import DmlfeError, InputError, StoreError
from dmlfe.estimators import MultiLabelProjection, make_estimator
from dmlfe.fit.params import COMMON, SELECTIONS
from dmlfe.ingestion import (
    DEFAULT_CHUNK_ROWS,
    format_options,
    open_append,
    open_ingest,
    parse_split_names,
)
from dmlfe.io.classifier import (
    PREDICT_CLASSIFIERS,
    has_classifier,
    load_classifier,
    save_classifier,
)
from dmlfe.io.embeddings import embedding_obs, write_embeddings
from dmlfe.io.model import check_model_target
from dmlfe.methods.registry import all_methods, method_choices, resolve_method
from dmlfe.metrics import metric_report
from dmlfe.model_io import load_model, text_pipeline
from dmlfe.params import Param, bounds_of, flag_options
from dmlfe.pipeline.cli import add_run_parser, cmd_run
from dmlfe.pipeline.config import CLASSIFIERS, METRICS, ClassifierSpec
from dmlfe.pipeline.runner import make_classifier
from dmlfe.progress import show_progress
from dmlfe.readers.registry import get_reader, reader_names, reader_options
from dmlfe.relation.similarities import similarity_choices
from dmlfe.solvers.dimension import check_n_components
from dmlfe.stats.cache import clean
from dmlfe.store import check_export, export_parquet, import_parquet, open_store
from dmlfe.store.verify import add_record, verify_store
from dmlfe.store.writer import check_store_target
from dmlfe.store.xmc import export_svmlight, export_xmc
from dmlfe.tempfiles import (
    describe_write_fault,
    find_temporaries,
    link_note,
    path_size,
    recover_swaps_under,
    remove_path,
    write_atomically,
)


def _ngram(s: str) -> tuple[int, int]:
    parts = s.replace("-", ",").split(",")
    try:
        lo, hi = (int(parts[0]), int(parts[-1]))
    except ValueError:
        raise argparse.ArgumentTypeError(f"ngram range must look like 1,3 (got {s!r})") from None
    return lo, hi


def _df(s: str) -> float | int:
    try:
        return int(s)
    except ValueError:
        try:
            return float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an int or a float, got {s!r}") from None


def _split_names(s: str) -> dict[str, str]:
    try:
        return parse_split_names(s)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--split-names ")) from None


def _add_ingest_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk-rows", type=int, default=None,
                   help="documents per chunk (default 10000); one chunk's texts may "
                   "hold at most dmlfe.staging.MAX_PART_BYTES (256 Mi) characters")
    v = p.add_argument_group("vectoriser (text formats)")
    v.add_argument("--vectorizer", choices=["tfidf", "hashing"], default=None,
                   help="tfidf: a learned vocabulary (default); hashing: hashed terms, for "
                   "huge vocabularies")
    v.add_argument("--ngram-range", type=_ngram, default=None, metavar="MIN,MAX",
                   help="word n-grams from MIN to MAX words (default 1,1)")
    v.add_argument("--min-df", type=_df, default=None,
                   help="drop terms in fewer documents: an int count or a float fraction "
                   "(default 1)")
    v.add_argument("--max-df", type=_df, default=None,
                   help="drop terms in more documents: an int count or a float fraction "
                   "(default 1.0)")
    v.add_argument("--max-features", type=int, default=None,
                   help="tfidf: keep the N most frequent terms (default all)")
    v.add_argument("--sublinear-tf", action="store_true", default=None,
                   help="term frequency 1 + ln(tf) instead of tf")
    v.add_argument("--norm", choices=["l2", "l1", "none"], default=None,
                   help="row normalisation of the tf-idf rows (default l2)")
    v.add_argument("--n-features", type=int, default=None, help="hashing: number of columns")
    v.add_argument("--fit-split", default=None,
                   help="learn vocabulary and idf on this split only (e.g. train)")
    r = p.add_argument_group("reader options")
    groups = {"reader options": r}
    for param, group in reader_options():  # each reader's flags, from its declaration
        if param.flag is not None:
            if group not in groups:
                groups[group] = p.add_argument_group(group)
            groups[group].add_argument(param.option, **param.flag)
    r.add_argument("--split-names", type=_split_names, default=None, metavar="OLD=NEW,...",
                   help="rename splits, e.g. dev=validation,eval=test. A file's name gives "
                   "its documents' split: train or test as a whole word between - _ . "
                   "(Corel5k-train-sparse.arff: train), else the file's stem")


def _ingest_option_names() -> list[str]:
    """Every option of :func:`dmlfe.ingest`, of any format: a ``dmlfe ingest`` flag's dest
    is its option's name."""
    return sorted(set().union(*(format_options(f) for f in reader_names())))


def _ingest_options(args: argparse.Namespace) -> dict[str, Any]:
    opts = {}
    for opt in _ingest_option_names():
        v = getattr(args, opt, None)
        if v is not None:
            opts[opt] = None if (opt == "norm" and v == "none") else v
    # named here in the flags' terms; the API's own check names the Python options
    misplaced = [f"--{opt.replace('_', '-')}" for opt in opts
                 if opt not in format_options(args.format)]
    if misplaced:
        verb = "does" if len(misplaced) == 1 else "do"
        raise InputError(f"{', '.join(misplaced)} {verb} not apply to --format {args.format}; "
                         "dmlfe ingest --help says which formats each flag goes with")
    return opts


def cmd_ingest(args: argparse.Namespace) -> int:
    spec = get_reader(args.format)
    if spec.needs_source and not args.source:
        raise SystemExit(f"dmlfe ingest: format {args.format!r} needs a SOURCE path")
    for name in spec.required:
        if getattr(args, name, None) in (None, ""):
            raise InputError(f"format {args.format} needs {spec.flag_words(name)}, "
                             f"{spec.option(name).doc.partition(chr(10))[2].strip()}")
    source = args.source if len(args.source) != 1 else args.source[0]
    if args.append is not None:
        return _append(args, source)
    _check_out(args.out, True, "a store (a zarr folder)")  # an existing one: open_ingest
    if args.split is not None:
        raise InputError("--split applies to --append only (an ingest takes the splits from "
                         "the reader's split field, e.g. --split-field)")
    # the input is opened and checked (first batch read, output path checked) before
    # a cluster is started: a bad file costs no cluster start
    with open_ingest(source or None, format=args.format, out=args.out,
                     chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS,
                     overwrite=args.overwrite, progress=not args.quiet,
                     **_ingest_options(args)) as job, client_from_args(args) as client:
        path = job.run(client)
    print(f"wrote store {path}")
    _print_info(path, as_json=False, labels_all=args.labels_all)
    return 0


def _append(args: argparse.Namespace, source: Any) -> int:
    """``dmlfe ingest NEW --append STORE``: the documents appended to the store."""
    for flag, given in (("--overwrite", args.overwrite), ("--chunk-rows", args.chunk_rows)):
        if given:
            raise InputError(f"{flag} does not apply to --append (the store keeps its chunking "
                             "and is never replaced by another)")
    with open_append(args.append, source or None, args.format, split=args.split,
                     progress=not args.quiet, **_ingest_options(args)) as job, \
            client_from_args(args) as client:
        entry = job.run(client)
    start, stop = entry["rows"]
    print(f"appended {stop - start} documents to store {args.append} (rows {start}..{stop - 1})")
    unseen = (entry.get("report") or {}).get("unseen_terms")
    if unseen and unseen["distinct"]:
        top = ", ".join(t for t, _ in unseen["most_frequent"][:10])
        print(f"{unseen['distinct']} terms ({unseen['occurrences']} occurrences) are not in the "
              f"store's vocabulary and got no column; the most frequent: {top}")
    _print_info(args.append, as_json=False, labels_all=args.labels_all)
    return 0


def _print_info(path: str | Path, as_json: bool, labels_all: bool = False) -> None:
    info = open_store(path).info()
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    print(format_info(info, labels_all=labels_all))


def format_info(info: dict, labels_all: bool = False) -> str:
    """Human-readable summary of ``Store.info()``: the LABELS_SHOWN most frequent labels
    unless ``labels_all`` (a store may have thousands: delicious has 983)."""
    lines = []
    for key, value in info.items():
        if key == "history":
            lines.append(f"history ({len(value)}):")
            lines += [f"  {history_line(e)}" for e in value]
            continue
        if isinstance(value, dict) and key in ("labels", "provenance", "report", "splits"):
            items = list(value.items())
            more = 0
            if key == "labels" and not labels_all and len(items) > LABELS_SHOWN:
                items = sorted(items, key=lambda kv: -kv[1])[:LABELS_SHOWN]
                more = len(value) - LABELS_SHOWN
            lines.append(f"{key}:" if not more else
                         f"{key} ({len(value)}; the {LABELS_SHOWN} most frequent):")
            for name, v in items:
                v = json.dumps(v, default=str) if isinstance(v, dict | list) else v
                lines.append(f"  {name}: {v}")
            if more:
                lines.append(f"  ... and {more} more (--labels-all lists every label)")
        elif isinstance(value, dict):
            lines.append(f"{key}: {json.dumps(value, default=str)}")
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def history_line(entry: dict) -> str:
    """One line of ``dmlfe info``'s history: what was added, from where, when."""
    start, stop = entry["rows"]
    src = entry.get("source") or {}
    paths = ", ".join(src.get("source") or []) or "(generated)"
    split = f", split {src['split']}" if src.get("split") else ""
    fp = entry.get("fingerprint") or {}
    return (f"{entry.get('kind', 'ingest')} rows {start}..{stop - 1} ({stop - start} "
            f"documents) from {src.get('format')} {paths}{split} at {entry.get('time')}; "
            f"store uuid {fp.get('uuid')}")


def cmd_info(args: argparse.Namespace) -> int:
    _print_info(args.store, args.json, labels_all=args.labels_all)
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """Check every array and chunk of a store: one line per problem, exit 2 if any."""
    report = add_record(args.store) if args.record else verify_store(args.store)
    for problem in report.problems:
        print(f"{report.path}: {problem}")
    for note in report.notes:
        print(f"note: {note}")
    if not report.ok:
        raise StoreError(f"store {report.path} is damaged: {len(report.problems)} problem(s) "
                         "(listed on standard output); re-ingest it or restore a copy")
    if report.recorded and not args.record:
        print(f"{report.path}: intact: {report.n_arrays} arrays, {report.n_chunks} chunks "
              "(sizes and CRC-32s match the record)")
        return 0
    unchecked = (f"; {report.n_unchecked} chunk(s) without a file could not be checked (see "
                 "the notes)" if report.n_unchecked else "")
    print(f"{report.path}: no damage found: {report.n_arrays} arrays, {report.n_chunks} "
          f"chunks decoded and consistent{unchecked}"
          + ("; checksums recorded" if report.recorded else ""))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``dmlfe run`` on the demo pipeline (pipelines/demo.yaml)."""
    args.pipeline = str(demo_pipeline_path())
    return cmd_run(args)


def cmd_export(args: argparse.Namespace) -> int:
    _check_out(args.out, True, {"parquet": "a Parquet file", "xmc": "an XMC file",
                                "svmlight": "an svmlight file"}[args.format])
    if args.format == "parquet":
        if args.label_map or args.feature_map:
            raise InputError("--label-map and --feature-map go with --format xmc or svmlight; "
                             "a Parquet export keeps the names itself")
        export_parquet(args.store, args.out, overwrite=args.overwrite)
    else:
        export = export_xmc if args.format == "xmc" else export_svmlight
        export(args.store, args.out, label_map=args.label_map, feature_map=args.feature_map,
               overwrite=args.overwrite)
    print(f"wrote {args.out}")
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove a store's statistics cache and the temporaries killed processes left, or
    the left-over temporaries anywhere under a folder that is not a store."""
    path = Path(args.store)
    verb = "would remove" if args.dry_run else "removed"
    if path.is_dir() and not path.is_symlink() and not (path / "zarr.json").exists():
        return _clean_folder(path, args.dry_run)
    found = clean(path, dry_run=True)
    sizes = {p: path_size(p) for p in found}
    removed = found if args.dry_run else clean(path)
    for p in removed:
        print(f"{verb} {p} ({format_bytes(sizes.get(p, 0))})")
    total = sum(sizes.get(p, 0) for p in removed)
    print(f"{len(removed)} {'to remove' if args.dry_run else 'removed'} "
          f"({format_bytes(total)}); the store itself is untouched")
    return 0


def _clean_folder(folder: Path, dry_run: bool) -> int:
    """``dmlfe clean FOLDER``: the stale temporaries under ``folder``, at any depth."""
    verb = "would remove" if dry_run else "removed"
    if not dry_run:
        for p in recover_swaps_under(folder):  # appends killed half-way through their swap
            print(f"recovered {p}: an append killed while it replaced the store beside it "
                  "(dmlfe.tempfiles.recover_swap)")
    found = find_temporaries(folder)
    stale = [t for t in found if t.stale]
    for t in found:
        if not t.stale:
            print(f"kept {t.path} ({format_bytes(t.size)}): process {t.pid} is still "
                  "running and writes it")
            continue
        if not dry_run:
            remove_path(t.path)
        print(f"{verb} {t.path} ({format_bytes(t.size)})")
    kept = len(found) - len(stale)
    print(f"{len(stale)} left-over temporaries {'to remove' if dry_run else 'removed'} "
          f"under {folder} ({format_bytes(sum(t.size for t in stale))})"
          + (f"; {kept} in use kept" if kept else ""))
    return 0


def cmd_cluster_check(args: argparse.Namespace) -> int:
    """Validate a cluster profile and show what it would start; starts nothing."""
    profile = read_profile(args.profile)
    print(check_profile(profile))
    print(f"{profile.path}: a valid {profile.kind} profile (nothing was started or "
          "submitted)")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    # a file that is not a dmlfe export, or an existing output, fails before a cluster
    # is started
    _check_out(args.out, args.overwrite, "a store (a zarr folder)")
    check_export(args.source)
    check_store_target(Path(args.out).absolute(), args.overwrite)  # with --overwrite too
    with client_from_args(args) as client:
        path = import_parquet(args.source, args.out, chunk_rows=args.chunk_rows, client=client,
                              overwrite=args.overwrite)
    print(f"wrote store {path}")
    return 0


#: Relation-route estimator parameter -> its ``dmlfe fit`` flag.
_RELATION_FLAGS = {
    "route": "--route", "n_prototypes": "--prototypes",
    "prototype_selection": "--prototype-selection", "similarity": "--similarity",
    "tau": "--tau", "n_neighbors": "--n-neighbors", "random_state": "--random-state",
    "knn_search": "--knn-search",
}


def method_flags() -> dict[str, tuple[Param, list[str]]]:
    """Method parameter -> (its declaration, the methods that take it), for every
    parameter of a registered method that declares a command-line flag."""
    out: dict[str, tuple[Param, list[str]]] = {}
    for spec in all_methods().values():
        for p in spec.parameters:
            if p.flag is not None:
                out.setdefault(p.name, (p, []))[1].append(spec.name)
    return out


def _common(name: str) -> Param:
    """The common estimator parameter ``name`` (:data:`dmlfe.fit.params.COMMON`)."""
    return next(p for p in COMMON if p.name == name)


def _choices(name: str) -> list[Any]:
    """``dmlfe fit``'s choices for the common parameter ``name``, read from its
    constraint."""
    return flag_options(_common(name))["choices"]


def _variant_families() -> list[str]:
    return list(dict.fromkeys(s.family for s in all_methods().values() if s.variant))


def _n_components(kind: type) -> Any:
    """argparse type of --dim (int) and --threshold (float): the one n_components rule
    (:func:`dmlfe.solvers.dimension.check_n_components`), told in the flag's terms."""
    expected = ("a number of components, a whole number of 1 or more" if kind is int else
                "a share of the eigenvalue sum, a number above 0 and at most 1 (e.g. 0.999)")

    def parse(s: str) -> int | float:
        try:
            return check_n_components(kind(s))
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {expected}; got {s!r}") from None

    return parse


def _seed(s: str) -> int:
    """argparse type of --random-state: the seeds ``random_state``'s constraint takes."""
    check = _common("random_state").check
    try:
        return check("random_state", int(s))
    except (TypeError, ValueError):
        lo, hi = bounds_of(check)
        raise argparse.ArgumentTypeError(f"expected a seed from {lo} to {hi}, got {s!r}") from None


def _fit_estimator(args: argparse.Namespace) -> MultiLabelProjection:
    """The estimator ``dmlfe fit`` asked for; ValueError names a bad method or option."""
    method = args.method.lower().replace("-", "_")
    choices = method_choices()
    if method not in choices:
        raise ValueError(f"unknown method {args.method!r}; choose one of {', '.join(choices)}")
    if args.variant is not None:
        families = _variant_families()
        spec = resolve_method(method)
        if spec.variant is None:
            others = f" (or {', '.join(families[1:])})" if len(families) > 1 else ""
            raise ValueError(f"--variant applies to --method {families[0]} only{others}, not "
                             f"{args.method}")
        if method != spec.family and spec.variant != args.variant:
            raise ValueError(f"--variant {args.variant} contradicts --method {args.method}")
        method = spec.family
    kw: dict[str, Any] = {"solver": args.solver, "split": args.split,
                          "progress": not args.quiet}
    if args.variant is not None:
        kw["variant"] = args.variant
    if args.dim is not None:
        kw["n_components"] = args.dim
    elif args.threshold is not None:
        kw["n_components"] = args.threshold
    if args.max_dense_features is not None:
        kw["max_dense_features"] = args.max_dense_features
    for name in ("max_components", "threshold_memory", "max_dual_samples", "max_gather_bytes",
                 "n_oversamples", "n_iter", "tol", "max_passes", "components_dtype"):
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    for param in _RELATION_FLAGS:
        value = getattr(args, param, None)
        if value is not None:
            kw[param] = value
    if kw.get("n_prototypes") is not None and "prototype_selection" not in kw:
        kw["prototype_selection"] = "random"
    est = make_estimator(method, **kw)
    if "n_components" not in kw and isinstance(est.n_components, int):
        # a method whose d no threshold can choose (OLPP minimises: no positive
        # eigenvalue to take a share of) has a fixed default, which is no rule for data
        raise ValueError(f"--method {args.method} needs --dim N: it minimises its objective, "
                         "whose eigenvalues are not positive, so --threshold cannot choose "
                         "d; compare it with other methods at the same d, as the MOPE paper "
                         "does")
    accepted = est._spec().params
    for name, (param, _) in method_flags().items():
        value = getattr(args, name)
        if value is None:
            continue
        if name not in accepted:
            opts = ", ".join(p.option for p in est._spec().parameters if p.flag is not None)
            raise ValueError(f"{param.option} does not apply to method {est._method}; "
                             + (f"its options: {opts}" if opts else "it takes no method options"))
        est.set_params(**{name: value})
    return est


def _check_out(out: str, overwrite: bool, binary: str | None = None) -> None:
    """Refuse an existing ``out`` (a symbolic link too, even a dangling or looping one)
    without ``--overwrite``, and ``-`` (standard output) for the ``binary`` output named
    (a model, a store, embeddings); a text output (None) takes ``-``."""
    if out == STDOUT:
        if binary is None:
            return
        raise InputError(f"--out -: {binary} cannot be written to standard output; give a "
                         "path")
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"{out} exists{link_note(out)}; pass --overwrite to replace it")


#: ``--out -``: standard output, for outputs that are text (JSON Lines, JSON).
STDOUT = "-"


def _write_text(args: argparse.Namespace, text: str) -> str:
    """Write ``text`` to ``args.out`` (atomically), or to standard output for ``-``;
    returns where it went, for the summary line. Standard output is the one the command
    started with, so that ``--quiet`` silences the summary, not the data."""
    if args.out == STDOUT:
        stream = getattr(args, "stdout", None) or sys.stdout
        stream.write(text)
        stream.flush()
        return "standard output"
    write_atomically(args.out, lambda f: f.write(text.encode("utf-8")))
    return str(Path(args.out).resolve())


def _summary(args: argparse.Namespace) -> Any:
    """Where a command's summary line goes: stderr when its data go to stdout."""
    return sys.stderr if getattr(args, "out", None) == STDOUT else sys.stdout


def _split_text(split: str | list[str]) -> str:
    return split if isinstance(split, str) else ",".join(split)


def _unrecorded_warning(store: Any) -> None:
    """A warning where ``store`` has no integrity record, whose damage may pass unseen:
    given once the command has succeeded, so that a failure stays one line."""
    if not store.check_chunk_files():
        warnings.warn(
            f"store {store.path} has no integrity record (it was written before dmlfe "
            "recorded checksums): damage such as a deleted label chunk cannot be detected "
            "(it reads as documents without labels); run dmlfe verify "
            f"{store.path} --record on an intact copy to add one", stacklevel=2)


def cmd_fit(args: argparse.Namespace) -> int:
    # bad methods or options, a missing store, an unknown split or an existing output
    # fail here, before a cluster is started
    est = _fit_estimator(args)
    store = open_store(args.store)
    if args.split is not None:
        store.subset(args.split)
    _check_out(args.out, args.overwrite, "a model (a folder)")
    # with --overwrite too: a path that is not a model is refused now, not after the fit
    check_model_target(args.out, args.overwrite)
    clf = None
    with client_from_args(args) as client:
        est.set_params(client=client)
        try:
            est.fit(args.store)
        finally:
            est.set_params(client=None)
        if args.classifier is not None:
            clf = training_classifier(est, _classifier(args.classifier))
    out = est.save(args.out, overwrite=args.overwrite)
    if clf is not None:
        save_classifier(clf, out, name=args.classifier)
    split = f" (split {_split_text(args.split)})" if args.split else ""
    how = ("fixed" if isinstance(est.n_components, int)
           else f"eigenvalue-sum threshold {est.n_components}")
    top = ", ".join(f"{w:.6g}" for w in est.eigenvalues_[:10])
    more = f" ... ({est.eigenvalues_.size} computed)" if est.eigenvalues_.size > 10 else ""
    print(f"method: {est._method} ({type(est).__name__}"
          + "".join(f", {k}={v}" for k, v in est.method_params_.items()
                    if not isinstance(v, list)) + ")")
    print(f"trained on: {args.store}{split}: {est.n_samples_} documents x "
          f"{est.n_features_in_} features")
    print(f"d: {est.n_components_} ({how})")
    print(f"route: {est.route_} ({est.route_reason_})")
    if est.relation_ is not None:
        rel = est.relation_
        tau = "" if rel["tau"] is None else f", tau={rel['tau']:.6g}"
        print(f"relation features: p = {rel['n_prototypes']} prototypes "
              f"({rel['prototype_selection']}), similarity {rel['similarity']}{tau}")
    print(f"solver: {est.solver_}")
    print(f"passes over the data: {est.n_passes_}")
    if est.regularization_:
        print(f"constraint regularised: + {est.regularization_:.3g} * I")
    print(f"top eigenvalues: {top}{more}")
    if clf is not None:
        print(f"classifier: {args.classifier} on the training embeddings, saved with the model")
    print(f"model: {Path(out).resolve()}")
    _unrecorded_warning(store)
    return 0


def cmd_transform(args: argparse.Namespace) -> int:
    model = load_model(args.model)
    store = model_view(model, args.store, args.split)
    _check_out(args.out, args.overwrite, "embeddings (a zarr or parquet folder)")
    attrs = {"model": str(Path(args.model).resolve()), "method": model._method,
             "store": str(store.path), "split": args.split}
    with client_from_args(args) as client:
        Z = model.transform(store.X)
        out = write_embeddings(Z, args.out, ids=store.ids, format=args.format, client=client,
                               overwrite=args.overwrite, attrs=attrs, **embedding_obs(model, store))
    print(f"wrote {args.format} embeddings {Path(out).resolve()}: {store.n_docs} documents x "
          f"{model.n_components_} components ({model._method})")
    _unrecorded_warning(store)
    return 0


def _documents(args: argparse.Namespace, binary: str | None = None
               ) -> tuple[Any, list[str], list[str]]:
    """The model ``args.model`` and the documents of ``args.input``."""
    model = load_model(args.model)
    _check_out(args.out, args.overwrite, binary)
    ids, texts = read_documents(args.input, args.input_format, text_field=args.text_field,
                                id_field=args.id_field)
    if not texts:
        raise InputError(f"{args.input} holds no documents")
    return model, ids, texts


def cmd_embed(args: argparse.Namespace) -> int:
    model, ids, texts = _documents(args, "embeddings (a zarr or parquet folder)")
    Z = text_pipeline(model, store=args.store).transform(texts)
    # the documents are in memory already: a cluster only where one is asked for
    asked = args.scheduler or args.cluster or args.workers
    with client_from_args(args) if asked else contextlib.nullcontext() as client:
        out = write_embeddings(Z, args.out, ids=np.asarray(ids, dtype=object),
                               format=args.format, overwrite=args.overwrite, client=client,
                               attrs={"model": str(Path(args.model).resolve()),
                                      "method": model._method, "input": str(args.input)},
                               **embedding_obs(model))
    print(f"wrote {args.format} embeddings {Path(out).resolve()}: {len(texts)} documents x "
          f"{model.n_components_} components ({model._method})")
    return 0


def _classifier(name: str) -> Any:
    return make_classifier(ClassifierSpec(name, name, {}))


def _saved_or_fitted_classifier(args: argparse.Namespace, model: Any) -> Any:
    """The classifier ``dmlfe predict`` uses: the one saved with the model unless
    ``--classifier`` names another, else one fitted now on the training embeddings."""
    saved = load_classifier(args.model) if has_classifier(args.model) else None
    if saved is not None and args.classifier in (None, saved[0]):
        args.classifier, clf = saved
        return clf
    args.classifier = args.classifier or "ridge"
    if saved is None:
        print(f"note: {args.model} holds no saved classifier: fitting {args.classifier} on "
              "the training store's embeddings now (save one with dmlfe fit --classifier)",
              file=sys.stderr)
    with client_from_args(args):
        return training_classifier(model, _classifier(args.classifier))


def cmd_predict(args: argparse.Namespace) -> int:
    if is_store(args.input):
        return _predict_store(args)
    if args.split is not None:
        raise InputError(f"--split applies to a store; {args.input} is a documents file "
                         "(every document in it is predicted)")
    model, ids, texts = _documents(args)
    clf = _saved_or_fitted_classifier(args, model)
    pipe = text_pipeline(model, clf, store=args.store)
    records = label_sets(np.asarray(pipe.predict(texts)), np.asarray(pipe.predict_proba(texts)),
                         model_label_names(model), ids)
    where = _write_text(args, "".join(json.dumps(r) + "\n" for r in records))
    print(f"wrote label sets and scores of {len(records)} documents to {where} "
          f"({model._method} + {args.classifier})", file=_summary(args))
    return 0


def _predict_store(args: argparse.Namespace) -> int:
    """``dmlfe predict MODEL STORE [--split S]``: the stored features, not raw text."""
    model = load_model(args.model)
    names = model_label_names(model)
    view = model_view(model, args.input, args.split)
    _check_out(args.out, args.overwrite)
    clf = _saved_or_fitted_classifier(args, model)
    with client_from_args(args):
        ids, P, S, _ = store_predictions(model, clf, view)
    records = label_sets(P, S, names, [str(i) for i in ids])
    where = _write_text(args, "".join(json.dumps(r) + "\n" for r in records))
    split = f" (split {_split_text(args.split)})" if args.split else ""
    print(f"wrote label sets and scores of {len(records)} documents of {view.path}{split} to "
          f"{where} ({model._method} + {args.classifier})", file=_summary(args))
    return 0


def format_metrics(report: dict[str, float | int]) -> str:
    """The metrics table ``dmlfe evaluate`` prints: one line per measure, with whether
    lower or higher is better, then the counts behind them."""
    width = max(len(m) for m in METRICS)
    lines = [f"{'metric':<{width}}  {'value':>8}  better"]
    for name, lower in METRICS.items():
        if name in report:
            lines.append(f"{name:<{width}}  {report[name]:>8.4f}  {'lower' if lower else 'higher'}")
    counts = {"n_documents": "documents", "n_labels": "labels",
              "n_ranking_skipped": "documents with no or every label relevant (left out of "
              "the ranking measures)",
              "n_auc_labels_skipped": "labels without positive or negative documents (left "
              "out of macro_auc)"}
    lines += [f"{report[k]} {what}" for k, what in counts.items() if k in report]
    return "\n".join(lines)


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Score a model's saved classifier on a store's documents: the 13 measures."""
    model = load_model(args.model)
    if not has_classifier(args.model):
        raise InputError(f"{args.model} holds no classifier to evaluate; refit it with dmlfe "
                         f"fit ... --classifier NAME ({', '.join(PREDICT_CLASSIFIERS)})")
    name, clf = load_classifier(args.model)
    view = model_view(model, args.store, args.split)
    label_columns(model, view)  # a label mismatch fails before a cluster is started
    if args.json is not None and args.json != STDOUT:
        _check_out(args.json, args.overwrite)
    with client_from_args(args):
        _, P, S, Y = store_predictions(model, clf, view, labels=True)
    report = metric_report(Y, P, S)
    split = _split_text(args.split) if args.split else None
    if args.json is not None:
        doc = {"model": str(Path(args.model).resolve()), "method": model._method,
               "classifier": name, "store": str(view.path), "split": split,
               "metrics": report}
        args.out = args.json
        where = _write_text(args, json.dumps(doc, indent=2) + "\n")
        if args.json != STDOUT:
            print(f"wrote metrics to {where}", file=sys.stderr)
    if args.json != STDOUT:
        print(f"{model._method} + {name} on {view.path}"
              + (f" (split {split})" if split else "") + ":")
        print(format_metrics(report))
    return 0


def _add_document_flags(p: argparse.ArgumentParser, store_input: bool = False) -> None:
    p.add_argument("model", help="a model directory written by dmlfe fit")
    p.add_argument("input", help="the raw documents: a .jsonl[.gz] file, a .parquet file or "
                   "folder, or a text file with one document per line; - reads lines from "
                   "standard input" + ("; or a store (a folder written by dmlfe ingest)"
                                       if store_input else ""))
    p.add_argument("--input-format", choices=input_formats(), default=None,
                   help="how to read INPUT (default: from its name; standard input is text)")
    p.add_argument("--text-field", default="text", help="jsonl/parquet: the text field "
                   "(default text)")
    p.add_argument("--id-field", default=None, help="jsonl/parquet: the document id field "
                   "(default: the document numbers)")
    p.add_argument("--store", default=None, help="the store whose vectoriser to use "
                   "(default: the model's training store)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dmlfe", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"dmlfe {__version__}")
    p.add_argument("--debug", action="store_true", help=DEBUG.flag["help"])
    sub = p.add_subparsers(dest="command", required=True)

    pi = sub.add_parser("ingest", help="read a corpus into a chunked sparse store, or "
                        "append documents to one",
                        epilog="example: dmlfe ingest reuters21578.tar.gz --format "
                        "reuters21578 --modapte --top-n 10 --out r10.zarr; dmlfe ingest "
                        "new.jsonl --format jsonl --append r10.zarr --split test")
    pi.add_argument("source", nargs="*", help="corpus file(s); none for --format synthetic")
    pi.add_argument("--format", required=True, choices=reader_names(),
                    help="the corpus format")
    target = pi.add_mutually_exclusive_group(required=True)
    target.add_argument("--out", help="the store to write (a directory)")
    target.add_argument("--append", metavar="STORE", default=None,
                        help="append the documents to this existing store instead, vectorised "
                        "with its own vectoriser (no vectoriser flags); atomic")
    pi.add_argument("--split", default=None,
                    help="with --append: the split of every new document (e.g. test); "
                    "default: the reader's split field")
    _add_ingest_flags(pi)
    pi.set_defaults(func=cmd_ingest)

    pn = sub.add_parser("info", help="describe a store",
                        epilog="example: dmlfe info r10.zarr --json")
    pn.add_argument("store", help="the store (a folder written by dmlfe ingest)")
    pn.add_argument("--json", action="store_true", help="machine-readable output")
    pn.set_defaults(func=cmd_info)

    pv = sub.add_parser(
        "verify", help="check every array and chunk of a store against its checksums",
        description="Check a store's every array (its zarr.json against the shape, type and "
        "chunking it was written with) and every chunk (present, and its size and CRC-32 "
        "against the record written at ingest). Prints one line per problem; exit 0 when "
        "the store is intact, 2 when it is damaged. A store written before dmlfe recorded "
        "checksums is decoded and checked for consistency instead.",
        epilog="example: dmlfe verify r10.zarr")
    pv.add_argument("store", help="the store (a folder written by dmlfe ingest)")
    pv.add_argument("--record", action="store_true",
                    help="for a store without checksums: check it, then record them (the "
                    "store's data and identity are unchanged)")
    pv.set_defaults(func=cmd_verify)

    pd = sub.add_parser("demo", help="the main job: the demo pipeline on a synthetic corpus "
                        "(= dmlfe run pipelines/demo.yaml)",
                        epilog="example: dmlfe demo --work-dir /tmp/demo")
    pd.add_argument("--work-dir", default=None, help="cache and report folder "
                    "(default dmlfe-work/demo)")
    pd.add_argument("--fresh", action="store_true", help="run every stage again")
    pd.set_defaults(func=cmd_demo)

    add_run_parser(sub)

    pe = sub.add_parser("export", help="export a store to Parquet (one row per document), "
                        "or to the XMC or svmlight text format",
                        epilog="example: dmlfe export r10.zarr --out r10.parquet")
    pe.add_argument("store", help="the store to export")
    pe.add_argument("--out", required=True, help="the file to write")
    pe.add_argument("--format", choices=["parquet", "xmc", "svmlight"], default="parquet",
                    help="parquet (default; dmlfe import reads it back), xmc (header "
                    "'n_docs n_features n_labels', zero-based) or svmlight (one-based "
                    "features)")
    pe.add_argument("--label-map", default=None, metavar="FILE",
                    help="xmc/svmlight: also write the label names there, one a line")
    pe.add_argument("--feature-map", default=None, metavar="FILE",
                    help="xmc/svmlight: also write the feature names there, one a line")
    pe.set_defaults(func=cmd_export)

    pc = sub.add_parser("clean", help="remove a store's statistics cache and leftovers of "
                        "interrupted runs", description="Remove STORE.stats/ (statistics "
                        "cached beside the store) and the temporary files or folders that "
                        "killed dmlfe processes left beside the store. The store is kept. "
                        "Given a folder that is not a store, remove the temporaries that "
                        "killed dmlfe processes left anywhere under it (.NAME.tmp-PID-HEX); "
                        "caches and results are kept. A temporary whose process still "
                        "runs on this host is never removed: run it on the host that ran "
                        "the writers. Each path is printed with its size.",
                        epilog="example: dmlfe clean corpus.zarr   (or a folder: dmlfe clean "
                        "runs/ --dry-run)")
    pc.add_argument("store", metavar="PATH", help="the store (it need not exist any more), or "
                    "a folder to search for left-over temporaries")
    pc.add_argument("--dry-run", action="store_true",
                    help="remove nothing; print what would be removed")
    pc.set_defaults(func=cmd_clean)

    pm = sub.add_parser("import", help="import a Parquet export into a store",
                        epilog="example: dmlfe import r10.parquet --out r10.zarr")
    pm.add_argument("source", help="the Parquet file written by dmlfe export")
    pm.add_argument("--out", required=True, help="the store to write (a directory)")
    pm.add_argument("--chunk-rows", type=int, default=10_000,
                    help="documents per chunk (default 10000); one chunk's texts may "
                   "hold at most dmlfe.staging.MAX_PART_BYTES (256 Mi) characters")
    pm.set_defaults(func=cmd_import)

    pk = sub.add_parser("cluster", help="cluster profiles: check one without starting it",
                        epilog="example: dmlfe cluster check slurm")
    kinds = pk.add_subparsers(dest="cluster_command", required=True,
                              help="check: validate a profile and show what it would start")
    pkc = kinds.add_parser(
        "check", help="validate a cluster profile without starting anything",
        description="Validate a cluster profile and print what it would start, without "
        "starting, submitting or contacting anything: the LocalCluster options (local), "
        "the address (scheduler), the hosts and the commands run over SSH (ssh), the job "
        "script each batch job would be submitted with (slurm, pbs), the DaskCluster "
        "resource (kubernetes). Exit 0 when valid; otherwise one line naming the profile "
        "file and the field.",
        epilog="example: dmlfe cluster check slurm   (or a path: dmlfe cluster check "
        "my-site.yaml)")
    pkc.add_argument("profile", help="a profile name in cluster_configs/ or a .yaml path")
    pkc.set_defaults(func=cmd_cluster_check)

    pf = sub.add_parser("fit", help="learn a projection from a store and save the model",
                        epilog="example: dmlfe fit r10.zarr --method mddm_f --dim 9 --split "
                        "train --out mddm-model")
    pf.add_argument("store", help="the training store")
    pf.add_argument("--method", required=True, metavar="NAME",
                    help=f"one of {', '.join(method_choices())} (a family name such as mddm "
                    "= its first variant)")
    d = pf.add_mutually_exclusive_group()
    d.add_argument("--dim", type=_n_components(int), default=None, help="number of components d")
    d.add_argument("--threshold", type=_n_components(float), default=None,
                   help="smallest d whose eigenvalues hold this share of the total "
                   "(default 0.999)")
    mo = pf.add_argument_group("method options (default: the method's own)")
    for name, (param, methods) in method_flags().items():
        options = {k: v for k, v in flag_options(param).items() if k != "help"}
        text = ", ".join(methods) + (f": {param.flag['help']}" if "help" in param.flag else "")
        mo.add_argument(param.option, dest=name, default=None, help=text, **options)
    families = _variant_families()
    variants = list(dict.fromkeys(s.variant for s in all_methods().values() if s.variant))
    mo.add_argument("--variant", choices=variants, default=None, help=", ".join(families))
    ro = pf.add_argument_group(
        "route (relation = similarities to prototype documents, a p x p problem at any D)")
    ro.add_argument("--route", choices=_choices("route"), default=None,
                    help="default: auto (kmddm: relation); above --max-dense-features auto "
                    "picks dual (exact, through the n x n Gram) when n <= "
                    "--max-dual-samples, else matrix-free (PCA, LSI, MVMD) or relation")
    ro.add_argument("--prototypes", dest="n_prototypes", type=positive_int, default=None,
                    help="number of prototypes p (default: every training document)")
    # the Python parameter also takes row positions, which the flag does not
    ro.add_argument("--prototype-selection", choices=list(SELECTIONS), default=None,
                    help="how prototypes are chosen (default all; random if --prototypes "
                    "is given)")
    ro.add_argument("--similarity", default=None,
                    choices=similarity_choices("relation", aliases=True),
                    help="relation similarity (default linear; kmddm: gaussian)")
    ro.add_argument("--tau", type=float, default=None,
                    help="gaussian / inverse_normalized_distance width (gaussian default: "
                    "median heuristic)")
    ro.add_argument("--n-neighbors", type=positive_int, default=None,
                    help="local_scaling: K-th nearest neighbour (default 7)")
    ro.add_argument("--knn-search", choices=_choices("knn_search"), default=None,
                    help="graph methods: exact or approximate (NN-descent, needs dmlfe[ann]) "
                    "K-NN search (default auto: exact up to 100,000 documents)")
    lo, hi = bounds_of(_common("random_state").check)
    ro.add_argument("--random-state", type=_seed, default=None,
                    help=f"seed of prototype selection and randomized solvers, {lo} to {hi} "
                    "(default 0)")
    pf.add_argument("--solver", choices=_choices("solver"), default="auto",
                    help="eigensolver (default auto: dense when D is small "
                    "enough, else matrix-free)")
    pf.add_argument("--max-dense-features", type=positive_int, default=None,
                    help="largest D for which a D x D matrix is formed (default 20000)")
    pf.add_argument("--max-components", type=positive_int, default=None,
                    help="a threshold: most eigenpairs computed (default: as many as it "
                    "needs, within --threshold-memory)")
    pf.add_argument("--threshold-memory", type=positive_int, default=None,
                    help="a threshold on the dual, n-space or matrix-free route: bytes of "
                    "driver memory its eigenpairs may take (default 2**32)")
    pf.add_argument("--max-dual-samples", type=positive_int, default=None,
                    help="largest n for the dual route (an n x n Gram; default 12000)")
    pf.add_argument("--max-gather-bytes", type=int, default=None,
                    help="dual route, and relation route with a dense p x p solve, on a "
                         "store: read X to the driver when its sparse arrays are at most "
                         "this size and the cluster has no more threads than the driver "
                         "(default 2**30; 0: never)")
    pf.add_argument("--n-oversamples", type=int, default=None,
                    help="matrix-free solver: extra block columns (default 10)")
    pf.add_argument("--n-iter", type=positive_int, default=None,
                    help="matrix-free solver: a fixed number of passes (default: until --tol)")
    pf.add_argument("--tol", type=float, default=None,
                    help="matrix-free solver: relative residual to stop at (default 1e-5)")
    pf.add_argument("--max-passes", type=positive_int, default=None,
                    help="matrix-free solver: most passes (default 30)")
    pf.add_argument("--components-dtype", choices=_choices("components_dtype"), default=None,
                    help="storage of the saved components (d x D; default float64: 0.8 GB "
                    "per 100 components at D = 2^20; float32: half that, and float32 "
                    "embeddings). The solve is float64 either way")
    pf.add_argument("--out", required=True, help="the model directory to write")
    pf.add_argument("--classifier", choices=PREDICT_CLASSIFIERS, default=None,
                    help="also fit this classifier on the training embeddings and save it "
                    "with the model, for dmlfe predict (default: none)")
    pf.set_defaults(func=cmd_fit)

    pt = sub.add_parser("transform", help="project a store's documents with a saved model",
                        epilog="example: dmlfe transform mddm-model r10.zarr --split test "
                        "--out r10-test-emb --format parquet")
    pt.add_argument("model", help="a model directory written by dmlfe fit")
    pt.add_argument("store", help="the store whose documents to project")
    pt.add_argument("--out", required=True, help="the embeddings to write (a directory)")
    pt.add_argument("--format", choices=["zarr", "parquet"], default="zarr",
                    help="embeddings format (default zarr)")
    pt.set_defaults(func=cmd_transform)

    pb = sub.add_parser(
        "embed", help="embed raw documents with a saved model",
        description="Vectorise raw documents as the model's training store vectorised its "
        "own (same vocabulary or hashing, idf, tokeniser, n-grams) and project them. The "
        "documents are read into memory and embedded in this process; the embeddings are "
        "written on a cluster only when --scheduler, --cluster or --workers is given.",
        epilog="example: dmlfe embed model/ new.jsonl --out new-emb --format parquet")
    _add_document_flags(pb)
    pb.add_argument("--out", required=True, help="the embeddings to write (a directory)")
    pb.add_argument("--format", choices=["zarr", "parquet"], default="zarr",
                    help="embeddings format (default zarr)")
    pb.set_defaults(func=cmd_embed)

    pp = sub.add_parser(
        "predict", help="predict the label sets of raw documents or of a store's documents",
        description="Classify documents with a classifier fitted on the model's embeddings "
        "of its training documents: the one saved with the model (dmlfe fit --classifier), "
        "else one fitted now on the training store and split the model records. INPUT is "
        "raw documents (embedded as dmlfe embed does) or a store (its stored features; "
        "--split picks its documents). Writes JSON Lines: one record per document with its "
        "id, the predicted label names and every label's score (predict_proba).",
        epilog="example: dmlfe predict model/ corpus.zarr --split test --out preds.jsonl   "
        "(raw text: dmlfe predict model/ new.txt --out - --classifier ridge)")
    _add_document_flags(pp, store_input=True)
    pp.add_argument("--out", required=True,
                    help="the JSON Lines file to write; - writes to standard output")
    pp.add_argument("--classifier", choices=list(CLASSIFIERS), default=None,
                    help="classifier on the embeddings (default: the one saved with the model "
                    "by dmlfe fit --classifier, else ridge fitted now)")
    pp.set_defaults(func=cmd_predict)

    pa = sub.add_parser(
        "evaluate", help="score a model and its saved classifier on a store's documents",
        description="Project a store's documents with a saved model, classify them with the "
        "classifier saved with it (dmlfe fit --classifier) and score the predictions "
        "against the store's labels (matched by name) with the papers' 13 measures: "
        "hamming_loss, example_accuracy/precision/recall/f1, subset_accuracy, micro_f1, "
        "macro_f1 (label sets) and ranking_loss, one_error, coverage, average_precision, "
        "macro_auc (scores). Prints a table; --json writes the measures too.",
        epilog="example: dmlfe evaluate model/ corpus.zarr --split test --json metrics.json")
    pa.add_argument("model", help="a model directory written by dmlfe fit --classifier")
    pa.add_argument("store", help="the store whose documents to score")
    pa.add_argument("--json", default=None, metavar="PATH",
                    help="also write the measures as JSON to PATH; - writes them to standard "
                    "output instead of the table")
    pa.set_defaults(func=cmd_evaluate)

    for name, command in commands(p):
        add_common_flags(command, name)
    return p


@contextlib.contextmanager
def _held_dask_logs(keep: int = 1000) -> Iterator[None]:
    """dask's log lines of a command held until it ends: shown when it succeeds, left out
    when it fails (the error, printed after, is then the last line and says what
    happened; ``--verbose`` shows them as they come). Of more than ``keep`` lines, the
    last ``keep`` are shown."""
    held: collections.deque[tuple[logging.Handler, logging.LogRecord]] = \
        collections.deque(maxlen=keep)
    handlers = {h for name, lg in logging.root.manager.loggerDict.items()
                if isinstance(lg, logging.Logger)
                and (name == "distributed" or name.startswith("distributed."))
                for h in lg.handlers}

    def holder(h: logging.Handler) -> Callable[[logging.LogRecord], bool]:
        # a handler's filter sees what passes its level (dask's silencing included)
        def hold(record: logging.LogRecord) -> bool:
            held.append((h, record))
            return False
        return hold

    filters = {h: holder(h) for h in handlers}
    for h, f in filters.items():
        h.addFilter(f)
    failed = True
    try:
        yield
        failed = False
    finally:
        for h, f in filters.items():
            h.removeFilter(f)
        if not failed:
            for h, record in held:
                h.handle(record)


@contextlib.contextmanager
def _output(quiet: bool, verbose: bool) -> Iterator[None]:
    """How much a command says.

    ``--quiet``: standard output is discarded (the result summary included) and dask's
    log lines are dropped; progress and the dashboard address are left
    out by the commands themselves. Errors (printed by :func:`main` after this context
    closes) and Python warnings still reach stderr.
    ``--verbose``: the ``dmlfe`` and ``distributed`` loggers log at INFO on stderr.
    Neither: dask's log lines are held until the command ends, and shown only when it
    succeeds (:func:`_held_dask_logs`).
    """
    if not quiet and not verbose:
        with _held_dask_logs():
            yield
        return
    loggers = [logging.getLogger(name) for name in ("dmlfe", "distributed")]
    levels = [lg.level for lg in loggers]
    handler = None
    try:
        if quiet:
            loggers[1].setLevel(logging.ERROR)
            # No log lines up to errors, from any logger: distributed's children set
            # levels of their own ("distributed.client" logs the lost scheduler's
            # traceback as an error), and it would precede main's one-line error.
            logging.disable(logging.ERROR)
            try:
                with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
                    yield
            finally:
                logging.disable(logging.NOTSET)
            return
        for lg in loggers:
            lg.setLevel(logging.INFO)
        if not loggers[0].handlers:  # distributed installs its own stderr handler
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(
                "%(asctime)s - %(name)s - %(levelname)s - %(message)s"))
            loggers[0].addHandler(handler)
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if handler is not None:
            loggers[0].removeHandler(handler)


def _subcommand(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def cli_terms(message: str, parser: argparse.ArgumentParser, command: str) -> str:
    """``message`` (a library warning) on one line, with the Python parameter names of
    ``dmlfe COMMAND``'s flags written as the flags (``max_components`` ->
    ``--max-components``, ``n_components=5`` -> ``--dim 5``)."""
    text = " ".join(str(message).split())
    flags = {a.dest: a.option_strings[0] for a in _subcommand(parser, command)._actions
             if a.option_strings and a.option_strings[0].startswith("--")}
    if "dim" in flags:
        def n_components(m: re.Match) -> str:
            value = m.group(1)
            return f"--{'dim' if value.isdigit() else 'threshold'} {value}"
        text = re.sub(r"\bn_components=([0-9.eE+-]*[0-9])", n_components, text)
        text = re.sub(r"\ban int n_components\b", "--dim", text)
        text = re.sub(r"\ba float n_components\b", "--threshold", text)
        text = re.sub(r"\bn_components\b", "--dim/--threshold", text)
    for dest, flag in flags.items():
        text = re.sub(rf"\b{re.escape(dest)}=", f"{flag} ", text)
        if "_" in dest:  # plain words (split, tol) stay words
            text = re.sub(rf"\b{re.escape(dest)}\b", flag, text)
    return text


@contextlib.contextmanager
def _cli_warnings(parser: argparse.ArgumentParser, command: str) -> Iterator[None]:
    """Python warnings during a command: one line each on stderr, ``dmlfe COMMAND:
    warning: ...`` in the command's terms (:func:`cli_terms`), without the source line."""
    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None,
             line: Any = None) -> None:
        print(f"dmlfe {command}: warning: {cli_terms(str(message), parser, command)}",
              file=sys.stderr)

    with warnings.catch_warnings():
        warnings.showwarning = show
        yield


#: Errors about what the user gave: one line on stderr, exit status 2.
USER_ERRORS = (DmlfeError, ValueError, FileNotFoundError, FileExistsError, PermissionError)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 on success; 2 with one line on stderr for an error about the inputs (a dmlfe
    error, a bad value, a missing or existing path); 1 with one line and a request to
    report it for anything else (a bug: ``--debug`` shows the traceback); 130 when
    interrupted.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    args.stdout = sys.stdout  # --out -: the data go here, even under --quiet
    # A file-size limit (ulimit -f) otherwise kills the process with SIGXFSZ, leaving
    # temporaries and no message; ignored, the write fails with EFBIG, which is one line
    # (the workers a local cluster starts inherit the disposition).
    if hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        quiet = getattr(args, "quiet", None)
        # commands with --quiet show the progress of their passes unless it is given
        with _output(bool(quiet), getattr(args, "verbose", False)), \
                show_progress(quiet is False), _cli_warnings(parser, args.command):
            return args.func(args)
    except OSError as exc:
        # A full disk, a file-size limit, a read-only folder: the machine's, not a bug.
        fault = describe_write_fault(exc, getattr(args, "out", None))
        if fault is None and not isinstance(exc, USER_ERRORS):
            return _bug(args, exc)
        if args.debug:
            traceback.print_exc()
        print(f"dmlfe {args.command}: error: {fault or exc}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        if args.debug:
            traceback.print_exc()
        print(f"dmlfe {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dmlfe {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        return _bug(args, exc)


def _bug(args: argparse.Namespace, exc: BaseException) -> int:
    """A bug: one line, the traceback on request; exit status 1. Unless it is the loss
    of the dask scheduler or of workers mid-run: one line saying so, exit status 2."""
    if args.debug:
        traceback.print_exc()
    lost = describe_cluster_fault(exc, cluster_words(args))
    if lost is not None:
        print(f"dmlfe {args.command}: error: {lost}", file=sys.stderr)
        return 2
    print(f"dmlfe {args.command}: internal error: {type(exc).__name__}: {exc}. This is a "
          "bug in dmlfe; please report it with the command you ran (--debug shows the "
          "traceback)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
