"""``dmlfe.ingest``: any supported corpus -> a chunked sparse store.

Text corpora take three passes, each one dask compute:

1. *staging* (driver, streaming): the reader's documents are cut into Parquet parts
   of ``chunk_rows`` documents (skipped for the synthetic corpus, whose parts are
   generated on the workers directly);
2. *document frequencies* (workers): each part is tokenised and counted, the
   counts merge in a tree; the driver prunes the vocabulary and computes idf;
3. *vectorise + write* (workers): each part becomes a tf-idf CSR piece of the
   store; the store writer assembles the pieces and renames the store into place.

Numeric corpora (ARFF, XMC, svmlight) carry features already: their batches are
written as pieces directly. Memory on the driver is bounded by one part plus the vocabulary.

Input that cannot be used is refused with a :class:`~dmlfe.errors.DmlfeError` and no
store is written: a malformed file is a :class:`~dmlfe.errors.DataFormatError` naming
it (raised by its reader), a missing one a :class:`~dmlfe.errors.MissingPathError`,
and an empty corpus -- no documents, no features, or (ARFF) no labels -- an
:class:`~dmlfe.errors.InputError` or a ``DataFormatError`` saying what was found. The
first batch is read before anything is written to disk, so a corpus without documents
leaves no trace at all.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import itertools
import os
import shutil
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask.delayed import delayed

from dmlfe._version import __version__
from dmlfe.compute import run, tree_reduce
from dmlfe.errors import InputError, MissingPathError
from dmlfe.labels import label_rows, relabel_columns
from dmlfe.readers.base import (
    IngestReport,
    NumericSource,
    TextBatch,
)
from dmlfe.readers.registry import ReaderSpec, get_reader, reader_names
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

#: The built-in formats' names, kept for code that imports them; the registry
#: (:func:`dmlfe.readers.registry.reader_names`) also has the readers registered later.
TEXT_FORMATS = reader_names("text")
NUMERIC_FORMATS = reader_names("numeric")
FORMATS = TEXT_FORMATS + NUMERIC_FORMATS

_VECTORIZER_OPTIONS = (
    "vectorizer", "ngram_range", "min_df", "max_df", "max_features", "sublinear_tf", "norm",
    "lowercase", "n_features", "fit_split",
)
#: Options of every format whose splits come from its files (all but synthetic).
_SPLIT_OPTIONS = ("split_names",)
#: jsonl/parquet: the field read as the split when ``split_field`` is not given and the
#: first record has it.
DEFAULT_SPLIT_FIELD = "split"


def format_options(fmt: str) -> set[str]:
    """The options :func:`ingest` accepts for format ``fmt`` (reader, split names and,
    for text formats, vectoriser)."""
    spec = get_reader(fmt)
    allowed = set(spec.option_names)
    if spec.needs_source:
        allowed |= set(_SPLIT_OPTIONS)
    if spec.kind == "text":
        allowed |= set(_VECTORIZER_OPTIONS)
    return allowed


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


def _renamed_splits(batches: Iterator, names: dict[str, str], source: Any) -> Iterator:
    """``batches`` with each split renamed by ``names``; a name to rename that no
    document has is an InputError at the end, before the store is written."""
    seen: set[str] = set()
    for b in batches:
        if b.splits is not None:
            splits = b.splits
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
        more ARFF, XMC or svmlight files (train and test files become the "train"/"test"
        splits); a JSON Lines file or a Parquet file/folder. None for ``format="synthetic"``.
    format : {"reuters21578", "mulan", "meka", "xmc", "svmlight", "jsonl", "parquet", "synthetic"}
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
        .xml); xmc: ``label_map``, ``feature_map`` (files naming the labels/features, one
        name a line); svmlight: those and ``zero_based`` ("auto", True or False);
        jsonl/parquet: ``text_field``, ``labels_field``, ``id_field``, ``split_field``
        (default: ``"split"`` when the first record has that field, else no split);
        synthetic: the :class:`~dmlfe.readers.synthetic.SyntheticCorpus`
        parameters (``n_docs``, ``vocab_size``, ``n_labels``, ``seed``, ...).
        Vectoriser options (text formats): ``vectorizer`` ("tfidf" or "hashing"),
        ``ngram_range``, ``min_df``, ``max_df``, ``max_features``, ``sublinear_tf``,
        ``norm``, ``lowercase``, ``n_features`` (hashing), ``fit_split`` (learn the
        vocabulary and idf on the documents of this split only; default all).
        Every format but synthetic: ``split_names``, a mapping ``{old: new}`` renaming
        splits. Files name their documents' split by :func:`dmlfe.readers.base.split_from_file_name`
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
    spec = get_reader(format)
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise InputError(f"chunk_rows must be a positive int, got {chunk_rows!r}")
    allowed = format_options(format)
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"option(s) {', '.join(unknown)} do not apply to format {format!r}; "
            f"valid options: {', '.join(sorted(allowed)) or 'none'}"
        )
    reader_opts = {k: v for k, v in options.items() if k in spec.option_names}
    vec_opts = {k: v for k, v in options.items() if k in _VECTORIZER_OPTIONS}
    split_names = _check_split_names(options.get("split_names") or {})
    if spec.needs_source:
        if source is None or not _as_paths(source):
            raise InputError(f"format {format!r} needs a source path")
        for p in _as_paths(source):
            if not p.exists():
                raise MissingPathError(f"source {p} does not exist")
    if (spec.first_record_has is not None and "split_field" in spec.option_names
            and reader_opts.get("split_field") is None):
        if spec.first_record_has(_as_paths(source)[0], DEFAULT_SPLIT_FIELD):
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
    if spec.kind == "numeric":
        # Headers, and the first batch of rows, are read before anything is written.
        src = _open_numeric(source, spec, reader_opts, report)
        batches = _nonempty(_renamed_splits(src.batches(chunk_rows), split_names, source),
                            lambda: _no_rows_message(source))
        return OpenedIngest(
            lambda writer, client: _ingest_numeric(src, batches, writer, report, provenance,
                                                   client, progress),
            StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite))
    stream = None
    if spec.needs_source:
        _say(progress, f"reading {format} corpus from {source}")
        stream = _nonempty(_renamed_splits(_read(spec, source, reader_opts, report, chunk_rows),
                                           split_names, source),
                           lambda: _no_documents_message(source, report))
    else:
        reader_opts = spec.check_options(reader_opts)
    return OpenedIngest(
        lambda writer, client: _ingest_text(source, spec, reader_opts, vec_opts, stream,
                                            writer, report, provenance, chunk_rows, client,
                                            progress),
        StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite))


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


def _read(spec: ReaderSpec, source: Any, opts: dict, report: IngestReport,
          batch_size: int) -> Any:
    """What reader ``spec`` reads from ``source`` with options ``opts`` (checked first)."""
    paths = _as_paths(source)
    if spec.one_source and len(paths) != 1:
        raise InputError(f"format {spec.name!r} takes one source path, got {len(paths)}")
    return spec.read(paths, report=report, batch_size=batch_size, **spec.check_options(opts))


def _open_numeric(source, spec: ReaderSpec, opts, report) -> NumericSource:
    src = _read(spec, source, opts, report, DEFAULT_CHUNK_ROWS)
    format = spec.name
    # The readers refuse these already; kept so that no store without features or
    # labels is ever written.
    if not src.n_features:
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
        n_features=src.n_features,
        label_names=list(src.label_names),
        feature_names=None if src.feature_names is None else list(src.feature_names),
        attrs=provenance,
        client=client,
    )


# ----------------------------------------------------------------------------- text


def load_part(spec: tuple, text: bool = True) -> TextBatch:
    """Documents of one part: a staged Parquet file, or a part of a generated corpus
    (synthetic) generated here (without its text when ``text`` is false: the texts are
    then not to be used)."""
    if spec[0] == "parquet":
        return read_part(spec[1])
    if spec[0] == "generated":
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
    Y = label_rows([[col[lab] for lab in labs] for labs in b.labels], len(label_names))
    piece = write_piece(tmp_path, index, X, Y, list(b.ids), b.splits, b.meta or None)
    os.remove(path)
    return {
        "piece": piece,
        "n_docs": len(b),
        "n_empty": int(np.count_nonzero(np.diff(X.indptr) == 0)),
        "n_unlabelled": int(np.count_nonzero(np.diff(Y.indptr) == 0)),
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


def _count_pass(specs: list, tmp_path: Path, params: VectorizerParams, fit_split: str | None,
                client: Any, progress: bool) -> TermCounts:
    """Pass 2: every part tokenised once (its counts kept for pass 3); the document
    frequencies of all parts, merged in a tree on the workers."""
    (tmp_path / "counts").mkdir()
    counts = tree_reduce(
        [delayed(_count_task, pure=True)(s, i, str(tmp_path), params, fit_split)
         for i, s in enumerate(specs)],
        merge_counts)
    (total,) = run(counts, desc="document-frequency pass", progress=progress, client=client)
    return total


def _vectorize_pass(specs: list, tmp_path: Path, vocab: dict | None, idf: np.ndarray,
                    label_names: list[str], params: VectorizerParams, client: Any,
                    progress: bool) -> list[dict]:
    """Pass 3: every part vectorised and written as a piece; the folders of the passes
    are removed after (they are not part of the store)."""
    # big shared inputs enter the graph once, named: no hashing of a big dict
    token = uuid.uuid4().hex
    vocab_d = delayed(vocab, name=f"dmlfe-vocabulary-{token}")
    idf_d = delayed(idf, name=f"dmlfe-idf-{token}")
    tasks = [
        delayed(_vectorize_task, pure=True)(s, i, str(tmp_path), vocab_d, idf_d,
                                            label_names, params)
        for i, s in enumerate(specs)
    ]
    (results,) = run(tasks, desc="vectorise + write pass", progress=progress, client=client)
    for folder in ("staging", "counts"):
        shutil.rmtree(tmp_path / folder, ignore_errors=True)
    return results


def _ingest_text(source, spec: ReaderSpec, opts, vec_opts, stream, writer, report,
                 provenance, chunk_rows, client, progress) -> Path:
    fit_split = vec_opts.pop("fit_split", None)
    kind = vec_opts.pop("vectorizer", "tfidf")
    if "ngram_range" in vec_opts:
        vec_opts["ngram_range"] = tuple(vec_opts["ngram_range"])
    params = VectorizerParams(kind=kind, **vec_opts)

    if spec.generate is not None:
        corpus = spec.generate(**opts)
        n_parts = corpus.n_parts(chunk_rows)
        specs = [("generated", corpus, i, chunk_rows) for i in range(n_parts)]
        label_names = list(corpus.label_names)
        has_split = True
        provenance["reader_options"] = _jsonable(corpus.params())
    else:
        _say(progress, f"staging {spec.name} corpus from {source}")
        staged = stage(stream, writer.tmp_path / "staging", chunk_rows, progress,
                       _source_words(source))
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
    total = _count_pass(specs, writer.tmp_path, params, fit_split, client, progress)
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

    # pass 3: vectorise and write the pieces
    results = _vectorize_pass(specs, writer.tmp_path, vocab, idf, label_names, params, client,
                              progress)
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


# ----------------------------------------------------------------------------- append
#: Terms not in a tf-idf store's vocabulary listed by name in an append's report.
UNSEEN_TERMS_LISTED = 20


def append(
    store: str | os.PathLike,
    source: str | os.PathLike | Sequence[str | os.PathLike],
    format: str | None = None,
    *,
    split: str | None = None,
    client: Any = None,
    progress: bool = False,
    **options: Any,
) -> dict:
    """Append documents to a store, vectorised as the store's own documents were.

    The new rows follow the store's rows, in the source's order. Text is vectorised with
    the store's vectoriser as its metadata records it: the same tokenisation, the
    hashing parameters or the store's vocabulary, and the store's idf weights, kept as
    they are (so the rows already stored, and every embedding computed from them, stay
    exactly what they were; the idf is not updated with the new documents' frequencies).
    Terms a tf-idf store's vocabulary does not have get no column: they are counted
    and reported (the history entry's ``report["unseen_terms"]``), not silently dropped.
    Numeric corpora (ARFF) must have the store's features, by name and order.

    Label columns are matched by name to the store's, in the store's order; labels the
    new documents do not have are 0; a label the store does not have is refused (the
    store's label set is fixed at ingest). Document ids must stay unique.

    The append is atomic: the next version of the store is built beside it (unchanged
    chunk files hard-linked, not copied) and swapped in; an exception or a kill at any
    point leaves the store as it was. The store gets a new uuid (so a new
    :attr:`~dmlfe.store.Store.fingerprint`) and an entry in its history
    (:func:`dmlfe.store.history`). Memory holds one part (``chunk_rows`` documents of
    the store) of the new documents at a time, as in an ingest.

    Parameters
    ----------
    store : path-like
        The store to append to.
    source : path or list of paths
        The new documents, in a format :func:`ingest` reads (not "synthetic").
    format : str, optional
        Their format; default: the store's own (its provenance's ``format``). A text
        store takes any text format, a numeric store "mulan" or "meka".
    split : str, optional
        The split of every new document (e.g. "test"); default: the reader's split field
        (as in an ingest), or none.
    client : distributed.Client, optional
        Where to run; default: the process's default client, else dask's local scheduler.
    progress : bool
        Print stage progress to stderr.
    **options
        Reader options of the format (see :func:`ingest`); vectoriser options are refused:
        the store's vectoriser is used. In the store's own format, the reader options its
        ingest was given (``id_field``, ``split_field``...) apply unless given here
        (``split_field`` not with ``split``).

    Returns
    -------
    dict
        The new history entry: ``rows`` (the new rows' range), ``n_docs_before``,
        ``source``, ``time``, ``fingerprint`` (the store's new fingerprint) and
        ``report`` (documents read and skipped; for tf-idf stores ``unseen_terms``:
        ``distinct``, ``occurrences`` and the ``most_frequent`` with their counts).

    Raises
    ------
    InputError
        The format does not fit the store (text to a numeric store or the reverse; other
        features), a new label, a duplicate id (naming it and the file), no documents.
    DataFormatError, MissingPathError
        As for :func:`ingest`. In every case the store is unchanged.
    """
    with open_append(store, source, format, split=split, progress=progress,
                     **options) as job:
        return job.run(client)


def open_append(
    store: str | os.PathLike,
    source: str | os.PathLike | Sequence[str | os.PathLike],
    format: str | None = None,
    *,
    split: str | None = None,
    progress: bool = False,
    **options: Any,
) -> OpenedIngest:
    """Open and check an append without running it (see :func:`append` for the
    parameters and the errors); use it as a context manager and call ``run(client)``."""
    from dmlfe.store import open_store
    from dmlfe.store.writer import StoreAppender

    st = open_store(store)
    format = format or st.attrs.get("format")
    spec = get_reader(format)
    if not spec.appendable:
        why = " (it generates documents of its own, with ids the store has)" \
            if spec.generate is not None else ""
        raise InputError(f"format {format!r} cannot be appended{why}; write the new "
                         "documents to a JSON Lines or Parquet file and append that")
    vec_opts = sorted(set(options) & set(_VECTORIZER_OPTIONS))
    if vec_opts:
        raise InputError(f"vectoriser option(s) {', '.join(vec_opts)} do not apply to an "
                         f"append: new documents are vectorised with the store's own "
                         f"vectoriser ({st.path})")
    unknown = sorted(set(options) - set(spec.option_names))
    if unknown:
        raise TypeError(f"option(s) {', '.join(unknown)} do not apply to format {format!r}; "
                        f"valid options: {', '.join(spec.option_names) or 'none'}")
    if split is not None and (not isinstance(split, str) or not split):
        raise InputError(f"split must be a non-empty string, got {split!r}")
    stored_format = st.attrs.get("format", "unknown")
    is_text = "vectorizer" in st.attrs
    if is_text != (spec.kind == "text"):
        kinds = "text formats: " + ", ".join(f for f in reader_names("text")
                                             if get_reader(f).appendable) \
            if is_text else "numeric formats: " + ", ".join(reader_names("numeric"))
        raise InputError(f"cannot append format {format!r} to the store {st.path}: it holds "
                         f"{'text vectorised' if is_text else 'numeric features'} "
                         f"(ingested from {stored_format}); append documents in one of the "
                         f"{kinds}")
    paths = _as_paths(source)
    if not paths:
        raise InputError(f"format {format!r} needs a source path")
    for p in paths:
        if not p.exists():
            raise MissingPathError(f"source {p} does not exist")
    # the store's own reader options (its id, split, text and label fields) unless given
    kept = (st.attrs.get("reader_options") or {}) if format == stored_format else {}
    reader_opts = {k: v for k, v in kept.items() if k in spec.option_names
                   and not (split is not None and k == "split_field")} | dict(options)
    report = IngestReport()
    entry_source = {"format": format, "source": [str(p) for p in paths],
                    "reader_options": _jsonable(reader_opts), "split": split}
    name = _source_words(source)
    if spec.kind == "numeric":
        src = _open_numeric(source, spec, reader_opts, report)
        _check_numeric_fits(st, src, name)
        batches = _nonempty(src.batches(st.stored_chunk_rows), lambda: _no_rows_message(source))
        return OpenedIngest(
            lambda writer, client: _append_numeric(st, src, _with_split(batches, split),
                                                   writer, report, entry_source, name,
                                                   client),
            StoreAppender(st))
    vectorizer = st.text_vectorizer()  # StoreError for a store without its idf
    _say(progress, f"reading {format} documents from {name}")
    stream = _nonempty(_read(spec, source, reader_opts, report, st.stored_chunk_rows),
                       lambda: _no_documents_message(source, report))
    return OpenedIngest(
        lambda writer, client: _append_text(st, vectorizer, _with_split(stream, split), writer,
                                            report, entry_source, name, client, progress),
        StoreAppender(st))


def _with_split(batches: Iterator, split: str | None) -> Iterator:
    """The batches, every document given ``split`` when one is given."""
    for b in batches:
        yield b if split is None else dataclasses.replace(b, splits=[split] * len(b))


def _new_label_error(name: str, new: list[str], counts: Any, store: Any) -> InputError:
    first = new[0]
    more = f" (and {len(new) - 1} more: {', '.join(map(repr, new[1:6]))})" if len(new) > 1 \
        else ""
    on = "" if counts is None else f" (on {counts[first]} documents)"
    return InputError(f"{name}: label {first!r}{on} is not one of the {store.n_labels} labels "
                      f"of the store {store.path}{more}; an append keeps the store's labels: "
                      "drop it from the new documents, or ingest the whole corpus into a new "
                      "store")


def _check_numeric_fits(store: Any, src: NumericSource, name: str) -> None:
    """InputError when a numeric source's features or labels are not the store's."""
    features = list(src.feature_names)
    if len(features) != store.n_features:
        raise InputError(f"{name}: {len(features)} features, the store {store.path} has "
                         f"{store.n_features}; an append needs the store's features")
    stored = store.feature_names
    if stored is not None:
        for j, (a, b) in enumerate(zip(features, stored, strict=True)):
            if a != b:
                raise InputError(f"{name}: feature {j} is {a!r} where the store {store.path} "
                                 f"has {b!r}; an append needs the store's features, in its "
                                 "order")
    new = [lab for lab in src.label_names if lab not in set(store.label_names)]
    if new:
        raise _new_label_error(name, new, None, store)


def _append_numeric(store, src, batches, writer, report, entry_source, name, client) -> dict:
    col = {lab: j for j, lab in enumerate(store.label_names)}
    cols = [col[lab] for lab in src.label_names]  # the source's labels in the store's order
    pieces = []
    for i, b in enumerate(batches):
        # the source's label columns moved to the store's, never a dense batch x q block
        Y = relabel_columns(sp.csr_matrix(b.Y), np.asarray(cols), store.n_labels)
        pieces.append(write_piece(writer.tmp_path, i, b.X, Y, b.ids, b.splits))
        report.n_read += len(b)
    return writer.finalize(pieces, source=entry_source, report=report.to_dict(),
                           source_name=name, client=client)


def _append_text(store, vectorizer, stream, writer, report, entry_source, name, client,
                 progress) -> dict:
    chunk_rows = writer.chunk_rows
    staged = stage(stream, writer.tmp_path / "staging", chunk_rows, progress, name, fixed=True)
    new = sorted(set(staged.label_counts) - set(store.label_names))
    if new:
        raise _new_label_error(name, new, staged.label_counts, store)
    if staged.meta_keys != store.obs_columns:
        raise InputError(f"{name}: the documents have the extra fields {staged.meta_keys}, the "
                         f"store {store.path} has {store.obs_columns}; an append needs the "
                         "same")
    specs = [("parquet", str(p)) for p in staged.parts]
    params = VectorizerParams.from_dict(vectorizer.params)
    _say(progress, f"staged {staged.n_docs} documents in {len(specs)} parts")
    total = _count_pass(specs, writer.tmp_path, params, None, client, progress)
    vocab = None
    unseen = None
    if params.kind == "tfidf":
        vocab = {t: j for j, t in enumerate(vectorizer.vocabulary)}
        unseen = _unseen_terms(total, vocab)
    results = _vectorize_pass(specs, writer.tmp_path, vocab, vectorizer.idf,
                              store.label_names, params, client, progress)
    report.n_read = sum(r["n_docs"] for r in results)
    entry_report = {**report.to_dict(), "unseen_terms": unseen,
                    "n_empty_documents": sum(r["n_empty"] for r in results),
                    "n_unlabelled_documents": sum(r["n_unlabelled"] for r in results)}
    if unseen is not None and unseen["distinct"]:
        _say(progress, f"{unseen['distinct']} terms ({unseen['occurrences']} occurrences) are "
                       "not in the store's vocabulary and get no column")
    return writer.finalize([r["piece"] for r in results], source=entry_source,
                           report=entry_report, source_name=name, client=client)


def _unseen_terms(total: TermCounts, vocab: dict[str, int]) -> dict:
    """The new documents' terms a tf-idf store's vocabulary lacks: how many distinct
    terms, their occurrences, and the most frequent ones with their counts."""
    terms = total.terms if total.terms is not None else np.array([], dtype=object)
    mask = np.fromiter((t not in vocab for t in terms), dtype=bool, count=len(terms))
    tf = total.tf[mask]
    order = np.argsort(-tf, kind="stable")[:UNSEEN_TERMS_LISTED]
    return {"distinct": int(mask.sum()), "occurrences": int(tf.sum()),
            "most_frequent": [[str(terms[mask][k]), int(tf[k])] for k in order]}
