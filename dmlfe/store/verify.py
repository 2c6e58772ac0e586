"""``dmlfe verify``: a whole store checked against its integrity record, or, without
one, decoded and checked for consistency; and the record added to such a store
(:mod:`dmlfe.store.integrity` holds the record and the checked reads).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import zarr

from dmlfe.errors import StoreError
from dmlfe.store import layout as F
from dmlfe.store.integrity import (
    Entry,
    array_chunk_keys,
    array_problems,
    build_record,
    chunk_entry,
    describe_array,
    entry_problem,
    expected_arrays,
    open_array,
    open_checked_group,
    read_record,
    read_values,
)
from dmlfe.store.reader import _read_root_meta


@dataclass
class VerifyReport:
    """What :func:`verify_store` found.

    Attributes
    ----------
    path : pathlib.Path
    recorded : bool
        The store carries an integrity record (checksums were compared).
    n_arrays, n_chunks : int
        Arrays and chunks checked.
    n_unchecked : int
        Chunks without a file in a store without a record: all-zero chunks zarr did not
        write, or deleted ones; nothing tells them apart.
    problems : list of str
        One line per damage, each naming the array (and chunk).
    notes : list of str
        What could not be checked (stores without a record).
    """

    path: Path
    recorded: bool
    n_arrays: int = 0
    n_chunks: int = 0
    n_unchecked: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(path: str | os.PathLike) -> VerifyReport:
    """Check every array and every chunk of a store.

    With a record, each chunk file's size and CRC-32 are compared with it (every file
    is read once) and each array's zarr.json with the shape, type and chunking it was
    written with. The CSR labels of a format-version-2 store are checked with or without
    a record (all ones, label columns in range and increasing within a row, a rising row
    pointer). Without a record, every chunk is decoded and the CSR arrays, labels and
    split codes are checked for consistency (a deleted ``X/indices`` chunk reads as
    column 0 and breaks the strictly increasing indices of a row); a missing chunk is
    a note, since zarr leaves out chunks whose values are all zero.

    Raises
    ------
    StoreError, FileNotFoundError
        When ``path`` is not a complete dmlfe store at all (nothing to verify).
    """
    root = Path(path).absolute()
    meta = _read_root_meta(root)
    entry = meta.get("integrity")
    report = VerifyReport(root, recorded=entry is not None)
    record = None
    if entry is not None:
        try:
            record = read_record(root, entry)
        except StoreError as exc:
            report.problems.append(str(exc).split("; the store is damaged")[0]
                                   .replace(f"store {root}: ", ""))
    group = open_checked_group(root, None)  # chunks are checked here, not by the store
    present = ["uns/idf"] if (root / "uns" / "idf" / "zarr.json").exists() else []
    expected = expected_arrays(meta, present)
    names = list(dict.fromkeys([*expected, *(record.arrays if record else {})]))
    arrays = {}
    for name in names:
        try:
            arr = open_array(root, group, name)
        except StoreError as exc:
            report.problems.append(_short(exc))
            continue
        report.n_arrays += 1
        desc = describe_array(arr)
        rec = record.arrays.get(name) if record else None
        report.problems += [f"{name}: {p}" for p in array_problems(desc, expected.get(name),
                                                                    rec)]
        if rec is not None and desc["shape"] == rec["shape"] \
                and desc["chunk_shape"] == rec["chunk_shape"]:
            report.problems += _check_recorded_chunks(root, name, rec["chunks"])
            report.n_chunks += len(rec["chunks"])
        else:
            arrays[name] = arr
    if record is None or arrays:  # no record, or arrays whose record no longer applies
        report.problems += _check_unrecorded(root, meta, arrays, report)
    if F.sparse_labels(meta) and not any(p.startswith("obsm/Y") for p in report.problems):
        # the labels' values are checked with a record too (they are O(nnz(Y)) to read):
        # the rules of a label matrix, beyond what the writer's checksums cover
        report.problems += _label_problems(root, meta, group)
    report.problems += _group_problems(root, names)
    if record is None and entry is None:
        report.notes.append("no integrity record (a store written before dmlfe recorded "
                            "checksums): a missing chunk cannot be told from an all-zero one "
                            f"and changed bytes go unnoticed; add one with: dmlfe verify "
                            f"{root} --record")
    return report


def _group_problems(root: Path, arrays: Iterable[str]) -> list[str]:
    """Groups of anndata's layout whose zarr.json is missing or is not a group's (dmlfe
    reads arrays by path and does not need them, but ``anndata.read_zarr`` does)."""
    groups = {str(Path(a).parent) for a in arrays} | set(F.EMPTY_GROUPS)
    groups |= {str(Path(g).parent) for g in groups} - {"."}
    problems = []
    for g in sorted(groups - {"."}):
        try:
            doc = json.loads((root / g / "zarr.json").read_text())
            ok = isinstance(doc, dict) and doc.get("node_type") == "group"
        except (OSError, ValueError):
            ok = False
        if not ok:
            problems.append(f"{g}: its group zarr.json ({root / g / 'zarr.json'}) is missing "
                            "or damaged (anndata.read_zarr needs it)")
    return problems


def _short(exc: StoreError) -> str:
    """``array: what`` of a :func:`damaged` message."""
    text = str(exc).split("; the store is damaged")[0]
    return text.split(": array ", 1)[1] if ": array " in text else text


def _check_recorded_chunks(root: Path, name: str, chunks: dict[str, Entry]) -> list[str]:
    problems = []
    for key, entry in chunks.items():
        now = chunk_entry(root / name / key)
        problem = entry_problem(entry, None if now is None else now[0],
                                None if now is None else now[1])
        if problem is not None:
            problems.append(f"{name}: chunk {key} {problem}")
    folder = root / name / "c"
    if folder.is_dir():  # chunk files beyond the recorded grid (an array grown by hand?)
        for f in sorted(p for p in folder.rglob("*") if p.is_file()):
            key = f.relative_to(root / name).as_posix()
            if key not in chunks:
                problems.append(f"{name}: chunk file {key} is not in the record")
    return problems


def _check_unrecorded(root: Path, meta: dict, arrays: dict[str, zarr.Array],
                      report: VerifyReport) -> list[str]:
    """Decode every chunk of ``arrays``, one chunk at a time, and check the invariants
    the writer guarantees: a row pointer rising from 0 to nnz, column indices in [0, D)
    and strictly increasing within a row, 0/1 labels, split codes in range."""
    problems = []
    n, D, nnz = int(meta["n_docs"]), int(meta["n_features"]), int(meta["nnz"])
    cats = meta.get("split_categories")
    order = sorted(arrays, key=lambda a: a != "X/indptr")  # indptr first: indices need it
    indptr: np.ndarray | None = None
    for name in order:
        arr = arrays[name]
        keys = array_chunk_keys(arr)
        report.n_chunks += len(keys)
        missing = [k for k in keys if not (root / name / k).is_file()]
        report.n_unchecked += len(missing)
        if missing:
            more = ", ..." if len(missing) > 3 else ""
            report.notes.append(f"{name}: {len(missing)} of {len(keys)} chunks have no file "
                                f"({', '.join(missing[:3])}{more}): all-zero chunks zarr did "
                                "not write, or deleted ones")
        step = max(int(arr.chunks[0]), 1) if arr.ndim else 1
        parts = []
        last = None  # the previous chunk's last column index
        for s in range(0, arr.shape[0] if arr.ndim else 1, step):
            try:
                block = np.asarray(read_values(root, name, arr,
                                               slice(s, s + step) if arr.ndim else ...))
            except StoreError as exc:
                problems.append(_short(exc))
                break
            if name == "X/indptr":
                parts.append(block)
            elif name == "X/indices" and indptr is not None:
                problem = _indices_problem(block, s, last, indptr, D, name)
                last = int(block[-1]) if block.size else last
                if problem:
                    problems.append(problem)
                    break
            elif name == "obsm/Y" and block.size and block.max() > 1:
                problems.append(f"obsm/Y: holds {int(block.max())} in rows {s}..: labels are "
                                "0/1; a chunk was changed")
                break
            elif name == "obs/split/codes" and cats is not None and block.size \
                    and (block.min() < -1 or block.max() >= len(cats)):
                problems.append(f"obs/split/codes: holds codes outside -1..{len(cats) - 1} in "
                                f"rows {s}..: a chunk was changed")
                break
        if name == "X/indptr" and len(parts) == len(range(0, arr.shape[0], step)):
            ptr = np.concatenate(parts).astype(np.int64) if parts else np.zeros(1, np.int64)
            falls = np.flatnonzero(np.diff(ptr) < 0)
            if (n and ptr[0] != 0) or ptr[-1] != nnz or falls.size:
                at = int(falls[0]) + 1 if falls.size else (0 if ptr[0] != 0 else n)
                problems.append(f"X/indptr: not a row pointer rising from 0 to nnz = {nnz} "
                                f"(position {at} holds {int(ptr[at])}): a chunk reads as "
                                "zeros (deleted?) or was changed")
            else:
                indptr = ptr
    return problems


def _label_problems(root: Path, meta: dict, group: zarr.Group) -> list[str]:
    """The CSR labels (format version 2), one chunk at a time: a row pointer rising from
    0 to ``label_nnz``, label columns in [0, q) and strictly increasing within a row
    (sorted and unique), stored values all 1."""
    n, q = int(meta["n_docs"]), len(meta["label_names"])
    nnz = int(meta.get("label_nnz", 0))
    try:
        arrays = {name: open_array(root, group, name) for name in F.LABEL_ARRAYS}
    except StoreError:
        return []  # reported with the other arrays
    shapes = {name: arr.shape for name, arr in arrays.items()}
    if shapes != {"obsm/Y/data": (nnz,), "obsm/Y/indices": (nnz,), "obsm/Y/indptr": (n + 1,)}:
        return []  # a shape edited: reported with the other arrays

    def chunks(name: str, size: int):
        arr = arrays[name]
        step = max(int(arr.chunks[0]), 1)
        for s in range(0, size, step):
            yield s, np.asarray(read_values(root, name, arr, slice(s, s + step)))

    try:
        ptr = np.concatenate([b for _, b in chunks("obsm/Y/indptr", n + 1)]).astype(np.int64)
    except StoreError as exc:
        return [_short(exc)]
    falls = np.flatnonzero(np.diff(ptr) < 0)
    if ptr[0] != 0 or ptr[-1] != nnz or falls.size:
        at = int(falls[0]) + 1 if falls.size else (0 if ptr[0] != 0 else n)
        return [f"obsm/Y/indptr: not a row pointer rising from 0 to label_nnz = {nnz} "
                f"(position {at} holds {int(ptr[at])}): a chunk reads as zeros (deleted?) "
                "or was changed"]
    problems = []
    try:
        for s, block in chunks("obsm/Y/data", nnz):
            bad = np.flatnonzero(block != 1)
            if bad.size:
                k = s + int(bad[0])
                row = int(np.searchsorted(ptr, k, side="right")) - 1
                problems.append(f"obsm/Y/data: element {k} (document row {row}) holds "
                                f"{int(block[bad[0]])}: stored labels are all 1; a chunk was "
                                "changed")
                break
        last = None
        for s, block in chunks("obsm/Y/indices", nnz):
            problem = _indices_problem(block, s, last, ptr, q, "obsm/Y/indices", "label")
            last = int(block[-1]) if block.size else last
            if problem:
                problems.append(problem)
                break
    except StoreError as exc:
        problems.append(_short(exc))
    return problems


def _indices_problem(block: np.ndarray, start: int, last: int | None, indptr: np.ndarray,
                     D: int, name: str = "X/indices", what: str = "column") -> str | None:
    """Column indices ``start:start + len(block)`` of array ``name``: in [0, D) and
    strictly increasing within each row (the writer sums duplicates and sorts), given
    the last index of the previous chunk."""
    if not block.size:
        return None
    where = f"{name}: elements {start}..{start + block.size - 1}"
    if block.min() < 0 or block.max() >= D:
        k = int(np.flatnonzero((block < 0) | (block >= D))[0])
        return (f"{where} hold {what} indices outside [0, {D}) ({int(block[k])} at element "
                f"{start + k}): a chunk was changed")
    ext = block.astype(np.int64)
    if last is not None:
        ext = np.concatenate([[last], ext])
    first = start - (1 if last is not None else 0)  # global position of ext[0]
    # a row starts at global position p when p is in indptr: there a fall is allowed
    starts = indptr[(indptr > first) & (indptr < first + ext.size)] - first
    allowed = np.zeros(ext.size, dtype=bool)
    allowed[starts] = True
    bad = np.flatnonzero((np.diff(ext) <= 0) & ~allowed[1:])
    if bad.size:
        return (f"{where}: the {what} indices of a row do not increase at element "
                f"{first + int(bad[0]) + 1}: a chunk reads as zeros (deleted?) or was changed")
    return None


def add_record(path: str | os.PathLike) -> VerifyReport:
    """Verify a store without a record and, when nothing is found wrong, record it.

    The record then holds the store as it is now: a chunk deleted before this call is
    recorded as not written. The root zarr.json is replaced atomically; the store's
    uuid (and with it the statistics cache and models' provenance) is unchanged.

    Returns
    -------
    VerifyReport
        Of the check made before recording; ``recorded`` is True when the record was
        written (or was already there).
    """
    report = verify_store(path)
    if report.recorded or not report.ok:
        return report
    root = report.path
    record = build_record(root)
    doc = json.loads((root / "zarr.json").read_text())
    doc["attributes"]["dmlfe"]["integrity"] = record
    tmp = root / f".zarr.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, root / "zarr.json")  # never a half-written root zarr.json
    report.recorded = True
    report.notes = [f"recorded CRC-32 checksums of {record['n_chunks']} chunks in "
                    f"{record['n_arrays']} arrays in {root / 'zarr.json'}"]
    return report
