"""Record types shared by every reader.

Readers stream a corpus as bounded batches so that a corpus larger than memory
ingests in bounded memory. Two kinds of batch exist:

* :class:`TextBatch` -- raw documents (text + label names); they still have to be
  vectorised (Reuters-21578, JSON Lines, Parquet, the synthetic corpus).
* :class:`NumericBatch` -- documents that already carry numeric features and a
  0/1 label matrix (MULAN and MEKA ARFF); they go to the store as they are.

Every reader also fills an :class:`IngestReport`, so that no document is ever
dropped without being counted and reported.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import scipy.sparse as sp

from dmlfe.errors import DataFormatError, MissingPathError

#: The longest line (end of line included) the line readers accept: JSON Lines and ARFF
#: files (bytes; ARFF files are read as UTF-8 text, so there it counts characters) and
#: one Reuters-21578 story. Real documents are far shorter (the longest line of the
#: MULAN/MEKA sets is about 5 KB, a Reuters story at most a few tens of KB; a dense ARFF
#: row of a million attributes is under 10 MB), while a decompression bomb can expand to
#: one line of gigabytes: the readers stop at this many bytes and refuse the line, so
#: one line never holds more than this much memory, whatever the file.
MAX_LINE_BYTES = 16 * 2**20

#: The first bytes of the compressed formats the readers recognise by content.
COMPRESSION_MAGIC = {"gzip": b"\x1f\x8b", "bzip2": b"BZh", "xz": b"\xfd7zXZ\x00"}
_DECOMPRESSORS = {"gzip": gzip.open, "bzip2": bz2.open, "xz": lzma.open}


def sniff_compression(path: str | os.PathLike[str]) -> str | None:
    """"gzip", "bzip2" or "xz" when the file's first bytes say so; None otherwise (or
    when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            head = f.read(6)
    except OSError:
        return None
    return next((kind for kind, magic in COMPRESSION_MAGIC.items() if head.startswith(magic)),
                None)


def open_by_content(path: str | os.PathLike[str]) -> tuple[IO[bytes], str | None]:
    """The file as bytes, decompressed when its content is gzip, bzip2 or xz (whatever
    its name says), and that compression (None: plain). The decompressors check the
    stream's checksum at its end, so a corrupt file does not read as fine."""
    kind = sniff_compression(path)
    if kind is None:
        return open(path, "rb"), None  # noqa: SIM115
    return _DECOMPRESSORS[kind](path, "rb"), kind


def batch_full(n_docs: int, n_chars: int, batch_size: int) -> bool:
    """Whether a text reader hands over the batch it gathers: at ``batch_size``
    documents, or earlier once their texts hold :data:`MAX_LINE_BYTES` characters, so
    that one batch never holds much more text than one line may (staging then bounds a
    part by :data:`dmlfe.staging.MAX_PART_BYTES` while gathering it)."""
    return n_docs >= batch_size or n_chars >= MAX_LINE_BYTES


def line_too_long(where: str, limit: int, what: str = "line") -> DataFormatError:
    """The error for a line (or ``what``) above ``limit`` bytes; ``where`` names the file
    and the line."""
    lacks = "line ends" if what == "line" else f"the {what}'s closing tag"
    return DataFormatError(
        f"{where}: longer than {limit:,} bytes, the longest {what} dmlfe reads "
        f"(dmlfe.readers.base.MAX_LINE_BYTES): a decompression bomb, or a file without "
        f"{lacks}?"
    )


def bounded_lines(fobj: IO[bytes], path: str | os.PathLike[str],
                  limit: int | None = None) -> Iterator[tuple[int, bytes]]:
    """``(line number, line)`` of a binary stream, refusing a line above ``limit`` bytes.

    Each line is read with ``readline(limit + 1)``: an over-long line is detected
    once ``limit + 1`` of its bytes are in memory and is never held whole (the
    decompressors behind :func:`open_by_content` decompress only what is asked for).

    Parameters
    ----------
    fobj : binary file object
        The (possibly decompressing) stream.
    path : str or PathLike
        The file's name, for the error message.
    limit : int, optional
        The longest line accepted, its end of line included; default
        :data:`MAX_LINE_BYTES` (read at call time, so that tests can lower it).

    Raises
    ------
    DataFormatError
        A line longer than ``limit``; the message names the file and the line.
    """
    limit = MAX_LINE_BYTES if limit is None else limit
    lineno = 0
    while True:
        line = fobj.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if len(line) > limit:
            raise line_too_long(f"{path}, line {lineno}", limit)
        yield lineno, line


