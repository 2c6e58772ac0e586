"""``dmlfe info``, ``verify``, ``export`` and ``clean``: the commands that read, check, export
or tidy a store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from dask.utils import format_bytes

from dmlfe.cli.outputs import _check_out
from dmlfe.cli_flags import LABELS_SHOWN
from dmlfe.errors import InputError, StoreError
from dmlfe.stats.cache import clean
from dmlfe.store import export_parquet, open_store
from dmlfe.store.verify import add_record, verify_store
from dmlfe.store.xmc import export_svmlight, export_xmc
from dmlfe.tempfiles import find_temporaries, path_size, recover_swaps_under, remove_path


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
        if key == "label_stats" and isinstance(value, dict):
            lines += label_stats_lines(value)
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


def label_stats_lines(stats: dict) -> list[str]:
    """``dmlfe info``'s label summary (:func:`dmlfe.store.reader.label_statistics`): a few
    lines whatever the number of labels."""
    per_label, per_doc = stats["docs_per_label"], stats["labels_per_doc"]
    top = ", ".join(f"{name} ({count})" for name, count in per_label["top"])
    return [
        f"label_stats: {stats['n_labels']} labels, {stats['label_pairs']} document-label "
        "pairs",
        f"  documents per label: min {per_label['min']}, median {per_label['median']:g}, "
        f"max {per_label['max']}; {per_label['labels_with_one_doc']} labels on one "
        f"document, {per_label['labels_without_docs']} on none",
        f"  most frequent: {top}",
        f"  labels per document: mean {per_doc['mean']:.3g}, max {per_doc['max']}; "
        f"{per_doc['docs_without_labels']} documents without labels",
    ]


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


def add_info_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe info`` to the ``dmlfe`` parser's subcommands."""
    pn = sub.add_parser("info", help="describe a store",
                        epilog="example: dmlfe info r10.zarr --json")
    pn.add_argument("store", help="the store (a folder written by dmlfe ingest)")
    pn.add_argument("--json", action="store_true", help="machine-readable output")
    pn.set_defaults(func=cmd_info)
    return pn


def add_verify_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe verify`` to the ``dmlfe`` parser's subcommands."""
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
    return pv


def add_export_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe export`` to the ``dmlfe`` parser's subcommands."""
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
    return pe


def add_clean_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``dmlfe clean`` to the ``dmlfe`` parser's subcommands."""
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
    return pc
