"""Streaming readers for the sparse text formats of extreme multi-label classification.

Both formats hold one document a line, its labels and then its features:

* **XMC** (``format="xmc"``), the format of the Extreme Classification Repository
  (EURLex-4K, Wiki10-31K, AmazonCat-13K, Amazon-670K, ...): a header line
  ``n_docs n_features n_labels``, then ``l1,l2,... f:v f:v ...`` with zero-based label
  and feature indices.
* **svmlight / LibSVM multi-label** (``format="svmlight"``; RCV1 and the LibSVM
  multi-label sets, what scikit-learn's ``dump_svmlight_file(multilabel=True)``
  writes): no header, ``l1,l2,... [qid:n] f:v ...``, ``#`` starts a comment, feature
  indices one-based or zero-based (see *The zero-based rule*).

Quirks accepted
---------------
* a document without labels: its line starts with a space, or directly with ``f:v``
  (scikit-learn's reader refuses these lines);
* a document without features: its labels alone (XMC: also a blank line, which is how
  the repository's writers print a document with neither);
* spaces after the commas of a label list (``1, 5 3:0.5``), a label given twice;
* trailing spaces and tabs, CRLF line ends, a UTF-8 byte order mark, blank lines after
  the last document;
* the features of a line in any order (they are sorted); explicit zeros (dropped);
* svmlight: ``#`` comments (in any encoding), on their own lines or after the data;
  ``qid:n`` (ignored, counted in the ingest report); blank lines (skipped);
* gzip, bzip2 or xz compression, recognised by content whatever the file's name.

Labels are label *indices* in both formats: label ``l`` is column ``l`` of the label
matrix. A label map file (``label_map``: one name per line, line ``i`` naming label
``i``, counted from 0) names them; without one they are named by their index (``"0"``,
``"1"``, ...). A feature map (``feature_map``) names the features likewise; without one
the features are numbered, not named (``feature_names`` is None; the store's
``feature_kind`` is "numbered").

The zero-based rule (svmlight)
------------------------------
``zero_based="auto"`` (the default, the rule of scikit-learn's ``load_svmlight_file``):
the feature indices are zero-based when some line of the files holds feature index 0,
and one-based otherwise. A zero-based file that never uses feature 0 therefore reads as
one-based, every feature moved one column to the left: pass ``zero_based=True`` for
such a file. ``zero_based=False`` refuses index 0. XMC files are always zero-based;
label indices are never shifted.

Sizes
-----
XMC: each file's header gives the numbers of documents, features and labels, and the
lines must agree with it (the error says which count is off and where). svmlight: a
first pass over the files finds the largest feature and label index and checks every
line, so that a bad line is refused before anything is written; the number of
features (labels) is the largest index + 1, or the length of the feature (label) map.
So a svmlight file does not record a feature or label that no document holds: pass the
maps to keep such trailing columns.

Streaming
---------
Lines are read with the bound :data:`dmlfe.readers.base.MAX_LINE_BYTES` and yielded as
:class:`~dmlfe.readers.base.NumericBatch` objects of ``batch_size`` documents: features
as float64 CSR, labels as uint8 CSR (``batch_size x n_labels``, built from each line's
label list: memory grows with the labels given, never with batch x labels). Memory is
bounded by one batch.

Several files (e.g. ``train.txt`` and ``test.txt``) are read in order as one corpus;
a document's id is ``"{file stem}:{row}"`` and its split comes from the file's name as
for ARFF files (``x-train``/``x_train`` -> "train", ``x-test`` -> "test", otherwise the
stem, e.g. ``train.txt`` -> "train").
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import InputError, MissingPathError
from dmlfe.labels import label_rows
from dmlfe.readers.base import (
    DataFormatError,
    IngestReport,
    NumericBatch,
    NumericSource,
    file_lines,
    split_from_file_name,
)

__all__ = ["read_svmlight", "read_xmc", "read_name_map"]

PathLike = str | Path
_BOM = b"\xef\xbb\xbf"
_COMPRESSED = (".gz", ".bz2", ".xz")
_TEXT_SUFFIXES = (".txt", ".svm", ".svmlight", ".libsvm", ".xmc", ".dat", ".data")
_WHAT = {"xmc": "XMC file", "svmlight": "svmlight file"}

#: The most labels a corpus may have: every label gets a name (a string in memory and in
#: the store), so a header or index beyond this is taken for a damaged file.
MAX_LABELS = 2**24


# ----------------------------------------------------------------------------- names


def read_name_map(path: PathLike, what: str) -> list[str]:
    """The names of a label or feature map: line ``i`` (counted from 0) names index ``i``.

    Parameters
    ----------
    path : str or Path
        The map, UTF-8, plain or compressed; line ends and surrounding spaces are not
        part of a name, blank lines after the last name are ignored.
    what : str
        "label map" or "feature map", for the messages.

    Returns
    -------
    list of str

    Raises
    ------
    DataFormatError
        A blank line before the last name, a name given twice, or text that is not
        UTF-8; the message names the file and the line.
    MissingPathError
        The file does not exist.
    """
    path = Path(path)
    names: list[str] = []
    first: dict[str, int] = {}
    blank = 0
    for lineno, raw in file_lines(path, what):
        if lineno == 1:
            raw = raw.removeprefix(_BOM)
        try:
            name = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise DataFormatError(f"{path}, line {lineno}: not valid UTF-8 ({exc.reason}); "
                                  f"re-encode the {what} as UTF-8") from None
        if not name:
            blank = blank or lineno
            continue
        if blank:
            raise DataFormatError(
                f"{path}, line {blank}: blank line in the {what}; line i names index i, "
                "so every line up to the last name needs a name")
        if name in first:
            raise DataFormatError(f"{path}, line {lineno}: name {name!r} is given twice "
                                  f"(first on line {first[name]}); names must be unique")
        first[name] = lineno
        names.append(name)
    if not names:
        raise DataFormatError(f"{path}: the {what} holds no name")
    return names


# ----------------------------------------------------------------------------- files


def _file_stem(path: Path) -> str:
    """File name without compression and text extensions (``train.txt.gz`` -> ``train``)."""
    name = path.name
    for group in (_COMPRESSED, _TEXT_SUFFIXES):
        ext = next((e for e in group if name.lower().endswith(e)), None)
        if ext is not None and len(name) > len(ext):
            name = name[: -len(ext)]
    return name


@dataclass
class _File:
    path: Path
    stem: str
    split: str
    n_docs: int | None = None  # XMC: the header's count


def _as_files(paths: PathLike | Sequence[PathLike], what: str) -> list[_File]:
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = [Path(p) for p in paths]
    if not paths:
        raise InputError(f"no {what} given; pass a path or a non-empty list of paths")
    files: list[_File] = []
    stems: dict[str, Path] = {}
    for p in paths:
        if not p.exists():
            raise MissingPathError(f"{what} {p} does not exist")
        if not p.is_file():
            raise DataFormatError(f"{p} is not a file; pass {what}s")
        stem = _file_stem(p)
        if stem in stems:
            raise DataFormatError(
                f"{stems[stem]} and {p} have the same file stem {stem!r}, so their document "
                "ids ('stem:row') would collide; rename one of them")
        stems[stem] = p
        files.append(_File(p, stem, split_from_file_name(stem)))
    return files


def _decode(raw: bytes, path: Path, lineno: int) -> str:
    if lineno == 1:
        raw = raw.removeprefix(_BOM)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1].hex()
        raise DataFormatError(f"{path}, line {lineno}: not valid UTF-8 ({exc.reason}, byte "
                              f"0x{bad}); re-encode the file as UTF-8") from None


def _xmc_header(path: Path, text: str) -> tuple[int, int, int]:
    toks = text.split()
    hint = ""
    if ":" in text:
        hint = ("; this line looks like a document: a file without the header is read with "
                "format 'svmlight' (zero_based=True, command line --zero-based true)")
    try:
        counts = [int(t) for t in toks]
    except ValueError:
        counts = []
    if len(toks) != 3 or len(counts) != 3 or min(counts) < 0:
        raise DataFormatError(
            f"{path}, line 1: the XMC header must be three non-negative integers "
            f"'n_docs n_features n_labels', found {text.strip()[:80]!r}{hint}")
    if counts[1] == 0:
        raise DataFormatError(f"{path}, line 1: the header declares 0 features: nothing "
                              "to ingest")
    return counts[0], counts[1], counts[2]


def _read_xmc_header(path: Path) -> tuple[int, int, int]:
    with closing(file_lines(path, "XMC file")) as lines:
        for lineno, raw in lines:
            return _xmc_header(path, _decode(raw, path, lineno))
    raise DataFormatError(f"{path} is empty; an XMC file starts with the header line "
                          "'n_docs n_features n_labels'")


# ----------------------------------------------------------------------------- lines


@dataclass
class _Doc:
    lineno: int
    labels: list[int]
    feats: str  # the "index:value" tokens, joined by spaces
    n_feats: int
    qid: bool


def _labels(text: str, where: str) -> list[int]:
    """Label indices of the text before the first feature (``1,5`` or ``1, 5``)."""
    out = []
    for piece in text.split(","):
        tok = piece.strip()
        try:
            value = int(tok)
        except ValueError:
            value = -1
        if value < 0 or not tok.lstrip("+").isdigit():
            if not tok:
                why = "an empty label between commas"
            else:
                why = f"label {tok!r} is not a label index (a non-negative integer)"
            hint = ("; a binary svmlight file (labels +1/-1) is not multi-label"
                    if tok in ("-1", "+1") else "")
            raise DataFormatError(f"{where}: {why} in the label list {text.strip()!r}{hint}")
        out.append(value)
    return out


def _docs(f: _File, fmt: str, n_docs: int | None) -> Iterator[_Doc]:
    """The documents of one file, the header (XMC) and comments (svmlight) left out.

    XMC: ``n_docs`` is the header's count; a blank line among the first ``n_docs`` is a
    document without labels and features, blank lines after them are ignored (the
    caller checks the count).
    """
    path = f.path
    seen = 0
    for lineno, raw in file_lines(path, _WHAT[fmt]):
        if fmt == "xmc" and lineno == 1:
            continue  # the header, read and checked when the corpus was opened
        if fmt == "svmlight":
            # cut before decoding: a comment may be in any encoding
            raw = raw.split(b"#", 1)[0]
        text = _decode(raw, path, lineno)
        toks = text.split()
        if not toks and (fmt == "svmlight" or seen == n_docs):
            continue
        seen += 1
        k = 0
        while k < len(toks) and ":" not in toks[k]:
            k += 1
        labels = _labels(" ".join(toks[:k]), f"{path}, line {lineno}") if k else []
        qid = False
        if fmt == "svmlight" and k < len(toks) and toks[k].startswith("qid:"):
            qid = True
            k += 1
        yield _Doc(lineno, labels, " ".join(toks[k:]), len(toks) - k, qid)


# ----------------------------------------------------------------------------- batches


@dataclass
class _Bounds:
    """The index ranges of one pass, with the words that say where they come from."""

    n_features: int | None  # None: not known yet (svmlight's first pass)
    n_labels: int | None
    offset: int  # subtracted from every feature index: 1 for a one-based file
    features_from: str = ""  # e.g. "the header (line 1) declares 5000 features"
    labels_from: str = ""


@dataclass
class _Batch:
    """The documents of the batch being built."""

    ids: list[str] = field(default_factory=list)
    splits: list[str] = field(default_factory=list)
    where: list[str] = field(default_factory=list)
    labels: list[list[int]] = field(default_factory=list)
    feats: list[str] = field(default_factory=list)  # one string a document: less memory
    counts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, f: _File, row: int, doc: _Doc) -> None:
        self.ids.append(f"{f.stem}:{row}")
        self.splits.append(f.split)
        self.where.append(f"{f.path}, line {doc.lineno}")
        self.labels.append(doc.labels)
        self.feats.append(doc.feats)
        self.counts.append(doc.n_feats)


def _careful(batch: _Batch, bounds: _Bounds) -> NoReturn:
    """Raise the error for the first bad feature token of the batch, token by token."""
    for r, feats in enumerate(batch.feats):
        seen: set[float] = set()
        for tok in feats.split():
            where = batch.where[r]
            idx_text, _, val_text = tok.partition(":")
            if ":" in val_text or not idx_text or not val_text:
                raise DataFormatError(f"{where}: malformed feature {tok!r}; expected "
                                      "'index:value'")
            try:
                idx = float(idx_text)
            except ValueError:
                idx = math.nan
            if not math.isfinite(idx) or idx != math.floor(idx):
                raise DataFormatError(f"{where}: feature index {idx_text!r} in {tok!r} is not "
                                      "an integer")
            try:
                value = float(val_text)
            except ValueError:
                raise DataFormatError(f"{where}: feature value {val_text!r} in {tok!r} is not "
                                      "a number") from None
            if not math.isfinite(value):
                raise DataFormatError(f"{where}: feature value {val_text!r} in {tok!r} is not "
                                      "finite; the store needs finite numbers")
            _check_index(int(idx), tok, where, bounds)
            if idx in seen:
                raise DataFormatError(f"{where}: feature index {idx_text} appears twice on "
                                      "the line; each feature may be given once")
            seen.add(idx)
    raise AssertionError("a bad feature token was flagged but not found")  # pragma: no cover


def _check_index(idx: int, tok: str, where: str, bounds: _Bounds) -> None:
    if idx < bounds.offset:
        if bounds.offset:
            raise DataFormatError(
                f"{where}: feature index {idx} in {tok!r} in a one-based file (indices from "
                "1); read the file with zero_based=True (command line --zero-based true)")
        raise DataFormatError(f"{where}: feature index {idx} in {tok!r} is negative")
    if bounds.n_features is not None and idx - bounds.offset >= bounds.n_features:
        raise DataFormatError(
            f"{where}: feature index {idx} in {tok!r} is out of range: "
            f"{bounds.features_from} (indices {bounds.offset}.."
            f"{bounds.n_features - 1 + bounds.offset})")


def _features(batch: _Batch, bounds: _Bounds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column (offset removed) and value of every feature of the batch, sorted by
    row and column; all parsed at once, and token by token only to name a bad one."""
    n = sum(batch.counts)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    flat = " ".join(batch.feats).replace(":", " ").split()
    nums = None
    if len(flat) == 2 * n:
        try:
            nums = np.array(flat, dtype=np.float64)
        except ValueError:
            nums = None
    if nums is None:
        _careful(batch, bounds)
    idx, vals = nums[0::2], nums[1::2]  # type: ignore[index]
    rows = np.repeat(np.arange(len(batch), dtype=np.int64), batch.counts)
    bad = ~np.isfinite(vals) | ~np.isfinite(idx) | (idx != np.floor(idx)) | (idx < bounds.offset)
    if bounds.n_features is not None:
        bad |= idx - bounds.offset >= bounds.n_features
    if bad.any():
        _careful(batch, bounds)
    cols = idx.astype(np.int64) - bounds.offset
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    if np.any((rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])):
        _careful(batch, bounds)
    return rows, cols, vals


