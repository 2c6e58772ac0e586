"""Projection Z = (X - mean) P, chunk-wise and in parallel, and writing Z to zarr or parquet.

The zarr output is laid out as anndata lays out an ``AnnData`` (the encodings of
:mod:`dmlfe.store.layout`, which the store uses too), so ``anndata.read_zarr`` opens it:

=====================  =============================================================
``obsm/X_<method>``    the embeddings, n x d float64, chunked by rows (``X_embedding``
                       when no method is named)
``obs/_index``         document ids (row numbers when none are given)
``obs/split``          the documents' split (categorical), when given
``obsm/Y``             n x q uint8 0/1 labels, when given, with ``uns/label_names``
``uns/...``            the model's method, n_components and parameters (``params``: JSON)
root attrs ``dmlfe``   n, d, the obsm key, dmlfe version and the caller's attributes
=====================  =============================================================

The parquet output (a folder of ``part-NNNNN.parquet`` files, one per row chunk, and
``_dmlfe.json``) carries the same ``obs`` in one table: ``id``, ``split`` (dictionary
encoded, the categories in the zarr's order), one uint8 column ``label:<name>`` per
label in the labels' order (the prefix keeps a label called ``id``, ``split`` or ``z0``
apart), then the embeddings ``z0`` ... ``z{d-1}``. :func:`read_embeddings` reads either
format, with ``obs=True`` also its ``obs`` as one DataFrame built the same way for both.

The labels are one n x q matrix (as in the store), not one ``obs`` column per label:
label names are free text (``/`` and clashes with ``split`` are possible, neither of
which a zarr array name or an obs column may carry), and thousands of labels (EUR-Lex)
would make thousands of zarr arrays. ``adata.obsm["Y"]`` with
``adata.uns["label_names"]`` gives a DataFrame in one line.

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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr
from dask import delayed

from dmlfe._version import __version__
from dmlfe.compute import (
    BlockFn,
    check_row_blocks,
    compute_one,
    graph_operand,
    is_dask,
    kept_float_dtype,
    to_float_block,
)
from dmlfe.store import layout as F
from dmlfe.tempfiles import link_note, move_into_place, remove_stale, temp_sibling

# pandas and pyarrow are imported where obs or parquet is read or written: a worker
# projecting blocks into a zarr needs neither
if TYPE_CHECKING:
    import pandas as pd

#: Rows of float32 components cast to float64 at a time for the mean offset.
_OFFSET_ROWS = 1 << 13
#: Rows of a block of another dtype than the components cast to theirs at a time.
_CAST_ROWS = 1 << 14
#: Columns of P that one sparse product takes (:class:`ColumnBlocks`).
PRODUCT_COLUMNS = 32


@dataclass(frozen=True)
class ColumnBlocks:
    """P (D x d) as C-ordered blocks of :data:`PRODUCT_COLUMNS` columns, made once.

    A sparse row block times P is then taken block by block through the row block's
    CSC form: each used row of a block of P is read once, in order, and the output's
    columns of that block stay in the CPU's cache, where the CSR product reads a row of
    all d columns of P for every stored value, from anywhere in P
    (``benchmarks/scale.py --parts synthetic`` times the embeddings). The entries are
    the same bit for bit (each output entry adds its row's products in the same column
    order).
    """

    blocks: tuple[np.ndarray, ...]

    @classmethod
    def of(cls, P: np.ndarray) -> ColumnBlocks:
        return cls(tuple(np.ascontiguousarray(P[:, c:c + PRODUCT_COLUMNS])
                         for c in range(0, P.shape[1], PRODUCT_COLUMNS)))

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.blocks[0].shape[0]), int(sum(b.shape[1] for b in self.blocks)))

    @property
    def dtype(self) -> np.dtype:
        return self.blocks[0].dtype


def _times(xb: Any, P: np.ndarray | ColumnBlocks) -> np.ndarray:
    """xb P for a block already in P's dtype (sparse CSR or dense)."""
    if not isinstance(P, ColumnBlocks):
        return np.asarray(xb @ P, dtype=P.dtype)
    xt = xb.tocsc() if sp.issparse(xb) else xb
    z = np.empty((xb.shape[0], P.shape[1]), dtype=P.dtype)
    at = 0
    for blk in P.blocks:
        z[:, at:at + blk.shape[1]] = xt @ blk
        at += blk.shape[1]
    return z


