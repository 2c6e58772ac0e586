"""Streaming readers for multi-label ARFF files in the MULAN and MEKA conventions.

Both conventions store a plain Weka ARFF file whose attributes are the features
and the labels together; they differ only in how the labels are named:

* **MULAN**: a companion XML file (namespace ``http://mulan.sourceforge.net/labels``)
  lists ``<label name="...">`` elements, possibly nested in hierarchies; every
  listed name is a label attribute, in the order the XML lists them.
* **MEKA**: the ``@relation`` name carries ``-C n``: the first ``n`` attributes are
  the labels, or the last ``-n`` when ``n`` is negative.

Rows may be dense (``v1,v2,...``) or sparse (``{index value, ...}``; an omitted
value is 0, which for a nominal attribute means its first declared value). Files
may be plain, gzip (``.gz``) or bzip2 (``.bz2``) compressed; the extension decides.
A UTF-8 byte order mark at the start of the file is ignored.

Files are read line by line and yielded as :class:`~dmlfe.readers.base.NumericBatch`
objects of a bounded number of rows, so a file larger than memory reads in bounded
memory. Features become float64 CSR matrices (explicit zeros dropped), labels a
uint8 0/1 matrix.

Value encoding
--------------
* ``numeric`` / ``real`` / ``integer`` attributes: the number, which must be finite.
* nominal attributes ``{a,b,...}``: if every declared value is a finite number, the
  number itself (``{0,1}`` gives 0.0/1.0); otherwise the 0-based index of the value
  in the declaration (``{red,green}``: red -> 0.0, green -> 1.0). The reader notes
  in the :class:`~dmlfe.readers.base.IngestReport` which attributes were index-coded.
* ``string``, ``date`` and ``relational`` attributes cannot be stored as numbers:
  the reader refuses them with :class:`~dmlfe.readers.base.DataFormatError`.
* Label attributes must be nominal with values 0/1 or numeric holding 0 or 1.
* Missing values (``?``) are refused: the store needs complete numeric data.

Errors
------
Every problem with a file is a :class:`~dmlfe.errors.DataFormatError` naming the file
(and the line where known): a malformed header or row, but also a file that cannot be
decompressed (truncated, or not compressed as its extension says) or is not UTF-8. A
missing file is a :class:`~dmlfe.errors.MissingPathError`.
"""

from __future__ import annotations

import bz2
import gzip
import math
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import InputError, MissingPathError
from dmlfe.readers import base
from dmlfe.readers.base import (
    DataFormatError,
    IngestReport,
    NumericBatch,
    NumericSource,
    sniff_compression,
    split_from_file_name,
)

__all__ = ["read_mulan", "read_meka"]

MULAN_NS = "http://mulan.sourceforge.net/labels"

PathLike = str | Path
_MEKA_C = re.compile(r"-C\s+(-?\d+)")
_NUMERIC_TYPES = ("numeric", "real", "integer")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


# ----------------------------------------------------------------------------- header


@dataclass(frozen=True)
class _Attr:
    """One ``@attribute`` declaration."""

    name: str
    kind: str  # "numeric", "nominal", "string", "date" or "relational"
    values: tuple[str, ...] = ()
    lineno: int = 0

    def signature(self) -> tuple:
        # The line number is not part of the identity: train and test files may
        # differ in comments yet declare the same attributes.
        return (self.name, self.kind, self.values)

    def describe(self) -> str:
        if self.kind == "nominal":
            return f"{self.name!r} {{{','.join(self.values)}}}"
        return f"{self.name!r} {self.kind}"


@dataclass
class _Header:
    path: Path
    relation: str
    attrs: list[_Attr]
    relation_lineno: int = 0


_COMPRESSION = {".gz": "gzip", ".bz2": "bzip2"}
_RENAME = {"gzip": ".gz", "bzip2": ".bz2"}


def _open_text(path: Path) -> TextIO:
    """Open a plain, .gz or .bz2 file as UTF-8 text (the extension decides; a BOM is dropped)."""
    suffix = path.suffix.lower()
    # "utf-8-sig" decodes as UTF-8 and drops a byte order mark at the start, if any.
    if suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8-sig", newline=None)
    if suffix == ".bz2":
        return bz2.open(path, "rt", encoding="utf-8-sig", newline=None)
    return open(path, encoding="utf-8-sig", newline=None)  # noqa: SIM115