def _check_labels(batch: _Batch, bounds: _Bounds) -> None:
    if bounds.n_labels is None:
        return
    for r, labs in enumerate(batch.labels):
        if labs and max(labs) >= bounds.n_labels:
            raise DataFormatError(
                f"{batch.where[r]}: label index {max(labs)} is out of range: "
                f"{bounds.labels_from} (indices 0..{bounds.n_labels - 1})")


def _finish(batch: _Batch, bounds: _Bounds) -> NumericBatch:
    m = len(batch)
    rows, cols, vals = _features(batch, bounds)
    _check_labels(batch, bounds)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(m, bounds.n_features))
    X.eliminate_zeros()
    # CSR from the label lists: memory grows with the labels given, not m x n_labels
    Y = label_rows(batch.labels, bounds.n_labels)  # type: ignore[arg-type]
    return NumericBatch(ids=batch.ids, X=X, Y=Y, splits=batch.splits)


def _batches(files: list[_File], fmt: str, bounds: _Bounds,
             batch_size: int) -> Iterator[tuple[_Batch, int]]:
    """Batches of at most ``batch_size`` documents, with their numbers of qid: tokens;
    a DataFormatError when an XMC file's number of documents is not its header's."""
    batch, qids = _Batch(), 0
    for f in files:
        row = 0
        for doc in _docs(f, fmt, f.n_docs):
            if row == f.n_docs:
                miscount = (f"{f.path}, line {doc.lineno}: document {row + 1}, but the header "
                            f"(line 1) declares {row} documents; fix the header's first number")
                break
            batch.add(f, row, doc)
            row += 1
            qids += doc.qid
            if len(batch) == batch_size:
                yield batch, qids
                batch, qids = _Batch(), 0
        else:
            if f.n_docs is None or row == f.n_docs:
                continue
            miscount = (f"{f.path}: the header (line 1) declares {f.n_docs} documents but the "
                        f"file has {row} document lines; the file is truncated, or fix the "
                        "header's first number")
        # the documents read so far are given first, so that a bad line before the
        # miscount is the error reported
        if len(batch):
            yield batch, qids
        raise DataFormatError(miscount)
    if len(batch):
        yield batch, qids


