"""Export of a store to the XMC and svmlight text formats, streamed block by block.

The formats are those :mod:`dmlfe.readers.xmc` reads: one line a document, its label
indices (the store's label columns) joined by commas, a space, then ``index:value`` for
each stored feature in column order. XMC files start with the header
``n_docs n_features n_labels`` and count features from 0; svmlight files have no header
and count features from 1 unless ``zero_based=True``. One-based is the default because
it reads back right under the zero-based rule's "auto" whatever the data: a zero-based
file whose documents never use feature 0 would read back one-based.

A document without labels starts its line with the space; an XMC document with neither
labels nor features is a blank line (the header's count keeps it). svmlight has no
such line (blank lines are skipped), so there the document is written with feature 1
of value 0, which reads back as no feature.

Values are written in Python's shortest round-trip form, so that ingesting the file
again gives the same numbers. Label and feature names go to optional map files (one
name a line, line ``i`` naming index ``i``), which the readers take back.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import InputError
from dmlfe.store.reader import Store, open_store
from dmlfe.tempfiles import link_note, write_atomically

__all__ = ["export_svmlight", "export_xmc"]


def _doc_lines(block: dict, offset: int, empty: str) -> list[str]:
    """One line (without its end) per document of a block."""
    X = block["X"].tocsr()
    X.sort_indices()
    Y = sp.csr_matrix(block["Y"])
    Y.sort_indices()  # label columns ascending per row
    label_off = Y.indptr.tolist()
    labels = Y.indices.tolist()
    indices = (X.indices.astype(np.int64) + offset).tolist()
    data = X.data.tolist()
    indptr = X.indptr.tolist()
    out = []
    for r in range(X.shape[0]):
        lab = ",".join(map(str, labels[label_off[r] : label_off[r + 1]]))
        lo, hi = indptr[r], indptr[r + 1]
        feats = " ".join(f"{j}:{v!r}" for j, v in zip(indices[lo:hi], data[lo:hi], strict=True))
        if not lab and not feats:
            feats = empty
        out.append(f"{lab} {feats}" if feats else lab)
    return out


def _names_text(names: list[str] | None, what: str, store: Store) -> bytes:
    if names is None:
        raise InputError(f"store {store.path} has no {what} names (its features are "
                         f"{store.feature_kind}): leave out the {what} map")
    bad = next((n for n in names if "\n" in n or "\r" in n or n != n.strip() or not n), None)
    if bad is not None:
        raise InputError(f"store {store.path}: {what} name {bad!r} cannot stand on a line of "
                         f"its own in a {what} map (empty, a line break, or spaces around it)")
    return "".join(f"{n}\n" for n in names).encode("utf-8")


def _export(store_or_path, out_path, *, fmt: str, offset: int, label_map, feature_map,
            overwrite: bool) -> Path:
    store = store_or_path if isinstance(store_or_path, Store) else open_store(store_or_path)
    out_path = Path(out_path).absolute()
    targets = [out_path] + [Path(p).absolute() for p in (label_map, feature_map)
                            if p is not None]
    for t in targets:
        if os.path.lexists(t) and not overwrite:
            raise FileExistsError(f"{t} already exists{link_note(t)}; pass overwrite=True "
                                  "to replace it")
    maps = []
    if label_map is not None:
        maps.append((label_map, _names_text(store.label_names, "label", store)))
    if feature_map is not None:
        maps.append((feature_map, _names_text(store.feature_names, "feature", store)))
    # svmlight skips blank lines: a document with neither labels nor features keeps its
    # line with a zero, which the reader drops
    empty = "" if fmt == "xmc" else f"{offset}:0"

    def write(f: BinaryIO) -> None:
        if fmt == "xmc":
            f.write(f"{store.n_docs} {store.n_features} {store.n_labels}\n".encode())
        for block in store.iter_blocks():
            lines = _doc_lines(block, offset, empty)
            if lines:
                f.write(("\n".join(lines) + "\n").encode("utf-8"))

    write_atomically(out_path, write)
    for path, text in maps:
        write_atomically(path, lambda f, text=text: f.write(text))
    return out_path


def export_xmc(store_or_path, out_path, *, label_map=None, feature_map=None,
               overwrite: bool = False) -> Path:
    """Write a store (or a subset view of one) in the Extreme Classification
    Repository's sparse format: the header ``n_docs n_features n_labels``, then one
    line a document, ``l1,l2 f:v f:v ...`` with zero-based indices.

    Parameters
    ----------
    store_or_path : Store or path-like
        The store; a subset view exports only its documents.
    out_path : path-like
        The file to write (atomically: a temporary sibling renamed at the end).
    label_map, feature_map : path-like, optional
        Files to write the label (feature) names to, one a line, line i naming index i;
        ``dmlfe ingest --label-map/--feature-map`` read them back.
    overwrite : bool
        Replace existing files.

    Returns
    -------
    pathlib.Path
        The file written.

    Raises
    ------
    FileExistsError
        A file exists and ``overwrite`` is false.
    InputError
        A feature map is asked of a store without feature names (hashed or numbered
        features), or a name cannot stand
        on a line of its own.
    """
    return _export(store_or_path, out_path, fmt="xmc", offset=0, label_map=label_map,
                   feature_map=feature_map, overwrite=overwrite)


def export_svmlight(store_or_path, out_path, *, zero_based: bool = False, label_map=None,
                    feature_map=None, overwrite: bool = False) -> Path:
    """Write a store (or a subset view of one) as a svmlight / LibSVM multi-label file:
    one line a document, ``l1,l2 f:v f:v ...``, no header.

    Parameters
    ----------
    store_or_path : Store or path-like
        The store; a subset view exports only its documents.
    out_path : path-like
        The file to write (atomically).
    zero_based : bool
        Count features from 0 instead of 1 (labels always count from 0). The default,
        one-based, reads back right under ``zero_based="auto"`` whatever the data.
    label_map, feature_map : path-like, optional
        Files to write the label (feature) names to, one a line, line i naming index i;
        besides the names they keep the numbers of labels and features, which a
        svmlight file does not record.
    overwrite : bool
        Replace existing files.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    FileExistsError, InputError
        As for :func:`export_xmc`.
    """
    return _export(store_or_path, out_path, fmt="svmlight", offset=0 if zero_based else 1,
                   label_map=label_map, feature_map=feature_map, overwrite=overwrite)