def _read_failure(path: Path, lineno: int, exc: Exception) -> str:
    """Words for a failure to read/decompress/decode ``path`` after ``lineno`` lines."""
    where = f"after line {lineno}" if lineno else "before its first line"
    named = _COMPRESSION.get(path.suffix.lower())
    found = sniff_compression(path)
    found = found if found in _RENAME else None  # ARFF files are plain, .gz or .bz2
    if isinstance(exc, UnicodeDecodeError):
        bad = exc.object[exc.start : exc.start + 1].hex()
        msg = (f"{path}: not valid UTF-8 {where} ({exc.reason}, byte 0x{bad}); "
               "re-encode the file as UTF-8")
        if found is not None and found != named:
            msg += (f"; its content is {found}-compressed: name it with the "
                    f"{_RENAME[found]} extension")
        return msg
    if named is not None:
        msg = (f"{path}: cannot decompress {where}: the file is truncated or not "
               f"{named}-compressed ({type(exc).__name__}: {exc})")
        if found is None:
            msg += f"; its content is not {named} data (plain text?): remove the extension"
        elif found != named:
            msg += (f"; its content is {found}-compressed: name it with the "
                    f"{_RENAME[found]} extension")
        else:
            msg += "; download or compress the file again"
        return msg
    return f"{path}: cannot be read {where} ({type(exc).__name__}: {exc})"


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of an ARFF file: the one place that opens and reads one.

    Every failure to open, decompress or decode becomes a :class:`DataFormatError`
    naming the file and the last line read (a missing file: :class:`MissingPathError`),
    and so is a line above :data:`dmlfe.readers.base.MAX_LINE_BYTES` characters. Use it with
    :func:`contextlib.closing` when not reading to the end.
    """
    # Read at call time (not bound at import), so that tests can lower it.
    limit = base.MAX_LINE_BYTES
    lineno = 0
    try:
        with _open_text(path) as f:
            # readline(limit + 1) stops there: an over-long line (a decompression bomb)
            # is refused without being held whole. Text mode counts characters.
            while line := f.readline(limit + 1):
                lineno += 1
                if len(line) > limit:
                    raise base.line_too_long(f"{path}, line {lineno}", limit)
                yield lineno, line
    except FileNotFoundError as exc:
        raise MissingPathError(f"ARFF file {path} not found") from exc
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        # OSError covers gzip.BadGzipFile and bz2's "Invalid data stream"; EOFError a
        # truncated stream; zlib.error a corrupt deflate block.
        raise DataFormatError(_read_failure(path, lineno, exc)) from exc


def _file_stem(path: Path) -> str:
    """File name without compression and ``.arff`` extensions (``Enron.arff.bz2`` -> ``Enron``)."""
    name = path.name
    for ext in (".gz", ".bz2"):
        if name.lower().endswith(ext):
            name = name[: -len(ext)]
            break
    if name.lower().endswith(".arff"):
        name = name[: -len(".arff")]
    return name


def _unquote(tok: str) -> str:
    """Remove ARFF quotes ('...' or "...") and resolve backslash escapes."""
    if len(tok) >= 2 and tok[0] in "'\"" and tok[-1] == tok[0]:
        body = tok[1:-1]
        if "\\" not in body:
            return body
        out = []
        i = 0
        while i < len(body):
            ch = body[i]
            if ch == "\\" and i + 1 < len(body):
                i += 1
                ch = _ESCAPES.get(body[i], body[i])
            out.append(ch)
            i += 1
        return "".join(out)
    return tok


def _split_outside_quotes(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` at ``sep`` where it is not inside quotes; pieces keep their quotes."""
    pieces: list[str] = []
    start = 0
    while (cut := _find_outside_quotes(text, sep, start)) >= 0:
        pieces.append(text[start:cut])
        start = cut + 1
    pieces.append(text[start:])
    return pieces


def _find_outside_quotes(text: str, chars: str, start: int = 0) -> int:
    """Index of the first of ``chars`` outside quotes at or after ``start``, or -1."""
    quote = ""
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in chars:
            return i
        i += 1
    return -1


def _strip_comment(line: str) -> str:
    """Drop a ``%`` comment that starts outside quotes (Weka treats the rest of the line so)."""
    if "%" not in line:
        return line
    pos = _find_outside_quotes(line, "%")
    return line if pos < 0 else line[:pos]


def _read_name(text: str, where: str) -> tuple[str, str]:
    """Split ``name type...`` into the (unquoted) name and the rest."""
    text = text.lstrip()
    if not text:
        raise DataFormatError(
            f"{where}: @attribute without a name; expected '@attribute NAME TYPE'"
        )
    if text[0] in "'\"":
        quote = text[0]
        i = 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == quote:
                return _unquote(text[: i + 1]), text[i + 1 :]
            i += 1
        raise DataFormatError(f"{where}: attribute name {text!r} has no closing {quote}")
    m = re.match(r"[^\s{]+", text)
    if m is None:  # the text starts with '{': a type without a name
        raise DataFormatError(
            f"{where}: @attribute without a name before {text[:40]!r}; expected "
            "'@attribute NAME TYPE'"
        )
    return m.group(0), text[m.end() :]