# ----------------------------------------------------------------------------- sources


def _source(files: list[_File], fmt: str, bounds: _Bounds, feature_names: list[str] | None,
            label_names: list[str], report: IngestReport) -> NumericSource:
    # Each pass replaces the counts of the previous one, so that the report describes
    # the corpus however often it is read.
    counted = {"docs": 0}

    def batches(batch_size: int) -> Iterator[NumericBatch]:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        report.n_read -= counted["docs"]
        counted["docs"] = 0
        return _numeric_batches(int(batch_size))

    def _numeric_batches(batch_size: int) -> Iterator[NumericBatch]:
        qids = unlabelled = 0
        for batch, q in _batches(files, fmt, bounds, batch_size):
            out = _finish(batch, bounds)
            qids += q
            unlabelled += int(np.count_nonzero(np.diff(out.Y.indptr) == 0))
            report.n_read += len(out)
            counted["docs"] += len(out)
            yield out
        if qids:
            report.note(f"qid: ignored on {qids} lines (query ids have no meaning here)")
        if unlabelled:
            report.note(f"{unlabelled} documents without labels")

    source = f"{fmt}: " + ", ".join(str(f.path) for f in files)
    return NumericSource(feature_names=feature_names, label_names=label_names,
                         batches_fn=batches, source=source, report=report,
                         n_features=bounds.n_features)