def mean_offset(mean: np.ndarray, P: np.ndarray) -> np.ndarray:
    """``mean @ P`` (the centring's constant row), accumulated in float64, in P's dtype.

    For float32 P the product is taken a slab of rows at a time: ``mean @ P`` as one
    expression would cast the whole of P to a D x d float64 temporary (0.8 GB per 100
    components at D = 2^20), the memory float32 components are there to save.
    """
    if P.dtype == np.float64:
        return mean @ P
    out = np.zeros(P.shape[1], dtype=np.float64)
    for s in range(0, P.shape[0], _OFFSET_ROWS):
        out += mean[s : s + _OFFSET_ROWS] @ P[s : s + _OFFSET_ROWS].astype(np.float64)
    return out.astype(P.dtype)


def project_block(
    xb: Any, P: np.ndarray | ColumnBlocks, offset: np.ndarray | None = None,
    block_fn: BlockFn | None = None
) -> np.ndarray:
    """One row block's embeddings ``xb P - offset``, in P's dtype (see :func:`project`).

    ``offset`` is :func:`mean_offset` of the training mean (None: uncentred); the
    estimators' in-memory ``transform`` and every task of :func:`project` call this.
    P may come in :class:`ColumnBlocks` (as :func:`project` sends a wide P); a wide P
    times a sparse block is taken in them.
    """
    if block_fn is not None:
        xb = block_fn(xb)
    if isinstance(P, np.ndarray) and sp.issparse(xb) and P.shape[1] > PRODUCT_COLUMNS:
        P = ColumnBlocks.of(P)
    # the block takes P's dtype: a float64 block times float32 P would upcast P (a
    # D x d float64 copy in scipy's and numpy's products), not the block -- a slab of
    # rows at a time, so that a large in-memory X is not copied whole into float32
    xb = sp.csr_matrix(xb) if sp.issparse(xb) else np.asarray(xb)  # rows can be sliced
    n = int(xb.shape[0])
    if n <= _CAST_ROWS or xb.dtype == P.dtype:
        z = _times(to_float_block(xb, P.dtype), P)
    else:
        z = np.empty((n, P.shape[1]), dtype=P.dtype)
        for r in range(0, n, _CAST_ROWS):
            z[r:r + _CAST_ROWS] = _times(to_float_block(xb[r:r + _CAST_ROWS], P.dtype), P)
    if offset is not None:
        z = z - offset
    return np.ascontiguousarray(z)


def projection_operands(components: Any, mean: Any = None
                        ) -> tuple[np.ndarray, np.ndarray | None]:
    """(P, offset) for :func:`project_block`: P = ``components`` (D x d) C-ordered in
    its kept dtype (float32 stays, anything else float64), offset = :func:`mean_offset`
    of ``mean`` (None when ``mean`` is None).

    One layout for the product whatever the model's: the same embedding, bit for bit,
    from a fitted model (``components_`` is a transposed view) and a loaded one.
    """
    components = np.asarray(components)
    P = np.ascontiguousarray(components, dtype=kept_float_dtype(components))
    if P.ndim != 2:
        raise ValueError(f"components must be a 2-D (D, d) array; got shape {P.shape}")
    if mean is None:
        return P, None
    mean = np.asarray(mean, dtype=np.float64).ravel()
    if mean.shape[0] != P.shape[0]:
        raise ValueError(f"mean has {mean.shape[0]} entries but components have {P.shape[0]} "
                         "rows")
    return P, mean_offset(mean, P)


