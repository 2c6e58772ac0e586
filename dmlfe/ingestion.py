"""``dmlfe.ingest``: any supported corpus -> a chunked sparse store.

Text corpora take three passes, each one dask compute:

1. *staging* (driver, streaming): the reader's documents are cut into Parquet parts
   of ``chunk_rows`` documents (skipped for the synthetic corpus, whose parts are
   generated on the workers directly);
2. *document frequencies* (workers): each part is tokenised and counted, the
   counts merge in a tree; the driver prunes the vocabulary and computes idf;
3. *vectorise + write* (workers): each part becomes a tf-idf CSR piece of the
   store; the store writer assembles the pieces and renames the store into place.

Numeric corpora (ARFF) carry features already: their batches are written as
pieces directly. Memory on the driver is bounded by one part plus the vocabulary.

Input that cannot be used is refused with a :class:`~dmlfe.errors.DmlfeError` and no
store is written: a malformed file is a :class:`~dmlfe.errors.DataFormatError` naming
it (raised by its reader), a missing one a :class:`~dmlfe.errors.MissingPathError`,
and an empty corpus -- no documents, no features, or (ARFF) no labels -- an
:class:`~dmlfe.errors.InputError` or a ``DataFormatError`` saying what was found. The
first batch is read before anything is written to disk, so a corpus without documents
leaves no trace at all.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from dask.delayed import delayed

from dmlfe._version import __version__
from dmlfe.compute import run, tree_reduce
from dmlfe.errors import DmlfeError, InputError, MissingPathError
from dmlfe.readers.arff import read_meka, read_mulan
from dmlfe.readers.base import IngestReport, NumericSource, TextBatch
from dmlfe.readers.reuters import read_reuters21578
from dmlfe.readers.synthetic import SyntheticCorpus
from dmlfe.readers.tabular import _jsonl_lines, read_jsonl, read_parquet
from dmlfe.staging import read_part, stage
from dmlfe.store import StoreWriter, write_piece
from dmlfe.vectorize.counts import (
    TermCounts,
    dense_df,
    load_counts,
    merge_counts,
    part_counts,
    remap_counts,
    save_counts,
    term_counts,
    tfidf_block,
)
from dmlfe.vectorize.params import VECTORIZER_VERSION, VectorizerParams
from dmlfe.vectorize.vocabulary import build_vocabulary, smooth_idf

TEXT_FORMATS = ("reuters21578", "jsonl", "parquet", "synthetic")
NUMERIC_FORMATS = ("mulan", "meka")
FORMATS = TEXT_FORMATS + NUMERIC_FORMATS

_READER_OPTIONS: dict[str, tuple[str, ...]] = {
    "reuters21578": ("modapte", "top_n"),
    "jsonl": ("text_field", "labels_field", "id_field", "split_field"),
    "parquet": ("text_field", "labels_field", "id_field", "split_field"),
    "synthetic": (
        "n_docs", "vocab_size", "n_labels", "mean_doc_length", "mean_labels_per_doc",
        "test_fraction", "zipf_exponent", "seed",
    ),
    "mulan": ("labels",),
    "meka": (),
}
_VECTORIZER_OPTIONS = (
    "vectorizer", "ngram_range", "min_df", "max_df", "max_features", "sublinear_tf", "norm",
    "lowercase", "n_features", "fit_split",
)
#: Options of every format whose splits come from its files (all but synthetic).
_SPLIT_OPTIONS = ("split_names",)
#: The split names a file name may carry (:func:`split_from_file_name`).
FILE_SPLITS = ("train", "test")
#: jsonl/parquet: the field read as the split when ``split_field`` is not given and the
#: first record has it.
DEFAULT_SPLIT_FIELD = "split"


def format_options(fmt: str) -> set[str]:
    """The options :func:`ingest` accepts for format ``fmt`` (reader, split names and,
    for text formats, vectoriser)."""
    allowed = set(_READER_OPTIONS[fmt])
    if fmt != "synthetic":
        allowed |= set(_SPLIT_OPTIONS)
    if fmt in TEXT_FORMATS:
        allowed |= set(_VECTORIZER_OPTIONS)
    return allowed


def split_from_file_name(stem: str) -> str:
    """The split a corpus file's name gives its documents.

    ``train`` or ``test`` as a whole word of the name -- between the separators ``-``,
    ``_`` and ``.`` or at either end, in any case -- is the split:
    ``Corel5k-train-sparse`` and ``bibtex_TRAIN`` give "train", ``bibtex-test`` "test".
    A name holding neither word, or both, keeps its whole stem as the split name
    (rename it with ``split_names``).
    """
    words = {w.lower() for w in re.split(r"[-_.]", stem)}
    found = [s for s in FILE_SPLITS if s in words]
    return found[0] if len(found) == 1 else stem


def parse_split_names(text: str) -> dict[str, str]:
    """``OLD=NEW,OLD2=NEW2`` (the ``--split-names`` syntax) as a mapping.

    Raises
    ------
    InputError
        An entry without ``=``, an empty name, or an OLD given twice.
    """
    out: dict[str, str] = {}
    for entry in text.split(","):
        old, eq, new = (x.strip() for x in entry.partition("="))
        if not eq or not old or not new:
            raise InputError(f"--split-names entry {entry!r} must look like OLD=NEW (e.g. "
                             "--split-names dev=validation,eval=test)")
        if old in out:
            raise InputError(f"--split-names renames {old!r} twice")
        out[old] = new
    return out


def _check_split_names(names: Any) -> dict[str, str]:
    if not isinstance(names, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in names.items()):
        raise InputError(f"split_names must map split names to new names (str -> str), got "
                         f"{names!r}")
    return dict(names)


def _renamed_splits(batches: Iterator, names: dict[str, str], from_files: bool,
                    source: Any) -> Iterator:
    """``batches`` with each split named by the file-name rule (``from_files``) and
    renamed by ``names``; a name to rename that no document has is an InputError at
    the end, before the store is written."""
    seen: set[str] = set()
    for b in batches:
        if b.splits is not None:
            splits = [split_from_file_name(s) for s in b.splits] if from_files else b.splits
            seen.update(splits)
            b.splits = [names.get(s, s) for s in splits]
        yield b
    unknown = sorted(set(names) - seen)
    if unknown:
        have = ", ".join(repr(s) for s in sorted(seen)) or "none"
        raise InputError(f"split_names renames {', '.join(map(repr, unknown))}, but no "
                         f"document of {_source_words(source)} has that split; its splits: "
                         f"{have}")

DEFAULT_CHUNK_ROWS = 10_000


def ingest(
    source: str | os.PathLike | Sequence[str | os.PathLike] | None,
    format: str,
    out: str | os.PathLike,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    client: Any = None,
    overwrite: bool = False,
    progress: bool = False,
    **options: Any,
) -> Path:
    """Read a corpus and write a dmlfe store.

    Parameters
    ----------
    source : path, list of paths, or None
        The corpus file(s): the Reuters-21578 .tar.gz or folder of ``reut2-*.sgm``; one or
        more ARFF files (MULAN: train and test files become the "train"/"test" splits);
        a JSON Lines file or a Parquet file/folder. None for ``format="synthetic"``.
    format : {"reuters21578", "mulan", "meka", "jsonl", "parquet", "synthetic"}
    out : path
        The store to write (a directory). It appears only once complete.
    chunk_rows : int
        Documents per chunk (the store's row chunking and the unit of parallel work).
    client : distributed.Client, optional
        Where to run; default: the process's default client, else dask's local scheduler.
    overwrite : bool
        Replace an existing store at ``out``.
    progress : bool
        Print stage progress to stderr.
    **options
        Reader options -- reuters21578: ``modapte``, ``top_n``; mulan: ``labels`` (the
        .xml); jsonl/parquet: ``text_field``, ``labels_field``, ``id_field``,
        ``split_field`` (default: ``"split"`` when the first record has that field,
        else no split); synthetic: the :class:`~dmlfe.readers.synthetic.SyntheticCorpus`
        parameters (``n_docs``, ``vocab_size``, ``n_labels``, ``seed``, ...).
        Vectoriser options (text formats): ``vectorizer`` ("tfidf" or "hashing"),
        ``ngram_range``, ``min_df``, ``max_df``, ``max_features``, ``sublinear_tf``,
        ``norm``, ``lowercase``, ``n_features`` (hashing), ``fit_split`` (learn the
        vocabulary and idf on the documents of this split only; default all).
        Every format but synthetic: ``split_names``, a mapping ``{old: new}`` renaming
        splits. Files name their documents' split by :func:`split_from_file_name`
        (mulan, meka: ``Corel5k-train-sparse.arff`` -> "train").

    Returns
    -------
    pathlib.Path
        The store path; open it with :func:`dmlfe.open_store`.

    Raises
    ------
    DataFormatError
        A corpus file is malformed, truncated or not compressed as its name says; the
        message names the file (and line or record).
    MissingPathError
        A source path does not exist.
    InputError
        The corpus is empty (no documents; no features, e.g. a vocabulary pruned to
        nothing by ``min_df``/``max_df``), or the options cannot be used. Nothing is
        written at ``out`` in any of these cases.
    """
    with open_ingest(source, format, out, chunk_rows=chunk_rows, overwrite=overwrite,
                     progress=progress, **options) as job:
        return job.run(client)


class OpenedIngest:
    """An ingest whose input is open and checked -- options, source paths, the first
    batch of documents, the output path -- with nothing computed yet.

    Made by :func:`open_ingest`; :meth:`run` does the passes. The command line opens
    the ingest before it starts a cluster, so that a bad input costs no cluster start.
    Leaving the ``with`` block without :meth:`run` removes the temporary folder.
    """

    def __init__(self, work: Any, writer: StoreWriter) -> None:
        self._work = work
        self._writer = writer

    def run(self, client: Any = None) -> Path:
        """Run the ingest (on ``client`` when given); returns the store path."""
        return self._work(self._writer, client)

    def __enter__(self) -> OpenedIngest:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return self._writer.__exit__(*exc)


def open_ingest(
    source: str | os.PathLike | Sequence[str | os.PathLike] | None,
    format: str,
    out: str | os.PathLike,
    *,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    overwrite: bool = False,
    progress: bool = False,
    **options: Any,
) -> OpenedIngest:
    """Open and check an ingest without running it (see :func:`ingest` for the
    parameters and the errors); use it as a context manager and call ``run(client)``."""
    if format not in FORMATS:
        raise InputError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise InputError(f"chunk_rows must be a positive int, got {chunk_rows!r}")
    allowed = format_options(format)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"option(s) {', '.join(unknown)} do not apply to format {format!r}; "
            f"valid options: {', '.join(sorted(allowed)) or 'none'}"
        )
    reader_opts = {k: v for k, v in options.items() if k in _READER_OPTIONS[format]}
    vec_opts = {k: v for k, v in options.items() if k in _VECTORIZER_OPTIONS}
    split_names = _check_split_names(options.get("split_names") or {})
    if format != "synthetic":
        if source is None or not _as_paths(source):
            raise InputError(f"format {format!r} needs a source path")
        for p in _as_paths(source):
            if not p.exists():
                raise MissingPathError(f"source {p} does not exist")
    if format in ("jsonl", "parquet") and reader_opts.get("split_field") is None:
        if _first_record_has(_as_paths(source)[0], format, DEFAULT_SPLIT_FIELD):
            reader_opts["split_field"] = DEFAULT_SPLIT_FIELD
            _say(progress, f"the records have a {DEFAULT_SPLIT_FIELD!r} field: it names "
                 "their splits (another field: --split-field NAME)")

    out = Path(out)
    report = IngestReport()
    provenance = {
        "source": None if source is None else [str(p) for p in _as_paths(source)],
        "format": format,
        "reader_options": _jsonable(reader_opts),
        "split_names": split_names or None,
        "chunk_rows": chunk_rows,
        "dmlfe_version": __version__,
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    }
    if format in NUMERIC_FORMATS:
        # Headers, and the first batch of rows, are read before anything is written.
        src = _open_numeric(source, format, reader_opts, report)
        batches = _nonempty(_renamed_splits(src.batches(chunk_rows), split_names, True, source),
                            lambda: _no_rows_message(source))
        return OpenedIngest(
            lambda writer, client: _ingest_numeric(src, batches, writer, report, provenance,
                                                   client, progress),
            StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite))
    stream = None
    if format != "synthetic":
        _say(progress, f"reading {format} corpus from {source}")
        stream = _nonempty(_renamed_splits(_text_stream(source, format, reader_opts, report,
                                                        chunk_rows), split_names, False, source),
                           lambda: _no_documents_message(source, report))
    return OpenedIngest(
        lambda writer, client: _ingest_text(source, format, reader_opts, vec_opts, stream,
                                            writer, report, provenance, chunk_rows, client,
                                            progress),
        StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite))


def _first_record_has(path: Path, format: str, field: str) -> bool:
    """Whether the first record of a jsonl or parquet corpus has ``field``; False when
    it cannot be read (its reader then says why)."""
    try:
        if format == "parquet":
            schema = (pq.ParquetDataset(path).schema if path.is_dir()
                      else pq.read_schema(path))
            return field in schema.names
        for _, raw in _jsonl_lines(path):
            line = raw.removeprefix(b"\xef\xbb\xbf").strip()
            if line:
                rec = json.loads(line)
                return isinstance(rec, dict) and field in rec
    except (DmlfeError, OSError, ValueError, pa.ArrowException):
        return False
    return False


def _nonempty(batches: Iterator, message) -> Iterator:
    """``batches`` with its first non-empty batch read now; InputError(message()) if none."""
    for b in batches:
        if len(b):
            return itertools.chain([b], batches)
    raise InputError(message())


def _no_rows_message(source: Any) -> str:
    paths = _as_paths(source)
    if len(paths) == 1:
        return f"{paths[0]} has a header but no data rows: nothing to ingest"
    names = ", ".join(str(p) for p in paths)
    return f"{names} have headers but no data rows: nothing to ingest"


def _no_documents_message(source: Any, report: IngestReport) -> str:
    names = ", ".join(str(p) for p in _as_paths(source))
    msg = f"{names} holds no documents: nothing to ingest"
    if report.n_skipped:
        reasons = "; ".join(f"{n} {r}" for r, n in report.skipped_reasons.items())
        msg += f" (all {report.n_skipped} documents read were left out: {reasons})"
    if report.notes:
        msg += f" [reader notes: {'; '.join(report.notes)}]"
    return msg


def _as_paths(source: Any) -> list[Path]:
    if source is None:
        return []
    if isinstance(source, (str, os.PathLike)):
        return [Path(source)]
    return [Path(s) for s in source]


def _jsonable(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, os.PathLike):
            v = str(v)
        elif isinstance(v, tuple):
            v = list(v)
        out[k] = v
    return out


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(f"[dmlfe] {msg}", file=sys.stderr)


# ----------------------------------------------------------------------------- numeric


def _open_numeric(source, format, opts, report) -> NumericSource:
    paths = _as_paths(source)
    if format == "mulan":
        if not opts.get("labels"):
            raise InputError("format 'mulan' needs the .xml file naming the labels: "
                             "labels= (command line: --labels FILE.xml)")
        src = read_mulan(paths, opts["labels"], report=report)
    else:
        src = read_meka(paths, report=report)
    # The readers refuse these already; kept so that no store without features or
    # labels is ever written.
    if not src.feature_names:
        raise InputError(f"{src.source}: no feature attribute: nothing to ingest")
    if not src.label_names:
        raise InputError(f"{src.source}: no label attribute; {format} data must have labels")
    return src


def _ingest_numeric(src, batches, writer, report, provenance, client, progress) -> Path:
    pieces = []
    n = 0
    for i, b in enumerate(batches):
        pieces.append(write_piece(writer.tmp_path, i, b.X, b.Y, b.ids, b.splits))
        n += len(b)
        if progress and (i + 1) % 10 == 0:
            _say(progress, f"read {n} documents")
    provenance["report"] = report.to_dict()
    _say(progress, f"assembling the store from {len(pieces)} pieces ({n} documents)")
    return writer.finalize(
        pieces,
        n_features=len(src.feature_names),
        label_names=list(src.label_names),
        feature_names=list(src.feature_names),
        attrs=provenance,
        client=client,
    )


# ----------------------------------------------------------------------------- text


def _text_stream(source, format, opts, report, chunk_rows):
    if format == "reuters21578":
        return read_reuters21578(Path(source), batch_size=chunk_rows, report=report, **opts)
    reader = read_jsonl if format == "jsonl" else read_parquet
    paths = _as_paths(source)
    if len(paths) != 1:
        raise InputError(f"format {format!r} takes one source path, got {len(paths)}")
    return reader(paths[0], batch_size=chunk_rows, report=report, **opts)


def load_part(spec: tuple, text: bool = True) -> TextBatch:
    """Documents of one part: a staged Parquet file, or a synthetic part generated here
    (without its text when ``text`` is false: the texts are then not to be used)."""
    if spec[0] == "parquet":
        return read_part(spec[1])
    if spec[0] == "synthetic":
        corpus, index, size = spec[1:]
        return corpus.part(index, size, text=text)
    raise ValueError(f"unknown part kind {spec[0]!r}")


def _count_task(spec: tuple, index: int, tmp_path: str, params: VectorizerParams,
                fit_split: str | None) -> TermCounts:
    """Tokenise part ``index`` once, keep its counts for the vectorise pass, and return
    the document frequencies of its ``fit_split`` documents (all when None)."""
    b = load_part(spec)
    counts, terms = part_counts(b.texts, params)
    save_counts(_counts_path(tmp_path, index), counts, terms)
    rows = None
    if fit_split is not None:
        rows = np.array([s == fit_split for s in b.splits], dtype=bool)
    return term_counts(counts, terms, params, rows)


def _counts_path(tmp_path: str, index: int) -> str:
    return str(Path(tmp_path) / "counts" / f"part-{index:06d}.npz")


def _vectorize_task(spec, index, tmp_path, vocab, idf, label_names, params) -> dict:
    b = load_part(spec, text=False)  # ids, labels, splits: the text was counted already
    path = _counts_path(tmp_path, index)
    counts, terms = load_counts(path)
    if params.kind == "tfidf":
        counts = remap_counts(counts, terms, vocab, len(idf))
    X = tfidf_block(counts, idf, params)
    col = {name: j for j, name in enumerate(label_names)}
    Y = np.zeros((len(b), len(label_names)), dtype=np.uint8)
    for r, labs in enumerate(b.labels):
        for lab in labs:
            Y[r, col[lab]] = 1
    piece = write_piece(tmp_path, index, X, Y, list(b.ids), b.splits, b.meta or None)
    os.remove(path)
    return {
        "piece": piece,
        "n_docs": len(b),
        "n_empty": int(np.count_nonzero(np.diff(X.indptr) == 0)),
        "n_unlabelled": int(np.count_nonzero(Y.sum(axis=1) == 0)),
    }


def _source_words(source) -> str:
    return "the corpus" if source is None else ", ".join(str(p) for p in _as_paths(source))


def _require_terms(total: TermCounts, source, fit_split: str | None) -> None:
    """InputError when no document (of ``fit_split``) holds any term: no feature to store."""
    keys = total.terms if total.terms is not None else total.cols
    if keys is None or len(keys) == 0:
        of = "" if fit_split is None else f" of split {fit_split!r}"
        raise InputError(
            f"{_source_words(source)}: none of its {total.n_docs} documents{of} holds a term "
            "(all texts are empty after tokenisation): no feature to ingest"
        )


def _vocabulary(total: TermCounts, params: VectorizerParams, source) -> tuple[list[str], Any]:
    """The pruned vocabulary; InputError when no term is left (no feature to store)."""
    n_terms = len(total.terms)
    try:
        return build_vocabulary(total, params)
    except ValueError as exc:  # pruning left no term, or min_df/max_df contradict
        raise InputError(
            f"{_source_words(source)}: the vocabulary is empty ({total.n_docs} documents, "
            f"{n_terms} distinct terms): {exc}"
        ) from exc


def _ingest_text(source, format, opts, vec_opts, stream, writer, report, provenance, chunk_rows,
                 client, progress) -> Path:
    fit_split = vec_opts.pop("fit_split", None)
    kind = vec_opts.pop("vectorizer", "tfidf")
    if "ngram_range" in vec_opts:
        vec_opts["ngram_range"] = tuple(vec_opts["ngram_range"])
    params = VectorizerParams(kind=kind, **vec_opts)

    if format == "synthetic":
        corpus = SyntheticCorpus(**opts)
        n_parts = corpus.n_parts(chunk_rows)
        specs = [("synthetic", corpus, i, chunk_rows) for i in range(n_parts)]
        label_names = list(corpus.label_names)
        has_split = True
        provenance["reader_options"] = _jsonable(corpus.params())
    else:
        _say(progress, f"staging {format} corpus from {source}")
        staged = stage(stream, writer.tmp_path / "staging", chunk_rows, progress)
        if staged.n_docs == 0:  # pragma: no cover - _nonempty refused it already
            raise InputError(_no_documents_message(source, report))
        specs = [("parquet", str(p)) for p in staged.parts]
        label_names = sorted(staged.label_counts)
        has_split = staged.has_split
        _say(progress, f"staged {staged.n_docs} documents in {len(specs)} parts, "
                       f"{len(label_names)} labels")
    if fit_split is not None and not has_split:
        raise InputError(f"fit_split={fit_split!r} given but the corpus has no split field")

    # pass 2: document frequencies, merged in a tree on the workers
    (writer.tmp_path / "counts").mkdir()
    counts = tree_reduce(
        [delayed(_count_task, pure=True)(s, i, str(writer.tmp_path), params, fit_split)
         for i, s in enumerate(specs)],
        merge_counts)
    (total,) = run(counts, desc="document-frequency pass", progress=progress, client=client)
    if fit_split is not None and total.n_docs == 0:
        raise InputError(f"fit_split={fit_split!r}: no document has that split")
    _require_terms(total, source, fit_split)
    if params.kind == "hashing":
        vocab = None
        idf = smooth_idf(dense_df(total, params.n_features), total.n_docs)
        n_features = params.n_features
        feature_names = None
        hashing = params.to_dict()
    else:
        feature_names, df = _vocabulary(total, params, source)
        vocab = {t: j for j, t in enumerate(feature_names)}
        idf = smooth_idf(df, total.n_docs)
        n_features = len(feature_names)
        hashing = None
    _say(progress, f"{n_features} features from {total.n_docs} documents")

    # pass 3: vectorise and write the pieces; big shared inputs enter the graph once
    token = uuid.uuid4().hex
    vocab_d = delayed(vocab, name=f"dmlfe-vocabulary-{token}")  # named: no hashing of a big dict
    idf_d = delayed(idf, name=f"dmlfe-idf-{token}")
    tasks = [
        delayed(_vectorize_task, pure=True)(s, i, str(writer.tmp_path), vocab_d, idf_d,
                                            label_names, params)
        for i, s in enumerate(specs)
    ]
    (results,) = run(tasks, desc="vectorise + write pass", progress=progress, client=client)
    report.n_read = sum(r["n_docs"] for r in results)
    provenance["vectorizer"] = {**params.to_dict(), "version": VECTORIZER_VERSION}
    if params.kind == "tfidf":
        del provenance["vectorizer"]["n_features"]
    provenance["fit_split"] = fit_split
    provenance["idf_documents"] = total.n_docs
    provenance["report"] = report.to_dict()
    provenance["n_empty_documents"] = sum(r["n_empty"] for r in results)
    provenance["n_unlabelled_documents"] = sum(r["n_unlabelled"] for r in results)
    _say(progress, f"assembling the store from {len(results)} pieces")
    return writer.finalize(
        [r["piece"] for r in results],
        n_features=n_features,
        label_names=label_names,
        feature_names=feature_names,
        hashing=hashing,
        attrs=provenance,
        idf=idf,
        client=client,
    )