def _names(map_path: PathLike, n: int, what: str, bound_words: str) -> list[str]:
    names = read_name_map(map_path, what)
    if len(names) != n:
        raise DataFormatError(f"{map_path}: the {what} has {len(names)} names but "
                              f"{bound_words}; line i of the {what} names index i")
    return names


def read_xmc(
    paths: PathLike | Sequence[PathLike],
    *,
    label_map: PathLike | None = None,
    feature_map: PathLike | None = None,
    report: IngestReport | None = None,
) -> NumericSource:
    """Open files in the Extreme Classification Repository's sparse format.

    Parameters
    ----------
    paths : str, Path or list of them
        One file, or several (e.g. ``train.txt`` and ``test.txt``) read in order as one
        corpus; each starts with its header ``n_docs n_features n_labels``, and the
        headers must agree on the numbers of features and labels.
    label_map, feature_map : str or Path, optional
        Files naming the labels (features), one name a line, line i naming index i;
        their lengths must equal the headers' counts. Without them the labels are named
        by their indices and the features are numbered (``feature_names`` None).
    report : IngestReport, optional
        Report to fill; ``n_read`` counts the documents of the latest pass.

    Returns
    -------
    NumericSource
        ``batches(n)`` re-reads the files on every call.

    Raises
    ------
    DataFormatError
        A malformed header or line, an index beyond the header's counts, a number of
        document lines other than the header's, headers that disagree; the message
        names the file, the line and the bad token.
    MissingPathError
        A file does not exist.
    """
    files = _as_files(paths, "XMC file")
    dims = None
    for f in files:
        n_docs, n_features, n_labels = _read_xmc_header(f.path)
        f.n_docs = n_docs
        if dims is None:
            dims = (n_features, n_labels, f.path)
        elif dims[:2] != (n_features, n_labels):
            raise DataFormatError(
                f"{dims[2]} and {f.path} disagree in their headers (line 1): {dims[0]} "
                f"features and {dims[1]} labels vs {n_features} and {n_labels}; files read as "
                "one corpus must have the same features and labels")
    assert dims is not None
    n_features, n_labels, first = dims
    f_words = f"the header of {first} (line 1) declares {n_features} features"
    l_words = f"the header of {first} (line 1) declares {n_labels} labels"
    bounds = _Bounds(n_features, n_labels, 0, f_words, l_words)
    if n_labels == 0:
        raise DataFormatError(f"{first}, line 1: the header declares 0 labels; multi-label "
                              "data must have labels")
    if n_labels > MAX_LABELS:
        raise DataFormatError(f"{first}, line 1: the header declares {n_labels:,} labels, more "
                              f"than the {MAX_LABELS:,} dmlfe stores (dmlfe.readers.xmc."
                              "MAX_LABELS, the store keeps labels dense); is the header right?")
    feature_names = None if feature_map is None else \
        _names(feature_map, n_features, "feature map", f_words)
    label_names = [str(i) for i in range(n_labels)] if label_map is None else \
        _names(label_map, n_labels, "label map", l_words)
    return _source(files, "xmc", bounds, feature_names, label_names,
                   report if report is not None else IngestReport())


