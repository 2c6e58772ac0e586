"""Readers for generic labelled text corpora in JSON Lines and Parquet.

Each record is one document with a text field, a labels field (a list of label
strings) and optionally an id field and a split field; the field names are
configurable. Both readers stream: JSON Lines line by line (plain or compressed),
Parquet record batch by record batch with pyarrow, so memory stays bounded by the
batch size (plus one set of document ids, kept to reject duplicates).

Checks are strict where a value cannot be read as meant (a missing field, labels
that are not a list, an invalid JSON line, a repeated id: :class:`DataFormatError`
naming file, line or record, field and value) and lenient where the meaning is
clear (null text -> empty document, null labels -> no labels, blank lines, a UTF-8
byte order mark before the first JSON line); each lenient case is counted in the
:class:`IngestReport`. A file that cannot be read at all (a truncated or corrupt gzip
stream, a damaged Parquet file, invalid UTF-8) is a :class:`DataFormatError` naming the
file and the line or row reached; a missing file a :class:`MissingPathError`.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dmlfe.errors import DmlfeError, MissingPathError
from dmlfe.readers import base
from dmlfe.readers.base import (
    DataFormatError,
    IngestReport,
    TextBatch,
    batch_full,
    file_lines,
)

__all__ = ["read_jsonl", "read_parquet"]

_BOM = b"\xef\xbb\xbf"
# A JSON escape \uD800-\uDFFF alone decodes to a lone surrogate: no character, and it
# cannot be stored (UTF-8 has no encoding for it).
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_SHOWN = 80

_NOTE_NULL_TEXT = "documents with null text (read as empty documents)"
_NOTE_NULL_LABELS = "documents with null labels (read as documents without labels)"
_NOTE_DUP_LABEL = "documents listing a label twice (duplicate dropped)"
_NOTE_BLANK = "blank lines skipped (not documents)"


def _show(value: Any) -> str:
    """A short printable form of a value for an error message."""
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _check_chars(value: str, name: str, where: Callable[[], str]) -> None:
    """Refuse a string holding a lone surrogate (from a JSON ``\\uD800``-style escape)."""
    m = _SURROGATE.search(value)
    if m is not None:
        raise DataFormatError(
            f"{where()}: field {name!r} holds the lone UTF-16 surrogate "
            f"\\u{ord(m.group()):04x} (from a JSON \\u escape), which is not a character: "
            f"{_show(value)}"
        )


class _Converter:
    """Turns records (field -> value mappings) into documents, checking every field.

    One converter reads one corpus (possibly several files): it numbers the
    documents, rejects repeated ids and counts the lenient cases.
    """

    def __init__(
        self,
        text_field: str,
        labels_field: str | None,
        id_field: str | None,
        split_field: str | None,
        describe: Callable[[int], str],
    ) -> None:
        self.describe = describe
        self.text_field = text_field
        self.labels_field = labels_field
        self.id_field = id_field
        self.split_field = split_field
        self.n_docs = 0
        # id -> position of its record (an int, to keep the memory per id small)
        self.seen: dict[str, int] = {}
        self.counts: Counter = Counter()

    def fields(self) -> dict[str, str]:
        """Field name -> the reader parameter that names it."""
        named = {
            "text_field": self.text_field,
            "labels_field": self.labels_field,
            "id_field": self.id_field,
            "split_field": self.split_field,
        }
        out: dict[str, str] = {}
        for param, name in named.items():
            if name is not None:
                out.setdefault(name, param)
        return out

    def convert(self, rec: Mapping[str, Any], pos: int) -> tuple[str, str, list[str], str | None]:
        """One document (id, text, labels, split) from ``rec``; ``describe(pos)`` names it."""
        where = lambda: self.describe(pos)  # noqa: E731 - built lazily, for errors only
        text = self._text(rec, where)
        labels = self._labels(rec, where)
        doc_id = self._id(rec, where, pos)
        split = self._split(rec, where)
        self.n_docs += 1
        return doc_id, text, labels, split

    def _get(
        self, rec: Mapping[str, Any], name: str, where: Callable[[], str], what: str, param: str
    ) -> Any:
        if name not in rec:
            present = ", ".join(repr(k) for k in list(rec)[:20])
            raise DataFormatError(
                f"{where()}: field {name!r} ({what}) is missing; the record has fields "
                f"{present or '(none)'}. Add the field to every record, or name the right "
                f"field with {param}=..."
            )
        return rec[name]

    def _text(self, rec: Mapping[str, Any], where: Callable[[], str]) -> str:
        value = self._get(rec, self.text_field, where, "document text", "text_field")
        if value is None:
            self.counts[_NOTE_NULL_TEXT] += 1
            return ""
        if not isinstance(value, str):
            raise DataFormatError(
                f"{where()}: field {self.text_field!r} must be a string (the document text), "
                f"got {type(value).__name__} {_show(value)}"
            )
        _check_chars(value, self.text_field, where)
        return value

    def _labels(self, rec: Mapping[str, Any], where: Callable[[], str]) -> list[str]:
        if self.labels_field is None:  # unlabelled documents (e.g. new text to embed)
            return []
        value = self._get(rec, self.labels_field, where, "list of label strings", "labels_field")
        if value is None:
            self.counts[_NOTE_NULL_LABELS] += 1
            return []
        if not isinstance(value, list | tuple):
            raise DataFormatError(
                f"{where()}: field {self.labels_field!r} must be a list of label strings, "
                f"got {type(value).__name__} {_show(value)}; write a single label as "
                f'["label"] and no label as []'
            )
        labels: list[str] = []
        for item in value:
            if not isinstance(item, str):
                raise DataFormatError(
                    f"{where()}: field {self.labels_field!r} must hold only strings, got "
                    f"{type(item).__name__} {_show(item)} in {_show(value)}"
                )
            _check_chars(item, self.labels_field, where)
            if item in labels:
                self.counts[_NOTE_DUP_LABEL] += 1
            else:
                labels.append(item)
        return labels

    def _id(self, rec: Mapping[str, Any], where: Callable[[], str], pos: int) -> str:
        if self.id_field is None:
            return str(self.n_docs)
        value = self._get(rec, self.id_field, where, "document id", "id_field")
        # bool is an int subclass but never a meaningful id.
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise DataFormatError(
                f"{where()}: field {self.id_field!r} (document id) must be a string or an "
                f"integer, got {type(value).__name__} {_show(value)}"
            )
        doc_id = str(value)
        _check_chars(doc_id, self.id_field, where)
        first = self.seen.get(doc_id)
        if first is not None:
            raise DataFormatError(
                f"{where()}: document id {doc_id!r} (field {self.id_field!r}) was already "
                f"used by {self.describe(first)}; ids must be unique"
            )
        self.seen[doc_id] = pos
        return doc_id

    def _split(self, rec: Mapping[str, Any], where: Callable[[], str]) -> str | None:
        if self.split_field is None:
            return None
        value = self._get(rec, self.split_field, where, "split name", "split_field")
        if not isinstance(value, str):
            raise DataFormatError(
                f"{where()}: field {self.split_field!r} (split name) must be a string such "
                f"as 'train' or 'test', got {type(value).__name__} {_show(value)}"
            )
        _check_chars(value, self.split_field, where)
        return value

    def finish(self, report: IngestReport, kind: str) -> None:
        for message, n in self.counts.items():
            if n:
                report.note(f"{kind}: {n} {message}")


class _Batcher:
    """Collects documents and hands out batches of ``batch_size`` (or fewer documents
    holding much text: :func:`~dmlfe.readers.base.batch_full`)."""

    def __init__(self, batch_size: int, with_splits: bool) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
        self.batch_size = batch_size
        self.with_splits = with_splits
        self._reset()

    def _reset(self) -> None:
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.labels: list[list[str]] = []
        self.splits: list[str] = []
        self.chars = 0

    def add(self, doc: tuple[str, str, list[str], str | None]) -> TextBatch | None:
        doc_id, text, labels, split = doc
        self.ids.append(doc_id)
        self.texts.append(text)
        self.chars += len(text)
        self.labels.append(labels)
        if self.with_splits:
            self.splits.append(split)  # type: ignore[arg-type]
        return self.flush() if batch_full(len(self.ids), self.chars, self.batch_size) else None

    def flush(self) -> TextBatch | None:
        if not self.ids:
            return None
        batch = TextBatch(
            ids=self.ids,
            texts=self.texts,
            labels=self.labels,
            splits=self.splits if self.with_splits else None,
        )
        self._reset()
        return batch


def _jsonl_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of a JSON Lines file (see :func:`file_lines`)."""
    return file_lines(path, "JSON Lines file")