def project(
    X: Any,
    components: np.ndarray,
    mean: np.ndarray | None = None,
    *,
    block_fn: BlockFn | None = None,
    client: Any = None,
) -> da.Array:
    """Lazy embeddings Z = (X - mean) P, shape (n, d), chunked like X's rows.

    float64, or float32 when ``components`` is float32 (a model fitted with
    ``components_dtype="float32"``): the row blocks are then cast to float32 and
    multiplied in float32, so P is never copied to float64.

    Parameters
    ----------
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        Documents x D features (training or new documents).
    components : ndarray, shape (D, d)
        Projection P (a fitted model's ``components_.T``); float32 is kept, any other
        dtype is taken as float64.
    mean : ndarray of shape (D,), optional
        Feature means for centred methods; None for uncentred ones (LSI, MLDA, ...).
    block_fn : callable, optional
        Applied to each row block first, as in ``compute_stats``.
    client : distributed.Client, optional
        The client the result will be computed on (default: the default client, when
        ``dask.compute`` would use it). Components over
        :data:`dmlfe.compute.SCATTER_BYTES` (8 MB; 0.8 GB at D = 2^20, d = 100) are
        scattered to its workers once, and the graph refers to them, instead of carrying
        them through the scheduler; that graph must then be computed on that client.

    Returns
    -------
    dask.array.Array
        In-memory X is projected at once (no graph overhead) and wrapped as a
        single-chunk dask array.
    """
    P, offset = projection_operands(components, mean)
    dtype = P.dtype
    n_cols = X.shape[1] if block_fn is None else None
    if n_cols is not None and n_cols != P.shape[0]:
        raise ValueError(
            f"X has {n_cols} features but components have {P.shape[0]} rows: project with the "
            "model fitted on the same feature space (same vocabulary / hashing parameters)"
        )
    d = P.shape[1]
    if not is_dask(X):
        X = sp.csr_matrix(X) if sp.issparse(X) else np.asarray(X)
        Z = project_block(X, P, offset, block_fn)
        return da.from_array(Z, chunks=(max(Z.shape[0], 1), d))
    X = check_row_blocks(X)
    # One graph key each for P and the offset, shared by every block task. A wide P goes
    # in column blocks, each cut, scattered and let go before the next (the driver holds
    # one block beside P, not a second P), and joined into ColumnBlocks by one task.
    if d > PRODUCT_COLUMNS:
        P_ref = delayed(ColumnBlocks)(tuple(
            graph_operand(np.ascontiguousarray(P[:, c:c + PRODUCT_COLUMNS]), client,
                          nbytes=P.nbytes)
            for c in range(0, d, PRODUCT_COLUMNS)))
    else:
        P_ref = graph_operand(P, client)
    off_ref = None if offset is None else delayed(offset)
    blocks = [
        da.from_delayed(
            delayed(project_block)(xb, P_ref, off_ref, block_fn),
            shape=(rows, d),
            dtype=dtype,
            meta=np.empty((0, 0), dtype=dtype),
        )
        for xb, rows in zip(X.to_delayed().ravel(), X.chunks[0], strict=True)
    ]
    return da.concatenate(blocks, axis=0)


