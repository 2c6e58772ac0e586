"""Writing a store: pieces written in parallel, then assembled chunk by chunk, then renamed.

Workers write *pieces* (consecutive blocks of documents, any size) with
:func:`write_piece` under ``<tmp>/pieces``; :meth:`StoreWriter.finalize` then creates the
final zarr arrays and fills them with tasks that each write whole zarr chunks only (so
no two tasks ever touch the same chunk), writes the metadata with the ``complete``
marker last, and renames the temporary directory to its final name. Nothing at the
final path is ever a half-written store.

Workers must see the temporary directory at the same path as the driver (a local
cluster, or a shared file system).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import scipy.sparse as sp
import zarr

from dmlfe._version import __version__
from dmlfe.errors import InputError, StoreError
from dmlfe.progress import ProgressLine, progress_default, watch_futures
from dmlfe.store import integrity
from dmlfe.store import layout as F
from dmlfe.store.reader import (
    Store,
    _opened,
    _read_root_meta,
    _read_rows,
    _read_split,
    _read_x,
    _read_y,
    fingerprint_of,
    history,
    history_source,
)
from dmlfe.tempfiles import (
    link_note,
    move_into_place,
    remove_stale,
    swap_into_place,
    temp_sibling,
)

_PIECE_KEYS = ("index", "rows", "nnz", "path", "n_cols", "n_labels", "splits", "meta_keys",
               "label_nnz")


# --------------------------------------------------------------------------- pieces
def write_piece(tmp_path, index: int, X: sp.csr_matrix, Y, ids: list[str],
                splits: list[str] | None, meta: dict[str, list[str]] | None = None) -> dict:
    """Write one piece (a block of consecutive documents) of a store being built.

    A plain module-level function, meant to run on a dask worker.

    Parameters
    ----------
    tmp_path : path-like
        ``StoreWriter.tmp_path`` of the store being built.
    index : int
        Number of the piece; names its folder (pieces are assembled in the order of the
        list given to :meth:`StoreWriter.finalize`, not by this number).
    X : scipy.sparse matrix, shape (n, D)
        Features; stored as float64 CSR with sorted, summed-up column indices.
    Y : scipy.sparse matrix or array-like, shape (n, q)
        0/1 label matrix; stored as CSR (a sparse Y is never densified).
    ids : list of str
        Document ids.
    splits : list of (str or None) or None
        Split of each document (None for a missing value), or None when there is none.
    meta : dict of str to list of str, optional
        Further per-document string columns.

    Returns
    -------
    dict
        Small description of the piece for :meth:`StoreWriter.finalize`.

    Raises
    ------
    ValueError, TypeError
        On inconsistent lengths, labels other than 0/1, non-finite or out-of-range
        features, or non-string ids/columns; the message names the piece and document.
    """
    where = f"piece {index}"
    if not sp.issparse(X):
        raise TypeError(f"{where}: X must be a scipy.sparse matrix, got {type(X).__name__}")
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    n = X.shape[0]
    ids = list(ids)
    if len(ids) != n:
        raise ValueError(f"{where}: {len(ids)} ids for {n} rows of X")
    for i, v in enumerate(ids):
        if not isinstance(v, str):
            raise TypeError(f"{where}: document id at row {i} is {v!r} "
                            f"({type(v).__name__}), expected str")
    Y = label_csr(Y, where, ids)
    if Y.shape[0] != n:
        raise ValueError(f"{where}: Y has shape {Y.shape}, expected ({n}, n_labels)")
    if not np.isfinite(X.data).all():
        r = int(np.searchsorted(X.indptr, np.flatnonzero(~np.isfinite(X.data))[0], "right")) - 1
        raise ValueError(f"{where}: X holds a non-finite value in document {ids[r]!r}; "
                         "replace missing or infinite feature values before ingesting")
    if X.nnz and (X.indices.min() < 0 or X.indices.max() >= X.shape[1]):
        raise ValueError(f"{where}: X has column indices outside [0, {X.shape[1]})")
    X.sum_duplicates()  # canonical CSR: sorted indices, no duplicate entries

    split_values = None
    missing = None
    if splits is not None:
        splits = list(splits)
        if len(splits) != n:
            raise ValueError(f"{where}: {len(splits)} split values for {n} documents")
        missing = np.array([s is None for s in splits], dtype=bool)
        for i, s in enumerate(splits):
            if s is not None and not isinstance(s, str):
                raise TypeError(f"{where}: split of document {ids[i]!r} is {s!r}, "
                                "expected a str or None")
        splits = ["" if s is None else s for s in splits]
        split_values = sorted({s for s, m in zip(splits, missing, strict=True) if not m})
    meta = dict(meta or {})
    for key, col in meta.items():
        _check_meta_column(where, key, col, n, ids)

    pdir = Path(tmp_path) / "pieces" / f"{index:08d}"
    pdir.mkdir(parents=True, exist_ok=True)
    np.save(pdir / "data.npy", X.data)
    np.save(pdir / "indices.npy", X.indices.astype(F.index_dtype(X.shape[1]), copy=False))
    np.save(pdir / "indptr.npy", X.indptr.astype(np.int64))
    np.save(pdir / "Y_indices.npy", Y.indices.astype(F.index_dtype(Y.shape[1]), copy=False))
    np.save(pdir / "Y_indptr.npy", Y.indptr.astype(np.int64))
    _save_strings(pdir, "ids", ids)
    # 64-bit hashes let finalize check id uniqueness without loading every id string
    np.save(pdir / "id_hash.npy", id_hashes(ids))
    if splits is not None:
        _save_strings(pdir, "split", splits)
        np.save(pdir / "split_missing.npy", missing)
    for j, col in enumerate(meta.values()):
        _save_strings(pdir, f"meta{j}", col)
    return {
        "index": int(index), "rows": int(n), "nnz": int(X.nnz), "path": str(pdir),
        "n_cols": int(X.shape[1]), "n_labels": int(Y.shape[1]),
        "splits": split_values, "meta_keys": list(meta), "label_nnz": int(Y.nnz),
    }


def label_csr(Y, where: str, ids: Sequence[str]) -> sp.csr_matrix:
    """``Y`` as a canonical uint8 CSR 0/1 matrix: sorted, unique column indices per row,
    explicit zeros dropped; sparse input is never densified.

    Raises
    ------
    ValueError
        ``Y`` is not 2-D or holds a value other than 0/1; the message names ``where``,
        the document id and the label column.
    """
    if sp.issparse(Y):
        Y = sp.csr_matrix(Y, copy=True)
    else:
        Y = np.asarray(Y)
        if Y.ndim != 2:
            raise ValueError(f"{where}: Y has shape {Y.shape}, expected (n_docs, n_labels)")
        Y = sp.csr_matrix(Y)
    Y.sum_duplicates()  # a repeated (row, column) pair of a COO-built Y adds up: caught below
    bad = np.flatnonzero(Y.data != 1)
    bad = bad[Y.data[bad] != 0]
    if bad.size:
        k = int(bad[0])
        r = int(np.searchsorted(Y.indptr, k, side="right")) - 1
        doc = ids[r] if r < len(ids) else r
        raise ValueError(f"{where}: label matrix Y must be 0/1 but holds {Y.data[k].item()!r} "
                         f"at document {doc!r}, label column {int(Y.indices[k])}")
    Y.eliminate_zeros()
    return sp.csr_matrix((np.ones(Y.nnz, dtype=np.uint8), Y.indices, Y.indptr),
                         shape=Y.shape)


def _check_meta_column(where: str, key, col, n: int, ids: list[str]) -> None:
    if not isinstance(key, str) or not key or "/" in key or key.startswith((".", "__")):
        raise ValueError(f"{where}: extra column name {key!r} is not usable as a zarr name "
                         "(non-empty, no '/', not starting with '.' or '__')")
    if key in F.RESERVED_OBS:
        raise ValueError(f"{where}: extra column name {key!r} is reserved by the store layout")
    if len(col) != n:
        raise ValueError(f"{where}: extra column {key!r} has {len(col)} values for {n} documents")
    for i, v in enumerate(col):
        if not isinstance(v, str):
            raise TypeError(f"{where}: extra column {key!r} of document {ids[i]!r} is {v!r}, "
                            "expected str")


def _save_strings(pdir: Path, name: str, values: Sequence[str]) -> None:
    buf, off = F.encode_strings(values)
    np.save(pdir / f"{name}_buf.npy", buf)
    np.save(pdir / f"{name}_off.npy", off)


def _load(pdir: str, name: str) -> np.ndarray:
    return np.load(Path(pdir) / f"{name}.npy", mmap_mode="r", allow_pickle=False)


def _load_strings(pdir: str, name: str, start: int, stop: int) -> list[str]:
    return F.decode_strings(_load(pdir, f"{name}_buf"), _load(pdir, f"{name}_off"), start, stop)


# --------------------------------------------------------------------------- assembly tasks
def _fill_elem_chunk(root: str, c0: int, c1: int, spans: list[tuple[str, int, int]],
                     idx_dtype: str, matrix: str = "X") -> dict:
    """Write ``<matrix>/data[c0:c1]`` and ``<matrix>/indices[c0:c1]`` (one zarr chunk of
    each); ``matrix`` is ``"X"`` or ``"obsm/Y"`` (whose data are all ones).

    Returns the integrity entries of the two chunks written (:mod:`dmlfe.store.integrity`).
    """
    prefix = "" if matrix == "X" else "Y_"
    indices = np.concatenate([_load(p, f"{prefix}indices")[lo:hi] for p, lo, hi in spans])
    if matrix == "X":
        data = np.concatenate([_load(p, "data")[lo:hi] for p, lo, hi in spans])
    else:
        data = np.ones(c1 - c0, dtype=np.uint8)
    group = zarr.open_group(root, mode="r+")
    group[f"{matrix}/data"][c0:c1] = data
    group[f"{matrix}/indices"][c0:c1] = indices.astype(idx_dtype, copy=False)
    k = c0 // int(group[f"{matrix}/data"].chunks[0])  # c0 is a multiple of the chunk size
    return integrity.merge_entries(integrity.written_chunks(root, group, name, k)
                                   for name in (f"{matrix}/data", f"{matrix}/indices"))


def _fill_row_chunk(root: str, p0: int, p1: int, n: int, nnz: int,
                    spans: list[tuple[str, int, int, int, int]], categories: list[str] | None,
                    code_dtype: str, meta_keys: list[str], label_nnz: int = 0) -> dict:
    """Write indptr positions ``p0:p1`` and rows ``p0:min(p1, n)`` of every per-row array.

    ``spans`` lists ``(piece_path, lo, hi, nnz_offset, label_nnz_offset)`` for the
    piece rows covering the rows of this chunk, in order; ``nnz`` and ``label_nnz``
    are the store's totals (the last row pointer entries). Returns the integrity
    entries of the chunks written (:mod:`dmlfe.store.integrity`).
    """
    group = zarr.open_group(root, mode="r+")
    written = []
    for name, piece_name, total, pos in (("X/indptr", "indptr", nnz, 3),
                                         ("obsm/Y/indptr", "Y_indptr", label_nnz, 4)):
        starts = [_load(s[0], piece_name)[s[1]:s[2]] + s[pos] for s in spans]
        if p1 > n:  # the chunk holding indptr[n] = nnz
            starts.append(np.array([total], dtype=np.int64))
        group[name][p0:p1] = np.concatenate(starts).astype(np.int64)
        written.append(name)
    _fill_rows(group, p0, min(p1, n), spans, categories, code_dtype, meta_keys, written)
    k = p0 // int(group["X/indptr"].chunks[0])  # p0 is a multiple of the chunk rows
    return integrity.merge_entries(integrity.written_chunks(root, group, name, k)
                                   for name in written)


def _fill_rows(group, p0: int, r1: int, spans, categories, code_dtype: str,
               meta_keys: list[str], written: list[str]) -> None:
    """The per-row arrays of rows ``p0:r1`` (their names are appended to ``written``)."""
    if r1 <= p0:
        return
    group["obs/_index"][p0:r1] = np.array(
        [s for p, lo, hi, *_ in spans for s in _load_strings(p, "ids", lo, hi)], dtype=object)
    written.append("obs/_index")
    if categories is not None:
        lookup = {c: k for k, c in enumerate(categories)}
        parts = []
        for p, lo, hi, *_ in spans:
            if not (Path(p) / "split_missing.npy").exists():  # piece without splits
                parts.append(np.full(hi - lo, -1, dtype=code_dtype))
                continue
            codes = np.array([lookup.get(s, -1) for s in _load_strings(p, "split", lo, hi)],
                             dtype=code_dtype)
            codes[np.asarray(_load(p, "split_missing")[lo:hi])] = -1
            parts.append(codes)
        group["obs/split/codes"][p0:r1] = np.concatenate(parts)
        written.append("obs/split/codes")
    for j, key in enumerate(meta_keys):
        group[f"obs/{key}"][p0:r1] = np.array(
            [s for p, lo, hi, *_ in spans for s in _load_strings(p, f"meta{j}", lo, hi)],
            dtype=object)
        written.append(f"obs/{key}")


def _spans(bounds: np.ndarray, c0: int, c1: int) -> list[tuple[int, int, int]]:
    """``(piece, lo, hi)`` local ranges of the pieces covering global range ``[c0, c1)``.

    ``bounds`` are the cumulative piece sizes (length n_pieces + 1).
    """
    out = []
    k = int(np.searchsorted(bounds, c0, side="right")) - 1
    while k < len(bounds) - 1 and bounds[k] < c1:
        lo, hi = max(c0, bounds[k]) - bounds[k], min(c1, bounds[k + 1]) - bounds[k]
        if hi > lo:
            out.append((k, int(lo), int(hi)))
        k += 1
    return out


def _fill_tasks(plan: _Plan, root: str, cr: int, idx_dtype: np.dtype, code_dtype: np.dtype,
                categories: list[str] | None, row_base: int = 0, nnz_base: int = 0,
                row_start: int = 0, elem_start: int = 0, label_base: int = 0,
                label_start: int = 0) -> list[tuple]:
    """The tasks that write every zarr chunk the plan's pieces cover.

    The pieces hold rows ``row_base:``, elements ``nnz_base:`` of X and elements
    ``label_base:`` of the label matrix; chunks are written from row ``row_start``,
    element ``elem_start`` of X and element ``label_start`` of Y on (multiples of the
    chunk sizes, at or after the bases): 0 for a new store, the first chunk an append
    changes for an append.
    """
    n, nnz = row_base + plan.n, nnz_base + plan.nnz
    label_nnz = label_base + plan.label_nnz
    rows, elems = plan.row_bounds + row_base, plan.nnz_bounds + nnz_base
    label_elems = plan.label_bounds + label_base
    label_idx = F.index_dtype(len(plan.label_names))
    tasks: list[tuple] = []
    for matrix, bounds, start, total, dtype in (("X", elems, elem_start, nnz, idx_dtype),
                                                ("obsm/Y", label_elems, label_start,
                                                 label_nnz, label_idx)):
        for c0 in range(start, total, F.ELEM_CHUNK):
            c1 = min(c0 + F.ELEM_CHUNK, total)
            spans = [(plan.paths[k], lo, hi) for k, lo, hi in _spans(bounds, c0, c1)]
            tasks.append((_fill_elem_chunk, root, c0, c1, spans, dtype.str, matrix))
    for p0 in range(row_start, n + 1, cr):
        p1 = min(p0 + cr, n + 1)
        spans = [(plan.paths[k], lo, hi, int(elems[k]), int(label_elems[k]))
                 for k, lo, hi in _spans(rows, p0, min(p1, n))]
        tasks.append((_fill_row_chunk, root, p0, p1, n, nnz, spans, categories,
                      code_dtype.str, plan.meta_keys, label_nnz))
    return tasks


def _run_tasks(tasks: list[tuple], client) -> list:
    """Run ``(func, *args)`` tasks on the client, or on local threads without one; returns
    their results in order."""
    if not tasks:
        return []
    if client is not None:
        futures = [client.submit(t[0], *t[1:], pure=False) for t in tasks]
        if progress_default():
            watch_futures(futures, ProgressLine("writing the store"))
        return client.gather(futures)  # raises the first task error here
    return list(dask.compute(*[dask.delayed(t[0], pure=False)(*t[1:]) for t in tasks],
                             scheduler="threads"))


# --------------------------------------------------------------------------- writer
class StoreWriter:
    """Builds a store under a temporary sibling directory and renames it when complete.

    Parameters
    ----------
    out : path-like
        Final path of the store.
    chunk_rows : int
        Documents per zarr chunk of the per-document arrays (and default dask block).
    overwrite : bool
        Replace an existing store at ``out`` (only at the final rename).

    Attributes
    ----------
    tmp_path : pathlib.Path
        The temporary directory, ``out.parent / f".{out.name}.tmp-{pid}-{hex}"``
        (:func:`dmlfe.tempfiles.temp_sibling`); pieces go to ``tmp_path / "pieces"``.

    Use it as a context manager: an exception inside the ``with`` block removes the
    temporary directory, and nothing appears at ``out``. A process killed outright
    leaves its temporary directory behind; the next ``StoreWriter`` for the same
    ``out`` removes it (and any other temporary of ``out`` whose process is gone) with
    a RuntimeWarning naming it.
    """

    def __init__(self, out: str | os.PathLike, *, chunk_rows: int, overwrite: bool = False):
        self.out = Path(out).absolute()
        if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, (int, np.integer)) \
                or chunk_rows < 1:
            raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
        self.chunk_rows = int(chunk_rows)
        self.overwrite = bool(overwrite)
        remove_stale(self.out)  # what killed ingests into the same path left behind
        check_store_target(self.out, self.overwrite)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_path = temp_sibling(self.out)
        self.tmp_path.mkdir()
        (self.tmp_path / "pieces").mkdir()
        self._state = "open"

    # context manager -------------------------------------------------------------
    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self._state == "open":
            self.abort()
        return False

    def abort(self) -> None:
        """Remove the temporary directory (pieces and any partial store)."""
        shutil.rmtree(self.tmp_path, ignore_errors=True)
        if self._state == "open":
            self._state = "aborted"

    # finalize --------------------------------------------------------------------
    def finalize(self, pieces: list[dict], *, n_features: int, label_names: list[str],
                 feature_names: list[str] | None = None, hashing: dict | None = None,
                 attrs: dict | None = None, idf: np.ndarray | None = None,
                 client=None) -> Path:
        """Assemble the pieces (list order = document order) into the store at ``out``.

        Parameters
        ----------
        pieces : list of dict
            Return values of :func:`write_piece`.
        n_features : int
            Number of columns of X; every piece must have it.
        label_names : list of str
            Unique names of the label columns of Y.
        feature_names : list of str, optional
            Unique names of the features (the vocabulary).
        hashing : dict, optional
            Hashing parameters, for stores without feature names.
        idf : ndarray (n_features,), optional
            The text vectoriser's idf weights (``uns/idf``), kept so that new text can be
            vectorised as the stored documents were (:meth:`Store.text_vectorizer`).
        attrs : dict, optional
            Provenance (source, parameters, ...); a ``"report"`` entry (an
            ``IngestReport.to_dict()``) is kept apart. Must be JSON serialisable.
        client : distributed.Client, optional
            Fill the arrays with tasks on this cluster; local threads otherwise.

        Returns
        -------
        pathlib.Path
            ``out``.

        Raises
        ------
        ValueError, TypeError
            On inconsistent pieces, duplicate ids or label/feature names; the temporary
            directory is removed and nothing is written at ``out``.
        """
        if self._state != "open":
            raise RuntimeError(f"this StoreWriter is {self._state}; create a new one")
        try:
            self._assemble(pieces, n_features, label_names, feature_names, hashing, attrs, idf,
                           client)
            self._rename()
        except BaseException:
            self.abort()
            raise
        self._state = "finalized"
        return self.out

    def _assemble(self, pieces, n_features, label_names, feature_names, hashing, attrs, idf,
                  client) -> None:
        plan = _Plan(pieces, n_features, label_names, feature_names, hashing)
        attrs = F.jsonable(dict(attrs or {}), "attrs")
        report = attrs.pop("report", None)
        attrs.setdefault("dmlfe_version", __version__)
        attrs.setdefault("created", datetime.now(UTC).isoformat(timespec="seconds"))
        hashing = F.jsonable(hashing, "hashing") if hashing is not None else None
        _check_unique_ids(plan)

        root = str(self.tmp_path)
        cr = self.chunk_rows
        n, nnz = plan.n, plan.nnz
        skeleton = F.create_anndata(root, n=n, chunk_rows=cr, categories=plan.categories,
                                    obs_columns=plan.meta_keys, label_names=plan.label_names,
                                    n_features=plan.n_features,
                                    named_features=plan.feature_names is not None,
                                    label_nnz=plan.label_nnz)
        group = skeleton.root
        idx_dtype = F.index_dtype(plan.n_features)
        elem_chunk = F.ELEM_CHUNK
        arr = F.new_array

        gx = group.create_group("X", attributes={**F.CSR_ENC, "shape": [n, plan.n_features]})
        arr(gx, "data", (nnz,), (elem_chunk,), np.float64)
        arr(gx, "indices", (nnz,), (elem_chunk,), idx_dtype)
        arr(gx, "indptr", (n + 1,), (cr,), np.int64)
        code_dtype = F.codes_dtype(len(plan.categories or []))

        tasks = _fill_tasks(plan, root, cr, idx_dtype, code_dtype, plan.categories)
        written = integrity.merge_entries(_run_tasks(tasks, client))

        _write_var(skeleton.var_index, plan)
        if idf is not None:
            idf = np.asarray(idf, dtype=np.float64)
            if idf.shape != (plan.n_features,):
                raise ValueError(f"idf has shape {idf.shape}; expected ({plan.n_features},)")
            chunk = max(1, min(F.VAR_CHUNK, plan.n_features))
            arr(skeleton.uns, "idf", idf.shape, (chunk,), np.float64, F.ARRAY_ENC)[:] = idf
        shutil.rmtree(self.tmp_path / "pieces")  # not part of the store (nor its record)
        # per-chunk sizes and CRC-32s: the big arrays' came back from the tasks that wrote
        # them, the small arrays the driver wrote are read back here
        record = integrity.build_record(root, written)

        meta = {
            "format": F.FORMAT_NAME, "format_version": F.FORMAT_VERSION,
            "uuid": uuid.uuid4().hex, "n_docs": n, "n_features": plan.n_features,
            "nnz": nnz, "label_nnz": plan.label_nnz, "chunk_rows": cr,
            "label_names": plan.label_names,
            "has_feature_names": plan.feature_names is not None, "hashing": hashing,
            "split_categories": plan.categories, "obs_columns": plan.meta_keys,
            "provenance": attrs, "report": report, "integrity": record, "complete": True,
        }
        # a new store's history starts here, whatever history its attrs carried (an
        # import's attrs are another store's, with that store's fingerprints)
        attrs["history"] = [{"kind": "ingest", "rows": [0, n], "n_docs_before": 0,
                             "source": history_source(attrs), "time": attrs["created"],
                             "fingerprint": fingerprint_of(self.out, meta)}]
        # written last: a store without this marker is refused by open_store
        group.attrs["dmlfe"] = meta

    def _rename(self) -> None:
        check_store_target(self.out, self.overwrite)
        move_into_place(self.tmp_path, self.out)


#: Folders an ingest of an older dmlfe left inside a store (not part of the zarr tree).
_WORK_DIRS = ("pieces", "staging", "counts")
#: Folder number of the piece holding the store's own last rows in an append.
_TAIL_PIECE = 99_999_999


class StoreAppender(StoreWriter):
    """Builds the next version of a store, with documents appended, and swaps it in.

    The new version is built in a temporary sibling of the store (as
    :class:`StoreWriter` builds a new store): the chunk files the append leaves
    unchanged are hard links of the store's own (copies where the file system has no
    hard links), every ``zarr.json`` is a copy, and the chunks the append changes (the
    last, partly filled chunk of each array) and adds are written as new files by the
    same tasks that write a new store; the integrity record keeps the entries of the
    unchanged chunks and gets those of the written ones; the root metadata, with a new
    uuid and the history entry, is written last. :func:`dmlfe.tempfiles.swap_into_place`
    then replaces the store. An exception anywhere removes the temporary; a kill leaves
    the store as it was (and a temporary that the next write or ``dmlfe clean``
    removes).

    A store of format version 1 (dense labels) is migrated by its first append: every
    row is written again, the labels as CSR, and the swapped-in store has format
    version 2 (the history entry records ``migrated_from_format``).

    Parameters
    ----------
    store : Store
        The store to append to, opened (a whole store, not a view).
    """

    def __init__(self, store: Store) -> None:
        if store.is_subset:
            raise ValueError("append to a whole store, not to a subset of one")
        self.store = store
        self.out = store.path
        self.chunk_rows = store.stored_chunk_rows
        self.overwrite = True
        remove_stale(self.out)  # what killed appends or ingests into the same path left
        self.tmp_path = temp_sibling(self.out)
        self.tmp_path.mkdir()
        (self.tmp_path / "pieces").mkdir()
        self._state = "open"

    def finalize(self, pieces: list[dict], *, source: dict, report: dict | None = None,
                 source_name: str = "the new documents", client=None) -> dict:
        """Append the pieces (list order = document order) to the store and swap it in.

        Parameters
        ----------
        pieces : list of dict
            Return values of :func:`write_piece`: X with the store's columns, Y with the
            store's label columns in the store's order, and the store's extra columns.
        source : dict
            The history entry's ``source`` (reader, path(s), options).
        report : dict, optional
            The append's report (documents read and skipped, terms not in the
            vocabulary), kept in the history entry.
        source_name : str
            How messages name the new documents' file(s).
        client : distributed.Client, optional
            Write the chunks with tasks on this cluster; local threads otherwise.

        Returns
        -------
        dict
            The new history entry (:func:`dmlfe.store.history`).

        Raises
        ------
        InputError
            A new document's id is already in the store or occurs twice; the split
            values would need a wider code type. The store is unchanged.
        StoreError
            The store was replaced by another process meanwhile; the store is unchanged.
        """
        if self._state != "open":
            raise RuntimeError(f"this StoreAppender is {self._state}; create a new one")
        try:
            entry = self._extend(list(pieces), source, report, source_name, client)
            self._swap()
        except BaseException:
            self.abort()
            raise
        self._state = "finalized"
        return entry

    def _extend(self, pieces, source, report, source_name, client) -> dict:
        old = self.store
        meta = old._meta
        n0, nnz0, D = int(meta["n_docs"]), int(meta["nnz"]), int(meta["n_features"])
        cr, E = self.chunk_rows, F.ELEM_CHUNK
        o = _opened(old._root, old._uid)
        self._check_ids(o, n0, pieces, source_name)
        _link_tree(old.path, self.tmp_path)

        # the store's own rows that share a chunk with the new ones: the last, partly
        # filled row chunk, and the rows of the last, partly filled element chunks of X
        # and of the labels
        t0, e0 = (n0 // cr) * cr, (nnz0 // E) * E
        migrate = not F.sparse_labels(meta)
        if migrate:
            # a format-version-1 store (dense labels) is rewritten whole as version 2,
            # through the same temporary and swap: the labels change layout in every row
            t0 = e0 = ye0 = r_a = 0
        else:
            ye0 = (int(meta["label_nnz"]) // E) * E
            r_a = min(t0, _row_of_element(o, n0, e0),
                      _row_of_element(o, n0, ye0, "obsm/Y/indptr"))
        nnz_a = int(o.read("X/indptr", slice(r_a, r_a + 1))[0])
        ynnz_a = 0 if migrate else int(o.read("obsm/Y/indptr", slice(r_a, r_a + 1))[0])
        old_cats = meta.get("split_categories")
        tail = [self._tail_piece(r, min(r + cr, n0), old_cats, k)
                for k, r in enumerate(range(r_a, n0, cr))]
        plan = _Plan(tail + pieces, D, list(meta["label_names"]), None, None)
        if plan.meta_keys != list(meta.get("obs_columns") or []):
            raise ValueError(f"the new documents' extra columns {plan.meta_keys} differ from "
                             f"the store's {meta.get('obs_columns') or []}")
        cats = old_cats
        new_values = sorted({v for p in pieces for v in (p["splits"] or [])})
        if old_cats is not None or any(p["splits"] is not None for p in pieces):
            cats = list(old_cats or []) + [v for v in new_values if v not in (old_cats or [])]
            if old_cats and F.codes_dtype(len(cats)) != F.codes_dtype(len(old_cats)):
                raise InputError(f"{source_name}: appending would give the store {len(cats)} "
                                 f"split values, more than its split codes hold "
                                 f"({len(old_cats)} now); ingest the whole corpus anew")
        n, nnz, ynnz = r_a + plan.n, nnz_a + plan.nnz, ynnz_a + plan.label_nnz
        root = str(self.tmp_path)
        group = zarr.open_group(root, mode="r+")
        recreated = self._migrate_labels(group, n, ynnz) if migrate else set()
        recreated |= self._resize(group, n, nnz, ynnz, old_cats, cats)
        idx_dtype = F.index_dtype(D)
        code_dtype = F.codes_dtype(len(cats or []))
        # the chunks about to be written are new files, never written through a link
        # to the store's own (zarr also writes through a rename; this does not rely on it)
        for name, first, size in self._touched(group, t0, e0, nnz, ye0, ynnz):
            arr = group[name]
            for k in range(first, -(-size // arr.chunks[0])):
                key = arr.metadata.encode_chunk_key((k,) + (0,) * (arr.ndim - 1))
                (self.tmp_path / name / key).unlink(missing_ok=True)
        tasks = _fill_tasks(plan, root, cr, idx_dtype, code_dtype, cats, row_base=r_a,
                            nnz_base=nnz_a, row_start=t0, elem_start=e0,
                            label_base=ynnz_a, label_start=ye0)
        written = integrity.merge_entries(_run_tasks(tasks, client))
        shutil.rmtree(self.tmp_path / "pieces")

        # unchanged chunks keep their recorded entries; a store written without a record
        # gets one (every chunk file read here)
        known: dict = {}
        if meta.get("integrity") is not None:
            known = {name: dict(a["chunks"]) for name, a in meta["integrity"]["arrays"].items()
                     if name not in recreated}
        for name, entries in written.items():
            known.setdefault(name, {}).update(entries)
        record = integrity.build_record(root, known)

        new_meta = {**meta, "format_version": F.FORMAT_VERSION, "uuid": uuid.uuid4().hex,
                    "n_docs": n, "nnz": nnz, "label_nnz": ynnz, "split_categories": cats,
                    "integrity": record}
        entry = {"kind": "append", "rows": [n0, n], "n_docs_before": n0,
                 "source": source,
                 "time": datetime.now(UTC).isoformat(timespec="seconds"),
                 "report": report, "fingerprint": fingerprint_of(self.out, new_meta)}
        if migrate:
            entry["migrated_from_format"] = int(meta.get("format_version", 1))
        provenance = dict(meta.get("provenance") or {})
        provenance["history"] = history(old) + [entry]
        new_meta["provenance"] = F.jsonable(provenance, "provenance")
        # written last, as by a new store (the temporary is never opened as the store)
        group.attrs["dmlfe"] = new_meta
        return new_meta["provenance"]["history"][-1]

    def _check_ids(self, o, n0: int, pieces: list[dict], source_name: str) -> None:
        """InputError naming the first new document whose id is taken or repeated."""
        cr = self.chunk_rows
        old = [id_hashes(F.to_object_strings(o.read("obs/_index", slice(r, min(r + cr, n0)))))
               for r in range(0, n0, cr)]
        paths = [p["path"] for p in pieces]
        bounds = np.cumsum([n0] + [p["rows"] for p in pieces])
        hashes = np.concatenate(old + [np.asarray(_load(p, "id_hash")) for p in paths])

        def id_at(r: int) -> str:
            if r < n0:
                return str(F.to_object_strings(o.read("obs/_index", slice(r, r + 1)))[0])
            k = int(np.searchsorted(bounds, r, side="right")) - 1
            return _load_strings(paths[k], "ids", r - int(bounds[k]), r - int(bounds[k]) + 1)[0]

        dup = first_duplicate(hashes, id_at)
        if dup is None:
            return
        doc_id, first, second = dup
        if first < n0:
            raise InputError(f"{source_name}: document id {doc_id!r} (new document "
                             f"{second - n0}) is already in the store {self.out} (row "
                             f"{first}); document ids must stay unique: drop or rename it")
        raise InputError(f"{source_name}: document id {doc_id!r} occurs twice (new "
                         f"documents {first - n0} and {second - n0}); document ids must be "
                         "unique")

    def _tail_piece(self, r0: int, r1: int, cats: list[str] | None, k: int = 0) -> dict:
        """Piece ``k`` of the store's own rows, rows ``r0:r1``, to be written again with
        the new ones (its labels read as CSR, also from a format-version-1 store)."""
        old = self.store
        root, uid = old._root, old._uid
        X = _read_x(root, uid, r0, r1, old.n_features, None)
        Y = _read_y(root, uid, r0, r1, old.n_labels, None)
        ids = list(_read_rows(root, uid, "obs/_index", r0, r1, None))
        splits = None if cats is None else list(_read_split(root, uid, r0, r1, tuple(cats),
                                                            None))
        meta = {k: list(_read_rows(root, uid, f"obs/{k}", r0, r1, None))
                for k in old.obs_columns}
        return write_piece(self.tmp_path, _TAIL_PIECE + k, X, Y, ids, splits, meta)

    def _migrate_labels(self, group, n: int, label_nnz: int) -> set[str]:
        """Replace the dense ``obsm/Y`` of a format-version-1 store (in the temporary, a
        linked copy: the store itself is untouched) by the empty CSR group of version 2,
        sized for the appended store; the fill tasks then write every chunk of it."""
        shutil.rmtree(self.tmp_path / "obsm" / "Y")
        F.create_label_group(group["obsm"], n=n, q=self.store.n_labels, nnz=label_nnz,
                             chunk_rows=self.chunk_rows)
        return {"obsm/Y"}

    def _resize(self, group, n: int, nnz: int, label_nnz: int, old_cats, cats) -> set[str]:
        """Grow the arrays to ``n`` rows, ``nnz`` elements of X and ``label_nnz`` of Y;
        make the split arrays the new categories need. Returns the arrays made anew
        (their old record is void)."""
        for name in self._row_arrays(group):
            arr = group[name]
            arr.resize((n + (1 if name.endswith("indptr") else 0),) + tuple(arr.shape[1:]))
        for name in ("X/data", "X/indices"):
            group[name].resize((nnz,))
        for name in ("obsm/Y/data", "obsm/Y/indices"):
            group[name].resize((label_nnz,))
        group["X"].attrs["shape"] = [n, self.store.n_features]
        group["obsm/Y"].attrs["shape"] = [n, self.store.n_labels]
        recreated: set[str] = set()
        if cats is None or cats == old_cats:
            return recreated
        gobs = group["obs"]
        if old_cats is None:  # the store had no split: its rows get the missing code
            columns = ["split"] + list(gobs.attrs["column-order"])
            gobs.attrs["column-order"] = columns
            gsplit = gobs.create_group("split", attributes=F.CATEGORICAL_ENC)
            F.new_array(gsplit, "codes", (n,), (self.chunk_rows,), F.codes_dtype(len(cats)),
                        F.ARRAY_ENC, fill_value=-1)
            recreated.add("obs/split/codes")
        shutil.rmtree(self.tmp_path / "obs" / "split" / "categories", ignore_errors=True)
        F.new_array(group["obs/split"], "categories", (len(cats),), (max(1, len(cats)),),
                    str, F.STRING_ENC)[:] = np.array(cats, dtype=object)
        recreated.add("obs/split/categories")
        return recreated

    def _row_arrays(self, group) -> list[str]:
        names = ["X/indptr", "obsm/Y/indptr", "obs/_index"]
        names += [f"obs/{k}" for k in self.store.obs_columns]
        if "split" in group["obs"]:
            names.append("obs/split/codes")
        return names

    def _touched(self, group, t0: int, e0: int, nnz: int, ye0: int,
                 label_nnz: int) -> list[tuple[str, int, int]]:
        """``(array, first chunk, new length)`` of the chunks the fill tasks write."""
        cr = self.chunk_rows
        out = [(name, t0 // cr, group[name].shape[0]) for name in self._row_arrays(group)]
        if e0 < nnz:
            out += [(name, e0 // F.ELEM_CHUNK, nnz) for name in ("X/data", "X/indices")]
        if ye0 < label_nnz:
            out += [(name, ye0 // F.ELEM_CHUNK, label_nnz)
                    for name in ("obsm/Y/data", "obsm/Y/indices")]
        return out

    def _swap(self) -> None:
        now = _read_root_meta(self.out)
        if str(now["uuid"]) != self.store._uid:
            raise StoreError(f"store {self.out} was replaced by another process during the "
                             "append (its uuid changed); nothing was appended: run the "
                             "append again")
        swap_into_place(self.tmp_path, self.out)


def _link_tree(src: Path, dst: Path) -> None:
    """``dst`` made a copy of the store ``src``: chunk files hard-linked (copied where a
    link cannot be made), every zarr.json copied (the append rewrites some)."""
    for folder, dirs, files in os.walk(src):
        rel = Path(folder).relative_to(src)
        if rel == Path("."):
            dirs[:] = [d for d in dirs if d not in _WORK_DIRS]
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(folder) / name, dst / rel / name
            if name != "zarr.json":
                try:
                    os.link(s, d)
                    continue
                except OSError:  # another file system, or none with hard links
                    pass
            shutil.copy2(s, d)


def _row_of_element(o, n: int, e: int, indptr: str = "X/indptr") -> int:
    """The last row ``r`` of the store's ``n`` with ``indptr[r] <= e`` (a bisection: one
    chunk of the row pointer ``indptr`` read per step, never the whole of it)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if int(o.read(indptr, slice(mid, mid + 1))[0]) <= e:
            lo = mid
        else:
            hi = mid - 1
    return lo