def _parse_attribute(rest: str, where: str, lineno: int) -> _Attr:
    name, type_text = _read_name(rest, where)
    type_text = type_text.strip()
    low = type_text.lower()
    if low.startswith("{"):
        close = _find_outside_quotes(type_text, "}")
        if close < 0 or type_text[close + 1 :].strip():
            raise DataFormatError(
                f"{where}: nominal attribute {name!r} has a malformed value list {type_text!r}; "
                "expected '{value1,value2,...}'"
            )
        inner = type_text[1:close]
        values = tuple(_unquote(v.strip()) for v in _split_outside_quotes(inner))
        if not inner.strip() or any(v == "" for v in values):
            raise DataFormatError(
                f"{where}: nominal attribute {name!r} has an empty value in {type_text!r}"
            )
        if len(set(values)) != len(values):
            raise DataFormatError(
                f"{where}: nominal attribute {name!r} declares a value twice in {type_text!r}"
            )
        return _Attr(name, "nominal", values, lineno)
    if low in _NUMERIC_TYPES:
        return _Attr(name, "numeric", (), lineno)
    for kind in ("string", "date", "relational"):
        if low.split(maxsplit=1)[:1] == [kind]:
            return _Attr(name, kind, (), lineno)
    raise DataFormatError(
        f"{where}: attribute {name!r} has unknown type {type_text!r}; expected numeric, real, "
        "integer, a nominal list {a,b,...}, string or date"
    )


def _parse_header(lines: Iterator[tuple[int, str]], path: Path) -> _Header:
    """Consume the lines up to and including ``@data``; return the header."""
    relation = ""
    relation_lineno = 0
    attrs: list[_Attr] = []
    seen: dict[str, int] = {}
    for lineno, raw in lines:
        line = _strip_comment(raw).strip()
        if not line:
            continue
        where = f"{path}, line {lineno}"
        low = line[:11].lower()
        if low.startswith("@relation"):
            relation = _unquote(line[len("@relation") :].strip())
            relation_lineno = lineno
        elif low.startswith("@attribute"):
            attr = _parse_attribute(line[len("@attribute") :], where, lineno)
            if attr.name in seen:
                raise DataFormatError(
                    f"{where}: attribute {attr.name!r} is declared twice (first on line "
                    f"{seen[attr.name]}); attribute names must be unique"
                )
            seen[attr.name] = lineno
            attrs.append(attr)
        elif low.startswith("@data"):
            if not attrs:
                raise DataFormatError(f"{where}: @data before any @attribute declaration")
            if line[len("@data") :].strip():
                raise DataFormatError(
                    f"{where}: unexpected text after @data; data rows must start on the next line"
                )
            return _Header(path, relation, attrs, relation_lineno)
        else:
            raise DataFormatError(
                f"{where}: expected @relation, @attribute or @data in the ARFF header, "
                f"found {line[:60]!r}"
            )
    raise DataFormatError(f"{path}: no @data line; the file is not a complete ARFF file")


def _read_header(path: Path) -> _Header:
    with closing(_lines(path)) as lines:
        return _parse_header(lines, path)


# ----------------------------------------------------------------------------- layout


def _finite_number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@dataclass
class _Layout:
    """How the attributes of a corpus map to feature columns and label columns."""

    attrs: list[_Attr]
    feature_names: list[str]
    label_names: list[str]
    # Per attribute position: feature column (>= 0) or ``~label column`` (< 0).
    cols: list[int]
    # Per attribute position: text -> float (features) or text -> 0/1 int (labels).
    convs: list[Callable[[str], float]]
    # Per attribute position: the value an omitted sparse entry stands for.
    defaults: list[float]
    index_coded: list[str]

    @property
    def n_attrs(self) -> int:
        return len(self.attrs)

    @property
    def sparse_defaults_zero(self) -> bool:
        return not any(self.defaults)


def _label_from_number(text: str) -> int:
    value = float(text)
    if value == 0.0:
        return 0
    if value == 1.0:
        return 1
    raise ValueError(text)


