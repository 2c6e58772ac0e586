"""Saved sufficient statistics, so a failed solve or another method does not repeat the pass.

Layout: statistics of a store ``path/to/corpus.zarr`` live in the sibling folder
``path/to/corpus.zarr.stats/``. A sibling, not a folder inside the store,
because a store is written once atomically and then treated as immutable (and
readers such as anndata should see only the store's own groups); deleting the
sibling folder simply forgets the cache. Other inputs (a dask array, an in-memory
matrix) are cached only in an explicit ``cache_dir``.

Each entry is a pair of files named by ``key`` = a hash of its parameters:

* ``<key>.npz``  -- n, sum_x, sum_y, xty, yty and, when computed, xtx and xtwx
  (float64, written with ``allow_pickle=False`` and read back the same way);
* ``<key>.json`` -- the parameters in clear (data identity: the store's
  ``fingerprint``; the view's selection (split); block_fn route; label map; dmlfe
  version; cache format), which of X^T X / X^T W X are present, and the names and
  shapes of the arrays the ``.npz`` must hold with the CRC-32 of each (``crc32``:
  the zip's own check of its members, verified as they are read, so the record and
  the archive are tied together at no cost beyond reading them).

After an append, the entry of the grown version is a delta record: its ``.npz`` holds
the appended documents' statistics only (the D-long sums on the features they use, the
matrices as CSR triplets ``<name>_data``/``_indices``/``_indptr`` where they are sparse),
and its ``.json`` lists ``parts``: the earlier version's archive (the base: a whole
entry's ``.npz``, shared, not copied) and each delta since, in order, every one with the
names, shapes and CRC-32s of its arrays. A read sums base and deltas in that order (as
the fit that saved it did: the same values). Past :data:`MAX_STATS_DELTAS` deltas, or
when the appended part holds a dense D x D matrix, the entry is saved whole again (the
base of the versions after it). A part that is missing or fails a check makes the entry
unusable, as a damaged whole entry is.

The key leaves out ``need_xtx`` / ``need_xtwx``: an entry with X^T X serves
requests without it, and a request that needs X^T X replaces an entry that
lacks it. Both files are
written to a temporary name (:func:`dmlfe.tempfiles.temp_sibling`) and renamed into
place, the ``.json`` last, so an entry is only ever seen complete; a reader checks the
``.npz`` against its ``.json`` (the last of two concurrent writers wins). An entry that
cannot be read or fails a check is ignored with a RuntimeWarning, recomputed and
replaced. :func:`clean` removes a store's cache folder.

The dual route's n x n Gram of a view's rows is saved in the same folder
(:func:`load_or_compute_gram`), keyed by the view's content fingerprint and selection,
up to :data:`MAX_GRAM_CACHE_BYTES`, as row strips: ``<key>.gram.npy`` holds the rows the
version added (rows [a, b) of the Gram, each with its b columns: the whole Gram for a
version computed from all rows), and the record ``<key>.gram.json`` lists the files of
every strip from row 0, with the CRC-32 of each one's values. After an append the Gram
of the earlier version is read from its strips, extended by the appended rows'
products, and only the new strip is written: the earlier files are shared, not copied.
Written and checked as the statistics are (the record last; a strip that does not match
its CRC-32 in the record makes the entry unusable).

Why one module: the entries, their keys and checksums, the delta records of appended
rows and the Gram strips are one on-disk format whose writers and readers change
together (``CACHE_FORMAT``); split, a change to the format would touch every part.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import struct
import warnings
import zipfile
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe._version import __version__
from dmlfe.compute import BlockFn, is_dask
from dmlfe.errors import MissingPathError
from dmlfe.stats.gram import GramStrips, extend_gram_into, gram_matrix, gram_strip
from dmlfe.stats.pass_ import LabelFn, compute_stats
from dmlfe.stats.sufficient import SPARSE_ROWS_FRACTION, SufficientStats, held, whole_rows
from dmlfe.store import Store, open_store
from dmlfe.tempfiles import (
    recover_swap,
    remove_path,
    remove_stale,
    stale_temporaries,
    write_atomically,
)

log = logging.getLogger(__name__)

#: Bumped whenever the meaning or layout of a saved entry changes (5: statistics records
#: name the CRC-32 of each array of the ``.npz``, not a sha256 of the arrays; an entry of
#: an earlier format has another key, so it is not found and is computed again).
CACHE_FORMAT = 5

_ARRAYS = ("sum_x", "sumsq_x", "sum_y", "xty", "yty", "xtx", "xtwx")
#: The arrays with a row (and, for the D x D ones, a column) per feature.
_FEATURE_ROWS = ("sum_x", "sumsq_x", "xty", "xtx", "xtwx")


# --------------------------------------------------------------------------- #
# Keys and identities
# --------------------------------------------------------------------------- #
def _canonical(obj: Any) -> Any:
    """JSON round trip: the exact form the parameters have once stored."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def stats_key(params: dict[str, Any]) -> str:
    """Hex digest naming a cache entry: sha256 of the canonical JSON of ``params``."""
    text = json.dumps(_canonical(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def stats_dir_for(store_path: str | os.PathLike[str]) -> Path:
    """Cache folder of a store: ``<store>.stats`` next to it."""
    p = Path(store_path).resolve()
    return p.with_name(p.name + ".stats")


def _hash_array(h: Any, a: Any) -> None:
    if sp.issparse(a):
        a = sp.csr_matrix(a)
        for part in (a.data, a.indices, a.indptr):
            h.update(np.ascontiguousarray(part).tobytes())
        h.update(repr((a.shape, str(a.dtype))).encode())
    else:
        a = np.ascontiguousarray(a)
        h.update(a.tobytes())
        h.update(repr((a.shape, str(a.dtype))).encode())


def array_identity(a: Any) -> dict[str, Any]:
    """Identity of an array: the dask name (graph token), or a content hash in memory."""
    if a is None:
        return {"kind": "none"}
    if is_dask(a):
        return {"kind": "dask", "name": a.name, "shape": list(a.shape)}
    h = hashlib.sha256()
    _hash_array(h, a)
    return {"kind": "memory", "sha256": h.hexdigest(), "shape": list(a.shape)}


# --------------------------------------------------------------------------- #
# Saving and loading
# --------------------------------------------------------------------------- #
def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 of the arrays' names, dtypes, shapes and values (not of the zip bytes,
    which hold a time stamp: two writers of equal statistics get the same digest)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(repr((name, a.dtype.str, a.shape)).encode())
        h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def save_stats(
    stats: SufficientStats, directory: str | os.PathLike[str], params: dict[str, Any]
) -> Path:
    """Write ``stats`` as ``<key>.npz`` + ``<key>.json`` under ``directory``; return the npz.

    Each file is written to a temporary sibling and renamed into place; the ``.json``
    goes last and records the names, shapes and digest of the arrays the ``.npz`` must
    hold, so a reader that finds the pair of two different writers (or a ``.npz``
    without its ``.json``) ignores it. Stale temporaries of the entry (left by a killed
    process) are removed first, with a RuntimeWarning naming each.
    """
    arrays = {"n": np.asarray(stats.n, dtype=np.int64)}
    rows = stats.used_columns(SPARSE_ROWS_FRACTION)
    if rows is not None:
        arrays["rows"] = rows.astype(np.int64)
    for name in _ARRAYS:
        value = getattr(stats, name, None) if rows is None or name not in _FEATURE_ROWS \
            else _used_part(stats, name, rows)
        if value is not None:
            arrays[name] = np.ascontiguousarray(value, dtype=np.float64)
    totals = {"has_xtx": held(stats, "xtx") is not None,
              "has_xtwx": held(stats, "xtwx") is not None, "n": int(stats.n),
              "n_features": stats.n_features, "n_labels": stats.n_labels}
    return _write_entry(Path(directory), params, arrays, totals)


def _write_entry(directory: Path, params: dict[str, Any], arrays: dict[str, np.ndarray],
                 totals: dict[str, Any], before: list[dict[str, Any]] | None = None
                 ) -> Path:
    """Write ``arrays`` as ``<key>.npz`` and their record as ``<key>.json``
    (:func:`save_stats`), ``totals`` naming what the entry sums to (``n``,
    ``n_features``, ``n_labels``, ``has_xtx``, ``has_xtwx``); ``before``: the parts a
    delta record lists before its own archive (:func:`save_stats_delta`)."""
    directory.mkdir(parents=True, exist_ok=True)
    key = stats_key(params)
    npz_path = directory / f"{key}.npz"
    json_path = directory / f"{key}.json"
    shapes = {name: list(a.shape) for name, a in arrays.items()}
    meta = {
        "key": key,
        "params": _canonical(params),
        **totals,
        "arrays": shapes,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "dmlfe_version": __version__,
    }
    # The old record goes first: until the new one is in place a reader sees no entry
    # (and computes) rather than an old record beside new arrays.
    json_path.unlink(missing_ok=True)
    crcs: dict[str, int] = {}
    write_atomically(npz_path, lambda f: crcs.update(_write_npz(f, arrays)))
    meta["crc32"] = crcs
    if before is not None:
        meta["parts"] = [*before, {"file": npz_path.name, "n": int(arrays["n"]),
                                   "arrays": shapes, "crc32": crcs}]
    text = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    write_atomically(json_path, lambda f: f.write(text))
    return npz_path


def _write_npz(f: Any, arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """``np.savez(f, **arrays)`` (an uncompressed zip of ``<name>.npy`` members), and the
    CRC-32 the zip computed of each member as it wrote it."""
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, a in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(a), allow_pickle=False)
        return npz_crc32(z)


def npz_crc32(npz: zipfile.ZipFile | str | os.PathLike[str]) -> dict[str, int]:
    """The CRC-32 of each member of an ``.npz`` as its zip directory records them (what a
    statistics record names; a member's bytes are checked against it when read)."""
    if isinstance(npz, zipfile.ZipFile):
        return {info.filename: int(info.CRC) for info in npz.infolist()}
    with zipfile.ZipFile(npz) as z:
        return npz_crc32(z)


def _used_part(stats: SufficientStats, name: str, rows: np.ndarray) -> np.ndarray | None:
    """The used features' rows (and columns, of a D x D array) of a D-row array: every
    other entry is zero (:meth:`SufficientStats.used_columns`), so an entry of hashed
    text keeps only what its documents touched. Matrices are read from the rows the
    statistics hold (:meth:`SufficientStats.rows_of`): no D-row array is made for them."""
    if name in ("xty", "xtx", "xtwx"):
        a = held(stats, name)
        if a is None or a.shape[0] == 0:  # absent, or X^T Y not computed (zero rows)
            return a
        return stats.rows_of(name, rows)
    a = getattr(stats, name, None)
    return a if a is None or a.shape[0] != stats.n_features else a[rows]


class _BadEntry(Exception):
    """A cache entry that cannot be used; the message says why."""


def _read_meta(json_path: Path, params: dict[str, Any]) -> dict[str, Any]:
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except ValueError as exc:  # not JSON, not UTF-8, empty
        raise _BadEntry(f"unreadable ({exc})") from None
    if not isinstance(meta, dict):
        raise _BadEntry(f"not a JSON object but a {type(meta).__name__}")
    if meta.get("params") != _canonical(params):
        raise _BadEntry("it records other parameters than its key stands for")
    arrays = meta.get("arrays")
    if (
        not isinstance(arrays, dict)
        or not isinstance(meta.get("crc32"), dict)
        or not all(isinstance(meta.get(k), int) and meta[k] >= 0
                   for k in ("n", "n_features", "n_labels"))
    ):
        raise _BadEntry("it lacks the fields 'arrays', 'crc32', 'n', 'n_features', "
                        "'n_labels' (an older or damaged record)")
    return meta


#: The fixed part of a zip member's local header; the name and extra field follow it.
_LOCAL_HEADER = struct.Struct("<4s22xHH")


def _npy_header(f: Any, what: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran, dtype) of the .npy array that starts at f's position;
    :class:`_BadEntry` naming ``what`` when it is not one."""
    try:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) \
            else np.lib.format.read_array_header_2_0
        return read_header(f)
    except ValueError as exc:  # not an .npy, truncated
        raise _BadEntry(f"{what} is unreadable ({exc})") from None


def _read_member(f: Any, info: zipfile.ZipInfo) -> np.ndarray:
    """The ``.npy`` member ``info`` of the uncompressed zip open as ``f`` (what
    :func:`_write_npz` writes), read straight into a new array -- not through the zip
    module's small reads and a second copy, as ``np.load`` does -- and its bytes checked
    against the member's CRC-32; :class:`_BadEntry` otherwise."""
    if info.compress_type != zipfile.ZIP_STORED:
        raise _BadEntry(f"its member {info.filename} is compressed (not written by dmlfe)")
    f.seek(info.header_offset)
    magic, n_name, n_extra = _LOCAL_HEADER.unpack(f.read(_LOCAL_HEADER.size))
    if magic != b"PK\x03\x04":
        raise _BadEntry(f"its member {info.filename} has no local header")
    start = info.header_offset + _LOCAL_HEADER.size + n_name + n_extra
    f.seek(start)
    shape, fortran, dtype = _npy_header(f, f"its member {info.filename}")
    header = f.tell() - start
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if dtype.hasobject or header + nbytes != info.file_size:
        raise _BadEntry(f"its member {info.filename} holds a {dtype} array of shape {shape} "
                        f"in {info.file_size} bytes (truncated or damaged)")
    raw = np.empty(nbytes, dtype=np.uint8)
    f.seek(start)
    crc = zlib.crc32(f.read(header))
    if f.readinto(memoryview(raw)) != nbytes:
        raise _BadEntry(f"its member {info.filename} is shorter than its header says")
    if zlib.crc32(memoryview(raw), crc) & 0xFFFFFFFF != info.CRC:
        raise _BadEntry(f"the bytes of its member {info.filename} do not match their CRC-32 "
                        "(a damaged file)")
    return raw.view(dtype).reshape(shape, order="F" if fortran else "C")


def _read_archive(npz_path: Path, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The arrays of ``npz_path`` by name, checked against the names, shapes and CRC-32s
    the record ``meta`` gives them; :class:`_BadEntry` otherwise."""
    try:
        with open(npz_path, "rb") as f:
            with zipfile.ZipFile(f) as z:
                infos = z.infolist()
                crcs = npz_crc32(z)
            arrays = {info.filename.removesuffix(".npy"): _read_member(f, info)
                      for info in infos}
    except (FileNotFoundError, _BadEntry):
        raise
    except Exception as exc:  # noqa: BLE001 - truncated/garbage zip: BadZipFile, EOFError...
        raise _BadEntry(f"unreadable ({type(exc).__name__}: {exc})") from None
    want = {name: tuple(shape) for name, shape in meta["arrays"].items()}
    have = {name: a.shape for name, a in arrays.items()}
    if want != have:
        raise _BadEntry(f"it holds arrays {have}, its record names {want} (the files of "
                        "two different writes, or a damaged file)")
    if crcs != meta["crc32"]:
        raise _BadEntry("its arrays do not match the CRC-32s in its record (the files of "
                        "two different writes, or a damaged file)")
    return arrays


def _used_rows(arrays: dict[str, np.ndarray], d: int) -> tuple[np.ndarray | None, int]:
    """(the ``rows`` array popped from ``arrays``, checked, or None; how many rows the
    D-long arrays then have)."""
    rows = arrays.pop("rows", None)
    if rows is None:
        return None, d
    if (rows.ndim != 1 or rows.dtype.kind not in "iu"
            or (rows.size and (rows[0] < 0 or rows[-1] >= d
                               or np.any(np.diff(rows) <= 0)))):
        raise _BadEntry(f"its used-feature rows are not increasing indices below D={d}")
    return rows, int(rows.size)


def _widen_sums(arrays: dict[str, np.ndarray], rows: np.ndarray, d: int) -> None:
    """The D-long sums of ``arrays`` saved on ``rows`` made whole, in place."""
    for name in ("sum_x", "sumsq_x"):
        if name in arrays and arrays[name].shape[0] == rows.size:
            arrays[name] = whole_rows(arrays[name], rows, d)


def _read_arrays(npz_path: Path, meta: dict[str, Any]) -> SufficientStats:
    """The statistics of ``npz_path``, checked against what the record ``meta`` names."""
    arrays = _read_archive(npz_path, meta)
    d, q, n = meta["n_features"], meta["n_labels"], meta["n"]
    rows, m = _used_rows(arrays, d)
    shapes = {"n": (), "sum_x": (m,), "sumsq_x": (m,), "sum_y": (q,), "xty": (m, q), "yty": (q, q),
              "xtx": (m, m), "xtwx": (m, m)}
    if "xty" in arrays and arrays["xty"].shape[0] == 0:
        shapes["xty"] = (0, q)  # not computed (need_xty=False)
    missing = [k for k in ("n", "sum_x", "sum_y", "xty", "yty") if k not in arrays]
    if missing:
        raise _BadEntry(f"it lacks the arrays {missing}")
    for name, a in arrays.items():
        if name not in shapes:
            raise _BadEntry(f"unexpected array {name!r}")
        if a.shape != shapes[name]:
            raise _BadEntry(f"{name} has shape {a.shape}, expected {shapes[name]} for "
                            f"D={d}, q={q}")
        if a.dtype.kind not in "iuf" or not np.isfinite(a).all():
            raise _BadEntry(f"{name} holds non-finite or non-numeric values")
    if int(arrays["n"]) != n:
        raise _BadEntry(f"it counts n={int(arrays['n'])} documents, its record n={n}")
    for flag, name in (("has_xtx", "xtx"), ("has_xtwx", "xtwx")):
        if bool(meta.get(flag, False)) != (name in arrays):
            raise _BadEntry(f"its record says {flag}={meta.get(flag)} but the archive "
                            f"{'has' if name in arrays else 'lacks'} {name}")
    if rows is not None:
        # the D-long sums whole; the matrices stay on the used rows (compact_rows) until
        # something reads them whole
        _widen_sums(arrays, rows, d)
        if m == d:
            rows = None
    return SufficientStats(
        n=n,
        sum_x=arrays["sum_x"].astype(np.float64, copy=False),
        sum_y=arrays["sum_y"].astype(np.float64, copy=False),
        xty=arrays["xty"].astype(np.float64, copy=False),
        yty=arrays["yty"].astype(np.float64, copy=False),
        xtx=arrays["xtx"].astype(np.float64, copy=False) if "xtx" in arrays else None,
        xtwx=arrays["xtwx"].astype(np.float64, copy=False) if "xtwx" in arrays else None,
        # absent from entries written before it existed: those fits keep every column
        sumsq_x=arrays["sumsq_x"].astype(np.float64, copy=False) if "sumsq_x" in arrays
        else None,
        compact_rows=rows,
    )


def load_stats(
    directory: str | os.PathLike[str],
    params: dict[str, Any],
    *,
    need_xtx: bool = False,
    need_xtwx: bool = False,
) -> SufficientStats | None:
    """The saved statistics for ``params``; None when absent, unusable or lacking X^T (W) X.

    An entry that cannot be used (a truncated, empty or garbage file, a record that is
    not a JSON object or names other parameters, arrays of the wrong shapes or holding
    NaN, an ``.npz`` that does not match its ``.json``) is ignored with a RuntimeWarning
    naming the file; the caller recomputes and :func:`save_stats` replaces it.
    """
    found = _load_entry(Path(directory), params, need_xtx=need_xtx, need_xtwx=need_xtwx)
    return None if found is None else found[0]


def _entry_record(directory: Path, params: dict[str, Any], *, need_xtx: bool = False,
                  need_xtwx: bool = False) -> dict[str, Any] | None:
    """The record of the entry for ``params`` when it holds what is needed (its arrays
    not read); None when absent or unusable (a RuntimeWarning says why)."""
    key = stats_key(params)
    npz_path = directory / f"{key}.npz"
    json_path = directory / f"{key}.json"
    if not json_path.is_file() or not npz_path.is_file():
        return None  # absent, or a write in progress (the record goes last)
    try:
        meta = _read_meta(json_path, params)
    except FileNotFoundError:
        return None  # another process is replacing the entry right now: a miss
    except (_BadEntry, OSError) as exc:
        _warn_bad(json_path, exc)
        return None
    if need_xtx and not meta.get("has_xtx", False):
        return None
    if need_xtwx and not meta.get("has_xtwx", False):
        return None
    return {**meta, "key": key}


def _load_entry(directory: Path, params: dict[str, Any], *, need_xtx: bool = False,
                need_xtwx: bool = False) -> tuple[SufficientStats, dict[str, Any]] | None:
    """:func:`load_stats`, and the entry's record."""
    meta = _entry_record(directory, params, need_xtx=need_xtx, need_xtwx=need_xtwx)
    if meta is None:
        return None
    npz_path = directory / f"{meta['key']}.npz"
    try:
        if "parts" in meta:
            return _read_parts(directory, meta), meta
        return _read_arrays(npz_path, meta), meta
    except FileNotFoundError as exc:
        if "parts" in meta and exc.filename != str(npz_path):
            # the base or an earlier delta is gone (its entry replaced or removed): this
            # entry cannot be summed any more
            _warn_bad(npz_path, _BadEntry(f"{Path(str(exc.filename)).name}, a part it "
                                          "lists, is missing"))
        return None  # replaced between the two reads: a miss
    except (_BadEntry, OSError) as exc:
        _warn_bad(npz_path, exc)
        return None


# --------------------------------------------------------------------------- #
# Delta records: an appended version's part only
# --------------------------------------------------------------------------- #
#: Most delta records a statistics entry may list after its base (the whole statistics
#: of an earlier version): each is read and added at every load, so past this many the
#: entry is saved whole again, as a new base for the versions after it.
MAX_STATS_DELTAS = 8
#: The matrices a delta record may hold in CSR form (a few appended documents leave
#: them sparse), each as ``<name>_data``, ``<name>_indices``, ``<name>_indptr``.
_CSR_PARTS = ("data", "indices", "indptr")


def _delta_arrays(part: SufficientStats) -> dict[str, np.ndarray] | None:
    """The arrays of a delta record of ``part``: its sums -- the D-long ones on its used
    features' ``rows`` only when they are few, as a whole entry's -- and X^T Y, X^T X,
    X^T W X dense or as CSR triplets (X^T Y as CSR when few features are used); None
    when a D x D matrix of it is dense (its record would be as large as the whole
    entry's, which is then saved instead)."""
    arrays = {"n": np.asarray(part.n, dtype=np.int64)}
    rows = part.used_columns(SPARSE_ROWS_FRACTION)
    if rows is not None:
        arrays["rows"] = rows.astype(np.int64)
    for name in ("sum_x", "sumsq_x", "sum_y", "yty"):
        value = getattr(part, name)
        if value is not None:
            if rows is not None and name in _FEATURE_ROWS:
                value = value[rows]
            arrays[name] = np.ascontiguousarray(value, dtype=np.float64)
    for name in ("xty", "xtx", "xtwx"):
        value = held(part, name)
        if value is None:
            continue
        if rows is not None and name == "xty" and not sp.issparse(value) and value.size:
            value = sp.csr_matrix(value)  # the used features' rows only
        if sp.issparse(value):
            # as the product left it (no duplicate coordinates, perhaps unsorted): the
            # addition sorts it only where it needs to (add_into), here and when read
            m = sp.csr_matrix(value, dtype=np.float64)
            arrays.update({f"{name}_data": m.data, f"{name}_indices": m.indices,
                           f"{name}_indptr": m.indptr})
        elif name != "xty":
            return None
        else:
            arrays[name] = np.ascontiguousarray(value, dtype=np.float64)
    return arrays


def _read_delta(path: Path, part: dict[str, Any], d: int, q: int) -> SufficientStats:
    """The statistics of the delta record ``path`` (arrays as :func:`_delta_arrays` writes
    them), checked against its part of the entry's record; :class:`_BadEntry` otherwise."""
    arrays = _read_archive(path, part)
    rows, m = _used_rows(arrays, d)
    shapes = {"n": (), "sum_x": (m,), "sumsq_x": (m,), "sum_y": (q,), "yty": (q, q)}
    for name, shape in shapes.items():
        if name not in arrays and name != "sumsq_x":
            raise _BadEntry(f"it lacks the array {name}")
        if name in arrays and (arrays[name].shape != shape or arrays[name].dtype.kind
                               not in "iuf" or not np.isfinite(arrays[name]).all()):
            raise _BadEntry(f"{name} has shape {arrays[name].shape} or non-finite values, "
                            f"expected {shape} for D={d}, q={q}")
    if int(arrays["n"]) != part["n"]:
        raise _BadEntry(f"it counts n={int(arrays['n'])} documents, its record n={part['n']}")
    if rows is not None:
        _widen_sums(arrays, rows, d)
    matrices: dict[str, Any] = {}
    for name, shape in (("xty", (d, q)), ("xtx", (d, d)), ("xtwx", (d, d))):
        if name in arrays:
            a = arrays[name]
            if a.shape not in (shape, (0, q)) or not np.isfinite(a).all():
                raise _BadEntry(f"{name} has shape {a.shape} or non-finite values")
            matrices[name] = a
            continue
        got = [arrays.get(f"{name}_{k}") for k in _CSR_PARTS]
        if all(a is None for a in got):
            continue
        data, indices, indptr = got
        if data is None or indices is None or indptr is None or \
                indptr.shape != (shape[0] + 1,) or indptr[0] != 0 or \
                np.any(np.diff(indptr) < 0) or indptr[-1] != data.size or \
                indices.shape != data.shape or \
                (indices.size and (indices.min() < 0 or indices.max() >= shape[1])) or \
                not np.isfinite(data).all():
            raise _BadEntry(f"its sparse {name} is not a valid {shape[0]} x {shape[1]} CSR "
                            "matrix")
        matrices[name] = sp.csr_matrix((data, indices, indptr), shape=shape)
    extra = set(arrays) - set(shapes) - {f"{m}_{k}" for m in ("xty", "xtx", "xtwx")
                                         for k in _CSR_PARTS} - {"xty", "xtx", "xtwx"}
    if extra:
        raise _BadEntry(f"unexpected arrays {sorted(extra)}")
    return SufficientStats(
        n=part["n"], sum_x=arrays["sum_x"].astype(np.float64, copy=False),
        sum_y=arrays["sum_y"].astype(np.float64, copy=False),
        xty=matrices.get("xty", np.zeros((0, q))),
        yty=arrays["yty"].astype(np.float64, copy=False),
        xtx=matrices.get("xtx"), xtwx=matrices.get("xtwx"),
        sumsq_x=arrays["sumsq_x"].astype(np.float64, copy=False) if "sumsq_x" in arrays
        else None)


def _read_parts(directory: Path, meta: dict[str, Any]) -> SufficientStats:
    """The statistics of an entry saved as a base and delta records (``meta["parts"]``):
    the base read, each delta added to it in order, as the fit that saved the entry
    added them; every file checked against its CRC-32s in the record."""
    parts = meta["parts"]
    if not isinstance(parts, list) or len(parts) < 2 or not all(
            isinstance(p, dict) and isinstance(p.get("file"), str)
            and Path(p["file"]).name == p["file"] and isinstance(p.get("n"), int)
            and isinstance(p.get("arrays"), dict) and isinstance(p.get("crc32"), dict)
            for p in parts):
        raise _BadEntry("its record's 'parts' are not a base and delta records, each with "
                        "its file, n, arrays and CRC-32s")
    base = parts[0]
    d, q = meta["n_features"], meta["n_labels"]
    if (base.get("n_features"), base.get("n_labels")) != (d, q):
        raise _BadEntry("its base describes other features or labels than its record")
    try:
        stats = _read_arrays(directory / base["file"], base)
    except _BadEntry as exc:
        raise _BadEntry(f"its base {base['file']}: {exc}") from None
    for part in parts[1:]:
        try:
            stats += _read_delta(directory / part["file"], part, d, q)
        except _BadEntry as exc:
            raise _BadEntry(f"its delta record {part['file']}: {exc}") from None
    if stats.n != meta["n"]:
        raise _BadEntry(f"its parts count n={stats.n} documents, its record n={meta['n']}")
    for flag, name in (("has_xtx", "xtx"), ("has_xtwx", "xtwx")):
        if bool(meta.get(flag, False)) != (held(stats, name) is not None):
            raise _BadEntry(f"its record says {flag}={meta.get(flag)} but its parts do not "
                            "sum to that")
    return stats


def save_stats_delta(part: SufficientStats, directory: str | os.PathLike[str],
                     params: dict[str, Any], earlier: dict[str, Any]) -> Path | None:
    """Save the statistics of an earlier version's entry (its record ``earlier``) plus
    ``part``, the appended rows' statistics, as a delta record: ``<key>.npz`` holds
    ``part`` only and ``<key>.json`` lists the earlier entry's files before it, with the
    CRC-32s of each (the earlier files are shared, not copied). The earlier arrays are
    not read: the record sums to them. Returns the ``.npz`` written, or None when the
    list would pass :data:`MAX_STATS_DELTAS` deltas or ``part`` holds a dense D x D
    matrix: the sum is then saved whole (:func:`save_stats`) by the caller.
    """
    keys = ("arrays", "crc32", "n", "n_features", "n_labels", "has_xtx", "has_xtwx")
    before = earlier["parts"] if "parts" in earlier else \
        [{"file": f"{earlier['key']}.npz", **{k: earlier[k] for k in keys if k in earlier}}]
    arrays = _delta_arrays(part)
    if arrays is None or len(before) > MAX_STATS_DELTAS:
        return None
    # what the sum holds: a matrix either side lacks is absent from it (SufficientStats)
    totals = {"n": int(earlier["n"]) + int(part.n), "n_features": int(earlier["n_features"]),
              "n_labels": int(earlier["n_labels"]),
              "has_xtx": bool(earlier.get("has_xtx")) and held(part, "xtx") is not None,
              "has_xtwx": bool(earlier.get("has_xtwx")) and held(part, "xtwx") is not None}
    return _write_entry(Path(directory), params, arrays, totals, before)


def _warn_bad(path: Path, exc: Exception) -> None:
    warnings.warn(
        f"ignoring unreadable statistics cache entry {path}: {exc}; recomputing (the "
        "entry is replaced)",
        RuntimeWarning,
        stacklevel=3,
    )


def clean(store_path: str | os.PathLike[str], *, dry_run: bool = False) -> list[Path]:
    """Remove the statistics cache of a store and the temporaries killed processes left.

    Removes ``<store>.stats/`` (every saved entry and the stale temporaries in it; the
    temporaries of a process still writing there are left, and then the folder too),
    and the stale temporaries beside the store (``.<store>.tmp-<pid>-*`` of an ingest,
    an append, an export or an overwrite that was killed). The store itself is not
    touched, except that an append killed between the two renames of its swap is undone
    (:func:`dmlfe.tempfiles.recover_swap`).

    Parameters
    ----------
    store_path : path-like
        The store (it need not exist any more).
    dry_run : bool
        Remove nothing; return what would be removed.

    Returns
    -------
    list of Path
        What was removed: the cache folder (or, when a live process keeps it, each
        file removed from it) and each stale temporary.

    Raises
    ------
    MissingPathError
        When there is neither a store nor a cache folder nor a stale temporary there.
    """
    store_path = Path(store_path).absolute()
    cache_dir = stats_dir_for(store_path)
    removed: list[Path] = []
    if not dry_run:
        # an append killed half-way through its swap: the old store is put back first,
        # so that it is never taken for a temporary
        recover_swap(store_path)
    for target in (store_path, cache_dir):
        for p in stale_temporaries(target):
            if not dry_run:
                remove_path(p)
            removed.append(p)
    if cache_dir.is_dir():
        stale = set(_stale_temporaries_in(cache_dir))
        inside, live = [], False
        for p in sorted(cache_dir.iterdir()):
            if ".tmp-" in p.name and p not in stale:
                live = True
                continue  # a live process is writing this one
            if not dry_run:
                remove_path(p)
            inside.append(p)
        if dry_run:
            removed += inside if live or cache_dir.is_symlink() else [cache_dir]
            return removed
        try:
            if cache_dir.is_symlink():  # the link is the user's: empty what it points to
                raise OSError
            cache_dir.rmdir()
            removed.append(cache_dir)
        except OSError:  # a live writer's temporary is still there
            removed += inside
    elif not removed and not os.path.lexists(store_path) and not os.path.lexists(cache_dir):
        raise MissingPathError(f"{store_path} does not exist, and there is no statistics "
                               f"cache {cache_dir} nor a temporary of it to remove")
    return removed


def _stale_temporaries_in(directory: Path) -> list[Path]:
    """The stale temporaries of every name in ``directory``."""
    targets = set()
    for p in directory.iterdir():
        name = p.name
        if name.startswith(".") and ".tmp-" in name:
            targets.add(directory / name[1:name.rindex(".tmp-")])
    found: list[Path] = []
    for t in sorted(targets):
        found += stale_temporaries(t)
    return found


# --------------------------------------------------------------------------- #
# The reuse-or-compute entry point
# --------------------------------------------------------------------------- #
def _describe(fn: Any, description: Any, cache_on: bool, fn_name: str, arg: str) -> Any:
    if fn is None:
        # a description alone keys a variant of the plain statistics apart (labels
        # "none": an unsupervised fit that reads no label column of the store)
        return description
    if description is None and cache_on:
        raise ValueError(
            f"{fn_name} is set but {arg} is not: pass {arg}= (a string or JSON-able dict that "
            f"identifies the map and its parameters) so cached statistics of different maps "
            "are kept apart, or pass cache=False"
        )
    return description


def _extended(store: Store, params: dict[str, Any], cache_dir: Path,
              read: tuple[Any, Any] | None, kwargs: dict[str, Any]
              ) -> tuple[SufficientStats, Path | None] | None:
    """Statistics of ``store`` (a view) from those cached for an earlier version of it
    plus a pass over the rows appended since, and the delta record saved for them
    (:func:`save_stats_delta`; None: the caller saves them whole); None when no earlier
    version's are cached.

    A store's appends only add rows at its end (:func:`dmlfe.store.history`), so the
    entry of an earlier fingerprint with otherwise equal parameters covers the view's
    rows before that version's last row: the rest are read, reduced and added. Where the
    parameters depend on every row (MLDA's label weights, prototypes chosen from all
    documents), the earlier entries were saved under other parameters and nothing
    matches: the caller's full pass says so in the log.
    """
    need = {"need_xtx": kwargs["need_xtx"], "need_xtwx": kwargs["need_xtwx"]}
    # the records only: the earlier entry's arrays are read below, while the appended
    # rows are read, reduced and saved
    earlier = earlier_version(store, params, lambda p: _entry_record(cache_dir, p, **need),
                              "the statistics", covers=lambda meta: meta["n"])
    if earlier is None:
        return None
    entry, record, tail = earlier
    stop = int(entry["rows"][1])
    prior = {**params, "data": entry["fingerprint"]}
    if tail.n_docs == 0:
        loaded = _load_entry(cache_dir, prior, **need)
        if loaded is None:
            return None
        loaded[0].rows_read = 0
        return loaded[0], None
    # the earlier arrays are read (file reads and checksums, which release the GIL) in
    # this thread while another reads and reduces the appended rows, then added to
    # while it saves their delta record, which needs the earlier record only
    with ThreadPoolExecutor(max_workers=1) as pool:
        part = pool.submit(_appended_part, store, tail, read, kwargs)
        loaded = _load_entry(cache_dir, prior, **need)
        if loaded is None or loaded[1] != record:
            # damaged (a RuntimeWarning said so) or replaced since its record was read
            return None
        found, part = loaded[0], part.result()
        saving = pool.submit(_saved_delta, part, cache_dir, params, record)
        log.info("statistics of %s: %d cached documents (as of row %d) and %d read",
                 store.path, found.n, stop, part.n)
        found += part  # in place: the loaded arrays are this fit's own
        found.rows_read = part.n
        return found, saving.result()


def _saved_delta(part: SufficientStats, directory: Path, params: dict[str, Any],
                 earlier: dict[str, Any]) -> Path | None:
    """:func:`save_stats_delta`; None also where it could not be written (the caller's
    whole save tries again, and warns if it fails)."""
    try:
        return save_stats_delta(part, directory, params, earlier)
    except OSError:
        return None


def _appended_part(store: Store, tail: Store, read: tuple[Any, Any] | None,
                   kwargs: dict[str, Any]) -> SufficientStats:
    """The statistics of ``tail``, the rows of the view ``store`` appended since an
    earlier version (:func:`_extended`)."""
    if read is None and tail.n_docs <= store.stored_chunk_rows:
        # at most one stored chunk of rows, what an ingest part holds on the driver: read
        # here, not by tasks on workers that may only now be starting
        X, Y = (a.compute(scheduler="threads") for a in (tail.X, tail.Y))
        kwargs = {**kwargs, "client": None}
    elif read is None:
        X, Y = tail.X, tail.Y
    else:  # the view's rows in memory: the appended ones are its last
        X, Y = (a[a.shape[0] - tail.n_docs:] for a in read)
    return compute_stats(X, Y, dense_xty=False, **kwargs)


def load_or_compute_stats(
    source: Any,
    Y: Any = None,
    *,
    need_xtx: bool = False,
    max_dense_features: int = 20_000,
    client: Any = None,
    block_fn: BlockFn | None = None,
    route: Any = None,
    label_fn: LabelFn | None = None,
    labels: Any = None,
    need_xtwx: bool = False,
    split: str | Sequence[str] | None = None,
    row_mask: Any = None,
    subset: Any = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    read: tuple[Any, Any] | None = None,
    compute: Callable[[], SufficientStats] | None = None,
) -> SufficientStats:
    """Statistics from the cache when saved with the same parameters, else one pass (then saved).

    Parameters
    ----------
    source : str, PathLike, Store, dask array, scipy.sparse matrix or ndarray
        A store path or an opened :class:`dmlfe.store.Store` (or a view of one: its
        ``selection`` is part of the key). X and Y are read from the store and the
        cache goes to ``<store>.stats/``, keyed by the view's ``content_fingerprint``
        (an append that adds none of its documents keeps the key; one that adds some
        extends the entry of the earlier version by the appended documents). Or X
        itself: then Y is required and the cache is used only when ``cache_dir`` is
        given.
    Y : array-like, optional
        Labels when ``source`` is X.
    need_xtx, max_dense_features, client, block_fn, label_fn, need_xtwx, row_mask, progress
        As in :func:`dmlfe.stats.pass_.compute_stats`.
    route : str or dict, optional
        Description of ``block_fn`` (feature map and its parameters); required
        with ``block_fn`` when caching.
    labels : str or dict, optional
        Description of ``label_fn`` (e.g. MLDA's label-correlation matrix);
        required with ``label_fn`` when caching.
    split : str or sequence of str, optional
        Store path only: keep documents whose split is one of these.
    subset : str or dict, optional
        Name of the ``row_mask`` subset for the cache key; by default the mask's
        identity (content hash, or dask name).
    cache : bool
        Use and fill the cache.
    cache_dir : path, optional
        Cache folder; default ``<store>.stats`` for a store path.
    read : (X, Y), optional
        A store's X and Y (the same rows) already read into memory: on a cache miss
        they are reduced instead of the store being read again; the key is the store's.
    compute : callable, optional
        On a cache miss, the statistics come from ``compute()`` instead of a pass over X
        (the large-n route's tiles already hold X: :func:`dmlfe.stats.tiled.tiled_stats`);
        the key is the same.

    Returns
    -------
    SufficientStats
    """
    if subset is None and row_mask is not None and cache:
        subset = array_identity(row_mask)
    route_desc = _describe(block_fn, route, cache, "block_fn", "route")
    labels_desc = _describe(label_fn, labels, cache, "label_fn", "labels")
    if isinstance(source, str | os.PathLike):
        source = open_store(source)
        if split is not None:
            source = source.subset(split)
    elif split is not None:
        raise ValueError("split= applies to a store path; subset the Store itself instead")
    if isinstance(source, Store):
        X, Y = (source.X, source.Y) if read is None else read
        identity = source.content_fingerprint if cache else None
        split, view_subset = _view_selection(source)
        subset = view_subset if subset is None else subset
        if cache and cache_dir is None:
            cache_dir = stats_dir_for(source.path)
    else:
        if Y is None:
            raise ValueError("Y (labels) is required when X is given instead of a store path")
        X = source
        identity = None
        if cache and cache_dir is not None:
            identity = {"x": array_identity(X), "y": array_identity(Y)}

    kwargs = dict(
        need_xtx=need_xtx,
        max_dense_features=max_dense_features,
        client=client,
        block_fn=block_fn,
        label_fn=label_fn,
        need_xtwx=need_xtwx,
        row_mask=row_mask,
        progress=progress,
    )
    def fresh() -> SufficientStats:
        return compute() if compute is not None else compute_stats(X, Y, **kwargs)

    if not cache or cache_dir is None:
        return fresh()

    params = {
        "cache_format": CACHE_FORMAT,
        "dmlfe_version": __version__,
        "data": identity,
        "split": _split_list(split),
        "subset": subset,
        "route": route_desc,
        "labels": labels_desc,
    }
    key = stats_key(params)
    for suffix in (".npz", ".json"):  # a killed save of this entry left these behind
        try:
            remove_stale(Path(cache_dir) / f"{key}{suffix}")
        except OSError:  # an unreadable folder: the save below says so
            pass
    found = load_stats(cache_dir, params, need_xtx=need_xtx, need_xtwx=need_xtwx)
    if found is not None and isinstance(source, Store):
        # a hit reads no chunk: a chunk deleted or cut short since the statistics were
        # saved would go unnoticed (and a later read of the store would fail or differ)
        source.check_chunk_files()
    if found is not None:
        log.info("reusing statistics %s from %s", key, cache_dir)
        found.from_cache = True
        found.rows_read = 0
        return found
    stats = saved = None
    if isinstance(source, Store) and row_mask is None and subset is None:
        extended = _extended(source, params, Path(cache_dir), read, kwargs)
        if extended is not None:  # the old rows' part came from the cache
            source.check_chunk_files()
            stats, saved = extended
    if stats is None:
        stats = fresh()
        stats.rows_read = stats.n
    try:
        # a delta record (the appended rows' part) is saved already
        path = saved if saved is not None else save_stats(stats, cache_dir, params)
        log.info("saved statistics to %s", path)
    except OSError as exc:
        warnings.warn(
            f"could not save statistics to {cache_dir} ({exc}); they will be recomputed next "
            "time. Pass cache_dir= to a writable folder to keep them",
            RuntimeWarning,
            stacklevel=2,
        )
    return stats


# --------------------------------------------------------------------------- #
# The dual route's Gram
# --------------------------------------------------------------------------- #
#: The largest document Gram (n x n float64, 8 n^2 bytes) saved beside a store: 2 GiB,
#: a Gram of up to 16,384 documents, which covers the dual route's default
#: ``max_dual_samples``. A larger Gram is computed at each fit and not saved.
MAX_GRAM_CACHE_BYTES = 2**31
#: Layout of a saved Gram, part of its key: 2, a record listing row strips, each its own
#: file with its CRC-32 (1 was one file per version with a sha256 digest).
GRAM_FORMAT = 2
#: Bytes of a Gram file read at a time: its checksum reads them while they are in cache.
GRAM_READ_BYTES = 1 << 23


def _split_list(split: str | Sequence[str] | None) -> list[str] | None:
    """A split selection as it is keyed: None or a list of names."""
    return None if split is None else ([split] if isinstance(split, str) else list(split))


def _view_selection(store: Store) -> tuple[Any, dict[str, Any] | None]:
    """The split and the row subset (``take``/``since``) of a store view, as keyed."""
    selection = store.selection or {}
    subset = {k: selection[k] for k in ("rows", "since") if k in selection} or None
    return selection.get("split"), subset


def earlier_version(store: Store, params: dict[str, Any], load: Callable[[dict[str, Any]], Any],
                    what: str, covers: Callable[[Any], int] | None = None
                    ) -> tuple[dict[str, Any], Any, Store | None] | None:
    """The newest version of ``store`` before the one ``params["data"]`` names (the view's
    content fingerprint) whose entry ``load(params)`` finds, with ``params`` naming that
    version's fingerprint instead: (its history entry, the entry, the view's rows
    appended since); None when no earlier version has one (the log says so when there is
    one).

    ``covers(entry)``, the rows an entry holds (documents of statistics, rows of a Gram
    or graph): an entry that does not hold exactly the view's rows before the append is
    not used, and a RuntimeWarning says so. Without it the rows appended since are not
    looked up (None).
    """
    entries = store.history()
    prints = [e["fingerprint"] for e in entries]
    current = prints.index(params["data"]) if params["data"] in prints else len(prints) - 1
    for entry in reversed(entries[:current]):
        found = load({**params, "data": entry["fingerprint"]})
        if found is None:
            continue
        if covers is None:
            return entry, found, None
        stop = int(entry["rows"][1])
        tail = store.since(stop)
        if covers(found) + tail.n_docs == store.n_docs:
            return entry, found, tail
        warnings.warn(
            f"{what} cached for {store.path} as of row {stop} covers {covers(found)} "
            f"documents but the view holds {store.n_docs - tail.n_docs} before that row; "
            "computing it again from all rows", RuntimeWarning, stacklevel=3)
        return None
    if current > 0:
        log.info("%s of %s computed from all its rows: none cached for an earlier version "
                 "with the same parameters", what, store.path)
    return None


def gram_params(store: Store) -> dict[str, Any]:
    """The parameters that name the Gram of a store view's rows in the cache: the
    view's :attr:`~dmlfe.store.Store.content_fingerprint` and its split and row subset
    (the Gram depends on X only, not on the labels nor on the method)."""
    split, subset = _view_selection(store)
    return {"cache_format": CACHE_FORMAT, "dmlfe_version": __version__, "kind": "gram",
            "gram_format": GRAM_FORMAT, "data": store.content_fingerprint,
            "split": _split_list(split), "subset": subset}


def _matrix_paths(directory: Path, params: dict[str, Any], kind: str) -> tuple[Path, Path]:
    key = stats_key(params)
    return directory / f"{key}.{kind}.npy", directory / f"{key}.{kind}.json"


def _gram_paths(directory: Path, params: dict[str, Any]) -> tuple[Path, Path]:
    return _matrix_paths(directory, params, "gram")


def _save_matrix(M: np.ndarray, directory: str | os.PathLike[str], params: dict[str, Any],
                 kind: str) -> Path:
    """Write the 2-D float64 ``M`` as ``<key>.<kind>.npy`` + ``<key>.<kind>.json``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    npy_path, json_path = _matrix_paths(directory, params, kind)
    M = np.ascontiguousarray(M, dtype=np.float64)
    meta = {"key": stats_key(params), "params": _canonical(params), "n": int(M.shape[0]),
            "shape": list(M.shape), "sha256": arrays_digest({kind: M}),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "dmlfe_version": __version__}
    text = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    json_path.unlink(missing_ok=True)  # as in save_stats: no old record beside new values
    write_atomically(npy_path, lambda f: np.save(f, M, allow_pickle=False))
    write_atomically(json_path, lambda f: f.write(text))
    return npy_path


def _load_matrix(directory: str | os.PathLike[str], params: dict[str, Any], kind: str,
                 what: str) -> np.ndarray | None:
    """The matrix :func:`_save_matrix` wrote for ``params``, as a read-only memory map;
    None when absent or unusable (then a RuntimeWarning names the file)."""
    npy_path, json_path = _matrix_paths(Path(directory), params, kind)
    if not json_path.is_file() or not npy_path.is_file():
        return None
    try:
        try:
            meta = json.loads(json_path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise _BadEntry(f"unreadable ({exc})") from None
        if not isinstance(meta, dict) or meta.get("params") != _canonical(params) or \
                not isinstance(meta.get("n"), int) or not isinstance(meta.get("sha256"), str):
            raise _BadEntry("its record lacks 'n' or 'sha256', or names other parameters")
        try:
            M = np.load(npy_path, mmap_mode="r", allow_pickle=False)
        except ValueError as exc:  # not an .npy, truncated
            raise _BadEntry(f"unreadable ({exc})") from None
        n = meta["n"]
        # Gram records written before "shape" was recorded name n only
        shape = tuple(meta.get("shape") or (n, n))
        if M.shape != shape or M.dtype != np.float64:
            raise _BadEntry(f"it holds a {M.dtype} array of shape {M.shape}, its record a "
                            f"float64 {' x '.join(map(str, shape))} {what}")
        if arrays_digest({kind: M}) != meta["sha256"]:
            raise _BadEntry("its values do not match the digest in its record (the files "
                            "of two different writes, or a damaged file)")
    except FileNotFoundError:
        return None  # being replaced right now: a miss
    except (_BadEntry, OSError) as exc:
        warnings.warn(f"ignoring unreadable {what} cache entry {npy_path}: {exc}; recomputing "
                      "(the entry is replaced)", RuntimeWarning, stacklevel=4)
        return None
    return M


def _crc32(a: np.ndarray, value: int = 0) -> int:
    """CRC-32 of a C-contiguous array's bytes, continuing from ``value``."""
    return zlib.crc32(memoryview(a).cast("B"), value) & 0xFFFFFFFF


def _sum64(a: np.ndarray) -> list[int]:
    """A 64-bit checksum of a 2-D float64 array's words, as fast as reading them: the
    wrap-around sum of all of them and of each row's sum times its row number (a
    changed word always changes the first; rows moved or swapped change the second
    unless their sums agree; words swapped within a row change neither, which only the
    CRC-32 finds). The Gram strips' quick check, beside their CRC-32
    (:func:`gram_strips`)."""
    rows = a.reshape(a.shape[0], -1).view(np.uint64).sum(axis=1, dtype=np.uint64)
    weights = np.arange(1, rows.size + 1, dtype=np.uint64)
    return [int(rows.sum(dtype=np.uint64)), int((rows * weights).sum(dtype=np.uint64))]


def _write_gram(rows: np.ndarray, directory: str | os.PathLike[str], params: dict[str, Any],
                before: list[dict[str, Any]], start: int) -> Path:
    """Save the Gram of N = ``start`` + len(rows) rows as the strip ``rows`` (its rows
    [start, N), each with all N columns; the whole Gram when ``start`` is 0) and a record
    listing ``before`` (the strips of rows [0, start), already saved) and it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    npy_path, json_path = _gram_paths(directory, params)
    n = start + int(rows.shape[0])
    parts = list(before)
    if n > start:  # a version that added no row of the view lists the earlier strips only
        rows = np.ascontiguousarray(rows, dtype=np.float64)
        parts.append({"file": npy_path.name, "rows": [start, n], "crc32": _crc32(rows),
                      "sum64": _sum64(rows)})
    meta = {"key": stats_key(params), "params": _canonical(params), "n": n, "parts": parts,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "dmlfe_version": __version__}
    text = json.dumps(meta, indent=2, sort_keys=True).encode("utf-8")
    json_path.unlink(missing_ok=True)  # as in save_stats: no old record beside new values
    if n > start:
        write_atomically(npy_path, lambda f: np.save(f, rows, allow_pickle=False))
    write_atomically(json_path, lambda f: f.write(text))
    return npy_path


def _gram_record(directory: Path, params: dict[str, Any]) -> dict[str, Any] | None:
    """The Gram record for ``params``, its form checked (not the values); None when
    absent; :class:`_BadEntry` when it cannot be used."""
    json_path = _gram_paths(directory, params)[1]
    if not json_path.is_file():
        return None
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise _BadEntry(f"unreadable ({exc})") from None
    if not isinstance(meta, dict) or meta.get("params") != _canonical(params):
        raise _BadEntry("its record is not a JSON object or names other parameters")
    parts, n = meta.get("parts"), meta.get("n")
    stop = 0
    for part in parts if isinstance(parts, list) and parts else [None]:
        ok = isinstance(part, dict) and isinstance(part.get("file"), str) and \
            Path(part["file"]).name == part["file"] and isinstance(part.get("crc32"), int) \
            and isinstance(part.get("rows"), list) and len(part["rows"]) == 2 and \
            all(isinstance(v, int) for v in part["rows"]) and part["rows"][0] == stop < \
            part["rows"][1]
        if not ok:
            raise _BadEntry("its record lacks 'parts' (files of consecutive row strips, "
                            "each with its 'crc32') or names other files")
        stop = part["rows"][1]
    if n != stop:
        raise _BadEntry(f"its record names n={n!r} but its strips end at row {stop}")
    return meta


def _read_gram(directory: Path, parts: list[dict[str, Any]], out: np.ndarray) -> None:
    """Read the strips ``parts`` of a record into ``out``'s leading n x n block (n: the
    last strip's end), each checked against its record; :class:`_BadEntry` otherwise.

    Read a block of rows at a time straight into ``out`` (through a small buffer when
    a strip's rows are shorter than ``out``'s), checksummed as it comes; each strip's
    columns before its first row are its transpose's rows, mirrored into place.
    """
    buf = None
    for part in parts:
        start, stop = part["rows"]
        path = directory / part["file"]
        with open(path, "rb") as f:
            shape, fortran, dtype = _npy_header(f, path.name)
            if shape != (stop - start, stop) or fortran or dtype != np.dtype("<f8"):
                raise _BadEntry(f"{path.name} holds a {dtype} array of shape {shape}, its "
                                f"record rows [{start}, {stop}) of a float64 Gram")
            step = max(1, GRAM_READ_BYTES // (8 * stop))
            crc = 0
            direct = out.shape[1] == stop  # out's rows are the strip's: read in place
            for r in range(start, stop, step):
                c = min(step, stop - r)
                if direct:
                    into = out[r:r + c]
                else:
                    if buf is None or buf.shape[1] != stop:
                        buf = np.empty((step, stop))
                    into = buf[:c]
                if f.readinto(memoryview(into).cast("B")) != into.nbytes:
                    raise _BadEntry(f"{path.name} is shorter than its record says "
                                    "(truncated)")
                crc = _crc32(into, crc)
                if not direct:
                    out[r:r + c, :stop] = into
            if f.read(1):
                raise _BadEntry(f"{path.name} is longer than its record says")
        if crc != part["crc32"]:
            raise _BadEntry(f"the values of {path.name} do not match the CRC-32 in its "
                            "record (the files of two different writes, or a damaged file)")
        if start:
            out[:start, start:stop] = out[start:stop, :start].T


def _warn_bad_gram(path: Path, exc: Exception) -> None:
    warnings.warn(f"ignoring unreadable Gram cache entry {path}: {exc}; recomputing (the "
                  "entry is replaced)", RuntimeWarning, stacklevel=4)


def _checked_record(directory: Path, params: dict[str, Any]) -> dict[str, Any] | None:
    """:func:`_gram_record`, or None with a RuntimeWarning when it cannot be used."""
    try:
        return _gram_record(directory, params)
    except FileNotFoundError:
        return None  # being replaced right now: a miss
    except (_BadEntry, OSError) as exc:
        _warn_bad_gram(_gram_paths(directory, params)[1], exc)
        return None


def _read_gram_or_none(directory: Path, meta: dict[str, Any], out: np.ndarray,
                       params: dict[str, Any]) -> bool:
    """:func:`_read_gram` of ``meta``'s strips into ``out``; False, with a RuntimeWarning
    naming the entry, when they cannot be used."""
    try:
        _read_gram(directory, meta["parts"], out)
    except FileNotFoundError as exc:  # a strip removed (or being replaced)
        _warn_bad_gram(_gram_paths(directory, params)[0], _BadEntry(f"{exc.filename} is "
                                                                    "missing"))
        return False
    except (_BadEntry, OSError) as exc:
        _warn_bad_gram(_gram_paths(directory, params)[0], exc)
        return False
    return True


def save_gram(G: np.ndarray, directory: str | os.PathLike[str], params: dict[str, Any]) -> Path:
    """Write the Gram ``G`` as ``<key>.gram.npy`` (float64, C order) + ``<key>.gram.json``
    under ``directory``; return the ``.npy``.

    Written as :func:`save_stats` writes statistics: each file to a temporary sibling
    renamed into place, the record last, with the CRC-32 of the values. The Gram of a
    version after an append is saved as the strip of its new rows only, its record
    listing the earlier strips (:func:`load_or_compute_gram`).
    """
    return _write_gram(G, directory, params, [], 0)


def load_gram(directory: str | os.PathLike[str], params: dict[str, Any]) -> np.ndarray | None:
    """The saved Gram for ``params``, a new array read from the strips its record lists;
    None when absent or unusable (an unreadable record or file, another shape or dtype
    than the record's, values that do not match its CRC-32, a missing strip: ignored
    with a RuntimeWarning naming the file)."""
    directory = Path(directory)
    meta = _checked_record(directory, params)
    if meta is None:
        return None
    G = np.empty((meta["n"], meta["n"]))
    return G if _read_gram_or_none(directory, meta, G, params) else None


def load_or_compute_gram(store: Store, X: Any, *, client: Any = None, progress: bool = False,
                         cache_dir: str | os.PathLike[str] | None = None
                         ) -> tuple[np.ndarray, int]:
    """The dual route's Gram G = X X^T of a store view's rows, from the cache beside the
    store, extended from an earlier version's, or computed; and the passes over X made.

    After an append the earlier version's strips are read into the new Gram's array
    itself, the appended rows' products fill the rest, and only their strip (m x N for
    m new rows of N) is written, the record listing it after the earlier strips: the
    earlier files are neither copied nor written again.

    Parameters
    ----------
    store : Store
        The view whose rows ``X`` holds, in order (its split and row subset are part of
        the key, with its content fingerprint).
    X : dask array of CSR row blocks, scipy.sparse matrix or ndarray
        The view's rows (read to the driver or not).
    client, progress
        As in :func:`dmlfe.stats.gram.gram_matrix`.
    cache_dir : path, optional
        Default ``<store>.stats``, beside the statistics.

    Returns
    -------
    G : ndarray (n, n)
        A new array of the caller's (the solve may overwrite it).
    passes : int
        0 when G was saved for this version; 1 otherwise: a Gram pass, or, when the
        Gram of an earlier version of the store (before an append) is saved, the pass
        that multiplies the appended rows of the view with all its rows
        (:func:`dmlfe.stats.gram.extend_gram_into`: the old x old block is not computed
        again). A Gram of more than :data:`MAX_GRAM_CACHE_BYTES` is neither read nor
        saved.
    """
    n = int(X.shape[0])
    if 8 * n * n > MAX_GRAM_CACHE_BYTES:
        log.info("the %d x %d Gram of %s is above MAX_GRAM_CACHE_BYTES: computed, not saved",
                 n, n, store.path)
        return gram_matrix(X, client=client, progress=progress), 1
    directory = Path(stats_dir_for(store.path) if cache_dir is None else cache_dir)
    params = gram_params(store)
    for path in _gram_paths(directory, params):  # a killed save of this entry left these
        try:
            remove_stale(path)
        except OSError:
            pass
    found = load_gram(directory, params)
    if found is not None:
        log.info("reusing the Gram %s from %s", stats_key(params), directory)
        return found, 0
    G, before = None, []
    earlier = earlier_version(store, params, lambda p: _checked_record(directory, p),
                              "the Gram", covers=lambda meta: meta["n"])
    if earlier is not None:
        entry, meta, tail = earlier
        old = int(meta["n"])
        G = np.empty((n, n))
        if _read_gram_or_none(directory, meta, G, {**params, "data": entry["fingerprint"]}):
            extend_gram_into(G, old, X, client=client, progress=progress)
            before = meta["parts"]
            log.info("Gram of %s: %d cached rows (as of row %d) extended by %d", store.path,
                     old, int(entry["rows"][1]), tail.n_docs)
        else:
            G = None
    if G is None:
        G = gram_matrix(X, client=client, progress=progress)
    start = before[-1]["rows"][1] if before else 0
    try:
        log.info("saved the Gram to %s", _write_gram(G[start:], directory, params, before,
                                                    start))
    except OSError as exc:
        warnings.warn(f"could not save the Gram to {directory} ({exc}); it will be computed "
                      "again next time", RuntimeWarning, stacklevel=2)
    return G, 1


def _open_strips(directory: Path, parts: list[dict[str, Any]]) -> list[np.ndarray] | None:
    """The strips ``parts`` of a Gram record as read-only memory maps, each checked
    against its record (its 64-bit sum where the record has one, else its CRC-32);
    None when one is missing, of another shape or damaged."""
    strips = []
    for part in parts:
        start, stop = part["rows"]
        try:
            strip = np.load(directory / part["file"], mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError):  # missing, not an .npy, truncated
            return None
        if strip.shape != (stop - start, stop) or strip.dtype != np.dtype("<f8") or \
                not strip.flags.c_contiguous:
            return None
        if "sum64" in part:
            if _sum64(strip) != part["sum64"]:
                return None
        elif _crc32(strip) != part["crc32"]:
            return None
        strips.append(strip)
    return strips


def gram_strips(store: Store, X: Any, *, client: Any = None, progress: bool = False,
                cache_dir: str | os.PathLike[str] | None = None
                ) -> tuple[GramStrips, int] | None:
    """The dual route's Gram of a store view's rows as :class:`~dmlfe.stats.gram.GramStrips`
    over the strips saved beside the store -- this version's, or an earlier version's
    extended by the appended rows' strip (computed, then saved as
    :func:`load_or_compute_gram` saves it) -- and the passes over X made (0 or 1);
    None when neither is saved or a strip is missing or damaged (then
    :func:`load_or_compute_gram` warns, computes and replaces).

    The strips are memory-mapped, not read into a new n x n array: a warm row-space
    solve (:func:`dmlfe.solvers.dual.solve_dual`) applies them from the page cache.
    Each is checked as it is opened against its record's 64-bit sum (:func:`_sum64`,
    computed as each strip was written; a record without one: its CRC-32), so a changed
    value is still found at every fit.
    """
    n = int(X.shape[0])
    if 8 * n * n > MAX_GRAM_CACHE_BYTES:
        return None
    directory = Path(stats_dir_for(store.path) if cache_dir is None else cache_dir)
    params = gram_params(store)
    try:
        meta = _gram_record(directory, params)
    except (_BadEntry, OSError):
        return None
    if meta is not None:
        strips = _open_strips(directory, meta["parts"])
        return None if strips is None else (GramStrips(strips), 0)
    earlier = earlier_version(store, params, lambda p: _checked_record(directory, p),
                              "the Gram", covers=lambda meta: meta["n"])
    if earlier is None:
        return None
    entry, meta, tail = earlier
    strips = _open_strips(directory, meta["parts"])
    if strips is None:
        return None
    old = int(meta["n"])
    strip = np.empty((0, n)) if old == n else gram_strip(old, X, client=client,
                                                         progress=progress)
    log.info("Gram of %s: %d cached rows (as of row %d) extended by %d, as strips",
             store.path, old, int(entry["rows"][1]), tail.n_docs)
    for path in _gram_paths(directory, params):  # a killed save of this entry left these
        try:
            remove_stale(path)
        except OSError:
            pass
    try:
        log.info("saved the Gram to %s", _write_gram(strip, directory, params,
                                                    meta["parts"], old))
    except OSError as exc:
        warnings.warn(f"could not save the Gram to {directory} ({exc}); it will be computed "
                      "again next time", RuntimeWarning, stacklevel=2)
    return GramStrips([*strips, strip] if strip.shape[0] else strips), int(old < n)


# --------------------------------------------------------------------------- #
# The matrix-free route's warm start
# --------------------------------------------------------------------------- #
#: The largest start block (D x (k + oversampling) float64) saved beside a store after a
#: matrix-free fit: 1 GiB, e.g. 2^20 features and 128 columns. A larger one is not saved,
#: and the next fit on the grown store starts from random vectors.
MAX_START_CACHE_BYTES = 2**30


def start_params(store: Store, method: dict[str, Any]) -> dict[str, Any]:
    """The parameters that name a matrix-free fit's start block in the cache: those of
    the statistics' key (the view's content fingerprint, split and row subset) and
    ``method``, what defines the operator (the method, its parameters, the route)."""
    split, subset = _view_selection(store)
    return {"cache_format": CACHE_FORMAT, "dmlfe_version": __version__, "kind": "start",
            "data": store.content_fingerprint, "split": _split_list(split),
            "subset": subset, "method": method}


def _image_params(params: dict[str, Any], block: np.ndarray | str) -> dict[str, Any]:
    """The key of a start block's image: the block's own key and its digest (the
    ``sha256`` of the block's record, or computed from ``block``), so that an image is
    only ever found beside the block it was computed for."""
    if not isinstance(block, str):
        block = arrays_digest({"start": np.ascontiguousarray(block, dtype=np.float64)})
    return {**params, "kind": "startimage", "block": block}


def save_start(store: Store, method: dict[str, Any], block: np.ndarray,
               cache_dir: str | os.PathLike[str] | None = None,
               image: np.ndarray | None = None) -> Path | None:
    """Save the Ritz vectors a matrix-free fit on ``store`` ended with (D x w), or those
    of the dual route's row-space solve (n x w; ``method`` then names the route "dual"),
    the warm start of a later fit with the same ``method`` on a grown version of the
    store (:func:`earlier_start`); None when it is above :data:`MAX_START_CACHE_BYTES` or
    cannot be written (a RuntimeWarning says so).

    ``image``: X^T X block over the view's rows (D x w, the scatter part of the
    operator's image: :attr:`dmlfe.solvers.result.EigenResult.ritz_image`), saved beside
    it when both fit in :data:`MAX_START_CACHE_BYTES`: a later fit adds the appended
    rows' part to it and starts without a pass over X (:func:`saved_start`).
    """
    if 8 * block.size > MAX_START_CACHE_BYTES:
        log.info("the %d x %d start block of %s is above MAX_START_CACHE_BYTES: not saved",
                 *block.shape, store.path)
        return None
    directory = Path(stats_dir_for(store.path) if cache_dir is None else cache_dir)
    params = start_params(store, method)
    image_params = _image_params(params, block)
    stale = [*_matrix_paths(directory, params, "start"),  # a killed save left these
             *_matrix_paths(directory, image_params, "startimage")]
    try:  # the image of the block this one replaces: of no use without it
        earlier = json.loads(stale[1].read_text(encoding="utf-8"))["sha256"]
        for path in _matrix_paths(directory, _image_params(params, str(earlier)),
                                  "startimage"):
            path.unlink(missing_ok=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for path in stale:
        try:
            remove_stale(path)
        except OSError:
            pass
    try:
        saved = _save_matrix(block, directory, params, "start")
        if image is not None and 8 * (block.size + image.size) <= MAX_START_CACHE_BYTES:
            _save_matrix(image, directory, image_params, "startimage")
        return saved
    except OSError as exc:
        warnings.warn(f"could not save the matrix-free start block to {directory} ({exc}); "
                      "a refit after an append will start from random vectors",
                      RuntimeWarning, stacklevel=2)
        return None


@dataclass
class SavedStart:
    """A matrix-free fit's start block saved for an earlier version of a store
    (:func:`saved_start`).

    Attributes
    ----------
    block : ndarray (D, w)
        The Ritz vectors that fit ended with.
    note : str
        Which store version saved them, and its rows.
    image : ndarray (D, w) or None
        X^T X block over that version's rows of the view, when saved with it.
    added : Store or None
        With ``image``: the view's rows appended since (X^T X block of all rows is
        ``image`` plus their part).
    """

    block: np.ndarray
    note: str
    image: np.ndarray | None = None
    added: Store | None = None


def saved_start(store: Store, method: dict[str, Any],
                cache_dir: str | os.PathLike[str] | None = None) -> SavedStart | None:
    """The start block saved by a matrix-free fit with the same ``method`` on an earlier
    version of ``store`` (before its latest appends), with its image and the rows
    appended since when the image was saved too; None when there is no block.

    Only earlier versions: a fit on the version it was saved for starts, as a first fit
    does, from random vectors (a refit of the same data gives the same result).
    """
    directory = Path(stats_dir_for(store.path) if cache_dir is None else cache_dir)
    params = start_params(store, method)
    earlier = earlier_version(store, params,
                              lambda p: _load_matrix(directory, p, "start", "start block"),
                              "the matrix-free start block")
    if earlier is None:
        return None
    entry, block, _ = earlier
    block = np.array(block)
    stop = int(entry["rows"][1])
    image = _load_matrix(directory, _image_params({**params, "data": entry["fingerprint"]},
                                                  block), "startimage", "start block image")
    note = f"components of store version {entry['fingerprint']['uuid']} (rows [0, {stop}))"
    if image is None:
        return SavedStart(block, note)
    return SavedStart(block, note, np.array(image), store.since(stop))


def earlier_start(store: Store, method: dict[str, Any],
                  cache_dir: str | os.PathLike[str] | None = None
                  ) -> tuple[np.ndarray, str] | None:
    """(block, note) of :func:`saved_start`, without the image."""
    saved = saved_start(store, method, cache_dir)
    return None if saved is None else (saved.block, saved.note)