def check_store_target(out: Path, overwrite: bool) -> None:
    """Refuse an existing ``out`` unless overwriting a store (or an empty directory).

    A symbolic link at ``out`` (even a dangling or looping one) is refused, with
    ``overwrite`` too. Called by :class:`StoreWriter` when it opens and before its
    rename; the command line calls it before any work.
    """
    if not os.path.lexists(out):
        return
    if not overwrite:
        raise FileExistsError(f"{out} already exists{link_note(out)}; pass overwrite=True "
                              "(CLI: --overwrite) to replace it, or choose another output "
                              "path")
    if not out.is_dir() or out.is_symlink():
        raise FileExistsError(f"{out} exists and is not a directory; refusing to replace it "
                              "with a store even with overwrite=True; remove it yourself")
    if not (out / "zarr.json").exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is a non-empty directory that is not a zarr store; "
                              "refusing to replace it even with overwrite=True; remove it "
                              "yourself or choose another output path")


def _write_var(index, plan: _Plan) -> None:
    """Fill ``var/_index`` (made by :func:`dmlfe.store.layout.create_anndata`): the feature
    names, or the feature numbers for stores without names."""
    D = plan.n_features
    chunk = max(1, min(F.VAR_CHUNK, D))
    for s0 in range(0, D, chunk):
        s1 = min(s0 + chunk, D)
        if plan.feature_names is not None:
            index[s0:s1] = np.array(plan.feature_names[s0:s1], dtype=object)
        else:
            index[s0:s1] = np.arange(s0, s1, dtype=F.index_dtype(D))