def _make_layout(header: _Header, label_positions: list[int]) -> _Layout:
    """Build the column layout; ``label_positions`` are attribute positions in label order."""
    where = str(header.path)
    attrs = header.attrs
    label_col = {p: j for j, p in enumerate(label_positions)}
    cols: list[int] = []
    convs: list[Callable[[str], float]] = []
    defaults: list[float] = []
    feature_names: list[str] = []
    index_coded: list[str] = []
    for p, a in enumerate(attrs):
        aw = f"{where}, line {a.lineno}"
        if p in label_col:
            cols.append(~label_col[p])
            if a.kind == "numeric":
                convs.append(_label_from_number)
                defaults.append(0)
                continue
            if a.kind != "nominal":
                raise DataFormatError(
                    f"{aw}: label attribute {a.name!r} has type {a.kind}; label attributes "
                    "must be nominal {0,1} or numeric with values 0/1"
                )
            mapping: dict[str, float] = {}
            for v in a.values:
                num = _finite_number(v)
                if num not in (0.0, 1.0):
                    raise DataFormatError(
                        f"{aw}: label attribute {a.name!r} declares value {v!r}; label "
                        "attributes must be nominal {0,1} or numeric with values 0/1"
                    )
                mapping[v] = int(num)  # type: ignore[arg-type]
            convs.append(mapping.__getitem__)
            defaults.append(mapping[a.values[0]])
            continue
        if a.kind in ("string", "date", "relational"):
            raise DataFormatError(
                f"{aw}: attribute {a.name!r} has type {a.kind}, which cannot be stored as a "
                "numeric feature; remove it from the file (or convert it to numbers, e.g. with "
                "Weka's StringToWordVector) before ingesting"
            )
        cols.append(len(feature_names))
        feature_names.append(a.name)
        if a.kind == "numeric":
            convs.append(float)
            defaults.append(0.0)
            continue
        numbers = [_finite_number(v) for v in a.values]
        if all(n is not None for n in numbers):
            mapping = dict(zip(a.values, numbers, strict=True))  # type: ignore[arg-type]
        else:
            mapping = {v: float(i) for i, v in enumerate(a.values)}
            index_coded.append(a.name)
        convs.append(mapping.__getitem__)
        defaults.append(mapping[a.values[0]])
    return _Layout(
        attrs=attrs,
        feature_names=feature_names,
        label_names=[attrs[p].name for p in label_positions],
        cols=cols,
        convs=convs,
        defaults=defaults,
        index_coded=index_coded,
    )


# ----------------------------------------------------------------------------- rows


class _Fallback(Exception):
    """The fast row parser cannot handle a line; the careful parser takes over."""


class _Batch:
    """Buffers of the batch being built (CSR parts of X and of the labels, ids, splits).

    The parsers write a row's labels as bytes into ``ybuf`` (one per label column);
    :meth:`end_row` keeps the columns that are 1 and empties it, so a batch holds its
    labels as CSR parts, never rows x labels bytes (some corpora have thousands).
    """

    def __init__(self, n_labels: int) -> None:
        self.n_labels = n_labels
        self.indptr: list[int] = [0]
        self.indices: list[int] = []
        self.data: list[float] = []
        self.ybuf = bytearray()  # the labels of the row being parsed
        self.yindices: list[int] = []
        self.yindptr: list[int] = [0]
        self.ids: list[str] = []
        self.splits: list[str] = []
        self.where: list[tuple[Path, int]] = []

    def __len__(self) -> int:
        return len(self.ids)

    def rollback(self) -> None:
        """Drop the partial row the fast parser was writing."""
        del self.indices[self.indptr[-1] :]
        del self.data[self.indptr[-1] :]
        del self.ybuf[:]

    def end_row(self) -> None:
        """Move the finished row's label bytes to the CSR label parts."""
        if self.ybuf.count(0) != len(self.ybuf):  # at least one label (a quick C scan)
            row = np.frombuffer(bytes(self.ybuf), dtype=np.uint8)
            self.yindices.extend(np.flatnonzero(row).tolist())
        self.yindptr.append(len(self.yindices))
        del self.ybuf[:]

    def finish(self, layout: _Layout) -> NumericBatch:
        n = len(self.ids)
        data = np.array(self.data, dtype=np.float64)
        indices = np.array(self.indices, dtype=np.int64)
        indptr = np.array(self.indptr, dtype=np.int64)
        finite = np.isfinite(data)
        if not finite.all():
            k = int(np.argmin(finite))
            row = int(np.searchsorted(indptr, k, side="right")) - 1
            path, lineno = self.where[row]
            name = layout.feature_names[int(indices[k])]
            raise DataFormatError(
                f"{path}, line {lineno}: value {data[k]!r} of numeric attribute {name!r} is not "
                "finite; the store needs finite numeric data: fix or remove it before ingesting"
            )
        X = sp.csr_matrix((data, indices, indptr), shape=(n, len(layout.feature_names)))
        Y = sp.csr_matrix((np.ones(len(self.yindices), dtype=np.uint8),
                           np.array(self.yindices, dtype=np.int64),
                           np.array(self.yindptr, dtype=np.int64)), shape=(n, self.n_labels))
        return NumericBatch(ids=self.ids, X=X, Y=Y, splits=self.splits)


