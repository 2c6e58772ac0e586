"""Staging: stream a text corpus once into row-aligned Parquet parts.

Readers of files (SGML, JSON Lines, Parquet) are sequential; staging turns their
stream into parts of exactly ``chunk_rows`` documents (the last may be shorter)
that the workers then read in parallel, in bounded memory on the driver.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dmlfe.readers.base import TextBatch


def rebatch(batches: Iterable[TextBatch], size: int) -> Iterator[TextBatch]:
    """Re-cut a stream of batches into batches of exactly ``size`` (last may be short)."""
    buf: list[TextBatch] = []
    have = 0
    for b in batches:
        if len(b) == 0:
            continue
        buf.append(b)
        have += len(b)
        while have >= size:
            joined = concat_batches(buf)
            yield slice_batch(joined, 0, size)
            rest = slice_batch(joined, size, len(joined))
            buf, have = ([rest], len(rest)) if len(rest) else ([], 0)
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
          progress: bool = False) -> StagedCorpus:
    """Write the stream as Parquet parts of ``chunk_rows`` documents under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    staged = StagedCorpus()
    for i, batch in enumerate(rebatch(batches, chunk_rows)):
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