# --------------------------------------------------------------------------- #
# Writing
# --------------------------------------------------------------------------- #
def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename the finished ``tmp`` to ``out``; an old ``out`` is removed only after that."""
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"{out} exists{link_note(out)}; pass overwrite=True to replace "
                              "it")
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


#: Prefix of the label columns of the parquet output (and of read_embeddings' obs).
LABEL_PREFIX = "label:"


def _write_parquet_part(z: np.ndarray, ids: Any, path: str, start: int, codes: Any = None,
                        categories: list[str] | None = None, y: Any = None,
                        label_names: list[str] | None = None) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if ids is None:
        ids = np.arange(start, start + z.shape[0]).astype(str)
    cols = {"id": pa.array(np.asarray(ids).astype(str).tolist(), type=pa.string())}
    if categories is not None:
        codes = np.asarray(codes).astype(np.int32)
        # every part carries all the categories in order, so the parts agree on the codes
        cols["split"] = pa.DictionaryArray.from_arrays(
            pa.array(codes, mask=codes < 0), pa.array(categories, type=pa.string()))
    if label_names is not None:
        y = np.asarray(y, dtype=np.uint8)
        for j, name in enumerate(label_names):
            cols[LABEL_PREFIX + name] = pa.array(y[:, j], type=pa.uint8())
    for j in range(z.shape[1]):
        cols[f"z{j}"] = pa.array(z[:, j], type=pa.float64())
    pq.write_table(pa.table(cols), path)
    return int(z.shape[0])


def embedding_key(method: str | None) -> str:
    """The ``obsm`` key of the embeddings of ``method`` (anndata's ``X_<name>`` convention)."""
    return f"X_{method}" if method else "X_embedding"


def embedding_uns(model: Any) -> dict[str, Any]:
    """What ``uns`` records of a fitted model: method, n_components and its parameters."""
    params = {k: v for k, v in model.get_params(deep=False).items() if k != "client"}
    return {"method": model._method, "n_components": int(model.n_components_),
            "params": json.dumps(F.jsonable(params, "model parameters"), sort_keys=True)}


def embedding_obs(model: Any, store: Any = None) -> dict[str, Any]:
    """:func:`write_embeddings` keywords for ``model``'s embeddings of ``store``'s documents
    (or of new documents when no store is given): method, uns, split and labels."""
    kw: dict[str, Any] = {"method": model._method, "uns": embedding_uns(model)}
    if store is not None:
        kw.update(labels=store.Y, label_names=store.label_names)
        if store.split is not None:
            kw.update(split=store.split, split_categories=store.split_categories)
    return kw


def write_embeddings(
    Z: Any,
    out: str | os.PathLike[str],
    *,
    ids: Any = None,
    format: str = "zarr",
    client: Any = None,
    overwrite: bool = False,
    attrs: dict[str, Any] | None = None,
    method: str | None = None,
    split: Any = None,
    split_categories: Any = None,
    labels: Any = None,
    label_names: Any = None,
    uns: dict[str, Any] | None = None,
) -> Path:
    """Write embeddings atomically; the workers write their own chunks.

    Parameters
    ----------
    Z : dask array or ndarray, shape (n, d)
        Embeddings (e.g. from :func:`project`).
    out : path
        Output folder. zarr: an AnnData layout (see the module docstring) that
        ``anndata.read_zarr`` opens, the embeddings in ``obsm/X_<method>`` (read them
        back with :func:`read_embeddings`). parquet: a folder of
        ``part-NNNNN.parquet`` files, one per row chunk, one row per document with
        column ``id`` (the document id, or the row number when no ids are given), the
        zarr's obs (``split``, ``label:<name>`` per label) and ``z0`` ... ``z{d-1}``
        (``uns`` is zarr only).
    ids : array-like or dask array of str, shape (n,), optional
        Document ids.
    format : {"zarr", "parquet"}
    client : distributed.Client, optional
        Compute on this client (default: dask's current scheduler).
    overwrite : bool
        Replace an existing ``out`` (only after the new output is complete).
    attrs : dict, optional
        Extra JSON attributes (zarr: root attribute ``dmlfe``; ``_dmlfe.json`` for parquet).
    method : str, optional
        The method's name: the embeddings go to ``obsm/X_<method>``.
    split : array-like or dask array of str, shape (n,), optional
        Each document's split, written as the categorical ``obs/split`` (parquet: the
        dictionary-encoded column ``split``).
    split_categories : sequence of str, optional
        The split's categories in order (a store's ``split_categories``); found from
        ``split`` when not given.
    labels : array-like or dask array, shape (n, q), optional
        0/1 labels, written as ``obsm/Y`` (uint8; parquet: a column ``label:<name>``
        per label); needs ``label_names``.
    label_names : sequence of str, optional
        The q label names, in the labels' column order (``uns/label_names``).
    uns : dict, optional
        Entries of ``uns`` (str, numbers, bools, nested dicts; other values as JSON
        strings), e.g. :func:`embedding_uns` of the model.

    Returns
    -------
    Path
        ``out``.
    """
    if format not in ("zarr", "parquet"):
        raise ValueError(f"format = {format!r} is not one of 'zarr', 'parquet'")
    out = Path(out)
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"{out} exists{link_note(out)}; pass overwrite=True to replace "
                              "it")
    if not is_dask(Z):
        Z = np.asarray(Z, dtype=np.float64)
        Z = da.from_array(Z, chunks=(max(Z.shape[0], 1), Z.shape[1]))
    if Z.ndim != 2:
        raise ValueError(f"Z must be 2-D (documents x components); got shape {Z.shape}")
    n, d = (int(s) for s in Z.shape)
    ids = _ids_array(ids, n)
    obs = _obs_columns(n, split, split_categories, labels, label_names)
    meta = {"n": n, "d": d, "format": format, "dmlfe_version": __version__, **(attrs or {})}
    if format == "zarr":
        meta["obsm_key"] = embedding_key(method)
    else:  # what the zarr keeps in obs/split/categories and uns/label_names
        if "split" in obs:
            meta["split_categories"] = obs["split"][1]
        if "Y" in obs:
            meta["label_names"] = obs["Y"][1]
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)  # what killed writes of the same output left behind
    tmp = temp_sibling(out)
    try:
        if format == "zarr":
            _write_zarr(Z, ids, tmp, meta, client, obs, uns or {})
        else:
            _write_parquet(Z, ids, tmp, meta, client, obs)
        _commit(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_embeddings(path: str | os.PathLike[str], d: int | None = None, *,
                    obs: bool = False) -> np.ndarray | tuple[np.ndarray, pd.DataFrame]:
    """The embeddings written by :func:`write_embeddings`, zarr or parquet.

    Parameters
    ----------
    path : path
        The zarr or parquet output folder.
    d : int, optional
        Read only the first ``d`` columns.
    obs : bool, default False
        Also return the documents' obs.

    Returns
    -------
    Z : ndarray (n, d) of float64
    obs : pandas.DataFrame, only with ``obs=True``
        Indexed by the document ids (index name ``id``; row numbers as str when none were
        written); column ``split`` (categorical, the written categories in order) when a
        split was written, then one uint8 0/1 column ``label:<name>`` per label, in the
        labels' order, when labels were written. The same for both formats.
    """
    path = Path(path)
    read = _read_parquet if (path / "_dmlfe.json").is_file() else _read_zarr
    Z, parts = read(path, d, obs)
    return (Z, _obs_frame(*parts)) if obs else Z


def _read_zarr(path: Path, d: int | None, obs: bool) -> tuple[np.ndarray, tuple | None]:
    group = zarr.open_group(str(path), mode="r")
    meta = group.attrs.get("dmlfe")
    if not isinstance(meta, dict) or "obsm_key" not in meta:
        raise ValueError(f"{path} is not a dmlfe embeddings zarr (no 'dmlfe' attribute with "
                         "'obsm_key'); write it with dmlfe transform / write_embeddings")
    Z = group[f"obsm/{meta['obsm_key']}"]
    Z = np.asarray(Z[:, : (Z.shape[1] if d is None else d)], dtype=np.float64)
    if not obs:
        return Z, None
    codes = cats = Y = names = None
    if "split" in group["obs"]:
        codes = np.asarray(group["obs/split/codes"][:])
        cats = [str(c) for c in group["obs/split/categories"][:]]
    if "Y" in group["obsm"]:
        Y = np.asarray(group["obsm/Y"][:])
        names = [str(x) for x in group["uns/label_names"][:]]
    return Z, (group["obs/_index"][:], codes, cats, Y, names)


def _read_parquet(path: Path, d: int | None, obs: bool) -> tuple[np.ndarray, tuple | None]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = json.loads((path / "_dmlfe.json").read_text(encoding="utf-8"))
    if not isinstance(meta, dict) or meta.get("format") != "parquet":
        raise ValueError(f"{path} is not a dmlfe parquet embeddings folder (its _dmlfe.json "
                         "has no format 'parquet'); write it with dmlfe transform / "
                         "write_embeddings")
    k = int(meta["d"]) if d is None else min(int(d), int(meta["d"]))
    cats, names = meta.get("split_categories"), meta.get("label_names")
    z_cols = [f"z{j}" for j in range(k)]
    label_cols = [LABEL_PREFIX + x for x in names] if names is not None else []
    columns = z_cols + (["id"] + (["split"] if cats is not None else []) + label_cols
                        if obs else [])
    # the part files in row order (their zero-padded numbers sort as the rows do)
    table = pa.concat_tables([pq.read_table(p, columns=columns)
                              for p in sorted(path.glob("part-*.parquet"))])
    if table.num_rows != int(meta["n"]):
        raise ValueError(f"{path} has {table.num_rows} rows in its part files but its "
                         f"_dmlfe.json says n = {meta['n']}; write it again")
    Z = np.column_stack([table.column(c).to_numpy() for c in z_cols]) if k else \
        np.empty((table.num_rows, 0))
    Z = np.asarray(Z, dtype=np.float64)
    if not obs:
        return Z, None
    codes = Y = None
    if cats is not None:
        # by value: a part file's dictionary need not keep the categories it does not use
        values = np.asarray(table.column("split").to_pylist(), dtype=object)
        codes = _split_codes(values, tuple(cats), "int64")
    if names is not None:
        Y = np.column_stack([table.column(c).to_numpy() for c in label_cols]) if names \
            else np.empty((table.num_rows, 0), dtype=np.uint8)
    return Z, (np.asarray(table.column("id").to_pylist(), dtype=object), codes, cats, Y,
               names)


def _obs_frame(ids: Any, codes: Any, categories: list[str] | None, Y: Any,
               label_names: list[str] | None) -> pd.DataFrame:
    """read_embeddings' obs from what either format stores (one code path for both)."""
    import pandas as pd

    frame = pd.DataFrame(index=pd.Index([str(i) for i in ids], dtype=object, name="id"))
    if categories is not None:
        frame["split"] = pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64),
                                                   categories=categories)
    if label_names is not None:
        labels = pd.DataFrame(np.asarray(Y, dtype=np.uint8), index=frame.index,
                              columns=[LABEL_PREFIX + x for x in label_names])
        frame = pd.concat([frame, labels], axis=1)
    return frame


