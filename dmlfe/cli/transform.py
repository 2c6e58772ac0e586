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
from dmlfe.errors import InputError
from dmlfe.io.classifier import PREDICT_CLASSIFIERS, has_classifier, load_classifier
from dmlfe.io.embeddings import embedding_obs, write_embeddings
from dmlfe.metrics import metric_report
from dmlfe.model_io import load_model, text_pipeline
from dmlfe.pipeline.config import CLASSIFIERS, METRICS


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
    records = label_sets(*(a.toarray() if hasattr(a, "toarray") else np.asarray(a)
                           for a in (P, S)), model_label_names(model), ids)
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
        "macro_auc (scores). Prints a table; --json writes the measures too.",
        epilog="example: dmlfe evaluate model/ corpus.zarr --split test --json metrics.json")
    pa.add_argument("model", help="a model directory written by dmlfe fit --classifier")
    pa.add_argument("store", help="the store whose documents to score")
    pa.add_argument("--json", default=None, metavar="PATH",
                    help="also write the measures as JSON to PATH; - writes them to standard "
                    "output instead of the table")
    pa.set_defaults(func=cmd_evaluate)
    return pa