def read_jsonl(
    path: str | Path,
    *,
    text_field: str = "text",
    labels_field: str | None = "labels",
    id_field: str | None = None,
    split_field: str | None = None,
    batch_size: int = 1000,
    report: IngestReport | None = None,
) -> Iterator[TextBatch]:
    """Stream a JSON Lines corpus (plain, gzip, bzip2 or xz, detected from the content).

    Each non-blank line is one JSON object, one document.

    Parameters
    ----------
    path : str or Path
        The ``.jsonl`` file, plain or gzip, bzip2 or xz compressed.
    text_field : str
        Field holding the document text (a string; null reads as an empty document).
    labels_field : str or None
        Field holding the labels: a list of strings (null reads as no labels; a label
        repeated within a document is kept once). A string or number is an error.
        None: the documents have no labels (the field is not read).
    id_field : str, optional
        Field holding the document id (string or integer, converted to str, unique).
        Without it, ids are the 0-based document numbers ("0", "1", ...), blank lines
        not counted.
    split_field : str, optional
        Field holding the split name (a string). Without it, ``splits`` is None.
    batch_size : int
        Documents per batch (the last batch may be smaller).
    report : IngestReport, optional
        ``n_read`` counts documents read; notes give the number of blank lines, null
        texts, null label lists and repeated labels (written when the stream ends or
        is closed).

    Yields
    ------
    TextBatch

    Raises
    ------
    DataFormatError
        Invalid JSON or UTF-8, a line that is not an object, a missing field, a value
        of the wrong type, or a repeated id; the message names file, line, field and
        value. Also a truncated or corrupt gzip stream (file and last line read named),
        and a line longer than :data:`dmlfe.readers.base.MAX_LINE_BYTES` (file and line
        named; the line is never held whole).
    MissingPathError
        When the file does not exist.
    """
    p = Path(path)
    report = report if report is not None else IngestReport()
    conv = _Converter(
        text_field, labels_field, id_field, split_field, lambda lineno: f"{p}, line {lineno}"
    )
    batcher = _Batcher(batch_size, split_field is not None)
    n_blank = 0
    try:
        for lineno, raw in _jsonl_lines(p):
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if not raw.strip():
                n_blank += 1
                continue
            rec = _parse_line(raw, p, lineno)
            doc = conv.convert(rec, lineno)
            report.n_read += 1
            if (batch := batcher.add(doc)) is not None:
                yield batch
        if (batch := batcher.flush()) is not None:
            yield batch
    finally:
        if n_blank:
            report.note(f"jsonl: {n_blank} {_NOTE_BLANK}")
        conv.finish(report, "jsonl")