class _RowParser:
    """Parses the data lines of one file into a :class:`_Batch`."""

    def __init__(self, layout: _Layout, path: Path) -> None:
        self.layout = layout
        self.path = path
        self.n = layout.n_attrs
        self.cols = layout.cols
        self.convs = layout.convs
        # Label bytes of a row before its entries are applied (label-column order).
        defaults = bytearray(len(layout.label_names))
        for p, c in enumerate(layout.cols):
            if c < 0:
                defaults[~c] = int(layout.defaults[p])
        self.label_defaults = bytes(defaults)
        self.sparse_fast = layout.sparse_defaults_zero

    # The fast paths handle the common unquoted rows; any irregularity falls back to
    # the careful parser, which either handles the row (quotes, comments) or raises
    # the precise error.
    def add(self, batch: _Batch, line: str, lineno: int) -> None:
        if "'" in line or '"' in line or "%" in line:
            self._add_careful(batch, line, lineno)
            return
        try:
            if line[0] == "{":
                if not self.sparse_fast:
                    raise _Fallback
                self._add_sparse_fast(batch, line)
            else:
                self._add_dense_fast(batch, line)
        except (_Fallback, ValueError, KeyError, IndexError, TypeError):
            batch.rollback()
            self._add_careful(batch, line, lineno)
            return
        batch.indptr.append(len(batch.indices))
        batch.end_row()

    def _add_sparse_fast(self, batch: _Batch, line: str) -> None:
        if line[-1] != "}":
            raise _Fallback
        body = line[1:-1]
        if "{" in body or "}" in body:
            raise _Fallback
        cols, convs = self.cols, self.convs
        indices, data, ybuf = batch.indices, batch.data, batch.ybuf
        base = len(ybuf)
        ybuf += self.label_defaults
        if not body.strip():
            return
        prev = -1
        for item in body.split(","):
            idx, text = item.split()
            p = int(idx)
            if p <= prev:
                raise _Fallback
            prev = p
            value = convs[p](text)
            c = cols[p]
            if c >= 0:
                if value:
                    indices.append(c)
                    data.append(value)
            else:
                ybuf[base + ~c] = value

    def _add_dense_fast(self, batch: _Batch, line: str) -> None:
        toks = line.split(",")
        if len(toks) != self.n:
            raise _Fallback
        if " " in line or "\t" in line:
            toks = [t.strip() for t in toks]
        indices, data, ybuf = batch.indices, batch.data, batch.ybuf
        base = len(ybuf)
        ybuf += self.label_defaults
        for c, conv, text in zip(self.cols, self.convs, toks, strict=True):
            value = conv(text)
            if c >= 0:
                if value:
                    indices.append(c)
                    data.append(value)
            else:
                ybuf[base + ~c] = value

    # -- careful path -----------------------------------------------------------------

    def _convert(self, p: int, raw: str, where: str) -> float:
        a = self.layout.attrs[p]
        text = _unquote(raw.strip())
        is_label = self.cols[p] < 0
        if text == "?":
            what = "label" if is_label else "feature"
            raise DataFormatError(
                f"{where}: missing value '?' for {what} attribute {a.name!r}; the store needs "
                "complete numeric data: impute or remove the missing values before ingesting"
            )
        if a.kind == "nominal":
            if text not in a.values:
                raise DataFormatError(
                    f"{where}: value {text!r} of nominal attribute {a.name!r} is not one of its "
                    f"declared values {{{','.join(a.values)}}}"
                )
            return self.convs[p](text)
        number = _finite_number(text)
        if number is None:
            raise DataFormatError(
                f"{where}: value {text!r} of numeric attribute {a.name!r} is not a finite number"
            )
        if is_label and number not in (0.0, 1.0):
            raise DataFormatError(
                f"{where}: label attribute {a.name!r} has value {text!r}; labels must be 0 or 1"
            )
        return int(number) if is_label else number

    def _add_careful(self, batch: _Batch, line: str, lineno: int) -> None:
        where = f"{self.path}, line {lineno}"
        text = _strip_comment(line).strip()
        if not text:
            return  # a line holding only a comment
        if text[0] == "{":
            values = self._careful_sparse(text, where)
        else:
            values = self._careful_dense(text, where)
        base = len(batch.ybuf)
        batch.ybuf += self.label_defaults
        for c, value in zip(self.cols, values, strict=True):
            if c >= 0:
                if value:
                    batch.indices.append(c)
                    batch.data.append(value)
            else:
                batch.ybuf[base + ~c] = int(value)
        batch.indptr.append(len(batch.indices))
        batch.end_row()

    def _careful_sparse(self, text: str, where: str) -> list[float]:
        close = _find_outside_quotes(text, "}")
        if close < 0:
            raise DataFormatError(f"{where}: sparse row has no closing '}}': {text[:80]!r}")
        rest = text[close + 1 :].strip()
        if rest:
            if rest.startswith(",") and rest[1:].lstrip().startswith("{"):
                raise DataFormatError(
                    f"{where}: weighted instance {rest!r} after the sparse row; instance "
                    "weights are not supported: remove them before ingesting"
                )
            raise DataFormatError(f"{where}: unexpected text {rest[:40]!r} after the sparse row")
        body = text[1:close]
        values = list(self.layout.defaults)
        if not body.strip():
            return values
        prev = -1
        for piece in _split_outside_quotes(body):
            entry = piece.strip()
            parts = entry.split(None, 1)
            if len(parts) != 2:
                raise DataFormatError(
                    f"{where}: malformed sparse entry {entry!r}; expected 'index value'"
                )
            try:
                p = int(parts[0])
            except ValueError:
                raise DataFormatError(
                    f"{where}: sparse index {parts[0]!r} is not an integer (entry {entry!r})"
                ) from None
            if not 0 <= p < self.n:
                raise DataFormatError(
                    f"{where}: sparse index {p} is out of range; the header declares {self.n} "
                    f"attributes (indices 0..{self.n - 1})"
                )
            if p <= prev:
                raise DataFormatError(
                    f"{where}: sparse index {p} follows index {prev}; indices in a sparse row "
                    "must be strictly increasing"
                )
            prev = p
            values[p] = self._convert(p, parts[1], where)
        return values

    def _careful_dense(self, text: str, where: str) -> list[float]:
        toks = _split_outside_quotes(text)
        last = toks[-1].strip()
        if last.startswith("{") and last.endswith("}"):
            raise DataFormatError(
                f"{where}: weighted instance {last!r} at the end of the row; instance weights "
                "are not supported: remove them before ingesting"
            )
        if len(toks) != self.n:
            raise DataFormatError(
                f"{where}: dense row has {len(toks)} values but the header declares "
                f"{self.n} attributes"
            )
        return [self._convert(p, tok, where) for p, tok in enumerate(toks)]


