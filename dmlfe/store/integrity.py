"""A store's integrity: per-chunk checksums recorded when it is written, checked when read.

zarr reads a chunk file that is not there as the array's fill value (zeros), and does
not know what shape an array had when it was written: a deleted ``X/indices`` or
``obsm/Y/indices`` chunk, or a shrunken shape in a ``zarr.json``, would be read as valid data
and fitted on. So every store written by :class:`~dmlfe.store.StoreWriter` (ingest and
import) carries an *integrity record* in its root ``zarr.json``, under
``attributes.dmlfe.integrity``:

* for every array: its shape, data type and chunk shape, as written;
* for every chunk of it (keyed by the chunk's file name): ``[bytes, crc32]`` of the
  chunk file as stored (compressed), or ``null`` for a chunk zarr did not write
  because all its values are the fill value.

It is in the root zarr.json, written last with the ``complete`` marker, rather than in a
file of its own: zarr (and so ``anndata.read_zarr``) warns about every file in a group
folder that is not part of the hierarchy. It takes about 30 bytes per chunk.

Why CRC-32 of the stored bytes. The reader checks each chunk with the bytes zarr has
just read from the file (:class:`CheckedStore` sits between zarr and the file system):
nothing is read a second time, and the compressed bytes are fewer than the decoded
values. CRC-32 (``zlib.crc32``) is several times faster than zstd decompresses the
same bytes and catches what damages a file by accident: truncation (the size already
does), overwritten or flipped bytes, another file copied in its place. It is no defence
against deliberate edits (anyone can recompute it); a cryptographic hash would cost
more for no gain against accidents. zstd's own frame checksum was not used: it covers
the decoded values only after decoding them, says nothing about a chunk that is
missing, and would change the codec of every array.

What is checked where:

* opening a store (:func:`dmlfe.open_store`, and once per process on each dask worker)
  reads every array's ``zarr.json`` and compares shape, data type and chunk shape with
  the record and with the store's own metadata (``n_docs``, ``nnz``, ...); a
  ``zarr.json`` that zarr cannot parse is reported by name;
* every chunk read is checked against the record: missing, of another size, another
  CRC-32 (computed the first time a process reads the chunk; the size on every read),
  or present where none was written: :class:`~dmlfe.errors.StoreError` naming the
  store, the array and the chunk, never fill values;
* :func:`dmlfe.store.verify.verify_store` (``dmlfe verify``) checks every chunk of every
  array and lists each problem.

Stores written before the record existed still open: their arrays' shapes and types
are checked against the store's metadata, a chunk that cannot be decoded is an error,
and a store that disappears while in use is noticed; but a missing chunk cannot be told
from an all-zero one zarr did not write. ``dmlfe verify STORE --record`` checks such a
store as far as it can and adds the record.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import warnings
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.errors import ZarrUserWarning
from zarr.storage import LocalStore, WrapperStore

from dmlfe.errors import DmlfeError, StoreError
from dmlfe.store import layout as F

RECORD_FORMAT = "dmlfe-integrity"
RECORD_VERSION = 1
#: ``[bytes, crc32]`` of a stored chunk file, or None: zarr wrote no file (all fill value).
Entry = list[int] | None
#: Chunks at least this large are checksummed off zarr's event-loop thread, so that
#: dask threads reading different blocks are not serialised on it.
_OFFLOAD_BYTES = 1 << 16


# --------------------------------------------------------------------------- entries
def checksum(data: Any) -> int:
    """CRC-32 of a bytes-like object (the record's checksum)."""
    return zlib.crc32(data) & 0xFFFFFFFF


def chunk_entry(path: Path) -> Entry:
    """``[bytes, crc32]`` of the chunk file at ``path``, None when there is none."""
    try:
        data = Path(path).read_bytes()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return [len(data), checksum(data)]


def array_chunk_keys(arr: zarr.Array) -> list[str]:
    """File names (relative to the array) of every chunk in ``arr``'s grid, C order."""
    grid = arr.cdata_shape
    return [arr.metadata.encode_chunk_key(c) for c in itertools.product(*map(range, grid))]


def describe_array(arr: zarr.Array) -> dict:
    """Shape, data type and chunk shape as zarr reads them from the array's zarr.json."""
    md = arr.metadata.to_dict()
    return {"shape": [int(s) for s in md["shape"]],
            "data_type": F.jsonable(md["data_type"], "data_type"),
            "chunk_shape": [int(s) for s in md["chunk_grid"]["configuration"]["chunk_shape"]]}


def written_chunks(root: str, group: zarr.Group, name: str,
                   chunk_index: int) -> dict[str, dict[str, Entry]]:
    """Entry of row-chunk ``chunk_index`` of array ``name`` (chunked along rows only),
    for the task that has just written that chunk: the file is read back once, on the
    worker that wrote it (from its page cache), so the record costs the driver nothing."""
    arr = group[name]
    key = arr.metadata.encode_chunk_key((chunk_index,) + (0,) * (arr.ndim - 1))
    return {name: {key: chunk_entry(Path(root) / name / key)}}


def merge_entries(parts: Iterable[dict[str, dict[str, Entry]] | None]) -> dict:
    """Union of the ``{array: {key: entry}}`` dicts the fill tasks returned."""
    out: dict[str, dict[str, Entry]] = {}
    for part in parts:
        for name, entries in (part or {}).items():
            out.setdefault(name, {}).update(entries)
    return out


def _arrays(group: zarr.Group) -> list[tuple[str, zarr.Array]]:
    with warnings.catch_warnings():
        # a stray file in a group folder is not an array: nothing to record, no warning
        warnings.simplefilter("ignore", ZarrUserWarning)
        members = list(group.members(max_depth=None))
    return sorted((name, node) for name, node in members if isinstance(node, zarr.Array))


def build_record(root: str | os.PathLike, known: dict | None = None) -> dict:
    """The integrity record of the store at ``root``: every array, every chunk.

    Parameters
    ----------
    root : path-like
        The store (complete but for the record).
    known : dict, optional
        ``{array: {chunk key: entry}}`` already computed (by the tasks that wrote
        those chunks); every other chunk file is read here.

    Returns
    -------
    dict
        JSON-ready; stored as ``attributes.dmlfe.integrity`` of the root zarr.json.
    """
    root = Path(root)
    known = known or {}
    arrays = {}
    for name, arr in _arrays(zarr.open_group(str(root), mode="r")):
        have = known.get(name, {})
        chunks = {key: have[key] if key in have else chunk_entry(root / name / key)
                  for key in array_chunk_keys(arr)}
        arrays[name] = {**describe_array(arr), "chunks": chunks}
    return {"format": RECORD_FORMAT, "version": RECORD_VERSION, "checksum": "crc32",
            "n_arrays": len(arrays), "n_chunks": sum(len(a["chunks"]) for a in arrays.values()),
            "arrays": arrays}


# --------------------------------------------------------------------------- reading
@dataclass
class Record:
    """A loaded integrity record.

    Attributes
    ----------
    arrays : dict
        Array path -> ``{"shape", "data_type", "chunk_shape", "chunks"}``.
    by_key : dict
        Store key (``"X/indices/c/0"``) -> (array path, chunk key, entry).
    """

    arrays: dict
    by_key: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, record: dict) -> Record:
        by_key = {f"{name}/{key}": (name, key, entry)
                  for name, a in record["arrays"].items() for key, entry in a["chunks"].items()}
        return cls(record["arrays"], by_key)

    @property
    def n_chunks(self) -> int:
        return len(self.by_key)


