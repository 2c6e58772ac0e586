"""Opening a store as dask arrays of row blocks.

Every block of ``X``, ``Y``, ``ids`` and ``split`` is a task that reads only its own
slices from zarr when it runs (the graph holds the store path and row range, never
data), so the arrays work on a distributed cluster of processes that see the store's
path. Each process opens a store once (:func:`_opened`): every array's zarr.json is
checked against the store's metadata and integrity record, and every chunk is read
through :class:`dmlfe.store.integrity.CheckedStore`, so a damaged store is a
:class:`~dmlfe.errors.StoreError` naming the store and the array wherever it is read,
never zeros.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from dmlfe.errors import MissingPathError, StoreError
from dmlfe.store import integrity
from dmlfe.store import layout as F
from dmlfe.tempfiles import recover_swap

if TYPE_CHECKING:
    from dmlfe.vectorize.text import TextVectorizer


class IncompleteStoreError(StoreError):
    """The path holds no complete dmlfe store (e.g. an interrupted ingest)."""


# --------------------------------------------------------------------------- block readers
@dataclass(frozen=True)
class _Opened:
    """A store opened in this process: its arrays checked against its metadata and its
    integrity record, every chunk read through :class:`~dmlfe.store.integrity.CheckedStore`."""

    root: Path
    record: integrity.Record | None
    arrays: dict

    def read(self, name: str, selection) -> np.ndarray:
        return integrity.read_values(self.root, name, self.arrays[name], selection)


#: Stores opened in this process, by (path, uuid): the uuid makes a store replaced at the
#: same path open afresh. Bounded like an LRU cache; a worker keeps at most this many.
_OPENED: OrderedDict[tuple[str, str], _Opened] = OrderedDict()
_OPENED_MAX = 64
_OPENED_LOCK = threading.Lock()


def _opened(root: str, store_uuid: str, meta: dict | None = None) -> _Opened:
    """The store at ``root`` opened and checked, once per process (driver or dask
    worker) and store; ``meta``: its root metadata when the caller has just read it."""
    key = (root, store_uuid)
    with _OPENED_LOCK:
        if key in _OPENED:
            _OPENED.move_to_end(key)
            return _OPENED[key]
    path = Path(root)
    if meta is None:
        try:
            meta = _read_root_meta(path)
        except MissingPathError:
            raise integrity._gone(path) from None
    if str(meta["uuid"]) != store_uuid:
        raise StoreError(f"store {path} was replaced while in use (another ingest wrote it: "
                         "its uuid changed); nothing was written: run the command again")
    record = integrity.read_record(path, meta["integrity"]) if "integrity" in meta else None
    group = integrity.open_checked_group(path, record)
    opened = _Opened(path, record, integrity.open_arrays(path, group, meta, record))
    with _OPENED_LOCK:
        _OPENED[key] = opened
        while len(_OPENED) > _OPENED_MAX:
            _OPENED.popitem(last=False)
    return opened


def _read_x(root: str, uid: str, r0: int, r1: int, n_features: int,
            rows: np.ndarray | None) -> sp.csr_matrix:
    o = _opened(root, uid)
    indptr = o.read("X/indptr", slice(r0, r1 + 1))
    p0, p1 = int(indptr[0]), int(indptr[-1])
    if (np.diff(indptr) < 0).any():
        # a row pointer that falls: a chunk read as zeros or changed (checked for every
        # store: the only cheap guard a store without an integrity record has)
        raise integrity.damaged(root, "X/indptr", f"rows {r0}..{r1} do not have a rising "
                                "row pointer (a chunk deleted or changed?)")
    block = sp.csr_matrix((o.read("X/data", slice(p0, p1)), o.read("X/indices", slice(p0, p1)),
                           indptr - p0), shape=(r1 - r0, n_features))
    return block if rows is None else block[rows]


def _read_y(root: str, uid: str, r0: int, r1: int, n_labels: int,
            rows: np.ndarray | None) -> sp.csr_matrix:
    """Labels of rows ``r0:r1`` (then ``rows`` of them) as a uint8 CSR block.

    A format-version-2 store keeps them as CSR (read like X); a version-1 store keeps a
    dense n x q array, whose rows are read and made CSR here (the v1 read path), so
    every consumer sees the same kind of block.
    """
    o = _opened(root, uid)
    if "obsm/Y" in o.arrays:  # format version 1: dense rows
        block = sp.csr_matrix(o.read("obsm/Y", slice(r0, r1)).astype(np.uint8, copy=False),
                              shape=(r1 - r0, n_labels))
        return block if rows is None else block[rows]
    indptr = o.read("obsm/Y/indptr", slice(r0, r1 + 1))
    p0, p1 = int(indptr[0]), int(indptr[-1])
    if (np.diff(indptr) < 0).any():
        raise integrity.damaged(root, "obsm/Y/indptr", f"rows {r0}..{r1} do not have a "
                                "rising row pointer (a chunk deleted or changed?)")
    block = sp.csr_matrix((o.read("obsm/Y/data", slice(p0, p1)),
                           o.read("obsm/Y/indices", slice(p0, p1)), indptr - p0),
                          shape=(r1 - r0, n_labels))
    return block if rows is None else block[rows]


def _read_row_nnz(root: str, uid: str, r0: int, r1: int, rows: np.ndarray | None) -> np.ndarray:
    counts = np.diff(_opened(root, uid).read("X/indptr", slice(r0, r1 + 1)))
    if (counts < 0).any():
        raise integrity.damaged(root, "X/indptr", f"rows {r0}..{r1} do not have a rising "
                                "row pointer (a chunk deleted or changed?)")
    return counts if rows is None else counts[rows]


def _read_rows(root: str, uid: str, name: str, r0: int, r1: int,
               rows: np.ndarray | None) -> np.ndarray:
    values = _opened(root, uid).read(name, slice(r0, r1))
    if values.dtype.kind in "TUSO":
        values = F.to_object_strings(values)
    return values if rows is None else values[rows]


def _read_split(root: str, uid: str, r0: int, r1: int, categories: tuple[str, ...],
                rows: np.ndarray | None) -> np.ndarray:
    codes = _read_rows(root, uid, "obs/split/codes", r0, r1, rows)
    lookup = np.array(list(categories) + [None], dtype=object)
    return lookup[np.where(codes < 0, len(categories), codes)]


# --------------------------------------------------------------------------- open
def _read_root_meta(path: Path) -> dict:
    if not path.exists():
        raise MissingPathError(f"no store at {path}: the path does not exist")
    if not path.is_dir():
        raise StoreError(f"{path} is a file, not a dmlfe store: a store is a folder (a zarr "
                         f"group) written by dmlfe ingest or dmlfe import; {_file_hint(path)}")
    interrupted = IncompleteStoreError(
        f"{path} is not a complete dmlfe store (an interrupted ingest?): its root "
        "zarr.json lacks the 'complete' marker of dmlfe's metadata; re-run the ingest "
        "(pass overwrite=True / --overwrite to replace it) or delete this directory")
    try:
        text = (path / "zarr.json").read_text()
    except FileNotFoundError:
        if ".tmp-" in path.name:  # the temporary folder of an ingest that did not finish
            raise interrupted from None
        raise StoreError(f"{path} is not a dmlfe store: it has no zarr.json (a store is a "
                         "folder written by dmlfe ingest or dmlfe import)") from None
    except OSError as exc:
        raise StoreError(f"cannot read {path / 'zarr.json'}: {exc}") from None
    try:
        root = json.loads(text)
    except ValueError:  # a torn write
        raise interrupted from None
    attrs = root.get("attributes") if isinstance(root, dict) else None
    meta = attrs.get("dmlfe") if isinstance(attrs, dict) else None
    if not isinstance(meta, dict):
        raise StoreError(f"{path} is not a dmlfe store: its zarr.json carries no dmlfe "
                         "metadata (a zarr group written by another program?)")
    if meta.get("complete") is not True:
        raise interrupted
    if meta.get("format_version", 0) > F.FORMAT_VERSION:
        raise StoreError(f"{path} has store format version {meta['format_version']}, newer "
                         f"than this dmlfe reads ({F.FORMAT_VERSION}); upgrade dmlfe")
    _check_meta(path, meta)
    return meta


#: Keys of the root metadata every reader relies on, and what each must hold.
_META_KEYS = {"uuid": "a string", "n_docs": "an integer >= 0", "n_features": "an integer >= 0",
              "nnz": "an integer >= 0", "chunk_rows": "an integer >= 1",
              "label_names": "a list of strings"}


def _check_meta(path: Path, meta: dict) -> None:
    """A root zarr.json with a key missing or of the wrong kind is damage, not a bug."""
    keys = dict(_META_KEYS)
    if F.sparse_labels(meta):  # format version 2: the stored ones of the CSR labels
        keys["label_nnz"] = "an integer >= 0"
    for key, what in keys.items():
        value = meta.get(key)
        if key == "uuid":
            ok = isinstance(value, str) and bool(value)
        elif key == "label_names":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            ok = isinstance(value, int) and not isinstance(value, bool) \
                and value >= (1 if key == "chunk_rows" else 0)
        if not ok:
            found = "is missing" if key not in meta else f"is {str(value)[:40]!r}"
            raise StoreError(f"store {path}: the dmlfe metadata in its zarr.json lacks a valid "
                             f"{key!r} (it {found}; {what} was written): the file was edited "
                             "or damaged; re-ingest the store or restore a copy")


#: Corpus files by suffix -> the ingest format that reads them (for the hint below).
_CORPUS_SUFFIXES = {".arff": "mulan --labels LABELS.xml", ".jsonl": "jsonl",
                    ".gz": "reuters21578 or jsonl", ".sgm": "reuters21578",
                    ".parquet": "parquet"}


def _file_hint(path: Path) -> str:
    """What to do when a file was given where a store was expected."""
    if path.name == "zarr.json":
        return f"give the folder that holds it ({path.parent})"
    fmt = _CORPUS_SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        return "give the store's folder"
    hint = (f"to make a store of this corpus file, run: dmlfe ingest {path} --format {fmt} "
            "--out STORE")
    if path.suffix.lower() == ".parquet":
        hint += f" (or dmlfe import {path} --out STORE for a file written by dmlfe export)"
    return hint


def fingerprint_of(path: Path, meta: dict) -> dict:
    """The fingerprint (:attr:`Store.fingerprint`) of the store at ``path`` whose root
    metadata is ``meta``; also computed for a store about to be written."""
    return {"kind": "store", "path": str(Path(path).resolve()), "uuid": str(meta["uuid"]),
            "shape": [int(meta["n_docs"]), int(meta["n_features"])],
            "n_labels": len(meta["label_names"]), "nnz": int(meta["nnz"])}


def history_source(provenance: dict) -> dict:
    """What a history entry records of an ingest's or append's input: the reader, the
    source path(s) and the reader options, as the provenance holds them."""
    return {k: provenance.get(k) for k in ("format", "source", "reader_options")}


def history(store: Store | str | os.PathLike) -> list[dict]:
    """The ingest and the appends that made a store, oldest first.

    Parameters
    ----------
    store : Store or path-like
        A store (or a view of one: the history is the whole store's) or its path.

    Returns
    -------
    list of dict
        One entry per ingest or append, each with ``kind`` ("ingest" or "append"),
        ``rows`` ([start, stop): the rows it added), ``n_docs_before``, ``source``
        (reader, path(s), options), ``time`` (UTC, ISO 8601) and ``fingerprint``: the
        store's :attr:`Store.fingerprint` as it was right after that entry, so that a
        result computed for that fingerprint is known to cover rows
        ``[0, rows[1])`` of the current store. An append entry also has its
        ``report`` (documents read and skipped, terms not in the vocabulary). A store
        written before histories were kept gets one ingest entry covering all its rows,
        with its current fingerprint.
    """
    if not isinstance(store, Store):
        store = open_store(store)
    meta = store._meta
    kept = (meta.get("provenance") or {}).get("history")
    if kept:
        return [dict(e) for e in kept]
    prov = meta.get("provenance") or {}
    return [{"kind": "ingest", "rows": [0, int(meta["n_docs"])], "n_docs_before": 0,
             "source": history_source(prov), "time": prov.get("created"),
             "fingerprint": fingerprint_of(store.path, meta)}]


def open_store(path, *, chunk_rows: int | None = None) -> Store:
    """Open a complete dmlfe store.

    Parameters
    ----------
    path : path-like
        The store directory.
    chunk_rows : int, optional
        Documents per dask block (default: the stored chunk size). Any positive value
        works; blocks are then other row ranges of the same arrays.

    Raises
    ------
    FileNotFoundError
        If nothing is at ``path``.
    IncompleteStoreError
        If ``path`` is not a complete store (an interrupted or running ingest).
    StoreError
        If an array's zarr.json is missing, unreadable or differs from the shape, type or
        chunking the store was written with (:mod:`dmlfe.store.integrity`).
    """
    path = Path(path).absolute()
    if not os.path.lexists(path):
        recover_swap(path)  # an append killed between its two renames (no atomic exchange)
    meta = _read_root_meta(path)
    cr = int(meta["chunk_rows"]) if chunk_rows is None else chunk_rows
    if isinstance(cr, bool) or not isinstance(cr, (int, np.integer)) or cr < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    n = int(meta["n_docs"])
    # every array's zarr.json is checked here (once per process), before any work starts
    _opened(str(path), str(meta["uuid"]), meta)
    blocks = [(r0, min(r0 + int(cr), n), None) for r0 in range(0, n, int(cr))] or [(0, 0, None)]
    return Store(path, meta, int(cr), blocks)


class Store:
    """A dmlfe store (or a row subset of one) as dask arrays chunked by row blocks.

    Attributes
    ----------
    path : pathlib.Path
    X : dask.array.Array
        float64, shape (n_docs, n_features); each block a ``scipy.sparse.csr_matrix``.
    Y : dask.array.Array
        uint8 0/1, shape (n_docs, n_labels), chunked like X; each block a
        ``scipy.sparse.csr_matrix`` (also for a format-version-1 store, whose dense
        label rows are read and made CSR block by block).
    ids : dask.array.Array
        Document ids (object array of str), chunked like X.
    split : dask.array.Array or None
        Split of each document (str, or None where missing); None without a split.
    label_names : list of str
    feature_names : list of str or None
        None for hashing stores (and numeric stores ingested without names).
    hashing : dict or None
        Hashing parameters of a hashing store.
    attrs : dict
        Provenance (source, parameters, dmlfe version, ...), with the reader report
        under ``"report"``.
    """

    def __init__(self, path: Path, meta: dict, chunk_rows: int,
                 blocks: list[tuple[int, int, np.ndarray | None]],
                 selection: dict | None = None):
        self.path = path
        self.selection = selection
        self._meta = meta
        self._chunk_rows = chunk_rows
        self._blocks = blocks
        self._root = str(path)
        self._uid = str(meta["uuid"])
        self._sizes = tuple(r1 - r0 if rows is None else len(rows) for r0, r1, rows in blocks)
        self._token = tokenize(self._root, self._uid, blocks)
        self.label_names: list[str] = list(meta["label_names"])
        self.hashing: dict | None = meta.get("hashing")
        self.attrs: dict = dict(meta.get("provenance") or {})
        if meta.get("report") is not None:
            self.attrs["report"] = meta["report"]

    # ------------------------------------------------------------------ properties
    @property
    def n_docs(self) -> int:
        return int(sum(self._sizes))

    @property
    def n_features(self) -> int:
        return int(self._meta["n_features"])

    @property
    def n_labels(self) -> int:
        return len(self.label_names)

    @property
    def chunk_rows(self) -> int:
        """Rows per block this store was opened with (blocks of a subset are smaller)."""
        return self._chunk_rows

    @property
    def stored_chunk_rows(self) -> int:
        """Rows per zarr chunk on disk."""
        return int(self._meta["chunk_rows"])

    @property
    def is_subset(self) -> bool:
        return any(rows is not None for _, _, rows in self._blocks)

    @property
    def fingerprint(self) -> dict:
        """The one public identity of the stored data (not of a view of it).

        Every consumer that must recognise a store again uses it: the statistics cache
        beside the store, a fitted model's provenance and the pipeline's stage cache.
        A store is built under a temporary name with a fresh uuid and renamed into
        place, so a rebuilt store has a new fingerprint even at the same path.
        """
        return fingerprint_of(self.path, self._meta)

    @property
    def content_fingerprint(self) -> dict:
        """The identity of the documents in view: the :attr:`fingerprint` the store had
        right after the ingest or append that added the last of them (its
        :func:`history` entry).

        Appends only add rows at the end and never change stored rows, so an append that
        adds none of the view's documents (test documents appended to a store whose
        training split is in view) leaves it as it was, and results computed for the view
        (statistics, K-NN graphs, pipeline stages) stay valid. An empty view has the
        store's fingerprint.
        """
        last = -1
        for r0, r1, rows in self._blocks:
            if rows is None:
                if r1 > r0:
                    last = max(last, r1 - 1)
            elif len(rows):
                last = max(last, r0 + int(np.max(rows)))
        if last >= 0:
            for entry in history(self):
                if entry["rows"][0] <= last < entry["rows"][1]:
                    return dict(entry["fingerprint"])
        return self.fingerprint

    def history(self) -> list[dict]:
        """The store's ingest and appends, oldest first (see :func:`history`)."""
        return history(self)

    @property
    def feature_kind(self) -> str:
        """How the columns are defined: "names" (a vocabulary), "hashing" or "numbered"."""
        if self._meta.get("has_feature_names"):
            return "names"
        return "hashing" if self.hashing is not None else "numbered"

    @cached_property
    def feature_names_sha256(self) -> str | None:
        """Hash of the vocabulary (None without feature names)."""
        names = self.feature_names
        if names is None:
            return None
        h = hashlib.sha256()
        for name in names:
            h.update(str(name).encode("utf-8"))
            h.update(b"\0")  # separator: ["ab", "c"] and ["a", "bc"] must differ
        return h.hexdigest()

    def provenance(self) -> dict:
        """What a model fitted on this store (view) must remember of it.

        The feature space (vocabulary hash or hashing parameters) is recorded so that
        projecting another store can be checked against it; the store's provenance
        attributes are kept except the reader report.
        """
        fp = self.fingerprint
        return {"fingerprint": fp, "path": fp["path"], "uuid": fp["uuid"],
                "split": None if self.selection is None else self.selection.get("split"),
                "n_docs": fp["shape"][0], "n_features": self.n_features,
                "n_labels": self.n_labels, "label_names": list(self.label_names),
                "features": self.feature_kind,
                "feature_names_sha256": self.feature_names_sha256, "hashing": self.hashing,
                "attrs": {k: v for k, v in self.attrs.items() if k != "report"}}

    def text_vectorizer(self) -> TextVectorizer:
        """The vectoriser that made this store's rows from raw text, for new text.

        Its ``transform(list of str)`` gives the rows the same texts got at ingest
        (:class:`dmlfe.vectorize.text.TextVectorizer`); see also
        :func:`dmlfe.text_pipeline`.

        Raises
        ------
        StoreError
            The store was not ingested from text, or was written without its idf.
        """
        o = _opened(self._root, self._uid)
        idf = o.read("uns/idf", slice(None)) if "uns/idf" in o.arrays else None
        vocab = self.feature_names if self.feature_kind == "names" else None
        # imported here: it brings scikit-learn, which a worker reading row blocks never
        # needs, and whose import is a visible part of a fresh worker's first task
        from dmlfe.vectorize.text import store_vectorizer

        return store_vectorizer(self.attrs, idf, vocab, f"the store {self.path}")

    def check_chunk_files(self) -> bool:
        """Compare every chunk file's size with the store's integrity record (one
        ``stat`` each, no data read): what a use that reads no chunk (statistics from
        the cache) checks first.

        Returns
        -------
        bool
            False when the store has no record (then nothing can be checked).

        Raises
        ------
        StoreError
            A chunk file is missing or of another size than was written; the line names
            the store, the array and the chunk.
        """
        o = _opened(self._root, self._uid)
        if o.record is None:
            return False
        problems = integrity.stat_problems(self.path, o.record)
        if problems:
            name, what = problems[0].split(": ", 1)
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise integrity.damaged(self.path, name, what + more)
        return True

    def integrity(self) -> str:
        """One line on the store's integrity record, for ``dmlfe info``.

        With a record, every chunk file's size is compared with it (one ``stat`` each;
        the CRC-32s are compared as chunks are read, and by ``dmlfe verify``).

        Raises
        ------
        StoreError
            A chunk file is missing or of another size than was written.
        """
        if not self.check_chunk_files():
            return ("no checksums recorded (a store written before dmlfe recorded them: a "
                    "deleted chunk would read as zeros); add them with: dmlfe verify "
                    f"{self.path} --record")
        o = _opened(self._root, self._uid)
        return (f"CRC-32 checksums of {o.record.n_chunks} chunks in {len(o.record.arrays)} "
                "arrays recorded; every chunk file is there at its recorded size; the "
                f"CRC-32s are checked as chunks are read (dmlfe verify {self.path}: all)")

    @property
    def obs_columns(self) -> list[str]:
        """Names of the extra per-document string columns."""
        return list(self._meta.get("obs_columns") or [])

    @cached_property
    def nnz(self) -> int:
        if not self.is_subset:
            return int(self._meta["nnz"])
        return int(sum(int(_read_row_nnz(self._root, self._uid, r0, r1, rows).sum())
                       for r0, r1, rows in self._blocks))

    @cached_property
    def feature_names(self) -> list[str] | None:
        if not self._meta.get("has_feature_names"):
            return None
        return _opened(self._root, self._uid).read("var/_index", slice(None)).tolist()

    @property
    def _categories(self) -> tuple[str, ...] | None:
        cats = self._meta.get("split_categories")
        return None if cats is None else tuple(cats)

    @property
    def split_categories(self) -> list[str] | None:
        """The split's categories in the store's order (None when it has no split)."""
        cats = self._categories
        return None if cats is None else list(cats)

    # ------------------------------------------------------------------ dask arrays
    @cached_property
    def X(self) -> da.Array:
        name = f"dmlfe-X-{self._token}"
        dsk = {(name, i, 0): (_read_x, self._root, self._uid, r0, r1, self.n_features, rows)
               for i, (r0, r1, rows) in enumerate(self._blocks)}
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
        return da.Array(graph, name, (self._sizes, (self.n_features,)), dtype=np.float64,
                        meta=sp.csr_matrix((0, 0), dtype=np.float64))

    def _column(self, kind: str, array_name: str, tail: tuple[int, ...], dtype, meta):
        name = f"dmlfe-{kind}-{self._token}"
        dsk = {}
        for i, (r0, r1, rows) in enumerate(self._blocks):
            key = (name, i) + (0,) * len(tail)
            dsk[key] = (_read_rows, self._root, self._uid, array_name, r0, r1, rows)
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
        return da.Array(graph, name, (self._sizes,) + tuple((d,) for d in tail), dtype=dtype,
                        meta=meta)

    @cached_property
    def Y(self) -> da.Array:
        name = f"dmlfe-Y-{self._token}"
        dsk = {(name, i, 0): (_read_y, self._root, self._uid, r0, r1, self.n_labels, rows)
               for i, (r0, r1, rows) in enumerate(self._blocks)}
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
        return da.Array(graph, name, (self._sizes, (self.n_labels,)), dtype=np.uint8,
                        meta=sp.csr_matrix((0, 0), dtype=np.uint8))

    @property
    def format_version(self) -> int:
        """The store format version it was written with (2: CSR labels; 1: dense)."""
        return int(self._meta.get("format_version", 1))

    @cached_property
    def ids(self) -> da.Array:
        return self._column("ids", "obs/_index", (), object, np.empty(0, dtype=object))

    @cached_property
    def split(self) -> da.Array | None:
        cats = self._categories
        if cats is None:
            return None
        name = f"dmlfe-split-{self._token}"
        dsk = {(name, i): (_read_split, self._root, self._uid, r0, r1, cats, rows)
               for i, (r0, r1, rows) in enumerate(self._blocks)}
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
        return da.Array(graph, name, (self._sizes,), dtype=object,
                        meta=np.empty(0, dtype=object))

    @cached_property
    def row_nnz(self) -> da.Array:
        """Stored entries per document (int64), chunked like X."""
        name = f"dmlfe-rownnz-{self._token}"
        dsk = {(name, i): (_read_row_nnz, self._root, self._uid, r0, r1, rows)
               for i, (r0, r1, rows) in enumerate(self._blocks)}
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
        return da.Array(graph, name, (self._sizes,), dtype=np.int64,
                        meta=np.empty(0, dtype=np.int64))

    # ------------------------------------------------------------------ eager access
    def obs_column(self, name: str) -> np.ndarray:
        """An extra per-document column (object array of str) of the documents in view.

        ``"split"`` and ``"id"`` are accepted too.
        """
        if name == "split":
            if self.split is None:
                raise KeyError(f"store {self.path} has no split column")
            return self.split.compute(scheduler="sync")
        if name == "id":
            return self.ids.compute(scheduler="sync")
        if name not in self.obs_columns:
            raise KeyError(f"store {self.path} has no column {name!r}; its columns are "
                           f"{self.obs_columns} (plus 'id' and 'split')")
        return self._column(f"obs-{name}", f"obs/{name}", (), object,
                            np.empty(0, dtype=object)).compute(scheduler="sync")

    def _split_codes(self) -> np.ndarray:
        """Split codes of the documents in view (-1 = missing), read eagerly."""
        parts = [_read_rows(self._root, self._uid, "obs/split/codes", r0, r1, rows)
                 for r0, r1, rows in self._blocks]
        return np.concatenate(parts).astype(np.int64)

    def subset(self, split: str | list[str]) -> Store:
        """The documents whose split is one of ``split``, with the same block structure.

        Each block keeps its rows in the given splits (empty blocks are dropped); the
        result has the same attributes as a store.
        """
        wanted = [split] if isinstance(split, str) else list(split)
        cats = self._categories
        if cats is None:
            raise ValueError(
                f"store {self.path} has no splits (its corpus named none at ingest), so no "
                f"split {', '.join(map(repr, wanted))}: use all its documents (no split), or "
                "ingest it again with splits (jsonl/parquet: --split-field FIELD)")
        unknown = [s for s in wanted if s not in cats]
        if unknown:
            raise ValueError(f"split value(s) {unknown} not in store {self.path}; its splits "
                             f"are {list(cats)}")
        wanted_codes = np.array([cats.index(s) for s in wanted], dtype=np.int64)
        blocks = []
        for r0, r1, rows in self._blocks:
            codes = _read_rows(self._root, self._uid, "obs/split/codes", r0, r1, rows)
            keep = np.isin(codes, wanted_codes)
            local = np.arange(r1 - r0, dtype=np.int64) if rows is None else rows
            if keep.any():
                blocks.append((r0, r1, local[keep]))
        if not blocks:
            blocks = [(0, 0, np.zeros(0, dtype=np.int64))]
        split_value = wanted[0] if isinstance(split, str) else wanted
        return Store(self.path, self._meta, self._chunk_rows, blocks,
                     {**(self.selection or {}), "split": split_value})

    def take(self, rows) -> Store:
        """The documents at positions ``rows`` of this store (or view), in row order,
        with the same block structure (e.g. a random or label-stratified part)."""
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.size and (rows[0] < 0 or rows[-1] >= self.n_docs):
            raise ValueError(f"row positions must lie in [0, {self.n_docs}); got "
                             f"{rows[0]}..{rows[-1]}")
        blocks, start = [], 0
        for r0, r1, local in self._blocks:
            size = (r1 - r0) if local is None else len(local)
            lo, hi = np.searchsorted(rows, [start, start + size])
            if hi > lo:
                pos = rows[lo:hi] - start
                sel = pos if local is None else np.asarray(local)[pos]
                blocks.append((r0, r1, np.asarray(sel, dtype=np.int64)))
            start += size
        if not blocks:
            blocks = [(0, 0, np.zeros(0, dtype=np.int64))]
        taken = hashlib.sha256(rows.tobytes()).hexdigest()[:24]
        return Store(self.path, self._meta, self._chunk_rows, blocks,
                     {**(self.selection or {}), "rows": [taken, *(self.selection or {}).get(
                         "rows", [])]})

    def since(self, start: int) -> Store:
        """The documents of this store (or view) stored at row ``start`` or later, with
        the same block structure; its ``selection`` records ``"since"``.

        The rows an append added (``history()[-1]["rows"]``) are a store's last rows, so
        ``store.subset("train").since(n_before)`` are the new training documents: what
        statistics cached for the store before the append lack.
        """
        if isinstance(start, bool) or int(start) < 0:
            raise ValueError(f"start must be a row number >= 0, got {start!r}")
        start = int(start)
        blocks: list[tuple[int, int, np.ndarray | None]] = []
        for r0, r1, rows in self._blocks:
            if r1 <= start:
                continue
            if rows is None:
                blocks.append((max(r0, start), r1, None))
            else:
                kept = np.asarray(rows, dtype=np.int64)
                kept = kept[kept >= start - r0]
                if kept.size:
                    blocks.append((r0, r1, kept))
        if not blocks:
            blocks = [(0, 0, np.zeros(0, dtype=np.int64))]
        return Store(self.path, self._meta, self._chunk_rows, blocks,
                     {**(self.selection or {}), "since": start})

    def reblock(self, max_rows: int) -> Store:
        """The same documents in blocks of at most ``max_rows`` rows (never merged).

        For work whose per-block memory grows with something else than the stored
        chunk (e.g. dense relation features, rows x p); no metadata is read again.
        """
        if isinstance(max_rows, bool) or int(max_rows) < 1:
            raise ValueError(f"max_rows must be a positive integer, got {max_rows!r}")
        m = int(max_rows)
        blocks: list[tuple[int, int, np.ndarray | None]] = []
        for r0, r1, rows in self._blocks:
            if rows is None:
                blocks += [(a, min(a + m, r1), None) for a in range(r0, r1, m)] or [(r0, r1, None)]
                continue
            if len(rows) == 0:
                blocks.append((r0, r1, rows))
            for i in range(0, len(rows), m):
                part = np.asarray(rows[i:i + m], dtype=np.int64)
                lo, hi = int(part.min()), int(part.max()) + 1
                blocks.append((r0 + lo, r0 + hi, part - lo))
        return Store(self.path, self._meta, min(self._chunk_rows, m), blocks, self.selection)

    def iter_blocks(self) -> Iterator[dict]:
        """Read the blocks one by one in this process (no dask): dicts with X, Y, ids,
        split (or None) and the extra columns under ``"obs"``."""
        cats = self._categories
        for r0, r1, rows in self._blocks:
            yield {
                "X": _read_x(self._root, self._uid, r0, r1, self.n_features, rows),
                "Y": _read_y(self._root, self._uid, r0, r1, self.n_labels, rows),
                "ids": _read_rows(self._root, self._uid, "obs/_index", r0, r1, rows),
                "split": None if cats is None
                else _read_split(self._root, self._uid, r0, r1, cats, rows),
                "obs": {k: _read_rows(self._root, self._uid, f"obs/{k}", r0, r1, rows)
                        for k in self.obs_columns},
            }

    def info(self) -> dict:
        """Summary for ``dmlfe info``: shape, nnz, labels, splits, chunking, size,
        integrity, provenance, history (:func:`history`).

        Runs one dask pass over the CSR label blocks and indptr (on the current
        scheduler; no block is made dense) and one ``stat`` per chunk file
        (:meth:`integrity`). ``labels`` maps every label to its number of documents;
        ``label_stats`` (:func:`label_statistics`) stays short at any number of labels.
        """
        n, D = self.n_docs, self.n_features
        q = self.n_labels
        parts = [dask.delayed(_label_block_stats)(b, q) for b in self.Y.to_delayed().ravel()]
        parts, row_nnz_zero, nnz = dask.compute(parts, (self.row_nnz == 0).sum(),
                                                self.row_nnz.sum())
        label_counts = np.zeros(q, dtype=np.int64)
        per_doc = np.zeros(3, dtype=np.int64)  # label pairs, most labels, docs without
        for counts, (pairs, most, without) in parts:
            label_counts += counts
            per_doc += [pairs, 0, without]
            per_doc[1] = max(per_doc[1], most)
        stats = label_statistics(self.label_names, label_counts, n, *per_doc)
        splits = None
        without_split = None
        if self._categories is not None:
            codes = self._split_codes()
            counts = np.bincount(codes[codes >= 0], minlength=len(self._categories))
            splits = {c: int(k) for c, k in zip(self._categories, counts, strict=True)}
            without_split = int((codes < 0).sum())
        arrays = _opened(self._root, self._uid).arrays
        zarr_chunks = {name: list(arrays[name].chunks)
                       for name in ("X/data", "X/indices", "X/indptr",
                                    *F.label_arrays(self._meta), "obs/_index")}
        return {
            "path": str(self.path),
            "format_version": self.format_version,
            "shape": [n, D],
            "nnz": int(nnz),
            "density": float(nnz) / (n * D) if n * D else 0.0,
            "n_labels": self.n_labels,
            "labels": {name: int(c) for name, c in
                       zip(self.label_names, label_counts, strict=True)},
            "docs_without_labels": int(per_doc[2]),
            "label_stats": stats,
            "empty_docs": int(row_nnz_zero),
            "splits": splits,
            "docs_without_split": without_split,
            "obs_columns": self.obs_columns,
            "features": self.feature_kind,
            "hashing": self.hashing,
            "chunking": {
                "chunk_rows": self.chunk_rows,
                "stored_chunk_rows": self.stored_chunk_rows,
                "n_chunks": len(self._blocks),
                "zarr_chunks": zarr_chunks,
            },
            "subset": self.is_subset,
            "size_on_disk_bytes": F.dir_size(self.path),
            "integrity": self.integrity(),
            "provenance": {k: v for k, v in self.attrs.items() if k != "history"},
            "history": self.history(),
        }

    def __repr__(self) -> str:
        kind = "subset of store" if self.is_subset else "store"
        return (f"<dmlfe {kind} {self.path}: {self.n_docs} docs x {self.n_features} features, "
                f"{self.n_labels} labels, {len(self._blocks)} blocks>")