# ----------------------------------------------------------------------------- corpus


@dataclass
class _File:
    path: Path
    stem: str
    split: str
    header: _Header


def _as_paths(arff_paths: PathLike | Sequence[PathLike]) -> list[Path]:
    if isinstance(arff_paths, (str, Path)):
        paths = [Path(arff_paths)]
    else:
        paths = [Path(p) for p in arff_paths]
    if not paths:
        raise InputError("no ARFF file given; pass a path or a non-empty list of paths")
    for p in paths:
        if not p.exists():
            raise MissingPathError(f"ARFF file {p} not found")
        if not p.is_file():
            raise DataFormatError(
                f"{p} is not a file; pass ARFF files (.arff, .arff.gz or .arff.bz2)"
            )
    return paths


def _read_files(paths: list[Path]) -> list[_File]:
    """Read every header, check that the attribute lists agree and the ids are unique."""
    files: list[_File] = []
    stems: dict[str, Path] = {}
    for path in paths:
        header = _read_header(path)
        stem = _file_stem(path)
        if stem in stems:
            raise DataFormatError(
                f"{stems[stem]} and {path} have the same file stem {stem!r}, so their document "
                "ids ('stem:row') would collide; rename one of them"
            )
        stems[stem] = path
        files.append(_File(path, stem, split_from_file_name(stem), header))
    first = files[0].header
    for f in files[1:]:
        a = [x.signature() for x in first.attrs]
        b = [x.signature() for x in f.header.attrs]
        if a == b:
            continue
        if len(a) != len(b):
            detail = f"{len(a)} attributes vs {len(b)}"
        else:
            i = next(i for i in range(len(a)) if a[i] != b[i])
            detail = (
                f"attribute #{i + 1}: {first.attrs[i].describe()} vs "
                f"{f.header.attrs[i].describe()}"
            )
        raise DataFormatError(
            f"{first.path} and {f.path} declare different attribute lists ({detail}); files "
            "read as one corpus must have identical attributes"
        )
    return files


