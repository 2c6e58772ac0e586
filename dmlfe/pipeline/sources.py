"""A pipeline's corpus files as last ingested, and whether they only grew since.

A data set given by ``format``/``source`` is ingested into a store kept in the work
folder (``WORK_DIR/cache/source/KEY/store.zarr``, KEY from the format, the paths and the
options, not from the files' content) with a record of the files as they were read
(``source.json``: each file's path, length, modification time and sha256, and the
store's uuid right after). On the next run the files are compared with the record:

* unchanged (same length and modification time, or else the same digest): the store
  is used as it is;
* grown: every recorded file is unchanged except that the last one may be longer, its
  first ``length`` bytes having the recorded digest, and files may follow it in the
  list: only the new documents are appended to the store (:func:`dmlfe.append`, with
  the store's reader options), so the stages downstream rerun only as the store's new
  fingerprint requires;
* anything else (a file edited, truncated, removed or reordered; a label file changed;
  a growth an append cannot reproduce exactly, or one :func:`dmlfe.append` refuses): the
  corpus is ingested again, and the run says why in one line.

An append must give the store a fresh ingest of the grown files would give, so it is
refused (and the corpus ingested again) where it would not: new text documents in the
split the store's idf and vocabulary are learned from (``options.fit_split``; without
it, from all documents), renamed splits, and a grown file whose new bytes are not whole
records on their own (formats other than plain JSON Lines, records without an id field,
whose ids would be renumbered, or new bytes that do not start a line).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmlfe.pipeline.cache import write_json_atomic
from dmlfe.readers.base import IngestReport
from dmlfe.readers.registry import get_reader

#: The record beside a pipeline's store of a corpus: the files as ingested.
SOURCE_RECORD = "source.json"
#: Formats whose grown file's new bytes, read on their own, are the new documents.
TAIL_FORMATS = ("jsonl",)
#: Leading bytes of the compressed streams the JSON Lines reader detects: appended bytes
#: of such a file are not lines of text.
_COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_BLOCK = 1 << 20
#: Documents per batch when reading the new documents' splits.
_SPLIT_BATCH = 10_000


def file_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A file's path, length and modification time: what a run compares first."""
    p = Path(path)
    if p.is_dir():
        files = [f for f in sorted(p.rglob("*")) if f.is_file()]
        return {"path": str(p), "bytes": sum(f.stat().st_size for f in files),
                "mtime_ns": max((f.stat().st_mtime_ns for f in files), default=0),
                "dir": True}
    st = p.stat()
    return {"path": str(p), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns}


def _hash_range(path: Path, stop: int, h: Any = None) -> Any:
    """``h`` (a new sha256 by default) updated with the first ``stop`` bytes of ``path``."""
    h = h if h is not None else hashlib.sha256()
    with open(path, "rb") as f:
        left = stop
        while left > 0:
            block = f.read(min(_BLOCK, left))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h


def file_digest(state: dict[str, Any]) -> str:
    """sha256 of a file's first ``state["bytes"]`` bytes (of every file of a folder)."""
    p = Path(state["path"])
    if state.get("dir"):
        h = hashlib.sha256()
        for f in sorted(p.rglob("*")):
            if f.is_file():
                h.update(str(f.relative_to(p)).encode() + b"\0")
                _hash_range(f, f.stat().st_size, h)
        return h.hexdigest()
    return _hash_range(p, int(state["bytes"])).hexdigest()


