"""The embeddings files: Z written to zarr (an AnnData) or parquet, and read back.

The zarr output is laid out as anndata lays out an ``AnnData`` (the AnnData skeleton of
:mod:`dmlfe.store.layout`, which the store writes too), so ``anndata.read_zarr`` opens it:

=====================  =============================================================
``obsm/X_<method>``    the embeddings, n x d float64, chunked by rows (``X_embedding``
                       when no method is named)
``obs/_index``         document ids (row numbers when none are given)
``obs/split``          the documents' split (categorical), when given
``obsm/Y``             n x q 0/1 labels, when given, with ``uns/label_names``: a CSR
                       group as in the store (format version 2, anndata's
                       ``csr_matrix`` encoding), so ``adata.obsm["Y"]`` is a
                       ``scipy.sparse.csr_matrix``
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
``adata.uns["label_names"]`` gives a DataFrame in one line. The zarr keeps the labels
sparse (memory and disk grow with the document-label pairs); the parquet output and
``read_embeddings(..., obs=True)`` give one 0/1 column per label.

Z comes from :func:`dmlfe.projection.project` (a model's ``transform``). Writes are
atomic: the output is built under a temporary name beside ``out`` and renamed into place
at the end; with a distributed cluster each worker writes the chunks it computed (the
output folder must be on a file system the workers share, as it is on a LocalCluster).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
import zarr
from dask import delayed

from dmlfe._version import __version__
from dmlfe.compute import compute_one, is_dask
from dmlfe.labels import sparse_labels
from dmlfe.store import layout as F
from dmlfe.tempfiles import link_note, move_into_place, remove_stale, temp_sibling

# pandas and pyarrow are imported where obs or parquet is read or written: a worker
# writing blocks into a zarr needs neither
if TYPE_CHECKING:
    import pandas as pd


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
        # this part's rows only: the parquet format has one column per label
        y = np.asarray(y.toarray() if sp.issparse(y) else y, dtype=np.uint8)
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
        Y = _read_labels(group["obsm/Y"])
        names = [str(x) for x in group["uns/label_names"][:]]
    return Z, (group["obs/_index"][:], codes, cats, Y, names)


def _read_labels(node: Any) -> sp.csr_matrix:
    """``obsm/Y`` of an embeddings zarr as CSR: a CSR group, or the dense array that
    files written before dmlfe kept labels sparse hold."""
    if isinstance(node, zarr.Array):
        return sp.csr_matrix(np.asarray(node[:], dtype=np.uint8))
    n, q = (int(v) for v in node.attrs["shape"])
    return sp.csr_matrix((np.asarray(node["data"][:], dtype=np.uint8), node["indices"][:],
                          node["indptr"][:]), shape=(n, q))


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
        Y = Y.toarray() if sp.issparse(Y) else Y  # one obs column per label
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
        if not is_dask(labels) and not sp.issparse(labels):
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
    if sp.issparse(a):
        a = sp.csr_matrix(a)
        starts = np.concatenate([[0], np.cumsum(chunks)]).astype(int)
        blocks = [da.from_delayed(dask.delayed(a[s:e]), (e - s, a.shape[1]), dtype=a.dtype,
                                  meta=sp.csr_matrix((0, 0), dtype=a.dtype))
                  for s, e in zip(starts[:-1], starts[1:], strict=True)]
        return da.concatenate(blocks, axis=0)
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


def _write_labels(group: Any, Y: sp.csr_matrix) -> None:
    """Fill the ``obsm/Y`` CSR group (:func:`dmlfe.store.layout.create_label_group`)."""
    step = F.ELEM_CHUNK
    for s in range(0, Y.nnz, step):  # a chunk at a time: no copy of all indices at once
        e = min(s + step, Y.nnz)
        group["data"][s:e] = np.ones(e - s, dtype=np.uint8)
        group["indices"][s:e] = Y.indices[s:e].astype(group["indices"].dtype, copy=False)
    group["indptr"][:] = Y.indptr.astype(np.int64)


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
    # the labels whole on the driver as CSR: O(document-label pairs), and their number
    # sizes the label arrays
    Y = sparse_labels(obs["Y"][0], client) if "Y" in obs else None
    skeleton = F.create_anndata(
        tmp, n=n, chunk_rows=rows,
        categories=obs["split"][1] if "split" in obs else None,
        label_names=obs["Y"][1] if "Y" in obs else None,
        label_nnz=0 if Y is None else Y.nnz)
    z_arr = F.new_array(skeleton.obsm, meta["obsm_key"], (n, d), (rows, max(d, 1)),
                        np.float64, F.ARRAY_ENC)
    sources: list[Any] = [Z]
    targets: list[Any] = [z_arr]
    if ids is None:
        ids = np.arange(n).astype(str)
    if is_dask(ids):
        sources.append(ids.rechunk((Z.chunks[0],)).astype(str))
        targets.append(skeleton.index)
    else:
        skeleton.index[:] = ids.astype(str)
    if "split" in obs:
        sources.append(_split_code_rows(obs, Z.chunks[0])[0])
        targets.append(skeleton.codes)
    if Y is not None:
        _write_labels(skeleton.labels, Y)
    _write_uns(skeleton.uns, uns)
    skeleton.root.attrs["dmlfe"] = F.jsonable(meta, "attrs")
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