def _make_source(
    files: list[_File], layout: _Layout, fmt: str, report: IngestReport | None
) -> NumericSource:
    if not layout.feature_names:
        names = ", ".join(str(f.path) for f in files)
        raise DataFormatError(
            f"{names}: all {layout.n_attrs} attributes are labels, there is no feature "
            "attribute: nothing to ingest"
        )
    report = report if report is not None else IngestReport()
    if layout.index_coded:
        shown = ", ".join(repr(n) for n in layout.index_coded[:10])
        more = f" and {len(layout.index_coded) - 10} more" if len(layout.index_coded) > 10 else ""
        report.note(
            f"{len(layout.index_coded)} nominal attribute(s) with non-numeric values stored as "
            f"0-based category indices: {shown}{more}"
        )
    # Each pass replaces the rows the previous pass counted, so that n_read describes the
    # corpus however often it is re-read, while counts other readers put in a shared report
    # stay.
    counted = [0]

    def batches(batch_size: int) -> Iterator[NumericBatch]:
        if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        report.n_read -= counted[0]
        counted[0] = 0
        return _iter_batches(files, layout, int(batch_size), report, counted)

    source = f"{fmt} ARFF: " + ", ".join(str(f.path) for f in files)
    return NumericSource(
        feature_names=list(layout.feature_names),
        label_names=list(layout.label_names),
        batches_fn=batches,
        source=source,
        report=report,
    )


def _iter_batches(
    files: list[_File],
    layout: _Layout,
    batch_size: int,
    report: IngestReport,
    counted: list[int],
) -> Iterator[NumericBatch]:
    n_labels = len(layout.label_names)
    batch = _Batch(n_labels)
    for f in files:
        parser = _RowParser(layout, f.path)
        with closing(_lines(f.path)) as lines:
            header = _parse_header(lines, f.path)
            if [a.signature() for a in header.attrs] != [a.signature() for a in f.header.attrs]:
                raise DataFormatError(
                    f"{f.path}: the header changed since the corpus was opened; open it again"
                )
            row = 0
            for lineno, raw in lines:
                line = raw.strip()
                if not line or line[0] == "%":
                    continue
                n_before = len(batch)
                parser.add(batch, line, lineno)
                if len(batch.indptr) - 1 == n_before:
                    continue  # a comment-only line the careful parser skipped
                batch.ids.append(f"{f.stem}:{row}")
                batch.splits.append(f.split)
                batch.where.append((f.path, lineno))
                row += 1
                if len(batch) == batch_size:
                    out = batch.finish(layout)
                    report.n_read += len(out)
                    counted[0] += len(out)
                    yield out
                    batch = _Batch(n_labels)
    if len(batch):
        out = batch.finish(layout)
        report.n_read += len(out)
        counted[0] += len(out)
        yield out


def _read_xml_labels(labels_xml: Path) -> list[str]:
    """Label names of a MULAN XML file in document order (nested labels included)."""
    if not labels_xml.exists():
        raise MissingPathError(f"MULAN labels file {labels_xml} not found")
    try:
        root = ET.parse(labels_xml).getroot()
    except ET.ParseError as exc:
        raise DataFormatError(f"{labels_xml}: not well-formed XML ({exc})") from exc
    except (OSError, ValueError, LookupError) as exc:  # a folder, an unknown encoding...
        raise DataFormatError(
            f"{labels_xml}: cannot be read as a MULAN labels XML file "
            f"({type(exc).__name__}: {exc})"
        ) from exc
    names: list[str] = []
    for el in root.iter():
        tag = el.tag if isinstance(el.tag, str) else ""
        ns, _, local = tag[1:].partition("}") if tag.startswith("{") else ("", "", tag)
        if local != "label" or ns not in ("", MULAN_NS):
            continue
        name = el.get("name")
        if name is None:
            raise DataFormatError(
                f"{labels_xml}: a <label> element has no name attribute; expected "
                '<label name="...">'
            )
        if name in names:
            raise DataFormatError(f"{labels_xml}: label {name!r} is listed twice")
        names.append(name)
    if not names:
        raise DataFormatError(
            f"{labels_xml}: no <label name=\"...\"> elements found (namespace {MULAN_NS}); "
            "is this a MULAN labels file?"
        )
    return names


