"""Staging: stream a text corpus once into row-aligned Parquet parts.

Readers of files (SGML, JSON Lines, Parquet) are sequential; staging turns their
stream into parts of exactly ``chunk_rows`` documents (the last may be shorter)
that the workers then read in parallel, in bounded memory on the driver: one part
holds at most :data:`MAX_PART_BYTES` of text (the readers hand over documents in
batches of at most about :data:`dmlfe.readers.base.MAX_LINE_BYTES` of text, and a part
over the budget is refused while it is gathered, before it is held whole).
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dmlfe.errors import InputError
from dmlfe.readers.base import TextBatch

#: The most text one staged part (``--chunk-rows`` documents) may hold, in characters
#: of its documents' texts (one to four bytes each in memory). Staging holds one part
#: on the driver before writing it, so this bounds the driver's memory during an ingest
#: or an append whatever the lengths of the lines; a part above it is refused with the
#: ``--chunk-rows`` value that would fit. Read at call time, so that tests can lower it.
MAX_PART_BYTES = 256 * 2**20


def _text_size(b: TextBatch) -> int:
    return sum(len(t) for t in b.texts)


def _part_too_large(where: str, first: int, texts: list[list[str]], size: int,
                    budget: int, fixed: bool) -> InputError:
    """The error for a part whose documents (numbered from ``first``) outgrow ``budget``."""
    held = fits = 0
    for t in (t for ts in texts for t in ts):
        held += len(t)
        if held > budget:
            break
        fits += 1
    n = sum(len(ts) for ts in texts)
    todo = (f"the store's parts are fixed at {size:,} documents: ingest the corpus anew with "
            f"--chunk-rows {max(fits, 1):,} or fewer" if fixed
            else f"ingest with --chunk-rows {max(fits, 1):,} or fewer")
    return InputError(
        f"{where}: documents {first + 1:,} to {first + n:,} (counted from 1) hold more than "
        f"{budget:,} characters of text, the most one staged part of --chunk-rows {size:,} "
        f"documents may hold (dmlfe.staging.MAX_PART_BYTES); {todo}"
    )


def rebatch(batches: Iterable[TextBatch], size: int, where: str = "the corpus",
            max_bytes: int | None = None, fixed: bool = False) -> Iterator[TextBatch]:
    """Re-cut a stream of batches into batches of exactly ``size`` (last may be short).

    Parameters
    ----------
    batches : iterable of TextBatch
        The reader's stream.
    size : int
        Documents per output batch.
    where : str
        The input's name, for the error message.
    max_bytes : int, optional
        The most characters of text one output batch may hold; default
        :data:`MAX_PART_BYTES` (read at call time).
    fixed : bool
        Whether ``size`` is a store's own (an append), for the error's advice.

    Raises
    ------
    InputError
        When the documents of one output batch hold more text than ``max_bytes``; it is
        raised as soon as the gathered text passes the budget, and names ``where``, the
        documents' range and the ``--chunk-rows`` value that would fit.
    """
    budget = MAX_PART_BYTES if max_bytes is None else max_bytes
    buf: list[TextBatch] = []
    have = 0
    chars = 0  # text held in buf
    done = 0  # documents already handed out
    for b in batches:
        if len(b) == 0:
            continue
        buf.append(b)
        have += len(b)
        chars += _text_size(b)
        while have >= size:
            joined = concat_batches(buf)
            part = slice_batch(joined, 0, size)
            if _text_size(part) > budget:
                raise _part_too_large(where, done, [part.texts], size, budget, fixed)
            yield part
            done += size
            rest = slice_batch(joined, size, len(joined))
            buf, have, chars = ([rest], len(rest), _text_size(rest)) if len(rest) else ([], 0, 0)
        # a part not yet complete: refused as soon as its text passes the budget
        if chars > budget:
            raise _part_too_large(where, done, [x.texts for x in buf], size, budget, fixed)
    if have:
        yield concat_batches(buf)


def concat_batches(batches: list[TextBatch]) -> TextBatch:
    if len(batches) == 1:
        return batches[0]
    has_split = batches[0].splits is not None
    meta_keys = list(batches[0].meta)
    return TextBatch(
        ids=[i for b in batches for i in b.ids],
        texts=[t for b in batches for t in b.texts],
        labels=[lab for b in batches for lab in b.labels],
        splits=[s for b in batches for s in b.splits] if has_split else None,
        meta={k: [v for b in batches for v in b.meta[k]] for k in meta_keys},
    )


def slice_batch(b: TextBatch, start: int, stop: int) -> TextBatch:
    return TextBatch(
        ids=b.ids[start:stop],
        texts=b.texts[start:stop],
        labels=b.labels[start:stop],
        splits=None if b.splits is None else b.splits[start:stop],
        meta={k: v[start:stop] for k, v in b.meta.items()},
    )


@dataclass
class StagedCorpus:
    """What staging learned on its single pass: the parts and the label inventory."""

    parts: list[Path] = field(default_factory=list)
    n_docs: int = 0
    label_counts: Counter = field(default_factory=Counter)
    has_split: bool = False
    meta_keys: list[str] = field(default_factory=list)


def write_part(batch: TextBatch, path: Path) -> None:
    cols = {
        "id": pa.array(batch.ids, pa.string()),
        "text": pa.array(batch.texts, pa.large_string()),
        "labels": pa.array(batch.labels, pa.list_(pa.string())),
    }
    if batch.splits is not None:
        cols["split"] = pa.array(batch.splits, pa.string())
    for k, v in batch.meta.items():
        cols[f"meta.{k}"] = pa.array(v, pa.string())
    pq.write_table(pa.table(cols), path, compression="zstd")


def read_part(path: str | Path) -> TextBatch:
    t = pq.read_table(path)
    names = t.column_names
    return TextBatch(
        ids=t.column("id").to_pylist(),
        texts=t.column("text").to_pylist(),
        labels=t.column("labels").to_pylist(),
        splits=t.column("split").to_pylist() if "split" in names else None,
        meta={n[5:]: t.column(n).to_pylist() for n in names if n.startswith("meta.")},
    )


def stage(batches: Iterable[TextBatch], folder: Path, chunk_rows: int,
          progress: bool = False, where: str = "the corpus",
          fixed: bool = False) -> StagedCorpus:
    """Write the stream as Parquet parts of ``chunk_rows`` documents under ``folder``.

    A part holds at most :data:`MAX_PART_BYTES` of text: more is an
    :class:`~dmlfe.errors.InputError` naming ``where`` (see :func:`rebatch`).
    """
    folder.mkdir(parents=True, exist_ok=True)
    staged = StagedCorpus()
    for i, batch in enumerate(rebatch(batches, chunk_rows, where, fixed=fixed)):
        if i == 0:
            staged.has_split = batch.splits is not None
            staged.meta_keys = list(batch.meta)
        elif (batch.splits is not None) != staged.has_split or list(batch.meta) != staged.meta_keys:
            raise ValueError("reader produced batches with inconsistent fields (split/meta)")
        path = folder / f"part-{i:06d}.parquet"
        write_part(batch, path)
        staged.parts.append(path)
        staged.n_docs += len(batch)
        for labs in batch.labels:
            staged.label_counts.update(labs)
        if progress and (i + 1) % 10 == 0:
            print(f"[dmlfe] staging: {staged.n_docs} documents read", file=sys.stderr)
    return staged
