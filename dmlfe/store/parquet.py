"""Parquet export and import of a store: one row per document, streamed by row groups.

Columns: ``id`` (string), ``split`` (string, null where missing or when the store has no
split), ``indices`` (list of int32, int64 for >= 2**31 features), ``values`` (list of
float64), ``labels`` (list of label names), then the store's extra per-document string
columns. The schema metadata key ``dmlfe`` holds JSON with n_features, label names,
feature names or hashing parameters and the provenance, so that :func:`import_parquet`
rebuilds an identical store. :func:`import_parquet` refuses anything else with a
:class:`~dmlfe.errors.DataFormatError` naming the file (and what is missing or damaged).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from dmlfe.errors import DataFormatError, DmlfeError, MissingPathError
from dmlfe.store import layout as F
from dmlfe.store.reader import Store, open_store
from dmlfe.store.writer import StoreWriter, write_piece
from dmlfe.tempfiles import link_note, write_atomically

_META_KEY = b"dmlfe"
#: Version of the exported Parquet layout (labels are name lists already: the store's
#: format version 2, sparse labels, left it unchanged).
PARQUET_FORMAT_VERSION = 1
_COLUMNS = ("id", "split", "indices", "values", "labels")
_META_FIELDS = ("n_features", "label_names", "feature_names", "hashing", "has_split",
                "obs_columns", "chunk_rows", "attrs")
# What pyarrow raises for a file that is not Parquet or is damaged (ArrowInvalid is a
# ValueError, ArrowIOError an OSError; invalid UTF-8 gives UnicodeDecodeError).
_PARQUET_ERRORS = (pa.ArrowException, OSError, ValueError, EOFError)
_NOT_EXPORT_HINT = ("`dmlfe import` reads files written by `dmlfe export` (export_parquet); "
                    "ingest a generic Parquet corpus with format='parquet' instead")


def _list_type(value_type: pa.DataType, large: bool) -> pa.DataType:
    return pa.large_list(value_type) if large else pa.list_(value_type)


def _list_array(offsets: np.ndarray, values: pa.Array, large: bool) -> pa.Array:
    cls = pa.LargeListArray if large else pa.ListArray
    off = pa.array(offsets.astype(np.int64 if large else np.int32))
    return cls.from_arrays(off, values)


def export_parquet(store_or_path, out_path, *, row_group_rows: int = 65536,
                   overwrite: bool = False) -> Path:
    """Write a store (or a subset view of one) to a Parquet file, one row per document.

    Parameters
    ----------
    store_or_path : Store or path-like
        The store; a subset view exports only its documents (its blocks become the row
        groups).
    out_path : path-like
        Parquet file to write (atomically: a temporary sibling renamed at the end).
    row_group_rows : int
        Documents per row group (memory is bounded by one row group).
    overwrite : bool
        Replace an existing file at ``out_path``.

    Returns
    -------
    pathlib.Path
    """
    store = store_or_path if isinstance(store_or_path, Store) else open_store(store_or_path)
    if not store.is_subset and store.chunk_rows != row_group_rows:
        store = open_store(store.path, chunk_rows=row_group_rows)
    out_path = Path(out_path).absolute()
    if os.path.lexists(out_path) and not overwrite:
        raise FileExistsError(f"{out_path} already exists{link_note(out_path)}; pass "
                              "overwrite=True to replace it")
    idx_type = pa.from_numpy_dtype(F.index_dtype(store.n_features))
    large = store.nnz >= 2**31
    fields = [
        pa.field("id", pa.string(), nullable=False),
        pa.field("split", pa.string()),
        pa.field("indices", _list_type(idx_type, large)),
        pa.field("values", _list_type(pa.float64(), large)),
        pa.field("labels", pa.list_(pa.string())),
    ] + [pa.field(k, pa.string()) for k in store.obs_columns]
    meta = {
        "format": "dmlfe-parquet", "format_version": PARQUET_FORMAT_VERSION,
        "n_features": store.n_features, "label_names": store.label_names,
        "feature_names": store.feature_names, "hashing": store.hashing,
        "has_split": store.split is not None, "obs_columns": store.obs_columns,
        "chunk_rows": store.stored_chunk_rows, "attrs": store.attrs,
    }
    schema = pa.schema(fields, metadata={_META_KEY: json.dumps(meta).encode("utf-8")})
    label_arr = np.array(store.label_names, dtype=object)

    def write(f: BinaryIO) -> None:
        with pq.ParquetWriter(f, schema) as writer:
            for block in store.iter_blocks():
                X: sp.csr_matrix = block["X"]
                Y = sp.csr_matrix(block["Y"])  # CSR: label columns ascending per row
                m = X.shape[0]
                if m == 0:
                    continue
                Y.sort_indices()
                cols = Y.indices
                label_off = Y.indptr.astype(np.int64)
                split = block["split"]
                columns = [
                    pa.array(block["ids"], type=pa.string()),
                    pa.nulls(m, pa.string()) if split is None
                    else pa.array(split, type=pa.string()),
                    _list_array(X.indptr, pa.array(X.indices, type=idx_type), large),
                    _list_array(X.indptr, pa.array(X.data, type=pa.float64()), large),
                    _list_array(label_off, pa.array(label_arr[cols], type=pa.string()), False),
                ] + [pa.array(block["obs"][k], type=pa.string()) for k in store.obs_columns]
                writer.write_table(pa.Table.from_arrays(columns, schema=schema),
                                   row_group_size=m)

    write_atomically(out_path, write)
    return out_path


def _read_meta(path: Path) -> tuple[dict, int]:
    """The export's metadata and its number of row groups, after checking that ``path``
    is a readable Parquet file written by :func:`export_parquet`."""
    if not path.exists():
        raise MissingPathError(f"Parquet file {path} does not exist")
    if path.is_dir():
        raise DataFormatError(f"{path} is a folder, not a Parquet file; {_NOT_EXPORT_HINT}")
    try:
        with pq.ParquetFile(path) as pf:
            schema = pf.schema_arrow
            n_groups = pf.num_row_groups
    except _PARQUET_ERRORS as exc:
        raise DataFormatError(f"{path} is not a readable Parquet file "
                              f"({type(exc).__name__}: {exc}); {_NOT_EXPORT_HINT}") from exc
    present = schema.names
    missing = [c for c in _COLUMNS if c not in present]
    raw = (schema.metadata or {}).get(_META_KEY)
    if missing or raw is None:
        what = []
        if missing:
            what.append(f"column{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(repr, missing))} missing (it has "
                        f"{', '.join(map(repr, present[:20])) or 'no column'})")
        if raw is None:
            what.append("no 'dmlfe' schema metadata")
        raise DataFormatError(f"{path} is not a dmlfe export: {'; '.join(what)}. "
                              f"{_NOT_EXPORT_HINT}")
    try:
        meta = json.loads(raw)
    except ValueError as exc:
        raise DataFormatError(f"{path}: the 'dmlfe' schema metadata is not valid JSON ({exc}); "
                              "the file is damaged: export the store again") from exc
    _check_meta(path, meta, schema)
    return meta, n_groups


def _check_meta(path: Path, meta, schema: pa.Schema) -> None:
    """Refuse metadata or column types that export_parquet never writes."""
    def bad(what: str) -> DataFormatError:
        return DataFormatError(f"{path}: {what}; the file is damaged or was not written by "
                               "dmlfe's export_parquet: export the store again")

    if not isinstance(meta, dict):
        raise bad("the 'dmlfe' schema metadata is not a JSON object")
    absent = [k for k in _META_FIELDS if k not in meta]
    if absent:
        raise bad(f"the 'dmlfe' schema metadata lacks {', '.join(map(repr, absent))}")
    n_features, chunk_rows = meta["n_features"], meta["chunk_rows"]
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 0:
        raise bad(f"n_features in the metadata is {n_features!r}, not a count")
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise bad(f"chunk_rows in the metadata is {chunk_rows!r}, not a positive integer")
    for key in ("label_names", "obs_columns"):
        value = meta[key]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad(f"{key} in the metadata is not a list of strings")
    if not isinstance(meta["attrs"], dict):
        raise bad("attrs in the metadata is not a JSON object")
    missing = [c for c in meta["obs_columns"] if c not in schema.names]
    if missing:
        raise bad(f"column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                  "named in the metadata is missing")

    def is_list_of(t: pa.DataType, ok) -> bool:
        return (pa.types.is_list(t) or pa.types.is_large_list(t)) and ok(t.value_type)

    def is_str(t: pa.DataType) -> bool:
        return pa.types.is_string(t) or pa.types.is_large_string(t)

    expected = {
        "id": (is_str, "string"),
        "split": (lambda t: is_str(t) or pa.types.is_null(t), "string"),
        "indices": (lambda t: is_list_of(t, pa.types.is_integer), "list of integers"),
        "values": (lambda t: is_list_of(t, lambda v: pa.types.is_floating(v)
                                        or pa.types.is_integer(v)), "list of numbers"),
        "labels": (lambda t: is_list_of(t, is_str), "list of strings"),
    }
    for name, (ok, words) in expected.items():
        t = schema.field(name).type
        if not ok(t):
            raise bad(f"column {name!r} has type {t}, expected a {words}")


def _import_row_group(path: str, row_group: int, tmp_path: str, piece: int, meta: dict) -> dict:
    """Read one row group of an export and write it as a store piece (runs on a worker)."""
    columns = list(_COLUMNS) + list(meta["obs_columns"])
    where = f"{path}, row group {row_group}"
    try:
        with pq.ParquetFile(path) as pf:
            table = pf.read_row_group(row_group, columns=columns)
        ids = table.column("id").to_pylist()
    except _PARQUET_ERRORS as exc:
        raise DataFormatError(f"{where}: the Parquet data is damaged and cannot be read "
                              f"({type(exc).__name__}: {exc})") from exc
    m = table.num_rows
    if None in ids:
        raise DataFormatError(f"{where}: document {ids.index(None)} of the row group has no id")

    def flat(name: str) -> tuple[np.ndarray, pa.Array]:
        arr = table.column(name).combine_chunks()
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        return offsets - offsets[0], arr.flatten()

    ind_off, indices = flat("indices")
    val_off, values = flat("values")
    if not np.array_equal(ind_off, val_off):
        bad = int(np.flatnonzero(ind_off != val_off)[0]) - 1
        raise DataFormatError(f"{where}: document {ids[max(bad, 0)]!r} has different numbers "
                              "of indices and values")
    col_idx = indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_features = int(meta["n_features"])
    out_of_range = (col_idx < 0) | (col_idx >= n_features)
    if out_of_range.any():
        k = int(np.argmax(out_of_range))
        r = int(np.searchsorted(ind_off, k, side="right")) - 1
        raise DataFormatError(f"{where}: document {ids[r]!r} has feature index {col_idx[k]}, "
                              f"outside 0..{n_features - 1} (n_features in the metadata)")
    X = sp.csr_matrix((values.to_numpy(zero_copy_only=False).astype(np.float64),
                       col_idx, ind_off), shape=(m, n_features))
    lab_off, labels = flat("labels")
    column_of = {name: j for j, name in enumerate(meta["label_names"])}
    doc_of = np.repeat(np.arange(m), np.diff(lab_off))
    cols = []
    for r, name in zip(doc_of, labels.to_pylist(), strict=True):
        if name not in column_of:
            raise DataFormatError(f"{where}: document {ids[r]!r} has label {name!r}, which is "
                                  "not among the label names in the file's metadata")
        cols.append(column_of[name])
    # CSR from the label lists (a label repeated in a row counts once)
    Y = sp.csr_matrix((np.ones(len(cols), dtype=np.uint8), np.asarray(cols, dtype=np.int64),
                       np.asarray(lab_off, dtype=np.int64)),
                      shape=(m, len(column_of)))
    Y.sum_duplicates()
    Y.data[:] = 1
    splits = table.column("split").to_pylist() if meta["has_split"] else None
    obs = {k: table.column(k).to_pylist() for k in meta["obs_columns"]}
    return write_piece(tmp_path, piece, X, Y, ids, splits, obs)


def check_export(path) -> None:
    """Check that ``path`` is a readable Parquet export written by :func:`export_parquet`
    (its schema and dmlfe metadata; no row is read).

    Raises
    ------
    MissingPathError
        If nothing is at ``path``.
    DataFormatError
        If it is a folder, not Parquet, or not a dmlfe export; the message names it.
    """
    _read_meta(Path(path).absolute())


def import_parquet(path, out, *, chunk_rows: int | None = None, client=None,
                   overwrite: bool = False) -> Path:
    """Rebuild a store from a Parquet file written by :func:`export_parquet`.

    Each row group becomes one piece (read and written by one task, on ``client`` when
    given), so memory is bounded by a row group.

    Parameters
    ----------
    path : path-like
        The Parquet export.
    out : path-like
        The store to write.
    chunk_rows : int, optional
        Rows per zarr chunk (default: that of the exported store).
    client : distributed.Client, optional
    overwrite : bool

    Returns
    -------
    pathlib.Path
        ``out``.
    """
    path = Path(path).absolute()
    meta, n_groups = _read_meta(path)
    chunk_rows = int(meta["chunk_rows"]) if chunk_rows is None else chunk_rows
    with StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite) as writer:
        args = [(str(path), g, str(writer.tmp_path), g, meta) for g in range(n_groups)]
        try:
            if client is not None:
                pieces = client.gather([client.submit(_import_row_group, *a, pure=False)
                                        for a in args])
            else:
                pieces = [_import_row_group(*a) for a in args]
            return writer.finalize(
                pieces, n_features=int(meta["n_features"]), label_names=meta["label_names"],
                feature_names=meta["feature_names"], hashing=meta["hashing"],
                attrs=meta["attrs"], client=client)
        except DmlfeError:
            raise
        except (ValueError, TypeError) as exc:
            # What the store writer refuses (a repeated id, a non-finite value, ...) comes
            # from the file's content.
            raise DataFormatError(f"{path}: cannot be imported: {exc}") from exc