def read_record(root: Path, entry: Any) -> Record:
    """The record of the store at ``root`` (``entry``: its root metadata's
    ``integrity`` value).

    Raises
    ------
    StoreError
        The record is malformed (the root zarr.json was edited) or of a newer version.
    """
    try:
        if entry["format"] != RECORD_FORMAT or entry["checksum"] != "crc32":
            raise ValueError(f"format {entry['format']!r}, checksum {entry['checksum']!r}")
        if entry["version"] > RECORD_VERSION:
            raise StoreError(f"store {root}: its integrity record has version "
                             f"{entry['version']}, newer than this dmlfe reads "
                             f"({RECORD_VERSION}); upgrade dmlfe")
        record = Record.from_dict(entry)
        for a in record.arrays.values():
            a["shape"], a["data_type"], a["chunk_shape"]  # noqa: B018 - present
        for _, _, e in record.by_key.values():
            if e is not None and not (isinstance(e, list) and len(e) == 2):
                raise ValueError(f"chunk entry {e!r}")
        return record
    except StoreError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StoreError(f"store {root}: the integrity record in its zarr.json is malformed "
                         f"({type(exc).__name__}: {exc}; the file was edited?); the store is "
                         "damaged") from None


def _gone(root: Path) -> StoreError:
    return StoreError(f"store {root} was moved or deleted while in use (its zarr.json is "
                      "gone); nothing was written: run the command again on the store's "
                      "current path")


def damaged(root: Path | str, name: str, what: str) -> StoreError:
    """The one-line error for damage to array ``name`` of the store at ``root``."""
    return StoreError(f"store {root}: array {name}: {what}; the store is damaged (dmlfe "
                      f"verify {root} lists all damage; re-ingest it or restore a copy)")


