"""``dmlfe transform``, ``embed``, ``predict`` and ``evaluate``: the commands that use a saved
model (and its classifier)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe.cli.fit import _classifier
from dmlfe.cli.outputs import (
    STDOUT,
    _check_out,
    _split_text,
    _summary,
    _unrecorded_warning,
    _write_text,
)
from dmlfe.cluster import client_from_args
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
from dmlfe.errors import DmlfeError, InputError
from dmlfe.io.classifier import PREDICT_CLASSIFIERS, has_classifier, load_classifier
from dmlfe.io.embeddings import embedding_obs, write_embeddings
from dmlfe.labels import sparse_labels
from dmlfe.metrics import (
    XMC_FAMILIES,
    XMC_KS,
    XMC_LABELS,
    label_propensities,
    metric_report,
    top_k,
)
from dmlfe.model_io import load_model, text_pipeline
from dmlfe.pipeline.config import CLASSIFIERS, METRICS
from dmlfe.store import open_store


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
    P, S = pipe.predict(texts), pipe.predict_proba(texts)  # knn-vote's are CSR
    names = model_label_names(model)
    if args.top_k is None:
        records = label_sets(*(a.toarray() if sp.issparse(a) else np.asarray(a)
                               for a in (P, S)), names, ids)
    else:
        P = sp.csr_matrix(P)
        P.eliminate_zeros()
        records = top_k_records([P.indices[P.indptr[i]:P.indptr[i + 1]]
                                 for i in range(P.shape[0])], *top_k(S, args.top_k),
                                names, ids)
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
        if args.top_k is None:
            ids, P, S, _ = store_predictions(model, clf, view)
            records = label_sets(P, S, names, [str(i) for i in ids])
        else:
            ids, found, idx, vals, _ = _store_top_k(model, clf, view, args.top_k)
            records = top_k_records(found, idx, vals, names, [str(i) for i in ids])
    where = _write_text(args, "".join(json.dumps(r) + "\n" for r in records))
    split = f" (split {_split_text(args.split)})" if args.split else ""
    print(f"wrote label sets and scores of {len(records)} documents of {view.path}{split} to "
          f"{where} ({model._method} + {args.classifier})", file=_summary(args))
    return 0


def top_k_records(found: list[np.ndarray], idx: np.ndarray, vals: np.ndarray,
                  names: list[str], ids: list[str]) -> list[dict[str, Any]]:
    """``dmlfe predict --top-k`` records: the id, the predicted label names (``found``:
    each document's predicted label indices) and the K best labels' scores, best first
    (:func:`dmlfe.metrics.top_k`'s order; its padding, where there are fewer than K
    labels, left out)."""
    return [{"id": i, "labels": [names[j] for j in f],
             "scores": {names[j]: float(v) for j, v in zip(row, vrow, strict=True) if j >= 0}}
            for i, f, row, vrow in zip(ids, found, idx, vals, strict=True)]


def _block_top_k(p: Any, s: Any, k: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    idx, vals = top_k(np.asarray(s), k)
    return [np.flatnonzero(r) for r in np.asarray(p)], idx, vals


def _store_top_k(model: Any, classifier: Any, view: Any, k: int, *, labels: bool = False
                 ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray, Any]:
    """(ids, predicted label indices, top-k indices, top-k scores, true labels or None) of
    a store view in one compute, block by block: no n x q matrix of scores reaches this
    process. The true labels (``labels=True``) as :func:`dmlfe.embed.store_predictions`:
    uint8 CSR, never dense."""
    import dask
    import dask.array as da

    Z = model.transform(view.X)
    if getattr(classifier, "target_type_", None) == "multilabel-indicator" and \
            hasattr(classifier, "top_k_blocks"):
        # decisions and probabilities a slice of rows at a time (many labels)
        blocks = classifier.top_k_blocks(da.asarray(Z).rechunk({1: -1}), k)
    else:
        P, S = da.asarray(classifier.predict(Z)), da.asarray(classifier.predict_proba(Z))
        S = S.rechunk({1: -1})
        P = P.rechunk((S.chunks[0], (P.shape[1],)))
        blocks = [dask.delayed(_block_top_k, pure=True)(p, s, k)
                  for p, s in zip(P.to_delayed().ravel(), S.to_delayed().ravel(),
                                  strict=True)]
    Y = view.Y[:, label_columns(model, view)] if labels else None
    # the delayed blocks as separate arguments: dask 2026.11's compute(array, [delayed,
    # ...], array) returned the last array in place of the list's first item
    ids, Y, *parts = dask.compute(view.ids, Y, *blocks)
    if Y is not None:
        Y = sparse_labels(Y)
    if not parts:
        return (np.asarray(ids), [], np.empty((0, k), dtype=np.int64),
                np.empty((0, k), dtype=np.float64), Y)
    return (np.asarray(ids), [f for part in parts for f in part[0]],
            np.concatenate([part[1] for part in parts]),
            np.concatenate([part[2] for part in parts]), Y)


def _sparse_rows(found: list[np.ndarray], q: int, idx: np.ndarray | None = None,
                 vals: np.ndarray | None = None) -> sp.csr_matrix:
    """A CSR matrix from per-row label indices (0/1), or from :func:`top_k`'s (indices,
    values) with the padding left out."""
    if idx is None:
        lengths = np.array([len(f) for f in found], dtype=np.int64)
        cols = np.concatenate(found) if found else np.empty(0, dtype=np.int64)
        data = np.ones(cols.size, dtype=np.int8)
    else:
        keep = idx >= 0
        lengths, cols, data = keep.sum(axis=1), idx[keep], vals[keep]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    return sp.csr_matrix((data, cols, indptr), shape=(len(lengths), q))


def _positive(text: str) -> int:
    """``--top-k K``: a positive integer."""
    try:
        k = int(text)
    except ValueError:
        k = 0
    if k < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive integer")
    return k


def _k_list(text: str) -> list[int]:
    """``--k 1,3,5``: positive integers."""
    try:
        ks = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        ks = []
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive integers separated by "
                                         "commas, e.g. 1,3,5")
    return sorted(set(ks))


def _label_counts(Y: Any) -> np.ndarray:
    """Documents per label (column sums) of a dask label matrix of dense or sparse blocks."""
    import dask

    if len(Y.chunks[1]) != 1:
        Y = Y.rechunk({1: -1})
    parts = [dask.delayed(lambda b: np.asarray(b.sum(axis=0), dtype=np.int64).ravel())(b)
             for b in Y.to_delayed().ravel()]
    sums = dask.compute(*parts)
    return np.sum(sums, axis=0) if sums else np.zeros(Y.shape[1], dtype=np.int64)


def _propensities(model: Any, Y_eval: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """Label propensities (A = 0.55, B = 1.5) from the model's training labels (its
    training store and split), else from the evaluated labels ``Y_eval``; with a record
    of where they came from."""
    prov = getattr(model, "training_store_", None) or {}
    why = "the model does not record its training store"
    if prov.get("path"):
        try:
            train = open_store(prov["path"])
            if prov.get("split") is not None:
                train = train.subset(prov["split"])
            counts = _label_counts(train.Y[:, label_columns(model, train)])
            return label_propensities(counts, int(train.n_docs)), {
                "from": "training", "store": str(train.path), "split": prov.get("split"),
                "n_docs": int(train.n_docs), "A": 0.55, "B": 1.5}
        except (OSError, DmlfeError, ValueError) as exc:
            why = f"its training store cannot be read ({exc})"
    counts = np.asarray(Y_eval.sum(axis=0)).ravel()
    n = int(Y_eval.shape[0])
    return label_propensities(counts, n), {"from": "evaluated", "reason": why,
                                           "n_docs": n, "A": 0.55, "B": 1.5}


def format_xmc(report: dict[str, Any]) -> list[str]:
    """The XMC measures of ``report`` as a compact table: one row per family, k across."""
    ks = sorted({int(key.split("@")[1]) for key in report if key.startswith("P@")})
    if not ks:
        return []
    lines = [f"{'XMC':<8}" + "".join(f"  {'@' + str(k):>8}" for k in ks) + "  better: higher"]
    for fam in XMC_FAMILIES:
        if f"{fam}@{ks[0]}" in report:
            lines.append(f"{fam:<8}" + "".join(f"  {report[f'{fam}@{k}']:>8.4f}" for k in ks))
    lines += [f"{key:<8}  {v:>8.4f}" for key, v in report.items() if key.startswith("recall@")]
    return lines


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
    lines += format_xmc(report)
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
    q = len(model_label_names(model))
    xmc = True if args.xmc or args.k is not None else None
    xmc_on = xmc or q >= XMC_LABELS
    ks = args.k or list(XMC_KS)
    # without the ranking measures the scores are only ranked: each document's best
    # max(ks) are kept, block by block, instead of an n x q matrix of scores
    ranking = q < XMC_LABELS or args.all_metrics
    props, where_from = None, None
    with client_from_args(args):
        if ranking:
            _, P, S, Y = store_predictions(model, clf, view, labels=True)
        else:
            _, found, idx, vals, Y = _store_top_k(model, clf, view, max(ks), labels=True)
            P, S = _sparse_rows(found, q), _sparse_rows(found, q, idx, vals)
        if xmc_on:
            props, where_from = _propensities(model, Y)
    report = metric_report(Y, P, S, xmc=xmc, ks=ks, propensities=props, ranking=ranking)
    split = _split_text(args.split) if args.split else None
    notes = []
    if where_from is not None:
        notes.append("propensities (A = 0.55, B = 1.5) from " + (
            f"the training labels: {where_from['store']}"
            + (f" split {_split_text(where_from['split'])}" if where_from["split"] else "")
            + f", {where_from['n_docs']} documents" if where_from["from"] == "training" else
            f"the evaluated labels, as {where_from['reason']}"))
    if "skipped_measures" in report:
        notes.append(f"not computed at {q} >= {XMC_LABELS} labels (O(n q log q) time, "
                     f"n x q work arrays): {', '.join(report['skipped_measures'])}; "
                     "--all-metrics computes them")
    if args.json is not None:
        doc = {"model": str(Path(args.model).resolve()), "method": model._method,
               "classifier": name, "store": str(view.path), "split": split,
               "metrics": report}
        if where_from is not None:
            doc["propensities"] = where_from
        args.out = args.json
        where = _write_text(args, json.dumps(doc, indent=2) + "\n")
        if args.json != STDOUT:
            print(f"wrote metrics to {where}", file=sys.stderr)
    if args.json != STDOUT:
        print(f"{model._method} + {name} on {view.path}"
              + (f" (split {split})" if split else "") + ":")
        print(format_metrics(report))
        for note in notes:
            print(f"note: {note}")
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



def add_transform_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe transform`` to the ``dmlfe`` parser's subcommands."""
    pt = sub.add_parser("transform", help="project a store's documents with a saved model",
                        epilog="example: dmlfe transform mddm-model r10.zarr --split test "
                        "--out r10-test-emb --format parquet")
    pt.add_argument("model", help="a model directory written by dmlfe fit")
    pt.add_argument("store", help="the store whose documents to project")
    _add_embeddings_output(pt)
    pt.set_defaults(func=cmd_transform)
    return pt


