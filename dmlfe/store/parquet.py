"""Parquet export and import of a store: one row per document, streamed by row groups.

Columns: ``id`` (string), ``split`` (string, null where missing or when the store has no
split), ``indices`` (list of int32, int64 for >= 2**31 features), ``values`` (list of
float64), ``labels`` (list of label names), then the store's extra per-document string
columns. The schema metadata key ``dmlfe`` holds JSON with n_features, label names,
feature names or hashing parameters and the provenance, so that :func:`import_parquet`
rebuilds an identical store.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from dmlfe.store import _format as F
from dmlfe.store.reader import Store, open_store
from dmlfe.store.writer import StoreWriter, write_piece

_META_KEY = b"dmlfe"


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
    if out_path.exists() and not overwrite:
        raise FileExistsError(f"{out_path} already exists; pass overwrite=True to replace it")
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
        "format": "dmlfe-parquet", "format_version": F.FORMAT_VERSION,
        "n_features": store.n_features, "label_names": store.label_names,
        "feature_names": store.feature_names, "hashing": store.hashing,
        "has_split": store.split is not None, "obs_columns": store.obs_columns,
        "chunk_rows": store.stored_chunk_rows, "attrs": store.attrs,
    }
    schema = pa.schema(fields, metadata={_META_KEY: json.dumps(meta).encode("utf-8")})
    label_arr = np.array(store.label_names, dtype=object)
    tmp = out_path.with_name(f".{out_path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            for block in store.iter_blocks():
                X: sp.csr_matrix = block["X"]
                Y = np.asarray(block["Y"])
                m = X.shape[0]
                if m == 0:
                    continue
                rows, cols = np.nonzero(Y)  # row-major: label columns ascending per row
                label_off = np.zeros(m + 1, dtype=np.int64)
                np.cumsum(np.bincount(rows, minlength=m), out=label_off[1:])
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
        os.replace(tmp, out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out_path


def _read_meta(path: Path) -> dict:
    schema = pq.read_schema(path)
    raw = (schema.metadata or {}).get(_META_KEY)
    if raw is None:
        raise ValueError(f"{path} has no 'dmlfe' schema metadata: it is not a file written by "
                         "dmlfe's export_parquet (ingest generic Parquet corpora with "
                         "format='parquet' instead)")
    return json.loads(raw)


def _import_row_group(path: str, row_group: int, tmp_path: str, piece: int, meta: dict) -> dict:
    """Read one row group of an export and write it as a store piece (runs on a worker)."""
    columns = ["id", "split", "indices", "values", "labels"] + list(meta["obs_columns"])
    table = pq.ParquetFile(path).read_row_group(row_group, columns=columns)
    m = table.num_rows
    ids = table.column("id").to_pylist()
    where = f"{path}, row group {row_group}"

    def flat(name: str) -> tuple[np.ndarray, pa.Array]:
        arr = table.column(name).combine_chunks()
        offsets = np.asarray(arr.offsets, dtype=np.int64)
        return offsets - offsets[0], arr.flatten()

    ind_off, indices = flat("indices")
    val_off, values = flat("values")
    if not np.array_equal(ind_off, val_off):
        bad = int(np.flatnonzero(ind_off != val_off)[0]) - 1
        raise ValueError(f"{where}: document {ids[max(bad, 0)]!r} has different numbers of "
                         "indices and values")
    X = sp.csr_matrix((values.to_numpy(zero_copy_only=False).astype(np.float64),
                       indices.to_numpy(zero_copy_only=False).astype(np.int64), ind_off),
                      shape=(m, int(meta["n_features"])))
    lab_off, labels = flat("labels")
    column_of = {name: j for j, name in enumerate(meta["label_names"])}
    Y = np.zeros((m, len(column_of)), dtype=np.uint8)
    label_rows = np.repeat(np.arange(m), np.diff(lab_off))
    for r, name in zip(label_rows, labels.to_pylist(), strict=True):
        if name not in column_of:
            raise ValueError(f"{where}: document {ids[r]!r} has label {name!r}, which is not "
                             "among the label names in the file's metadata")
        Y[r, column_of[name]] = 1
    splits = table.column("split").to_pylist() if meta["has_split"] else None
    obs = {k: table.column(k).to_pylist() for k in meta["obs_columns"]}
    return write_piece(tmp_path, piece, X, Y, ids, splits, obs)


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
    meta = _read_meta(path)
    n_groups = pq.ParquetFile(path).num_row_groups
    chunk_rows = int(meta["chunk_rows"]) if chunk_rows is None else chunk_rows
    with StoreWriter(out, chunk_rows=chunk_rows, overwrite=overwrite) as writer:
        args = [(str(path), g, str(writer.tmp_path), g, meta) for g in range(n_groups)]
        if client is not None:
            pieces = client.gather([client.submit(_import_row_group, *a, pure=False)
                                    for a in args])
        else:
            pieces = [_import_row_group(*a) for a in args]
        return writer.finalize(
            pieces, n_features=int(meta["n_features"]), label_names=meta["label_names"],
            feature_names=meta["feature_names"], hashing=meta["hashing"],
            attrs=meta["attrs"], client=client)