class _Plan:
    """Validated pieces and the offsets of each piece in the final arrays."""

    def __init__(self, pieces, n_features, label_names, feature_names, hashing):
        if isinstance(n_features, bool) or not isinstance(n_features, (int, np.integer)) \
                or n_features < 0:
            raise ValueError(f"n_features must be a non-negative integer, got {n_features!r}")
        self.n_features = int(n_features)
        self.label_names = _unique_names(label_names, "label name")
        self.feature_names = None
        if feature_names is not None:
            if hashing is not None:
                raise ValueError("give either feature_names or hashing parameters, not both")
            self.feature_names = _unique_names(feature_names, "feature name")
            if len(self.feature_names) != self.n_features:
                raise ValueError(f"{len(self.feature_names)} feature names for "
                                 f"n_features = {self.n_features}")
        if hashing is not None and not isinstance(hashing, dict):
            raise TypeError(f"hashing must be a dict of parameters, got {type(hashing).__name__}")
        pieces = list(pieces)
        q = len(self.label_names)
        self.meta_keys = list(pieces[0]["meta_keys"]) if pieces else []
        cats: set[str] = set()
        has_split = False
        for pos, p in enumerate(pieces):
            missing = [k for k in _PIECE_KEYS if k not in p]
            if missing:
                raise ValueError(f"pieces[{pos}] lacks {missing}; pass the dicts that "
                                 "write_piece returned")
            where = f"pieces[{pos}] (piece {p['index']}, {p['path']})"
            if p["n_cols"] != self.n_features:
                raise ValueError(f"{where}: X has {p['n_cols']} columns but n_features = "
                                 f"{self.n_features}")
            if p["n_labels"] != q:
                raise ValueError(f"{where}: Y has {p['n_labels']} label columns but "
                                 f"{q} label names were given")
            if list(p["meta_keys"]) != self.meta_keys:
                raise ValueError(f"{where}: extra columns {p['meta_keys']} differ from "
                                 f"{self.meta_keys} of the first piece; every piece needs "
                                 "the same columns")
            if p["splits"] is not None:
                has_split = True
                cats.update(p["splits"])
        self.categories = sorted(cats) if has_split else None
        self.paths = [str(p["path"]) for p in pieces]
        self.row_bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
        self.nnz_bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([p["rows"] for p in pieces], out=self.row_bounds[1:])
        np.cumsum([p["nnz"] for p in pieces], out=self.nnz_bounds[1:])
        self.label_bounds = np.zeros(len(pieces) + 1, dtype=np.int64)
        np.cumsum([p["label_nnz"] for p in pieces], out=self.label_bounds[1:])
        self.n = int(self.row_bounds[-1])
        self.nnz = int(self.nnz_bounds[-1])
        self.label_nnz = int(self.label_bounds[-1])


