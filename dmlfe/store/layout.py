"""On-disk layout of a dmlfe store: names, encodings, chunk sizes and small helpers.

A store is one zarr v3 group laid out the way anndata lays out an ``AnnData``, so that
``anndata.read_zarr(path)`` opens it:

===========================  ==========================================================
``X/{data,indices,indptr}``  CSR matrix, anndata ``csr_matrix`` encoding 0.1.0
``obs/_index``               document ids (string-array)
``obs/split``                split, anndata ``categorical`` (codes + categories); absent
                             when the corpus has no split; code -1 marks a missing value
``obs/<name>``               further per-document string columns (string-array)
``var/_index``               feature names (string-array), or for a hashing store the
                             feature numbers 0..D-1 (int64 array, see below)
``obsm/Y``                   n x q 0/1 label matrix as CSR, anndata ``csr_matrix``
                             encoding (format version 2): ``data`` uint8 ones,
                             ``indices`` int32 label columns (int64 from 2**31 labels),
                             sorted and unique per row, ``indptr`` int64; version 1
                             stores held a dense n x q uint8 array (still read)
``uns/label_names``          label names (string-array)
``uns/idf``                  the text vectoriser's idf weights (float64), in stores
                             ingested from text (new text is vectorised with them)
root attrs ``dmlfe``         dmlfe's own metadata; ``complete: true`` is written last
===========================  ==========================================================

The embeddings that ``dmlfe transform`` writes (:mod:`dmlfe.io.embeddings`) are an
``AnnData`` too, with the same ``obs``, ``obsm/Y``, ``uns/label_names`` and an empty
``var``: :func:`create_anndata` writes that skeleton for both.

Stores without feature names (hashing stores, up to 2**24 features) get the feature
numbers 0..D-1 as an integer ``var`` index instead: about 100 kB on disk for 2**24
features (bit-shuffled blosc/zstd) and well under a second to write, and anndata still
opens the whole store (it turns that index into strings when it loads it, which is the
reader's cost, not the ingest's). Generating 2**24 name strings instead would cost
seconds and gigabytes at ingest for nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BloscCodec, ZstdCodec

FORMAT_NAME = "dmlfe-store"
FORMAT_VERSION = 2
#: The last format version whose ``obsm/Y`` is a dense n x q uint8 array.
DENSE_LABELS_VERSION = 1
#: The arrays of the CSR label matrix (format version 2).
LABEL_ARRAYS = ("obsm/Y/data", "obsm/Y/indices", "obsm/Y/indptr")
#: Elements per zarr chunk of ``X/data`` and ``X/indices`` (16 MiB of float64).
ELEM_CHUNK = 2**21
#: Entries per zarr chunk of ``var/_index``.
VAR_CHUNK = 2**18
#: Column names reserved by the layout; extra obs columns may not use them.
RESERVED_OBS = ("_index", "split")

ENC = {"encoding-version": "0.2.0"}
DICT_ENC = {"encoding-type": "dict", "encoding-version": "0.1.0"}
STRING_ENC = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
ARRAY_ENC = {"encoding-type": "array", "encoding-version": "0.2.0"}
ANNDATA_ENC = {"encoding-type": "anndata", "encoding-version": "0.1.0"}
CSR_ENC = {"encoding-type": "csr_matrix", "encoding-version": "0.1.0"}
CATEGORICAL_ENC = {"encoding-type": "categorical", "encoding-version": "0.2.0", "ordered": False}
#: A 0-d string in ``uns`` (anndata's scalar encodings).
STRING_SCALAR_ENC = {"encoding-type": "string", "encoding-version": "0.2.0"}
NUMERIC_SCALAR_ENC = {"encoding-type": "numeric-scalar", "encoding-version": "0.2.0"}
#: The groups an AnnData has even when empty.
EMPTY_GROUPS = ("layers", "obsp", "varm", "varp")


def dataframe_attrs(columns: Sequence[str]) -> dict:
    """Attributes of an anndata ``dataframe`` group (``obs``/``var``) indexed by ``_index``."""
    return {"_index": "_index", "column-order": list(columns), "encoding-type": "dataframe",
            "encoding-version": "0.2.0"}


def compressor() -> ZstdCodec:
    """The codec of every array (zstd ships with zarr 3 through numcodecs)."""
    return ZstdCodec(level=3, checksum=False)


def number_compressor() -> BloscCodec:
    """Codec for the feature-number index: bit shuffling makes a range nearly free."""
    return BloscCodec(cname="zstd", clevel=5, shuffle="bitshuffle")


def index_dtype(n_features: int) -> np.dtype:
    """int32 column indices when they fit (as anndata/scipy do), int64 otherwise."""
    return np.dtype(np.int32 if n_features < 2**31 else np.int64)


def sparse_labels(meta: dict) -> bool:
    """Whether the store whose root metadata is ``meta`` keeps its labels as CSR."""
    return int(meta.get("format_version", 1)) > DENSE_LABELS_VERSION


def label_arrays(meta: dict) -> tuple[str, ...]:
    """The zarr arrays that hold a store's labels (CSR parts, or the dense v1 array)."""
    return LABEL_ARRAYS if sparse_labels(meta) else ("obsm/Y",)