def _parse_line(raw: bytes, path: Path, lineno: int) -> dict[str, Any]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataFormatError(
            f"{path}, line {lineno}: not valid UTF-8 ({exc}); JSON Lines files must be "
            "UTF-8 encoded"
        ) from None
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataFormatError(
            f"{path}, line {lineno}: invalid JSON ({exc.msg.removesuffix(' at')} at column "
            f"{exc.colno}): "
            f"{_show(line.strip())}"
        ) from None
    except (ValueError, RecursionError) as exc:
        # An integer of more than 4300 digits, or arrays/objects nested too deeply.
        raise DataFormatError(
            f"{path}, line {lineno}: JSON that cannot be read ({type(exc).__name__}: {exc}): "
            f"{_show(line.strip())}"
        ) from None
    if not isinstance(rec, dict):
        raise DataFormatError(
            f"{path}, line {lineno}: expected a JSON object (one document per line), "
            f"got {type(rec).__name__} {_show(rec)}"
        )
    return rec


def _parquet_files(p: Path) -> list[Path]:
    if p.is_dir():
        files = sorted(f for f in p.rglob("*.parquet") if f.is_file())
        if not files:
            raise DataFormatError(f"folder {p} holds no *.parquet file")
        return files
    if not p.exists():
        raise MissingPathError(f"Parquet input {p} does not exist")
    return [p]


# What pyarrow raises for a file that is not Parquet or is damaged: ArrowInvalid (a
# ValueError), ArrowIOError (an OSError), other ArrowExceptions; invalid UTF-8 in a
# string column surfaces as UnicodeDecodeError (a ValueError) when converted.
_PARQUET_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)


def _check_cells(rb: pa.RecordBatch, f: Path, row: int, columns: dict[str, str]) -> None:
    """Refuse a string cell above :data:`dmlfe.readers.base.MAX_LINE_BYTES` (read at
    call time), as a JSON Lines file refuses such a line: before the batch becomes
    Python strings, so that it is never copied."""
    limit = base.MAX_LINE_BYTES
    for name in columns:
        col = rb.column(name)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
                or pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type)):
            continue
        lengths = pc.binary_length(col)
        if (longest := pc.max(lengths).as_py()) is None or longest <= limit:
            continue
        i = pc.index(pc.greater(lengths, limit), True).as_py()
        raise DataFormatError(
            f"{f}, row {row + i}: field {name!r} holds {lengths[i].as_py():,} bytes, longer "
            f"than {limit:,}, the longest text dmlfe reads "
            "(dmlfe.readers.base.MAX_LINE_BYTES); is it a document?"
        )