def _unique_names(names, what: str) -> list[str]:
    names = list(names)
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"{what} at position {i} is {name!r}, expected str")
        if name in seen:
            raise ValueError(f"duplicate {what} {name!r} at positions {seen[name]} and {i}; "
                             f"{what}s must be unique")
        seen[name] = i
    return names


def _check_unique_ids(plan: _Plan) -> None:
    """Raise on a duplicate document id (8 bytes of driver memory per document)."""
    if plan.n == 0:
        return
    hashes = np.concatenate([np.asarray(_load(p, "id_hash")) for p in plan.paths])

    def id_at(r: int) -> str:
        k = int(np.searchsorted(plan.row_bounds, r, side="right")) - 1
        local = int(r - plan.row_bounds[k])
        return _load_strings(plan.paths[k], "ids", local, local + 1)[0]

    dup = first_duplicate(hashes, id_at)
    if dup is not None:
        doc_id, first, second = dup
        raise ValueError(f"duplicate document id {doc_id!r} (documents {first} and {second} "
                         "in corpus order); document ids must be unique")


def first_duplicate(hashes: np.ndarray, id_at) -> tuple[str, int, int] | None:
    """The id that occurs twice (``id_at(row)`` gives the id of a row, ``hashes`` the
    64-bit hashes of all ids), with its two rows; of all duplicates, the one whose second
    occurrence comes first. None when every id is unique."""
    order = np.argsort(hashes, kind="stable")
    sorted_h = hashes[order]
    dup = np.flatnonzero(sorted_h[1:] == sorted_h[:-1])
    best = None
    # equal hashes: compare the actual strings (a 64-bit collision is not a duplicate)
    for h in np.unique(sorted_h[dup]):
        seen: dict[str, int] = {}
        for r in np.sort(order[sorted_h == h]):
            doc_id = id_at(int(r))
            if doc_id in seen:
                if best is None or r < best[2]:
                    best = (doc_id, seen[doc_id], int(r))
                break
            seen[doc_id] = int(r)
    return best


def id_hashes(ids) -> np.ndarray:
    """The 64-bit hashes of document ids that the duplicate checks compare."""
    return pd.util.hash_array(np.asarray(ids, dtype=object))