def read_mulan(
    arff_paths: PathLike | Sequence[PathLike],
    labels_xml: PathLike,
    *,
    report: IngestReport | None = None,
) -> NumericSource:
    """Open a MULAN multi-label data set (ARFF + labels XML) as a streaming numeric source.

    Parameters
    ----------
    arff_paths : str, Path or list of them
        One ARFF file, or several (e.g. train and test) read in order as one corpus.
        All files must declare identical attributes. ``.gz`` and ``.bz2`` files are
        decompressed on the fly.
    labels_xml : str or Path
        The MULAN XML file naming the label attributes (``<label name="...">``,
        possibly nested); the labels are ordered as the XML lists them.
    report : IngestReport, optional
        Report to fill; a new one is made when omitted. ``n_read`` counts the rows of
        the latest pass over the files.

    Returns
    -------
    NumericSource
        ``feature_names``: the non-label attributes in file order; ``label_names``:
        the XML order. Each document's id is ``"{file stem}:{row}"`` (0-based row in
        its file) and its split is inferred from the file name (``x-train.arff`` or
        ``x_train.arff`` -> "train", ``x-test.arff`` -> "test", otherwise the stem). ``batches(n)``
        re-reads the files on every call.

    Raises
    ------
    DataFormatError
        For a malformed header or row (the message names the file and line), labels of
        the XML missing from the ARFF, attributes that cannot be stored as numbers, no
        feature attribute at all, or a file that cannot be decompressed or decoded.
    MissingPathError
        When an ARFF file or the XML file does not exist.
    """
    paths = _as_paths(arff_paths)
    labels_xml = Path(labels_xml)
    files = _read_files(paths)
    label_names = _read_xml_labels(labels_xml)
    header = files[0].header
    position = {a.name: p for p, a in enumerate(header.attrs)}
    missing = [n for n in label_names if n not in position]
    if missing:
        shown = ", ".join(repr(n) for n in missing[:20])
        more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
        raise DataFormatError(
            f"{labels_xml} lists {len(missing)} label(s) that {header.path} does not declare as "
            f"attributes: {shown}{more}; check that the XML file belongs to this ARFF file"
        )
    layout = _make_layout(header, [position[n] for n in label_names])
    return _make_source(files, layout, "MULAN", report)


def read_meka(
    arff_paths: PathLike | Sequence[PathLike],
    *,
    report: IngestReport | None = None,
) -> NumericSource:
    """Open a MEKA multi-label ARFF data set as a streaming numeric source.

    The ``@relation`` name must contain ``-C n`` (e.g. ``@relation 'IMDB: -C 28'``):
    the first ``n`` attributes are the labels, or the last ``-n`` when ``n`` is negative.

    Parameters
    ----------
    arff_paths : str, Path or list of them
        One ARFF file, or several read in order as one corpus; all files must declare
        identical attributes and the same ``-C``. ``.gz``/``.bz2`` are decompressed.
    report : IngestReport, optional
        Report to fill; ``n_read`` counts the rows of the latest pass.

    Returns
    -------
    NumericSource
        As for :func:`read_mulan`, with the labels in file order.

    Raises
    ------
    DataFormatError
        For a missing or invalid ``-C``, a malformed header or row (file and line named),
        attributes that cannot be stored as numbers, or a file that cannot be
        decompressed or decoded.
    MissingPathError
        When a file does not exist.
    """
    paths = _as_paths(arff_paths)
    files = _read_files(paths)
    counts: list[int] = []
    for f in files:
        h = f.header
        m = _MEKA_C.search(h.relation)
        if m is None:
            raise DataFormatError(
                f"{h.path}, line {h.relation_lineno}: the @relation name {h.relation!r} has no "
                "'-C n' option, so the label attributes are unknown; MEKA files name the number "
                "of labels there (e.g. @relation 'data: -C 6'). For MULAN files use read_mulan"
            )
        counts.append(int(m.group(1)))
    if len(set(counts)) > 1:
        listing = ", ".join(f"{f.path}: -C {c}" for f, c in zip(files, counts, strict=True))
        raise DataFormatError(f"the files disagree on the number of labels ({listing})")
    c = counts[0]
    header = files[0].header
    n = len(header.attrs)
    if c == 0 or abs(c) >= n:
        raise DataFormatError(
            f"{header.path}, line {header.relation_lineno}: -C {c} is invalid for {n} "
            f"attributes; it must be between 1 and {n - 1} labels (negative: the last ones)"
        )
    label_positions = list(range(c)) if c > 0 else list(range(n + c, n))
    layout = _make_layout(header, label_positions)
    return _make_source(files, layout, "MEKA", report)