def _parquet_columns(
    f: Path, columns: dict[str, str], batch_size: int
) -> Iterator[tuple[int, dict[str, list]]]:
    """``(rows, column -> values)`` of each record batch of one Parquet file.

    The one place that opens and reads a Parquet file: whatever pyarrow raises for it
    becomes a :class:`DataFormatError` naming the file (and the row reached); a missing
    column is one listing the columns present.
    """
    row = 0
    opened = False
    try:
        with pq.ParquetFile(f) as pf:
            opened = True
            present = pf.schema_arrow.names
            for col, param in columns.items():
                if col not in present:
                    raise DataFormatError(
                        f"{f}: column {col!r} is missing; the file has columns "
                        f"{', '.join(map(repr, present))}. Name the right column with "
                        f"{param}=..."
                    )
            for rb in pf.iter_batches(batch_size=batch_size, columns=list(columns)):
                _check_cells(rb, f, row, columns)
                data = {name: rb.column(name).to_pylist() for name in columns}
                yield rb.num_rows, data
                row += rb.num_rows
    except DmlfeError:
        raise
    except FileNotFoundError as exc:
        raise MissingPathError(f"Parquet input {f} does not exist") from exc
    except _PARQUET_ERRORS as exc:
        detail = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        if not opened:
            raise DataFormatError(f"{f} is not a readable Parquet file: {detail}") from exc
        raise DataFormatError(
            f"{f}: the Parquet data is damaged or cannot be read, after row {row} ({detail})"
        ) from exc


def read_parquet(
    path: str | Path,
    *,
    text_field: str = "text",
    labels_field: str | None = "labels",
    id_field: str | None = None,
    split_field: str | None = None,
    batch_size: int = 1000,
    report: IngestReport | None = None,
) -> Iterator[TextBatch]:
    """Stream a Parquet corpus: one file, or a folder of ``*.parquet`` files.

    Files of a folder (searched recursively) are read in path order; only the needed
    columns are read, ``batch_size`` rows at a time.

    Parameters
    ----------
    path : str or Path
        A Parquet file or a folder of them.
    text_field, labels_field, id_field, split_field : str
        Column names, with the same meaning and checks as in :func:`read_jsonl`
        (labels: a list-of-strings column). Without ``id_field`` the ids are the
        0-based row numbers over all files together.
    batch_size : int
        Documents per batch (the last batch may be smaller; batches span files).
    report : IngestReport, optional
        As in :func:`read_jsonl`.

    Yields
    ------
    TextBatch

    Raises
    ------
    DataFormatError
        A missing column (the message lists the columns present), a value of the
        wrong type or a repeated id (file and 0-based row within the file named), or
        a file that is not Parquet or is damaged, and a string cell longer than
        :data:`dmlfe.readers.base.MAX_LINE_BYTES` (file, row and field named).
    MissingPathError
        When the path does not exist.
    """
    p = Path(path)
    report = report if report is not None else IngestReport()
    files = _parquet_files(p)
    # Global row number of each file's first row, to name a record from its position.
    starts: list[int] = []

    def describe(pos: int) -> str:
        k = bisect.bisect_right(starts, pos) - 1
        return f"{files[k]}, row {pos - starts[k]}"

    conv = _Converter(text_field, labels_field, id_field, split_field, describe)
    batcher = _Batcher(batch_size, split_field is not None)
    columns = conv.fields()
    total = 0
    try:
        for f in files:
            starts.append(total)
            for n_rows, data in _parquet_columns(f, columns, batch_size):
                for i in range(n_rows):
                    rec = {name: data[name][i] for name in columns}
                    doc = conv.convert(rec, total + i)
                    report.n_read += 1
                    if (batch := batcher.add(doc)) is not None:
                        yield batch
                total += n_rows
        if (batch := batcher.flush()) is not None:
            yield batch
    finally:
        conv.finish(report, "parquet")


def jsonl_has_field(path: Path, field: str) -> bool:
    """Whether the first record of a JSON Lines corpus has ``field``; False when it
    cannot be read (its reader then says why)."""
    try:
        for _, raw in _jsonl_lines(path):
            line = raw.removeprefix(b"\xef\xbb\xbf").strip()
            if line:
                rec = json.loads(line)
                return isinstance(rec, dict) and field in rec
    except (DmlfeError, OSError, ValueError):
        return False
    return False


def parquet_has_field(path: Path, field: str) -> bool:
    """Whether a Parquet corpus (a file or a folder) has column ``field``; False when it
    cannot be read (its reader then says why)."""
    try:
        schema = pq.ParquetDataset(path).schema if path.is_dir() else pq.read_schema(path)
    except (DmlfeError, OSError, ValueError, pa.ArrowException):
        return False
    return field in schema.names