def _obs_columns(n: int, split: Any, categories: Any, labels: Any,
                 label_names: Any) -> dict[str, Any]:
    """Checked split/labels: {"split": (values, categories), "Y": (labels, names)}."""
    obs: dict[str, Any] = {}
    if split is not None:
        if not is_dask(split):
            split = np.asarray(split, dtype=object)
        if split.shape != (n,):
            raise ValueError(f"split has shape {split.shape} but Z has {n} rows")
        if categories is None:
            found = split.compute() if is_dask(split) else split
            categories = sorted({str(v) for v in found})
        obs["split"] = (split, [str(c) for c in categories])
    if labels is not None:
        if label_names is None:
            raise ValueError("labels given without label_names: pass the q label names")
        names = [str(x) for x in label_names]
        if not is_dask(labels):
            labels = np.asarray(labels)
        if labels.ndim != 2 or labels.shape[0] != n or labels.shape[1] != len(names):
            raise ValueError(f"labels have shape {labels.shape}; expected ({n}, {len(names)}) "
                             "(documents x label_names)")
        obs["Y"] = (labels, names)
    return obs


def _split_codes(values: np.ndarray, categories: tuple[str, ...], dtype: str) -> np.ndarray:
    lookup = {c: i for i, c in enumerate(categories)}
    return np.array([lookup.get(str(v), -1) if v is not None else -1 for v in values],
                    dtype=dtype)