def codes_dtype(n_categories: int) -> np.dtype:
    """Smallest signed integer type holding the categorical codes (-1 = missing)."""
    for dt in (np.int8, np.int16, np.int32):
        if n_categories <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def encode_strings(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """UTF-8 bytes + int64 offsets: a pickle-free, unpadded way to save strings in .npy."""
    encoded = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in encoded], out=offsets[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets


def decode_strings(buf: np.ndarray, offsets: np.ndarray, start: int = 0,
                   stop: int | None = None) -> list[str]:
    """Inverse of :func:`encode_strings`, for entries ``start:stop``."""
    stop = len(offsets) - 1 if stop is None else stop
    lo, hi = int(offsets[start]), int(offsets[stop])
    raw = np.asarray(buf[lo:hi]).tobytes()
    off = np.asarray(offsets[start:stop + 1]) - lo
    return [raw[off[i]:off[i + 1]].decode("utf-8") for i in range(stop - start)]


def to_object_strings(values: np.ndarray) -> np.ndarray:
    """A zarr string array (numpy StringDType) as an object array of Python str."""
    return np.asarray(values).astype(object)


def _json_default(value):
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} value {value!r} is not JSON serialisable")


def jsonable(value, what: str):
    """``value`` converted to plain JSON types (numpy scalars and paths are accepted).

    Raises
    ------
    TypeError
        Naming ``what`` when something cannot be stored as JSON.
    """
    try:
        return json.loads(json.dumps(value, default=_json_default))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"{what} must be JSON serialisable to be stored in the store attributes: {exc}"
        ) from exc


def dir_size(path: Path) -> int:
    """Bytes of all regular files under ``path``."""
    total = 0
    for p in Path(path).rglob("*"):
        if p.is_file():
            total += p.stat().st_size
    return total


# --------------------------------------------------------------------------- #
# The AnnData skeleton, shared by the store and the embeddings
# --------------------------------------------------------------------------- #
def new_array(group: zarr.Group, name: str, shape: tuple, chunks: tuple, dtype: Any,
              attributes: dict | None = None, fill_value: Any = None) -> zarr.Array:
    """A new array of a dmlfe zarr: the zstd codec (:func:`compressor`), no sharding."""
    return group.create_array(name, shape=shape, chunks=chunks, dtype=dtype,
                              compressors=compressor(), shards=None,
                              attributes=attributes or {}, fill_value=fill_value)


@dataclass(frozen=True)
class AnnDataGroups:
    """The groups and the per-document arrays :func:`create_anndata` made (still empty).

    ``codes`` (``obs/split/codes``) is None without a split, ``labels`` (the
    ``obsm/Y`` CSR group, its arrays still empty) None without labels; ``columns`` maps
    each further obs column to its array.
    """

    root: zarr.Group
    obs: zarr.Group
    obsm: zarr.Group
    uns: zarr.Group
    var: zarr.Group
    index: zarr.Array
    codes: zarr.Array | None
    labels: zarr.Group | None
    columns: dict[str, zarr.Array]
    var_index: zarr.Array


