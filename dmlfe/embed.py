"""Raw documents in, embeddings or label sets out (``dmlfe embed`` / ``dmlfe predict``).

The documents are vectorised by the model's training store's own vectoriser
(:func:`dmlfe.text_pipeline`), so a training document's text gets exactly its stored
embedding.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dmlfe.errors import InputError, MissingPathError
from dmlfe.labels import classifier_labels, sparse_labels
from dmlfe.model_io import check_compatible
from dmlfe.readers.base import IngestReport
from dmlfe.readers.registry import all_readers, get_reader
from dmlfe.relation import relation_block_rows
from dmlfe.store import open_store

if TYPE_CHECKING:
    import scipy.sparse as sp

#: Documents per batch read (the readers' own default).
_BATCH_DOCUMENTS = 1000

#: The options a reader needs for raw documents to be read by it: their texts and ids.
_DOCUMENT_OPTIONS = {"text_field", "labels_field", "id_field"}


def input_formats() -> tuple[str, ...]:
    """The formats raw documents are read in: the text readers with text, labels and id
    fields (jsonl, parquet), and "text" (one document a line)."""
    return (*(name for name, spec in all_readers().items()
              if spec.kind == "text" and _DOCUMENT_OPTIONS <= set(spec.option_names)), "text")


INPUT_FORMATS = input_formats()


def input_format(source: str) -> str:
    """The format of a documents file by its name: jsonl, parquet or (else) text."""
    name = Path(source).name.lower()
    for ext in (".gz", ".bz2", ".xz"):
        name = name.removesuffix(ext)
    for fmt in input_formats()[:-1]:
        if get_reader(fmt).suffixes and name.endswith(get_reader(fmt).suffixes):
            return fmt
    if source != "-" and Path(source).is_dir():
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
    if fmt not in input_formats():
        raise InputError(f"input format {fmt!r} must be one of {', '.join(input_formats())}")
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
    ids: list[str] = []
    texts: list[str] = []
    for batch in get_reader(fmt).read([Path(source)], report=IngestReport(),
                                      batch_size=_BATCH_DOCUMENTS, text_field=text_field,
                                      labels_field=None, id_field=id_field):
        ids += batch.ids
        texts += batch.texts
    return ids, texts


def is_store(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a store folder (``dmlfe predict`` reads its stored features
    instead of raw documents)."""
    return str(path) != "-" and (Path(path) / "zarr.json").is_file()


def model_view(model: Any, store: str | os.PathLike[str], split: str | list[str] | None
               ) -> Any:
    """The documents of ``store`` (of ``split`` only, when given) as ``model`` reads them.

    The store must be in the model's feature space
    (:func:`dmlfe.model_io.check_compatible`); for a relation-route model its blocks are
    cut so that their dense relation features stay small on the workers.
    """
    view = open_store(store)
    if split is not None:
        view = view.subset(split)
    if getattr(model, "relation_map_", None) is not None:
        view = view.reblock(relation_block_rows(model.relation_map_.n_prototypes,
                                                view.chunk_rows))
    check_compatible(model, view)
    return view


def model_label_names(model: Any) -> list[str]:
    """The label names of ``model``'s training store, in its column order."""
    prov = getattr(model, "training_store_", None)
    if not prov or prov.get("label_names") is None:
        raise InputError("the model does not record its training store's labels (it was "
                         "fitted on arrays), so its predictions have no label names")
    return list(prov["label_names"])


def label_columns(model: Any, store: Any) -> np.ndarray:
    """Columns of ``store.Y`` in the order of the model's labels, matched by name.

    Raises
    ------
    InputError
        The store's labels are not the model's (the message names the first labels
        missing on either side).
    """
    names = model_label_names(model)
    have = list(store.label_names)
    missing = [n for n in names if n not in have]
    extra = [n for n in have if n not in names]
    if missing or extra:
        def few(xs: list[str]) -> str:
            return ", ".join(repr(x) for x in xs[:5]) + (f" and {len(xs) - 5} more"
                                                         if len(xs) > 5 else "")
        parts = ([f"lacks the model's label(s) {few(missing)}"] if missing else []) + (
            [f"has label(s) the model was not trained on: {few(extra)}"] if extra else [])
        raise InputError(f"store {store.path} {'; '.join(parts)}: labels are compared by "
                         "name; score it with a model trained on the same labels")
    col = {n: j for j, n in enumerate(have)}  # a dict: thousands of labels are common
    return np.array([col[n] for n in names], dtype=np.int64)


def store_predictions(model: Any, classifier: Any, view: Any, *, labels: bool = False
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, sp.csr_matrix | None]:
    """(ids, predicted label sets, scores, true labels) of a store view, in one compute.

    The true labels (``labels=True``) are the store's as a uint8 CSR matrix, their
    columns put in the model's label order (:func:`label_columns`); None otherwise.
    """
    import dask

    Z = model.transform(view.X)
    parts = [view.ids, classifier.predict(Z), classifier.predict_proba(Z)]
    if labels:
        cols = label_columns(model, view)
        # column selection block by block: the blocks are CSR (dask's fancy indexing
        # of columns is for dense blocks)
        parts.append(view.Y.map_blocks(_take_columns, cols, dtype=view.Y.dtype,
                                       chunks=(view.Y.chunks[0], (len(cols),)),
                                       meta=view.Y._meta))
    out = dask.compute(*parts)
    # a classifier with sparse outputs (knn-vote: CSR) is densified here
    ids, P, S = (a.toarray() if hasattr(a, "toarray") else np.asarray(a) for a in out[:3])
    # the labels stay CSR: the label-set measures read them without a dense n x q copy
    return ids, P, S, (sparse_labels(out[3]) if labels else None)


def _take_columns(block: Any, cols: np.ndarray) -> Any:
    """Columns ``cols`` of a CSR (or dense) label block, in that order."""
    return block[:, cols]


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
    return classifier.fit(model.transform(store.X), classifier_labels(store.Y))


def label_sets(P: np.ndarray, S: np.ndarray, names: list[str], ids: list[str]
               ) -> list[dict[str, Any]]:
    """One record per document: its id, the names of the predicted labels, every score."""
    return [{"id": i, "labels": [names[j] for j in np.flatnonzero(p)],
             "scores": {n: float(s) for n, s in zip(names, row, strict=True)}}
            for i, p, row in zip(ids, P, S, strict=True)]