def with_digests(states: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The states with each file's ``sha256``."""
    return [s if "sha256" in s else {**s, "sha256": file_digest(s)} for s in states]


def read_record(folder: Path) -> dict[str, Any] | None:
    """The record of the files a store in ``folder`` was made from (None: no record)."""
    try:
        return json.loads((folder / SOURCE_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def same_cheaply(recorded: Sequence[dict[str, Any]], current: Sequence[dict[str, Any]]
                 ) -> bool:
    """Whether the files have the recorded paths, lengths and modification times."""
    keys = ("path", "bytes", "mtime_ns")
    return [[r.get(k) for k in keys] for r in recorded] == \
        [[c.get(k) for k in keys] for c in current]


@dataclass
class SourceUpdate:
    """What a run does to a pipeline's store of a corpus.

    ``kind``: "none" (the files are as ingested), "append" (``tail``: the grown file,
    the offset of its new bytes, its length; ``new_files``: files added to the list) or
    "ingest"; ``reason``: why a store that exists is ingested again (None for a first
    ingest); ``files``: the record's file states once the update is done.
    """

    kind: str
    reason: str | None = None
    tail: tuple[str, int, int] | None = None
    new_files: list[str] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    _tail_hash: Any = field(default=None, repr=False)

    def copy_tail(self, dest: Path) -> None:
        """Write the grown file's new bytes to ``dest`` (and finish its digest)."""
        assert self.tail is not None
        path, start, stop = self.tail
        h = self._tail_hash
        with open(path, "rb") as src, open(dest, "wb") as out:
            src.seek(start)
            left = stop - start
            while left > 0:
                block = src.read(min(_BLOCK, left))
                if not block:
                    break
                h.update(block)
                out.write(block)
                left -= len(block)
        for s in self.files:
            if s["path"] == path:
                s["sha256"] = h.hexdigest()


def _unchanged(rec: dict[str, Any], cur: dict[str, Any]) -> bool:
    if same_cheaply([rec], [cur]):
        return True
    return rec["bytes"] == cur["bytes"] and rec.get("sha256") == file_digest(cur)


def plan_update(record: dict[str, Any] | None, store_attrs: dict[str, Any] | None,
                store_uuid: str | None, files: Sequence[dict[str, Any]],
                option_files: Sequence[dict[str, Any]], fmt: str,
                options: dict[str, Any]) -> SourceUpdate:
    """Compare the files of a data set with the record of its store.

    Parameters
    ----------
    record : dict or None
        :data:`SOURCE_RECORD` of the store's folder (None: never ingested).
    store_attrs, store_uuid
        The store's metadata and uuid (None: no store).
    files, option_files : list of dict
        :func:`file_state` of the source files (in the data set's order) and of the
        files its options name (a MULAN label file).
    fmt : str
        The data set's format.
    options : dict
        Its ingest options.

    Returns
    -------
    SourceUpdate
    """
    if record is None or store_attrs is None:
        return SourceUpdate("ingest")
    if record.get("store_uuid") != store_uuid:
        return SourceUpdate("ingest", "the store in the work folder is not the one its "
                            "record describes (an update was interrupted)")
    for rec, cur in zip(record.get("option_files", []), option_files, strict=False):
        if rec["path"] != cur["path"] or not _unchanged(rec, cur):
            return SourceUpdate("ingest", f"{cur['path']} changed")
    if [r["path"] for r in record.get("option_files", [])] != \
            [c["path"] for c in option_files]:
        return SourceUpdate("ingest", "the files named in the options changed")
    old = record.get("files", [])
    if [r["path"] for r in old] != [c["path"] for c in files[:len(old)]]:
        return SourceUpdate("ingest", "the source files are not the ones ingested followed "
                            f"by new ones (ingested: {', '.join(r['path'] for r in old)})")
    states = [dict(c) for c in files]
    tail = None
    tail_hash = None
    for i, (rec, cur) in enumerate(zip(old, files, strict=False)):
        name = cur["path"]
        if cur["bytes"] < rec["bytes"]:
            return SourceUpdate("ingest", f"{name} is shorter than when it was ingested "
                                f"({cur['bytes']} bytes, then {rec['bytes']})")
        if _unchanged(rec, cur):
            states[i]["sha256"] = rec["sha256"]
            continue
        if cur["bytes"] == rec["bytes"] or cur.get("dir"):
            return SourceUpdate("ingest", f"{name} was edited (its content differs from the "
                                "one ingested)")
        h = _hash_range(Path(name), int(rec["bytes"]))
        if h.hexdigest() != rec["sha256"]:
            return SourceUpdate("ingest", f"{name} was edited within its first "
                                f"{rec['bytes']} bytes (the ones ingested)")
        if i != len(old) - 1:
            return SourceUpdate("ingest", f"{name} grew but is not the last file of the "
                                "list: its new documents would not follow the others")
        tail, tail_hash = (name, int(rec["bytes"]), int(cur["bytes"])), h
    new_files = [c["path"] for c in files[len(old):]]
    if tail is None and not new_files:
        return SourceUpdate("none", files=states)
    grown = tail[0] if tail is not None else ", ".join(new_files)
    why = _cannot_append(store_attrs, tail, fmt, options)
    if why is not None:
        return SourceUpdate("ingest", f"{grown} grew, but {why}")
    for s in states[len(old):]:
        s["sha256"] = file_digest(s)
    return SourceUpdate("append", tail=tail, new_files=new_files, files=states,
                        _tail_hash=tail_hash)


def _cannot_append(attrs: dict[str, Any], tail: tuple[str, int, int] | None, fmt: str,
                   options: dict[str, Any]) -> str | None:
    """Why appending the new documents would not give what a fresh ingest gives, or None."""
    if not get_reader(fmt).appendable:
        return f"format {fmt} cannot be appended to"
    if options.get("split_names"):
        return "options.split_names renames splits, which an append does not"
    if tail is None:
        return None
    path, start, _ = tail
    if fmt not in TAIL_FORMATS:
        return f"the new bytes of a grown {fmt} file are not a {fmt} file of their own"
    with open(path, "rb") as f:
        head = f.read(6)
        f.seek(max(start - 1, 0))
        edge = f.read(2) if start else b"\n"
    if head.startswith(_COMPRESSED):
        return "it is compressed: appended bytes are not lines of text"
    if not (attrs.get("reader_options") or {}).get("id_field"):
        return ("its records have no id field (options.id_field): an append would number "
                "the new documents from 0")
    if b"\n" not in edge:
        return f"its byte {start} (the first new one) does not start a line"
    return None


def vectoriser_change(attrs: dict[str, Any], fmt: str, paths: Sequence[str | os.PathLike[str]]
                      ) -> str | None:
    """Why the new documents in ``paths`` would change a fresh ingest's vectoriser (its
    idf, a tf-idf vocabulary), or None: they do when the store learned them from all its
    documents, or from a split (``fit_split``) some of the new ones are in."""
    if "vectorizer" not in attrs:
        return None
    fit_split = attrs.get("fit_split")
    if fit_split is None:
        return ("the store's idf is learned from all its documents, so new ones change it "
                "(options.fit_split: learn it from one split)")
    spec = get_reader(fmt)
    opts = {k: v for k, v in (attrs.get("reader_options") or {}).items()
            if k in spec.option_names}
    n = 0
    for batch in spec.read([Path(p) for p in paths], report=IngestReport(),
                           batch_size=_SPLIT_BATCH, **spec.check_options(opts)):
        n += sum(s == fit_split for s in (batch.splits or []))
    if n:
        return (f"{n} of the new documents are in split {fit_split!r}, from which the "
                "store's idf is learned")
    return None


def write_record(folder: Path, files: Sequence[dict[str, Any]],
                 option_files: Sequence[dict[str, Any]], store_uuid: str) -> None:
    """Record the files the store in ``folder`` now holds (written after the store)."""
    write_json_atomic(folder / SOURCE_RECORD, {
        "files": with_digests(files), "option_files": with_digests(option_files),
        "store_uuid": store_uuid})
