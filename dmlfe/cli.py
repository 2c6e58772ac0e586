"""The ``dmlfe`` command line: a thin shell over the library."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dmlfe._version import __version__


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


def _add_cluster_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where to run")
    x = g.add_mutually_exclusive_group()
    x.add_argument("--scheduler", metavar="ADDR", help="address of a running dask scheduler")
    x.add_argument("--cluster", metavar="PROFILE",
                   help="cluster profile: a name in cluster_configs/ or a .yaml path")
    g.add_argument("--workers", type=int, default=None,
                   help="LocalCluster workers (default: one per core)")
    g.add_argument("--quiet", action="store_true", help="no progress messages")


def _add_ingest_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--chunk-rows", type=int, default=None,
                   help="documents per chunk (default 10000)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store")
    v = p.add_argument_group("vectoriser (text formats)")
    v.add_argument("--vectorizer", choices=["tfidf", "hashing"], default=None)
    v.add_argument("--ngram-range", type=_ngram, default=None, metavar="MIN,MAX")
    v.add_argument("--min-df", type=_df, default=None)
    v.add_argument("--max-df", type=_df, default=None)
    v.add_argument("--max-features", type=int, default=None)
    v.add_argument("--sublinear-tf", action="store_true", default=None)
    v.add_argument("--norm", choices=["l2", "l1", "none"], default=None)
    v.add_argument("--n-features", type=int, default=None, help="hashing: number of columns")
    v.add_argument("--fit-split", default=None,
                   help="learn vocabulary and idf on this split only (e.g. train)")
    r = p.add_argument_group("reader options")
    r.add_argument("--labels", default=None, help="mulan: the .xml file naming the labels")
    r.add_argument("--modapte", action="store_true", default=None,
                   help="reuters21578: the ModApte split")
    r.add_argument("--top-n", type=int, default=None,
                   help="reuters21578: keep the N most frequent topics (10 = R10)")
    for f in ("text", "labels", "id", "split"):
        r.add_argument(f"--{f}-field", default=None, help=f"jsonl/parquet: the {f} field")
    s = p.add_argument_group("synthetic corpus")
    s.add_argument("--n-docs", type=int, default=None)
    s.add_argument("--vocab-size", type=int, default=None)
    s.add_argument("--n-labels", type=int, default=None)
    s.add_argument("--seed", type=int, default=None)


_FLAG_TO_OPTION = {
    "vectorizer": "vectorizer", "ngram_range": "ngram_range", "min_df": "min_df",
    "max_df": "max_df", "max_features": "max_features", "sublinear_tf": "sublinear_tf",
    "norm": "norm", "n_features": "n_features", "fit_split": "fit_split", "labels": "labels",
    "modapte": "modapte", "top_n": "top_n", "text_field": "text_field",
    "labels_field": "labels_field", "id_field": "id_field", "split_field": "split_field",
    "n_docs": "n_docs", "vocab_size": "vocab_size", "n_labels": "n_labels", "seed": "seed",
}


def _ingest_options(args: argparse.Namespace) -> dict[str, Any]:
    opts = {}
    for flag, opt in _FLAG_TO_OPTION.items():
        v = getattr(args, flag, None)
        if v is not None:
            opts[opt] = None if (opt == "norm" and v == "none") else v
    return opts


def _client(args: argparse.Namespace):
    from dmlfe.cluster import get_client

    return get_client(scheduler=args.scheduler, cluster=args.cluster, n_workers=args.workers)


def cmd_ingest(args: argparse.Namespace) -> int:
    from dmlfe.ingestion import DEFAULT_CHUNK_ROWS, ingest

    if args.format != "synthetic" and not args.source:
        raise SystemExit(f"dmlfe ingest: format {args.format!r} needs a SOURCE path")
    source = args.source if len(args.source) != 1 else args.source[0]
    with _client(args) as client:
        path = ingest(
            source or None, format=args.format, out=args.out,
            chunk_rows=args.chunk_rows or DEFAULT_CHUNK_ROWS, client=client,
            overwrite=args.overwrite, progress=not args.quiet, **_ingest_options(args),
        )
    print(f"wrote store {path}")
    _print_info(path, as_json=False)
    return 0


def _print_info(path: str | Path, as_json: bool) -> None:
    from dmlfe.store import open_store

    info = open_store(path).info()
    if as_json:
        print(json.dumps(info, indent=2, default=str))
        return
    print(format_info(info))


def format_info(info: dict) -> str:
    """Human-readable summary of ``Store.info()``."""
    lines = []
    for key, value in info.items():
        if isinstance(value, dict) and key in ("labels", "label_counts"):
            lines.append(f"{key}:")
            for name, count in value.items():
                lines.append(f"  {name}: {count}")
        elif isinstance(value, dict):
            lines.append(f"{key}: {json.dumps(value, default=str)}")
        else:
            lines.append(f"{key}: {value}")
    return "\n".join(lines)


def cmd_info(args: argparse.Namespace) -> int:
    _print_info(args.store, args.json)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from dmlfe.ingestion import ingest

    out = Path(args.out)
    store = out / "synthetic.zarr"
    with _client(args) as client:
        ingest(None, format="synthetic", out=store, chunk_rows=args.chunk_rows, client=client,
               overwrite=True, progress=not args.quiet, n_docs=args.n_docs, seed=args.seed)
    print(f"demo store: {store}")
    _print_info(store, as_json=False)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from dmlfe.store import export_parquet

    export_parquet(args.store, args.out)
    print(f"wrote {args.out}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from dmlfe.store import import_parquet

    with _client(args) as client:
        path = import_parquet(args.source, args.out, chunk_rows=args.chunk_rows, client=client)
    print(f"wrote store {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dmlfe", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"dmlfe {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    from dmlfe.ingestion import FORMATS

    pi = sub.add_parser("ingest", help="read a corpus into a chunked sparse store")
    pi.add_argument("source", nargs="*", help="corpus file(s); none for --format synthetic")
    pi.add_argument("--format", required=True, choices=FORMATS)
    pi.add_argument("--out", required=True, help="the store to write (a directory)")
    _add_ingest_flags(pi)
    _add_cluster_flags(pi)
    pi.set_defaults(func=cmd_ingest)

    pn = sub.add_parser("info", help="describe a store")
    pn.add_argument("store")
    pn.add_argument("--json", action="store_true", help="machine-readable output")
    pn.set_defaults(func=cmd_info)

    pd = sub.add_parser("demo", help="the main job on the embedded synthetic corpus")
    pd.add_argument("--out", default="dmlfe-work/demo", help="output folder")
    pd.add_argument("--n-docs", type=int, default=20_000)
    pd.add_argument("--seed", type=int, default=0)
    pd.add_argument("--chunk-rows", type=int, default=2_000)
    _add_cluster_flags(pd)
    pd.set_defaults(func=cmd_demo)

    pe = sub.add_parser("export", help="export a store to Parquet (one row per document)")
    pe.add_argument("store")
    pe.add_argument("--out", required=True)
    pe.set_defaults(func=cmd_export)

    pm = sub.add_parser("import", help="import a Parquet export into a store")
    pm.add_argument("source")
    pm.add_argument("--out", required=True)
    pm.add_argument("--chunk-rows", type=int, default=10_000)
    _add_cluster_flags(pm)
    pm.set_defaults(func=cmd_import)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, FileExistsError) as exc:
        print(f"dmlfe {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
