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
``obsm/Y``                   n x q uint8 0/1 label matrix
``uns/label_names``          label names (string-array)
``uns/idf``                  the text vectoriser's idf weights (float64), in stores
                             ingested from text (new text is vectorised with them)
root attrs ``dmlfe``         dmlfe's own metadata; ``complete: true`` is written last
===========================  ==========================================================

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
from pathlib import Path

import numpy as np
from zarr.codecs import BloscCodec, ZstdCodec

FORMAT_NAME = "dmlfe-store"
FORMAT_VERSION = 1
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
