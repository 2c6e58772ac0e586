"""Projection Z = (X - mean) P, chunk-wise and in parallel, and writing Z to zarr or parquet.

The centring is folded into a constant row: (X - 1 mean) P = X P - 1 (mean P),
so every row block is multiplied as it is (sparse stays sparse) and never
densified. The same :func:`project` serves the training documents and new ones
(a fitted model's ``components_`` and ``mean_``).

Writes are atomic: the output is built under a temporary name beside ``out``
and renamed into place at the end; with a distributed cluster each worker
writes the chunks it computed (the output folder must be on a file system the
workers share, as it is on a LocalCluster).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import dask
import dask.array as da
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp
import zarr
from dask import delayed

from dmlfe._version import __version__
from dmlfe.compute import BlockFn, check_row_blocks, compute_one, is_dask, to_float_block
from dmlfe.tempfiles import move_into_place, remove_stale, temp_sibling


def _project_block(
    xb: Any, P: np.ndarray, offset: np.ndarray | None, block_fn: BlockFn | None
) -> np.ndarray:
    if block_fn is not None:
        xb = block_fn(xb)
    xb = to_float_block(xb)
    z = np.asarray(xb @ P, dtype=np.float64)
    if offset is not None:
        z = z - offset
    return np.ascontiguousarray(z)


def project(
    X: Any,
    components: np.ndarray,
    mean: np.ndarray | None = None,
    *,
    block_fn: BlockFn | None = None,
) -> da.Array:
    """Lazy embeddings Z = (X - mean) P, shape (n, d), float64, chunked like X's rows.

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        Documents x D features (training or new documents).
    components : ndarray, shape (D, d)
        Projection P (a fitted model's ``components_``).
    mean : ndarray of shape (D,), optional
        Feature means for centred methods; None for uncentred ones (LSI, MLDA, ...).
    block_fn : callable, optional
        Applied to each row block first, as in ``compute_stats``.

    Returns
    -------
    dask.array.Array
        In-memory X is projected at once (no graph overhead) and wrapped as a
        single-chunk dask array.
    """
    P = np.asarray(components, dtype=np.float64)
    if P.ndim != 2:
        raise ValueError(f"components must be a 2-D (D, d) array; got shape {P.shape}")
    offset = None
    if mean is not None:
        mean = np.asarray(mean, dtype=np.float64).ravel()
        if mean.shape[0] != P.shape[0]:
            raise ValueError(
                f"mean has {mean.shape[0]} entries but components have {P.shape[0]} rows"
            )
        offset = mean @ P
    n_cols = X.shape[1] if block_fn is None else None
    if n_cols is not None and n_cols != P.shape[0]:
        raise ValueError(
            f"X has {n_cols} features but components have {P.shape[0]} rows: project with the "
            "model fitted on the same feature space (same vocabulary / hashing parameters)"
        )
    d = P.shape[1]
    if not is_dask(X):
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        Z = _project_block(X, P, offset, block_fn)
        return da.from_array(Z, chunks=(max(Z.shape[0], 1), d))
    X = check_row_blocks(X)
    # One graph key each for P and the offset, shared by every block task.
    P_ref = delayed(P)
    off_ref = None if offset is None else delayed(offset)
    blocks = [
        da.from_delayed(
            delayed(_project_block)(xb, P_ref, off_ref, block_fn),
            shape=(rows, d),
            dtype=np.float64,
            meta=np.empty((0, 0), dtype=np.float64),
        )
        for xb, rows in zip(X.to_delayed().ravel(), X.chunks[0], strict=True)
    ]
    return da.concatenate(blocks, axis=0)


# --------------------------------------------------------------------------- #
# Writing
# --------------------------------------------------------------------------- #
def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished ``tmp`` to ``out``; an old ``out`` is removed only after that."""
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True to replace it")
    move_into_place(tmp, out)


def _regular_rows(Z: da.Array) -> tuple[da.Array, int]:
    """Rechunk to equal row chunks (zarr needs a regular grid); returns (Z, chunk rows)."""
    rows = Z.chunks[0]
    size = max(max(rows), 1)
    regular = all(r == size for r in rows[:-1]) and rows[-1] <= size
    if not regular or len(Z.chunks[1]) > 1:
        Z = Z.rechunk({0: size, 1: -1})
    return Z, size


def _ids_array(ids: Any, n: int) -> Any:
    if ids is None:
        return None
    if not is_dask(ids):
        ids = np.asarray(ids)
        if ids.dtype.kind not in "UTO":
            ids = ids.astype(str)
    if ids.shape != (n,):
        raise ValueError(f"ids has shape {ids.shape} but Z has {n} rows")
    return ids


def _write_parquet_part(z: np.ndarray, ids: Any, path: str, start: int) -> int:
    if ids is None:
        ids = np.arange(start, start + z.shape[0]).astype(str)
    cols = {"id": pa.array(np.asarray(ids).astype(str).tolist(), type=pa.string())}
    for j in range(z.shape[1]):
        cols[f"z{j}"] = pa.array(z[:, j], type=pa.float64())
    pq.write_table(pa.table(cols), path)
    return int(z.shape[0])


def write_embeddings(
    Z: Any,
    out: str | os.PathLike[str],
    *,
    ids: Any = None,
    format: str = "zarr",
    client: Any = None,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
) -> Path:
    """Write embeddings atomically; the workers write their own chunks.

    Parameters
    ----------
    Z : dask array or ndarray, shape (n, d)
        Embeddings (e.g. from :func:`project`).
    out : path
        Output folder. zarr: a group with array ``Z`` (float64, chunked by rows),
        ``ids`` (strings) when given, and attributes (n, d, dmlfe version, any
        ``attrs``). parquet: a folder of ``part-NNNNN.parquet`` files, one per
        row chunk, one row per document with column ``id`` (the document id, or
        the row number when no ids are given) and ``z0`` ... ``z{d-1}``.
    ids : array-like or dask array of str, shape (n,), optional
        Document ids.
    format : {"zarr", "parquet"}
    client : distributed.Client, optional
        Compute on this client (default: dask's current scheduler).
    overwrite : bool
        Replace an existing ``out`` (only after the new output is complete).
    attrs : dict, optional
        Extra JSON attributes (zarr attributes; ``_dmlfe.json`` for parquet).

    Returns
    -------
    Path
        ``out``.
    """
    if format not in ("zarr", "parquet"):
        raise ValueError(f"format = {format!r} is not one of 'zarr', 'parquet'")
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} exists; pass overwrite=True to replace it")
    if not is_dask(Z):
        Z = np.asarray(Z, dtype=np.float64)
        Z = da.from_array(Z, chunks=(max(Z.shape[0], 1), Z.shape[1]))
    if Z.ndim != 2:
        raise ValueError(f"Z must be 2-D (documents x components); got shape {Z.shape}")
    n, d = (int(s) for s in Z.shape)
    ids = _ids_array(ids, n)
    meta = {"n": n, "d": d, "format": format, "dmlfe_version": __version__, **(attrs or {})}
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)  # what killed writes of the same output left behind
    tmp = temp_sibling(out)
    try:
        if format == "zarr":
            _write_zarr(Z, ids, tmp, meta, client)
        else:
            _write_parquet(Z, ids, tmp, meta, client)
        _commit(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def _write_zarr(Z: da.Array, ids: Any, tmp: Path, meta: dict[str, Any], client: Any) -> None:
    Z, rows = _regular_rows(Z.astype(np.float64))
    n, d = Z.shape
    group = zarr.open_group(str(tmp), mode="w")
    group.attrs.update(json.loads(json.dumps(meta, default=str)))
    z_arr = group.create_array("Z", shape=(n, d), chunks=(rows, max(d, 1)), dtype="float64")
    sources: list[Any] = [Z]
    targets: list[Any] = [z_arr]
    if ids is not None:
        id_arr = group.create_array("ids", shape=(n,), chunks=(rows,), dtype=str)
        if is_dask(ids):
            sources.append(ids.rechunk((Z.chunks[0],)).astype(str))
            targets.append(id_arr)
        else:
            id_arr[:] = ids.astype(str)
    # Chunk-aligned regions: no two tasks touch one zarr chunk, so no lock.
    stored = da.store(sources, targets, lock=False, compute=False)
    compute_one(stored, client, desc="projection pass")


def _write_parquet(Z: da.Array, ids: Any, tmp: Path, meta: dict[str, Any], client: Any) -> None:
    tmp.mkdir(parents=True)
    z_blocks = Z.rechunk({1: -1}).astype(np.float64).to_delayed().ravel()
    starts = np.concatenate([[0], np.cumsum(Z.chunks[0])[:-1]]).astype(int)
    if ids is None:
        id_blocks: list[Any] = [None] * len(z_blocks)
    elif is_dask(ids):
        id_blocks = list(ids.rechunk((Z.chunks[0],)).to_delayed().ravel())
    else:
        id_blocks = [ids[s : s + r] for s, r in zip(starts, Z.chunks[0], strict=True)]
    width = max(5, len(str(len(z_blocks))))
    tasks = [
        delayed(_write_parquet_part)(zb, ib, str(tmp / f"part-{i:0{width}d}.parquet"), int(s))
        for i, (zb, ib, s) in enumerate(zip(z_blocks, id_blocks, starts, strict=True))
    ]
    written = compute_one(dask.delayed(list)(tasks), client, desc="projection pass")
    if sum(written) != meta["n"]:
        raise RuntimeError(f"wrote {sum(written)} rows to {tmp}, expected {meta['n']}")
    (tmp / "_dmlfe.json").write_text(json.dumps(meta, default=str, indent=2), encoding="utf-8")