def _zero_based(value: object) -> bool | str:
    if value in ("auto", True, False):
        return value  # type: ignore[return-value]
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise InputError(f"zero_based must be 'auto', True or False, got {value!r}")


def read_svmlight(
    paths: PathLike | Sequence[PathLike],
    *,
    zero_based: bool | str = "auto",
    label_map: PathLike | None = None,
    feature_map: PathLike | None = None,
    report: IngestReport | None = None,
) -> NumericSource:
    """Open svmlight / LibSVM multi-label files (``l1,l2 [qid:n] f:v ... # comment``).

    The files are read once here, to find the numbers of features and labels and to
    check every line, and again by each ``batches(n)``.

    Parameters
    ----------
    paths : str, Path or list of them
        One file, or several read in order as one corpus.
    zero_based : {"auto", True, False}
        Whether the feature indices start at 0. "auto": zero-based when some line holds
        feature index 0, one-based otherwise (see the module's *zero-based rule*).
    label_map, feature_map : str or Path, optional
        Files naming the labels (features), one name a line, line i naming index i
        (after the one-based shift, for features); they also fix the numbers of labels
        (features). Without them the labels are named by their indices, the features
        are numbered (``feature_names`` None), and the numbers are the
        largest index + 1.
    report : IngestReport, optional
        Report to fill; ``n_read`` counts the documents of the latest pass.

    Returns
    -------
    NumericSource

    Raises
    ------
    DataFormatError
        A malformed line (named with its file, line and token), an index beyond a
        map, feature index 0 with ``zero_based=False``, or no document at all.
    MissingPathError
        A file does not exist.
    """
    zero_based = _zero_based(zero_based)
    files = _as_files(paths, "svmlight file")
    report = report if report is not None else IngestReport()
    scan = _Bounds(None, None, 0)
    low = high = top_label = None  # (index, where)
    for batch, _ in _batches(files, "svmlight", scan, 4096):
        rows, cols, _vals = _features(batch, scan)
        if len(cols):
            k_lo, k_hi = int(np.argmin(cols)), int(np.argmax(cols))
            if low is None or cols[k_lo] < low[0]:
                low = (int(cols[k_lo]), batch.where[rows[k_lo]])
            if high is None or cols[k_hi] > high[0]:
                high = (int(cols[k_hi]), batch.where[rows[k_hi]])
        for r, labs in enumerate(batch.labels):
            if labs and (top_label is None or max(labs) > top_label[0]):
                top_label = (max(labs), batch.where[r])
    names = ", ".join(str(f.path) for f in files)
    if high is None:
        raise DataFormatError(f"{names}: no document holds a feature ('index:value'): "
                              "nothing to ingest")
    if zero_based == "auto":
        zero_based = low[0] == 0  # type: ignore[index]
        report.note(f"svmlight feature indices read as {'zero' if zero_based else 'one'}-"
                    f"based ({'a' if zero_based else 'no'} feature index 0 in the files; "
                    "zero_based='auto')")
    elif not zero_based and low[0] == 0:  # type: ignore[index]
        raise DataFormatError(f"{low[1]}: feature index 0 in a one-based file "  # type: ignore[index]
                              "(zero_based=False); read it with zero_based=True "
                              "(command line --zero-based true)")
    offset = 0 if zero_based else 1
    if feature_map is not None:
        feature_names = read_name_map(feature_map, "feature map")
        if high[0] - offset >= len(feature_names):
            raise DataFormatError(
                f"{high[1]}: feature index {high[0]} is out of range: the feature map "
                f"{feature_map} names {len(feature_names)} features (indices {offset}.."
                f"{len(feature_names) - 1 + offset})")
    else:
        feature_names = None
    n_features = high[0] - offset + 1 if feature_names is None else len(feature_names)
    if label_map is not None:
        label_names = read_name_map(label_map, "label map")
        if top_label is not None and top_label[0] >= len(label_names):
            raise DataFormatError(
                f"{top_label[1]}: label index {top_label[0]} is out of range: the label map "
                f"{label_map} names {len(label_names)} labels (indices 0.."
                f"{len(label_names) - 1})")
    elif top_label is None:
        raise DataFormatError(f"{names}: no document has a label; multi-label data must have "
                              "labels (or pass a label map naming them)")
    elif top_label[0] >= MAX_LABELS:
        raise DataFormatError(f"{top_label[1]}: label index {top_label[0]:,} is beyond the "
                              f"{MAX_LABELS:,} labels dmlfe stores (dmlfe.readers.xmc."
                              "MAX_LABELS)")
    else:
        label_names = [str(i) for i in range(top_label[0] + 1)]
    bounds = _Bounds(n_features, len(label_names), offset, f"{n_features} features",
                     f"{len(label_names)} labels")
    return _source(files, "svmlight", bounds, feature_names, label_names, report)
