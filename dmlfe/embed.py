"""Raw documents in, embeddings or label sets out (``dmlfe embed`` / ``dmlfe predict``).

The documents are vectorised by the model's training store's own vectoriser
(:func:`dmlfe.text_pipeline`), so a training document's text gets exactly its stored
embedding.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dmlfe.errors import InputError, MissingPathError
from dmlfe.readers.tabular import read_jsonl, read_parquet
from dmlfe.store import open_store

INPUT_FORMATS = ("jsonl", "parquet", "text")


def input_format(source: str) -> str:
    """The format of a documents file by its name: jsonl, parquet or (else) text."""
    name = Path(source).name.lower()
    for ext in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(ext)
    if name.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if name.endswith(".parquet") or (source != "-" and Path(source).is_dir()):
        return "parquet"
    return "text"


def read_documents(source: str | os.PathLike[str], fmt: str | None = None, *,
                   text_field: str = "text", id_field: str | None = None
                   ) -> tuple[list[str], list[str]]:
    """(ids, texts) of raw documents.

    Parameters
    ----------
    source : path, or "-" for standard input
    fmt : {"jsonl", "parquet", "text"}, optional
        Default: from the file name (:func:`input_format`); standard input is text.
        "text" is one document per line; its ids are the 0-based line numbers.
    text_field, id_field : str
        jsonl/parquet: the fields holding the text and (optionally) the id, as for
        ingest; labels are not read.
    """
    source = str(source)
    fmt = fmt or ("text" if source == "-" else input_format(source))
    if fmt not in INPUT_FORMATS:
        raise InputError(f"input format {fmt!r} must be one of {', '.join(INPUT_FORMATS)}")
    if source != "-" and not Path(source).exists():
        raise MissingPathError(f"{source} does not exist")
    if fmt == "text":
        if source == "-":
            texts = sys.stdin.read().splitlines()
        else:
            texts = Path(source).read_text(encoding="utf-8").splitlines()
        return [str(i) for i in range(len(texts))], texts
    if source == "-":
        raise InputError(f"{fmt} documents cannot be read from standard input; give a file")
    reader = read_jsonl if fmt == "jsonl" else read_parquet
    ids: list[str] = []
    texts: list[str] = []
    for batch in reader(source, text_field=text_field, labels_field=None, id_field=id_field):
        ids += batch.ids
        texts += batch.texts
    return ids, texts


def training_classifier(model: Any, classifier: Any) -> Any:
    """``classifier`` fitted on ``model``'s embeddings of its training documents.

    The training store (and split) the model records; one pass over it.
    """
    prov = getattr(model, "training_store_", None)
    if not prov:
        raise InputError("the model does not record its training store (it was fitted on "
                         "arrays), so there are no labelled embeddings to fit a classifier on")
    store = open_store(prov["path"])
    if prov.get("split") is not None:
        store = store.subset(prov["split"])
    return classifier.fit(model.transform(store.X), store.Y)


def label_sets(P: np.ndarray, S: np.ndarray, names: list[str], ids: list[str]
               ) -> list[dict[str, Any]]:
    """One record per document: its id, the names of the predicted labels, every score."""
    return [{"id": i, "labels": [names[j] for j in np.flatnonzero(p)],
             "scores": {n: float(s) for n, s in zip(names, row, strict=True)}}
            for i, p, row in zip(ids, P, S, strict=True)]