def _add_embeddings_output(p: argparse.ArgumentParser) -> None:
    """``--out`` and ``--format`` of the commands that write embeddings."""
    p.add_argument("--out", required=True, help="the embeddings to write (a directory)")
    p.add_argument("--format", choices=["zarr", "parquet"], default="zarr",
                   help="embeddings format (default zarr)")


def add_embed_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe embed`` to the ``dmlfe`` parser's subcommands."""
    pb = sub.add_parser(
        "embed", help="embed raw documents with a saved model",
        description="Vectorise raw documents as the model's training store vectorised its "
        "own (same vocabulary or hashing, idf, tokeniser, n-grams) and project them. The "
        "documents are read into memory and embedded in this process; the embeddings are "
        "written on a cluster only when --scheduler, --cluster or --workers is given.",
        epilog="example: dmlfe embed model/ new.jsonl --out new-emb --format parquet")
    _add_document_flags(pb)
    _add_embeddings_output(pb)
    pb.set_defaults(func=cmd_embed)
    return pb


def add_predict_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe predict`` to the ``dmlfe`` parser's subcommands."""
    pp = sub.add_parser(
        "predict", help="predict the label sets of raw documents or of a store's documents",
        description="Classify documents with a classifier fitted on the model's embeddings "
        "of its training documents: the one saved with the model (dmlfe fit --classifier), "
        "else one fitted now on the training store and split the model records. INPUT is "
        "raw documents (embedded as dmlfe embed does) or a store (its stored features; "
        "--split picks its documents). Writes JSON Lines: one record per document with its "
        "id, the predicted label names and every label's score (predict_proba); with "
        "--top-k K only the K best labels' scores, best first.",
        epilog="example: dmlfe predict model/ corpus.zarr --split test --out preds.jsonl   "
        "(raw text: dmlfe predict model/ new.txt --out - --classifier ridge)")
    _add_document_flags(pp, store_input=True)
    pp.add_argument("--out", required=True,
                    help="the JSON Lines file to write; - writes to standard output")
    pp.add_argument("--classifier", choices=list(CLASSIFIERS), default=None,
                    help="classifier on the embeddings (default: the one saved with the model "
                    "by dmlfe fit --classifier, else ridge fitted now)")
    pp.add_argument("--top-k", type=_positive, default=None, metavar="K",
                    help="write only each document's K best-scored labels and their scores, "
                    "best first (ties: the label listed first in the model), instead of "
                    "every label's score; for large label sets")
    pp.set_defaults(func=cmd_predict)
    return pp