def entry_problem(entry: Entry, size: int | None, crc: int | None) -> str | None:
    """What is wrong with a chunk whose file has ``size`` bytes (None: no file) and
    CRC-32 ``crc`` (None: not computed), against its recorded ``entry``."""
    if entry is None:
        return None if size is None else (f"a {size}-byte file where none was written "
                                           "(the chunk was all fill value)")
    if size is None:
        return f"is missing (its file was deleted?; {entry[0]} bytes were written)"
    if size != entry[0]:
        return f"has {size} bytes where {entry[0]} were written (truncated or replaced?)"
    if crc is not None and crc != entry[1]:
        return "does not match its CRC-32 (its bytes were changed)"
    return None


class CheckedStore(WrapperStore):
    """A read-only zarr store that checks every chunk it hands zarr against a record.

    Parameters
    ----------
    store : zarr.abc.store.Store
        The store to read (a :class:`zarr.storage.LocalStore` of the store's folder).
    root : pathlib.Path
        The store's folder, for messages and to tell a moved store from a damaged one.
    record : Record or None
        The integrity record; None for a store written before records existed (chunks
        are then passed through, except that a store gone while in use is an error).

    Only whole-chunk reads are checksummed (dmlfe's stores are not sharded; a byte
    range is checked for presence only). A chunk's CRC-32 is computed the first time
    this process reads it; later reads of it (the next row block inside the same
    ``X/data`` chunk, the next pass of a solver) compare presence and size only, which
    is free. So a chunk rewritten with other bytes of the same size while a process
    already read it goes unnoticed by that process (``dmlfe verify`` sees it).
    """

    def __init__(self, store: Any, root: Path, record: Record | None) -> None:
        super().__init__(store)
        self._root = Path(root)
        self._record = record
        self._verified: set[str] = set()  # keys whose CRC-32 matched in this process

    def _with_store(self, store: Any) -> CheckedStore:
        return type(self)(store, self._root, self._record)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        buf = await self._store.get(key, prototype, byte_range)
        if self._record is None:
            if buf is None and not key.endswith("zarr.json") \
                    and not (self._root / "zarr.json").exists():
                raise _gone(self._root)  # would otherwise read as zeros
            return buf
        hit = self._record.by_key.get(key)
        if hit is None:  # metadata, or a chunk of an array outside the record
            return buf
        if buf is not None and hit[2] is not None and len(buf) == hit[2][0] \
                and key in self._verified:
            return buf  # its CRC-32 matched on an earlier read here; the size still does
        if buf is not None and byte_range is None and len(buf) >= _OFFLOAD_BYTES:
            await asyncio.to_thread(self._check, hit, buf, byte_range)
        else:
            self._check(hit, buf, byte_range)
        if buf is not None and byte_range is None:
            self._verified.add(key)
        return buf

    def _check(self, hit: tuple, buf: Any, byte_range: Any) -> None:
        name, key, entry = hit
        if buf is None:
            size = crc = None
        elif byte_range is None:
            size, crc = len(buf), checksum(buf.as_numpy_array())
        else:  # part of a file: whether it is there is all that can be compared
            size, crc = (len(buf) if entry is None else entry[0]), None
        problem = entry_problem(entry, size, crc)
        if problem is None:
            return
        if buf is None and not (self._root / "zarr.json").exists():
            raise _gone(self._root)
        raise damaged(self._root, name, f"chunk {key} {problem}")


def stat_problems(root: Path, record: Record) -> list[str]:
    """``array: chunk ...`` for each recorded chunk whose file is missing, of another size,
    or present where none was written: one ``stat`` per chunk, no data read."""
    problems = []
    for key, (name, chunk, entry) in record.by_key.items():
        try:
            size = os.stat(root / key).st_size
        except (FileNotFoundError, NotADirectoryError):
            size = None
        problem = entry_problem(entry, size, None)
        if problem is not None:
            problems.append(f"{name}: chunk {chunk} {problem}")
    return problems


def open_checked_group(root: Path, record: Record | None) -> zarr.Group:
    """The store's root group, read through a :class:`CheckedStore`."""
    store = CheckedStore(LocalStore(str(root), read_only=True), root, record)
    try:
        return zarr.open_group(store=store, mode="r")
    except DmlfeError:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure of the root zarr.json
        if not (root / "zarr.json").exists():
            raise _gone(root) from None
        raise StoreError(f"store {root}: its root zarr.json cannot be read as a zarr group "
                         f"({type(exc).__name__}: {exc}); the store is damaged") from None