def _as_rows(a: Any, chunks: tuple[int, ...]) -> da.Array:
    """``a`` as a dask array chunked like Z's rows."""
    if is_dask(a):
        return a.rechunk((chunks,) + tuple((s,) for s in a.shape[1:]))
    return da.from_array(a, chunks=(chunks,) + tuple((s,) for s in a.shape[1:]))


def _split_code_rows(obs: dict[str, Any], chunks: tuple[int, ...]) -> tuple[da.Array, str]:
    """The split's category codes (-1: none) chunked like Z's rows, and their dtype."""
    values, cats = obs["split"]
    code_dtype = F.codes_dtype(len(cats)).str
    codes = _as_rows(values, chunks).map_blocks(_split_codes, tuple(cats), code_dtype,
                                                dtype=code_dtype)
    return codes, code_dtype


def _label_rows(obs: dict[str, Any], chunks: tuple[int, ...]) -> da.Array:
    """The 0/1 labels as uint8, chunked like Z's rows."""
    return _as_rows(obs["Y"][0], chunks).astype(np.uint8)


def _write_uns(group: Any, entries: dict[str, Any]) -> None:
    """``uns`` entries in anndata's scalar/dict encodings (other values as JSON strings)."""
    for key, value in entries.items():
        if value is None:
            continue
        if isinstance(value, dict):
            _write_uns(group.create_group(key, attributes=F.DICT_ENC), value)
        elif isinstance(value, bool | int | float | np.number | np.bool_):
            arr = np.asarray(value)
            group.create_array(key, shape=(), dtype=arr.dtype,
                               attributes=F.NUMERIC_SCALAR_ENC)[...] = arr
        else:
            text = value if isinstance(value, str) else json.dumps(F.jsonable(value, key))
            group.create_array(key, shape=(), dtype=str,
                               attributes=F.STRING_SCALAR_ENC)[...] = text