def add_evaluate_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe evaluate`` to the ``dmlfe`` parser's subcommands."""
    pa = sub.add_parser(
        "evaluate", help="score a model and its saved classifier on a store's documents",
        description="Project a store's documents with a saved model, classify them with the "
        "classifier saved with it (dmlfe fit --classifier) and score the predictions "
        "against the store's labels (matched by name) with the papers' 13 measures: "
        "hamming_loss, example_accuracy/precision/recall/f1, subset_accuracy, micro_f1, "
        "macro_f1 (label sets) and ranking_loss, one_error, coverage, average_precision, "
        "macro_auc (scores). With --xmc, and by default from "
        f"{XMC_LABELS} labels on, also the extreme classification measures P@k, nDCG@k, "
        "PSP@k, PSnDCG@k (propensities from the model's training labels) and recall@k; "
        f"from {XMC_LABELS} labels on the five ranking measures are left out unless "
        "--all-metrics is given. Prints a table; --json writes the measures too.",
        epilog="example: dmlfe evaluate model/ corpus.zarr --split test --json metrics.json")
    pa.add_argument("model", help="a model directory written by dmlfe fit --classifier")
    pa.add_argument("store", help="the store whose documents to score")
    pa.add_argument("--json", default=None, metavar="PATH",
                    help="also write the measures as JSON to PATH; - writes them to standard "
                    "output instead of the table")
    pa.add_argument("--xmc", action="store_true",
                    help="also report the extreme classification measures P@k, nDCG@k, "
                    "PSP@k, PSnDCG@k and recall at the largest k (default: from "
                    f"{XMC_LABELS} labels on)")
    pa.add_argument("--k", type=_k_list, default=None, metavar="K,...",
                    help="the k's of the XMC measures (default 1,3,5; implies --xmc)")
    pa.add_argument("--all-metrics", action="store_true",
                    help=f"from {XMC_LABELS} labels on, compute the five ranking measures too "
                    "(left out by default: they sort every document's scores)")
    pa.set_defaults(func=cmd_evaluate)
    return pa