def file_lines(path: str | os.PathLike[str], what: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw line)`` of a line-based corpus file: the one place that reads one.

    The file may be plain or gzip, bzip2 or xz compressed (:func:`open_by_content`). A
    failure to open or decompress it is a :class:`DataFormatError` naming the file and
    the last line read (a missing file: :class:`MissingPathError`), and so is a line
    above :data:`MAX_LINE_BYTES` (never read whole, :func:`bounded_lines`).

    Parameters
    ----------
    path : str or PathLike
        The file.
    what : str
        What the file is, for the messages (e.g. "JSON Lines file").
    """
    lineno = 0
    kind = None
    try:
        fobj, kind = open_by_content(path)
        with fobj:
            for lineno, raw in bounded_lines(fobj, path):
                yield lineno, raw
    except FileNotFoundError as exc:
        raise MissingPathError(f"{what} {path} does not exist") from exc
    except IsADirectoryError as exc:
        raise DataFormatError(f"{path} is a folder, not a {what}") from exc
    except (OSError, EOFError, zlib.error, lzma.LZMAError) as exc:
        # gzip.BadGzipFile and bz2's "Invalid data stream" are OSErrors, a truncated
        # stream an EOFError, a corrupt deflate block a zlib.error, bad xz an LZMAError.
        where = f"after line {lineno}" if lineno else "before its first line"
        detail = f"{type(exc).__name__}: {exc}"
        if kind is not None:
            raise DataFormatError(
                f"{path}: cannot decompress {where}: the {kind} stream is truncated or corrupt "
                f"({detail}); compress or download the file again"
            ) from exc
        raise DataFormatError(f"{path}: cannot be read {where} ({detail})") from exc


@dataclass
class TextBatch:
    """A batch of raw documents.

    Attributes
    ----------
    ids : list of str
        Document identifiers (unique within a corpus).
    texts : list of str
        Document texts; an empty string is a valid (empty) document.
    labels : list of list of str
        Label names of each document; an empty list is a document without labels.
    splits : list of str or None
        Split name of each document ("train", "test", ...), or None when the
        corpus has no split.
    meta : dict of str to list of str
        Further per-document string fields kept in the store (for Reuters:
        ``lewissplit``, ``cgisplit``).
    """

    ids: list[str]
    texts: list[str]
    labels: list[list[str]]
    splits: list[str] | None = None
    meta: dict[str, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class NumericBatch:
    """A batch of documents with numeric features already.

    Attributes
    ----------
    ids : list of str
    X : scipy.sparse.csr_matrix, float64, shape (n_batch, n_features)
    Y : scipy.sparse.csr_matrix, uint8 0/1, shape (n_batch, n_labels)
        Built from each document's labels: memory grows with the labels given, never
        with n_batch x n_labels (corpora with tens of thousands of labels).
    splits : list of str or None
    """

    ids: list[str]
    X: sp.csr_matrix
    Y: sp.csr_matrix
    splits: list[str] | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class IngestReport:
    """Counts of everything notable that happened while reading a corpus."""

    n_read: int = 0
    n_skipped: int = 0
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def skip(self, reason: str, count: int = 1) -> None:
        self.n_skipped += count
        self.skipped_reasons[reason] = self.skipped_reasons.get(reason, 0) + count

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    def to_dict(self) -> dict:
        return {
            "n_read": self.n_read,
            "n_skipped": self.n_skipped,
            "skipped_reasons": dict(self.skipped_reasons),
            "notes": list(self.notes),
        }


@dataclass
class NumericSource:
    """A corpus with numeric features: its header and a batch stream.

    ``batches()`` may be called more than once (each call re-reads the file).
    ``feature_names`` is None for numbered (unnamed) features; ``n_features`` is then
    required, and otherwise defaults to the number of names.
    """

    feature_names: list[str] | None
    label_names: list[str]
    batches_fn: object  # Callable[[int], Iterator[NumericBatch]]
    source: str
    report: IngestReport = field(default_factory=IngestReport)
    n_features: int | None = None

    def __post_init__(self) -> None:
        if self.n_features is None:
            if self.feature_names is None:
                raise ValueError("a NumericSource without feature names needs n_features")
            self.n_features = len(self.feature_names)

    def batches(self, batch_size: int) -> Iterator[NumericBatch]:
        return self.batches_fn(batch_size)  # type: ignore[operator]


#: The split names a file name may carry (:func:`split_from_file_name`).
FILE_SPLITS = ("train", "test")


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