def create_anndata(path: str | Path, *, n: int, chunk_rows: int,
                   categories: Sequence[str] | None = None,
                   obs_columns: Sequence[str] = (),
                   label_names: Sequence[str] | None = None,
                   n_features: int = 0, named_features: bool = True,
                   label_nnz: int = 0) -> AnnDataGroups:
    """A new zarr v3 group at ``path`` laid out as an ``AnnData`` of ``n`` documents.

    Writes the encodings of every group and the small arrays: ``obs`` (``_index``, the
    categorical ``split`` when ``categories`` are given, a string column per name in
    ``obs_columns``), ``obsm`` (``Y``, n x q uint8, when ``label_names`` are given),
    ``uns`` (``label_names``), ``var`` (an index of ``n_features`` names, or of the
    feature numbers when not ``named_features``) and the empty groups anndata expects.
    The per-document arrays are chunked by ``chunk_rows`` and left for the caller to
    fill, as are ``X`` or ``obsm/X_<method>``.
    """
    root = zarr.create_group(store=str(path), zarr_format=3, attributes=ANNDATA_ENC)
    obs = root.create_group("obs", attributes=dataframe_attrs(
        (["split"] if categories is not None else []) + list(obs_columns)))
    index = new_array(obs, "_index", (n,), (chunk_rows,), str, STRING_ENC)
    codes = None
    if categories is not None:
        split = obs.create_group("split", attributes=CATEGORICAL_ENC)
        cats = new_array(split, "categories", (len(categories),),
                         (max(1, len(categories)),), str, STRING_ENC)
        if categories:
            cats[:] = np.array(list(categories), dtype=object)
        codes = new_array(split, "codes", (n,), (chunk_rows,), codes_dtype(len(categories)),
                          ARRAY_ENC)
    columns = {key: new_array(obs, key, (n,), (chunk_rows,), str, STRING_ENC)
               for key in obs_columns}
    obsm = root.create_group("obsm", attributes=DICT_ENC)
    uns = root.create_group("uns", attributes=DICT_ENC)
    labels = None
    if label_names is not None:
        q = len(label_names)
        labels = create_label_group(obsm, n=n, q=q, nnz=label_nnz, chunk_rows=chunk_rows)
        names = new_array(uns, "label_names", (q,), (max(q, 1),), str, STRING_ENC)
        if q:
            names[:] = np.array(list(label_names), dtype=object)
    var = root.create_group("var", attributes=dataframe_attrs([]))
    chunk = max(1, min(VAR_CHUNK, n_features))
    if named_features:
        var_index = new_array(var, "_index", (n_features,), (chunk,), str, STRING_ENC)
    else:
        # bit-shuffled consecutive integers compress to almost nothing
        var_index = var.create_array("_index", shape=(n_features,), chunks=(chunk,),
                                     dtype=index_dtype(n_features),
                                     compressors=number_compressor(), shards=None,
                                     attributes=ARRAY_ENC)
    for empty in EMPTY_GROUPS:
        root.create_group(empty, attributes=DICT_ENC)
    return AnnDataGroups(root, obs, obsm, uns, var, index, codes, labels, columns, var_index)


def create_label_group(obsm: zarr.Group, *, n: int, q: int, nnz: int,
                       chunk_rows: int) -> zarr.Group:
    """The empty ``obsm/Y`` CSR group of an n x q label matrix with ``nnz`` ones.

    Chunked like ``X``: ``indptr`` by ``chunk_rows`` rows, ``data`` (uint8 ones) and
    ``indices`` (the label columns) by :data:`ELEM_CHUNK` elements, so that memory
    and disk grow with the number of document-label pairs, not with n x q.
    """
    group = obsm.create_group("Y", attributes={**CSR_ENC, "shape": [n, q]})
    new_array(group, "data", (nnz,), (ELEM_CHUNK,), np.uint8)
    new_array(group, "indices", (nnz,), (ELEM_CHUNK,), index_dtype(q))
    new_array(group, "indptr", (n + 1,), (chunk_rows,), np.int64)
    return group
