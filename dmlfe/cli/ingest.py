"""``dmlfe ingest`` (and ``ingest --append``) and ``dmlfe import``: the commands that write
a store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dmlfe.cli.outputs import _check_out
from dmlfe.cli.store import _print_info
from dmlfe.cluster import client_from_args
from dmlfe.errors import InputError
from dmlfe.ingestion import (
    DEFAULT_CHUNK_ROWS,
    format_options,
    open_append,
    open_ingest,
    parse_split_names,
)
from dmlfe.readers.registry import get_reader, reader_names, reader_options
from dmlfe.store import check_export, import_parquet
from dmlfe.store.writer import check_store_target


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



def add_ingest_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe ingest`` to the ``dmlfe`` parser's subcommands."""
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
    return pi


def add_import_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe import`` to the ``dmlfe`` parser's subcommands."""
    pm = sub.add_parser("import", help="import a Parquet export into a store",
                        epilog="example: dmlfe import r10.parquet --out r10.zarr")
    pm.add_argument("source", help="the Parquet file written by dmlfe export")
    pm.add_argument("--out", required=True, help="the store to write (a directory)")
    pm.add_argument("--chunk-rows", type=int, default=10_000,
                    help="documents per chunk (default 10000); one chunk's texts may "
                   "hold at most dmlfe.staging.MAX_PART_BYTES (256 Mi) characters")
    pm.set_defaults(func=cmd_import)
    return pm