#: Labels listed by name in :func:`label_statistics` (the most frequent ones).
TOP_LABELS = 10


def _label_block_stats(block: sp.csr_matrix, n_labels: int) -> tuple[np.ndarray, tuple]:
    """Documents per label of a CSR label block, and (label pairs, most labels of one
    document, documents without labels): O(nnz + q), never dense."""
    block = sp.csr_matrix(block)
    counts = np.bincount(block.indices, minlength=n_labels).astype(np.int64)
    per_doc = np.diff(block.indptr)
    most = int(per_doc.max()) if per_doc.size else 0
    return counts, (int(block.nnz), most, int(np.count_nonzero(per_doc == 0)))


def label_statistics(label_names: list[str], counts: np.ndarray, n_docs: int,
                     pairs: int, most: int, without: int) -> dict:
    """A compact summary of a label matrix, short at any number of labels.

    Parameters
    ----------
    label_names : list of str
    counts : ndarray (q,)
        Documents per label.
    n_docs, pairs, most, without : int
        Documents, document-label pairs (nnz of Y), most labels of one document,
        documents without labels.

    Returns
    -------
    dict
        ``n_labels``, ``label_pairs``, ``docs_per_label`` (min, median, max,
        ``labels_with_one_doc``, ``labels_without_docs``, ``top``: the
        :data:`TOP_LABELS` most frequent labels as ``[name, documents]``) and
        ``labels_per_doc`` (mean, max, ``docs_without_labels``).
    """
    counts = np.asarray(counts, dtype=np.int64)
    q = counts.size
    top = np.argsort(-counts, kind="stable")[:TOP_LABELS]
    return {
        "n_labels": q,
        "label_pairs": int(pairs),
        "docs_per_label": {
            "min": int(counts.min()) if q else 0,
            "median": float(np.median(counts)) if q else 0.0,
            "max": int(counts.max()) if q else 0,
            "labels_with_one_doc": int(np.count_nonzero(counts == 1)),
            "labels_without_docs": int(np.count_nonzero(counts == 0)),
            "top": [[label_names[j], int(counts[j])] for j in top],
        },
        "labels_per_doc": {
            "mean": float(pairs) / n_docs if n_docs else 0.0,
            "max": int(most),
            "docs_without_labels": int(without),
        },
    }