def _write_zarr(Z: da.Array, ids: Any, tmp: Path, meta: dict[str, Any], client: Any,
                obs: dict[str, Any], uns: dict[str, Any]) -> None:
    Z, rows = _regular_rows(Z.astype(np.float64))
    n, d = Z.shape
    comp = F.compressor()

    def arr(g: Any, name: str, shape: tuple, chunks: tuple, dtype: Any, attributes: dict) -> Any:
        return g.create_array(name, shape=shape, chunks=chunks, dtype=dtype, compressors=comp,
                              shards=None, attributes=attributes)

    group = zarr.create_group(store=str(tmp), zarr_format=3, attributes=F.ANNDATA_ENC)
    gobs = group.create_group("obs", attributes=F.dataframe_attrs(
        ["split"] if "split" in obs else []))
    gobsm = group.create_group("obsm", attributes=F.DICT_ENC)
    z_arr = arr(gobsm, meta["obsm_key"], (n, d), (rows, max(d, 1)), np.float64, F.ARRAY_ENC)
    sources: list[Any] = [Z]
    targets: list[Any] = [z_arr]
    id_arr = arr(gobs, "_index", (n,), (rows,), str, F.STRING_ENC)
    if ids is None:
        ids = np.arange(n).astype(str)
    if is_dask(ids):
        sources.append(ids.rechunk((Z.chunks[0],)).astype(str))
        targets.append(id_arr)
    else:
        id_arr[:] = ids.astype(str)
    if "split" in obs:
        cats = obs["split"][1]
        gsplit = gobs.create_group("split", attributes=F.CATEGORICAL_ENC)
        arr(gsplit, "categories", (len(cats),), (max(1, len(cats)),), str,
            F.STRING_ENC)[:] = np.array(cats, dtype=object)
        codes, code_dtype = _split_code_rows(obs, Z.chunks[0])
        sources.append(codes)
        targets.append(arr(gsplit, "codes", (n,), (rows,), code_dtype, F.ARRAY_ENC))
    guns = group.create_group("uns", attributes=F.DICT_ENC)
    if "Y" in obs:
        names = obs["Y"][1]
        q = len(names)
        sources.append(_label_rows(obs, Z.chunks[0]))
        targets.append(arr(gobsm, "Y", (n, q), (rows, max(q, 1)), np.uint8, F.ARRAY_ENC))
        lab = arr(guns, "label_names", (q,), (max(q, 1),), str, F.STRING_ENC)
        if q:
            lab[:] = np.array(names, dtype=object)
    _write_uns(guns, uns)
    gvar = group.create_group("var", attributes=F.dataframe_attrs([]))
    arr(gvar, "_index", (0,), (1,), str, F.STRING_ENC)
    for empty in F.EMPTY_GROUPS:
        group.create_group(empty, attributes=F.DICT_ENC)
    group.attrs["dmlfe"] = F.jsonable(meta, "attrs")
    # Chunk-aligned regions: no two tasks touch one zarr chunk, so no lock.
    stored = da.store(sources, targets, lock=False, compute=False)
    compute_one(stored, client, desc="projection pass")


def _write_parquet(Z: da.Array, ids: Any, tmp: Path, meta: dict[str, Any], client: Any,
                   obs: dict[str, Any]) -> None:
    tmp.mkdir(parents=True)
    Z = Z.rechunk({1: -1})
    z_blocks = Z.astype(np.float64).to_delayed().ravel()
    rows = Z.chunks[0]
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(int)
    if ids is None:
        id_blocks: list[Any] = [None] * len(z_blocks)
    elif is_dask(ids):
        id_blocks = list(ids.rechunk((rows,)).to_delayed().ravel())
    else:
        id_blocks = [ids[s : s + r] for s, r in zip(starts, rows, strict=True)]
    # the obs columns from the same checked obs and row-chunked sources as the zarr's
    none: list[Any] = [None] * len(z_blocks)
    cats = names = None
    code_blocks, y_blocks = none, none
    if "split" in obs:
        cats = obs["split"][1]
        code_blocks = list(_split_code_rows(obs, rows)[0].to_delayed().ravel())
    if "Y" in obs:
        names = obs["Y"][1]
        y_blocks = list(_label_rows(obs, rows).to_delayed().ravel())
    width = max(5, len(str(len(z_blocks))))
    tasks = [
        delayed(_write_parquet_part)(zb, ib, str(tmp / f"part-{i:0{width}d}.parquet"), int(s),
                                     cb, cats, yb, names)
        for i, (zb, ib, s, cb, yb) in enumerate(zip(z_blocks, id_blocks, starts, code_blocks,
                                                    y_blocks, strict=True))
    ]
    written = compute_one(dask.delayed(list)(tasks), client, desc="projection pass")
    if sum(written) != meta["n"]:
        raise RuntimeError(f"wrote {sum(written)} rows to {tmp}, expected {meta['n']}")
    (tmp / "_dmlfe.json").write_text(json.dumps(meta, default=str, indent=2), encoding="utf-8")