# --------------------------------------------------------------------------- expectations
def expected_arrays(meta: dict, present: Iterable[str] = ()) -> dict[str, tuple]:
    """``{array: (shape, data_type or None)}`` that the store's metadata implies.

    ``present`` lists optional arrays found in the store (``uns/idf``); the types of
    string arrays are left to the record (zarr has named them differently).
    """
    n, D, nnz = int(meta["n_docs"]), int(meta["n_features"]), int(meta["nnz"])
    q = len(meta["label_names"])
    out: dict[str, tuple] = {
        "X/data": ((nnz,), "float64"),
        "X/indices": ((nnz,), F.index_dtype(D).name),
        "X/indptr": ((n + 1,), "int64"),
        "obs/_index": ((n,), None),
        "uns/label_names": ((q,), None),
        "var/_index": ((D,), None if meta.get("has_feature_names") else F.index_dtype(D).name),
    }
    if F.sparse_labels(meta):
        label_nnz = int(meta.get("label_nnz", 0))
        out["obsm/Y/data"] = ((label_nnz,), "uint8")
        out["obsm/Y/indices"] = ((label_nnz,), F.index_dtype(q).name)
        out["obsm/Y/indptr"] = ((n + 1,), "int64")
    else:  # format version 1: the dense label matrix
        out["obsm/Y"] = ((n, q), "uint8")
    cats = meta.get("split_categories")
    if cats is not None:
        out["obs/split/codes"] = ((n,), F.codes_dtype(len(cats)).name)
        out["obs/split/categories"] = ((len(cats),), None)
    for col in meta.get("obs_columns") or []:
        out[f"obs/{col}"] = ((n,), None)
    if "uns/idf" in present:
        out["uns/idf"] = ((D,), "float64")
    return out


def array_problems(desc: dict, expected: tuple | None, recorded: dict | None) -> list[str]:
    """How an array as its zarr.json describes it (``desc``) differs from what the
    store's metadata implies (``expected``: shape, data type) and from the record."""
    problems, flagged = [], set()
    if expected is not None:
        shape, dtype = expected
        if tuple(desc["shape"]) != tuple(shape):
            flagged.add("shape")
            problems.append(f"its zarr.json gives shape {tuple(desc['shape'])}, the store's "
                            f"metadata implies {tuple(shape)} (zarr.json edited?)")
        if dtype is not None and desc["data_type"] != dtype:
            flagged.add("data_type")
            problems.append(f"its zarr.json gives data type {desc['data_type']}, the store "
                            f"was written with {dtype} (zarr.json edited?)")
    for key in ("shape", "data_type", "chunk_shape"):
        if recorded is not None and key not in flagged and desc[key] != recorded[key]:
            what = key.replace("_", " ")
            problems.append(f"its zarr.json gives {what} {desc[key]}, it was written with "
                            f"{recorded[key]} (zarr.json edited?)")
    return problems


def open_arrays(root: Path, group: zarr.Group, meta: dict,
                record: Record | None) -> dict[str, zarr.Array]:
    """Every array the store must have, opened and checked against its metadata and the
    record (:class:`~dmlfe.errors.StoreError` for the first difference)."""
    present = ["uns/idf"] if (root / "uns" / "idf" / "zarr.json").exists() else []
    expected = expected_arrays(meta, present)
    names = list(expected) + [a for a in (record.arrays if record else {}) if a not in expected]
    arrays = {}
    for name in names:
        arr = open_array(root, group, name)
        desc = describe_array(arr)
        problems = array_problems(desc, expected.get(name),
                                  record.arrays.get(name) if record else None)
        if problems:
            raise damaged(root, name, problems[0])
        arrays[name] = arr
    return arrays


def open_array(root: Path, group: zarr.Group, name: str) -> zarr.Array:
    """``group[name]``; a missing or unparsable zarr.json is a StoreError naming it."""
    try:
        arr = group[name]
    except DmlfeError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever zarr raises for a bad zarr.json
        if not (root / "zarr.json").exists():
            raise _gone(root) from None
        if not (root / name / "zarr.json").is_file():
            raise damaged(root, name, f"its zarr.json ({root / name / 'zarr.json'}) is "
                          "missing (deleted?)") from None
        raise damaged(root, name, f"its zarr.json cannot be read ({type(exc).__name__}: "
                      f"{exc}; a key missing or edited?)") from None
    if not isinstance(arr, zarr.Array):
        raise damaged(root, name, "is a group where an array was written")
    return arr


def read_values(root: Path, name: str, arr: zarr.Array, selection: Any) -> np.ndarray:
    """``arr[selection]``; a chunk zarr cannot decode is a StoreError naming the array.

    A store with a record reaches this only for damage the checksums cannot see (none
    known); a store without one meets truncated or garbled chunks here.
    """
    try:
        return arr[selection]
    except (DmlfeError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - a codec error is damage, not a dmlfe bug
        if not (root / "zarr.json").exists():
            raise _gone(root) from None
        raise damaged(root, name, f"a chunk cannot be decoded ({type(exc).__name__}: "
                      f"{exc})") from None
