"""A synthetic corpus shaped like the Extreme Classification Repository's, at several
label counts: the same documents (the same X), only the labels coarsened.

:func:`write_xmc_corpus` writes XMC files (header ``n_docs n_features n_labels``, then
``l1,l2,... f:v f:v ...``, zero-based; what ``dmlfe ingest --format xmc`` reads), one
folder a label count::

    OUT/labels-100/train.txt    OUT/labels-100/test.txt
    OUT/labels-30000/train.txt  OUT/labels-30000/test.txt

Ingest one label count with
``dmlfe ingest OUT/labels-100/train.txt OUT/labels-100/test.txt --format xmc --out s.zarr``
(the file names give the splits "train" and "test"). From the command line::

    python -m dmlfe.readers.synthetic_xmc OUT --docs 100000 --labels 100,1000,10000,30000

The model
---------
* **Fine labels.** Documents are drawn with ``fine_labels`` (F, default 30,000) fine
  labels of Zipf frequencies: fine label ``f`` is drawn with probability proportional to
  ``(f + 1) ** -zipf_exponent`` (label 0 the most frequent). A document has
  ``1 + Poisson(labels_per_doc - 1)`` distinct fine labels (mean ``labels_per_doc``).
* **Words.** A document has ``max(1, Poisson(words_per_doc))`` word tokens. Each token
  is, with probability ``label_share``, one of the ``label_words`` feature ids of one of
  the document's fine labels (each fine label has its own small random set of feature
  ids, fixed by the seed), and otherwise a background word: Zipf (exponent
  ``word_exponent``) over all ``n_features`` feature ids, the rank order scrambled by a
  fixed affine permutation. A feature's value is the sublinear term frequency
  ``1 + ln(tf)``, each row L2-normalised, printed with 6 significant digits.
* **Splits.** ``floor(n_docs * test_fraction)`` documents, spread evenly through the
  corpus (document ``i`` is a test document when ``(i + 1) * n_test // n_docs`` exceeds
  ``i * n_test // n_docs``), go to ``test.txt``, the others to ``train.txt``, in order.
* **Coarse labels.** The file for ``q`` labels maps fine label ``f`` to coarse label
  ``floor(f ** a)`` with ``a = ln(q) / ln(F)`` (:func:`coarse_label_map`): coarse label
  ``c`` is the union of the fine labels of rank ``c ** (1/a) <= f < (c + 1) ** (1/a)``.
  Every coarse label holds at least one fine label; the frequent coarse labels hold few
  fine labels and the rare ones many. With fine exponent ``s`` a coarse label ``c >= 1``
  has probability about ``(1/a) * c ** ((1/a) * (1 - s) - 1)`` times the fine
  normalisation, a power law again, of exponent ``1 + (s - 1) / a`` (exactly ``s`` for
  the default ``s = 1``, at every ``q``). At ``q = F`` the map is the identity. A
  document's coarse labels are the distinct images of its fine labels, so it has at
  most (and at small ``q`` on average a little fewer than) ``labels_per_doc`` labels.
  (``f mod q`` would give every coarse label an equal share of the fine tail, which
  flattens the frequencies of the small ``q`` files; equal rank buckets would give
  coarse label 0 almost every document.)

Streaming and determinism
-------------------------
Documents are generated in units of :data:`RNG_BLOCK_DOCS` documents, unit ``u`` from
``numpy.random.default_rng([seed, u])``, so the files depend on the seed and the
parameters only: ``block_size`` (documents held at once, rounded up to whole units)
changes memory, not the output. Memory is O(``block_size`` x ``words_per_doc``) plus the
tables: the fine labels' word ids (F x ``label_words``) and the background word CDF
(``n_features`` floats, 8 MiB at 2^20). All label counts are written in one pass.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from dmlfe.errors import InputError

__all__ = ["RNG_BLOCK_DOCS", "coarse_label_map", "corpus_files", "write_xmc_corpus"]

#: Documents generated from one random generator; part of the output's definition.
RNG_BLOCK_DOCS = 1000

PathLike = str | Path


def coarse_label_map(fine_labels: int, n_labels: int) -> np.ndarray:
    """The coarse label of each fine label: ``floor(f ** (ln q / ln F))``.

    Parameters
    ----------
    fine_labels : int
        F, the number of fine labels (at least 2).
    n_labels : int
        q, the number of coarse labels, ``1 <= q <= F``.

    Returns
    -------
    numpy.ndarray of int64, shape (F,)
        Values in ``0 .. q-1``, non-decreasing in ``f``, every value taken; the identity
        when ``q == F``.

    Raises
    ------
    InputError
        ``q`` outside ``1 .. F``.
    """
    F, q = int(fine_labels), int(n_labels)
    if F < 2 or not 1 <= q <= F:
        raise InputError(f"n_labels must be between 1 and fine_labels ({F}), got {q}; "
                         "the coarse labels are unions of fine labels")
    f = np.arange(F, dtype=np.int64)
    if q == F:
        return f
    if q == 1:
        return np.zeros(F, dtype=np.int64)
    a = math.log(q) / math.log(F)
    c = np.floor(np.power(f.astype(np.float64), a) + 1e-9).astype(np.int64)
    return np.minimum(c, q - 1)


def corpus_files(out: PathLike, n_labels: int) -> tuple[Path, Path]:
    """The (train, test) files of label count ``n_labels`` under folder ``out``."""
    folder = Path(out) / f"labels-{int(n_labels)}"
    return folder / "train.txt", folder / "test.txt"


@dataclass(frozen=True)
class _Model:
    n_features: int
    fine_labels: int
    labels_per_doc: float
    words_per_doc: float
    label_words: int
    label_share: float
    zipf_exponent: float
    word_exponent: float
    seed: int

    def tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Fine label CDF, background word CDF, the fine labels' word ids (F x w)."""
        lab = np.cumsum(np.arange(1, self.fine_labels + 1, dtype=np.float64)
                        ** -self.zipf_exponent)
        words = np.cumsum(np.arange(1, self.n_features + 1, dtype=np.float64)
                          ** -self.word_exponent)
        rng = np.random.default_rng([self.seed, 2**31 - 1])
        own = rng.integers(0, self.n_features, size=(self.fine_labels, self.label_words))
        return lab / lab[-1], words / words[-1], own


def _affine(n: int, seed: int) -> tuple[int, int]:
    """A multiplier coprime to ``n`` and an offset: rank r -> (m r + b) mod n."""
    rng = np.random.default_rng([seed, 2**31 - 2])
    m = int(rng.integers(n // 3, max(n // 3 + 1, n - 1))) | 1 if n > 2 else 1
    while math.gcd(m, n) != 1:
        m += 1
    return m, int(rng.integers(0, n))


def _unit(model: _Model, tables: tuple[np.ndarray, np.ndarray, np.ndarray],
          affine: tuple[int, int], u: int, n: int) -> tuple[np.ndarray, np.ndarray,
                                                            sp.csr_matrix]:
    """Documents of unit ``u`` (``n`` of them): label pointers, fine labels, X (CSR)."""
    lab_cdf, word_cdf, own = tables
    rng = np.random.default_rng([model.seed, u])
    F = model.fine_labels
    k = np.minimum(1 + rng.poisson(max(model.labels_per_doc - 1.0, 0.0), size=n), F)
    lptr = np.concatenate([[0], np.cumsum(k)])
    doc = np.repeat(np.arange(n), k)
    labels = np.searchsorted(lab_cdf, rng.random(lptr[-1]), side="right")
    for _ in range(1000):  # redraw a label a document already has
        order = np.lexsort((labels, doc))
        dup = np.zeros(len(labels), dtype=bool)
        same = (doc[order][1:] == doc[order][:-1]) & (labels[order][1:] == labels[order][:-1])
        dup[order[1:][same]] = True
        if not dup.any():
            break
        labels[dup] = np.searchsorted(lab_cdf, rng.random(int(dup.sum())), side="right")
    labels = np.minimum(labels, F - 1)
    order = np.lexsort((labels, doc))
    labels = labels[order]

    nw = np.maximum(rng.poisson(model.words_per_doc, size=n), 1)
    wdoc = np.repeat(np.arange(n), nw)
    from_label = rng.random(len(wdoc)) < model.label_share
    # a label token: one of the document's labels, then one of that label's words
    pick = lptr[wdoc] + np.floor(rng.random(len(wdoc)) * k[wdoc]).astype(np.int64)
    which = rng.integers(0, model.label_words, size=len(wdoc))
    label_word = own[labels[pick], which]
    rank = np.minimum(np.searchsorted(word_cdf, rng.random(len(wdoc)), side="right"),
                      model.n_features - 1)
    m, b = affine
    background = (rank * m + b) % model.n_features
    feat = np.where(from_label, label_word, background)
    X = sp.csr_matrix((np.ones(len(feat)), (wdoc, feat)), shape=(n, model.n_features))
    X.sum_duplicates()
    X.sort_indices()
    X.data = 1.0 + np.log(X.data)
    norms = np.sqrt(np.add.reduceat(X.data**2, X.indptr[:-1]))
    X.data /= np.repeat(norms, np.diff(X.indptr))
    return lptr, labels, X


def _feature_text(X: sp.csr_matrix) -> list[str]:
    """`` f:v f:v ...`` of each row (a leading space), 6 significant digits."""
    counts = np.diff(X.indptr)
    fmt = "\n".join(" %d:%.6g" * int(c) for c in counts)
    args = np.empty(2 * X.nnz, dtype=object)
    args[0::2] = X.indices.tolist()
    args[1::2] = X.data.tolist()
    return (fmt % tuple(args)).split("\n")


def _blocks(model: _Model, n_docs: int, block_size: int
            ) -> Iterator[tuple[int, np.ndarray, np.ndarray, sp.csr_matrix]]:
    tables = model.tables()
    affine = _affine(model.n_features, model.seed)
    units_per_block = max(1, -(-block_size // RNG_BLOCK_DOCS))
    n_units = -(-n_docs // RNG_BLOCK_DOCS)
    for first in range(0, n_units, units_per_block):
        parts = []
        for u in range(first, min(first + units_per_block, n_units)):
            n = min(RNG_BLOCK_DOCS, n_docs - u * RNG_BLOCK_DOCS)
            parts.append(_unit(model, tables, affine, u, n))
        offsets = np.cumsum([0] + [p[0][-1] for p in parts[:-1]])
        lptr = np.concatenate([[0]] + [p[0][1:] + o for p, o in zip(parts, offsets,
                                                                      strict=True)])
        labels = np.concatenate([p[1] for p in parts])
        X = sp.vstack([p[2] for p in parts], format="csr")
        yield first * RNG_BLOCK_DOCS, lptr, labels, X


def write_xmc_corpus(
    out: PathLike,
    n_docs: int,
    n_labels: int | Sequence[int],
    *,
    n_features: int = 2**20,
    labels_per_doc: float = 5.0,
    words_per_doc: float = 100.0,
    label_words: int = 10,
    label_share: float = 0.4,
    zipf_exponent: float = 1.0,
    word_exponent: float = 1.0,
    test_fraction: float = 0.2,
    seed: int = 0,
    fine_labels: int = 30000,
    block_size: int = 20000,
) -> dict[int, tuple[Path, Path]]:
    """Write a synthetic XMC corpus at one or several label counts (same documents).

    Parameters
    ----------
    out : str or Path
        The folder to write; each label count ``q`` goes to ``out/labels-{q}/train.txt``
        and ``test.txt`` (existing files are replaced).
    n_docs : int
        Number of documents (train and test together), at least 1.
    n_labels : int or sequence of int
        The label count(s) q, each ``1 <= q <= fine_labels``.
    n_features : int, default 2**20
        Number of feature columns D (at least 2).
    labels_per_doc : float, default 5.0
        Mean number of fine labels of a document (at least 1).
    words_per_doc : float, default 100.0
        Mean number of word tokens of a document.
    label_words : int, default 10
        Number of feature ids of each fine label's own words.
    label_share : float, default 0.4
        Probability that a token is one of its document's label words.
    zipf_exponent : float, default 1.0
        Zipf exponent of the fine label frequencies (> 0).
    word_exponent : float, default 1.0
        Zipf exponent of the background words (> 0).
    test_fraction : float, default 0.2
        Share of the documents in ``test.txt``, ``0 <= test_fraction < 1``.
    seed : int, default 0
        The corpus's seed: the same seed and parameters give the same files.
    fine_labels : int, default 30000
        F, the number of fine labels the documents are drawn with.
    block_size : int, default 20000
        Documents generated at once (memory only; the output does not depend on it).

    Returns
    -------
    dict
        For each q, its (train, test) paths.

    Raises
    ------
    InputError
        A parameter out of range.
    """
    qs = [int(n_labels)] if isinstance(n_labels, (int, np.integer)) else [int(q) for q in
                                                                          n_labels]
    if not qs:
        raise InputError("n_labels: give at least one label count")
    if len(set(qs)) != len(qs):
        raise InputError(f"n_labels: a label count is given twice in {qs}")
    checks = [
        (n_docs >= 1, f"n_docs must be at least 1, got {n_docs}"),
        (n_features >= 2, f"n_features must be at least 2, got {n_features}"),
        (fine_labels >= 2, f"fine_labels must be at least 2, got {fine_labels}"),
        (labels_per_doc >= 1, f"labels_per_doc must be at least 1, got {labels_per_doc}"),
        (words_per_doc > 0, f"words_per_doc must be positive, got {words_per_doc}"),
        (label_words >= 1, f"label_words must be at least 1, got {label_words}"),
        (0 <= label_share <= 1, f"label_share must be in [0, 1], got {label_share}"),
        (zipf_exponent > 0, f"zipf_exponent must be positive, got {zipf_exponent}"),
        (word_exponent > 0, f"word_exponent must be positive, got {word_exponent}"),
        (0 <= test_fraction < 1, f"test_fraction must be in [0, 1), got {test_fraction}"),
        (block_size >= 1, f"block_size must be at least 1, got {block_size}"),
    ]
    for ok, message in checks:
        if not ok:
            raise InputError(message)
    maps = {q: coarse_label_map(fine_labels, q) for q in qs}
    model = _Model(int(n_features), int(fine_labels), float(labels_per_doc),
                   float(words_per_doc), int(label_words), float(label_share),
                   float(zipf_exponent), float(word_exponent), int(seed))
    n_test = int(math.floor(n_docs * test_fraction))
    counts = {"train": n_docs - n_test, "test": n_test}
    paths = {q: corpus_files(out, q) for q in qs}
    with ExitStack() as stack:
        files: dict[int, dict[str, object]] = {}
        for q, (train, test) in paths.items():
            train.parent.mkdir(parents=True, exist_ok=True)
            files[q] = {}
            for split, path in (("train", train), ("test", test)):
                fh = stack.enter_context(open(path, "w", encoding="utf-8", newline="\n"))
                fh.write(f"{counts[split]} {n_features} {q}\n")
                files[q][split] = fh
        for start, lptr, labels, X in _blocks(model, int(n_docs), int(block_size)):
            feats = _feature_text(X)
            i = np.arange(start, start + X.shape[0], dtype=np.int64)
            is_test = (i + 1) * n_test // n_docs > i * n_test // n_docs
            for q, coarse in maps.items():
                mapped = coarse[labels]
                lines: dict[str, list[str]] = {"train": [], "test": []}
                for r in range(X.shape[0]):
                    doc_labels = np.unique(mapped[lptr[r]:lptr[r + 1]]).tolist()
                    lines["test" if is_test[r] else "train"].append(
                        ",".join(map(str, doc_labels)) + feats[r] + "\n")
                for split, text in lines.items():
                    files[q][split].write("".join(text))  # type: ignore[attr-defined]
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dmlfe.readers.synthetic_xmc OUT --docs N --labels Q[,Q...]``."""
    ap = argparse.ArgumentParser(
        prog="python -m dmlfe.readers.synthetic_xmc",
        description="Write a synthetic XMC corpus (power-law labels) at one or several "
        "label counts with the same documents: OUT/labels-Q/train.txt and test.txt, for "
        "dmlfe ingest --format xmc.")
    ap.add_argument("out", help="the folder to write")
    ap.add_argument("--docs", type=int, required=True, help="number of documents")
    ap.add_argument("--labels", required=True,
                    help="label count(s), comma-separated, each at most --fine-labels")
    ap.add_argument("--features", type=int, default=2**20, help="number of features "
                    "(default 2^20)")
    ap.add_argument("--fine-labels", type=int, default=30000,
                    help="fine labels the documents are drawn with (default 30000)")
    ap.add_argument("--labels-per-doc", type=float, default=5.0)
    ap.add_argument("--words-per-doc", type=float, default=100.0)
    ap.add_argument("--label-words", type=int, default=10)
    ap.add_argument("--label-share", type=float, default=0.4)
    ap.add_argument("--zipf-exponent", type=float, default=1.0)
    ap.add_argument("--test-fraction", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block-size", type=int, default=20000,
                    help="documents generated at once (memory; not the output)")
    args = ap.parse_args(argv)
    try:
        qs = [int(v) for v in args.labels.split(",") if v.strip()]
    except ValueError:
        ap.error(f"--labels: not a comma-separated list of integers: {args.labels!r}")
    try:
        paths = write_xmc_corpus(
            args.out, args.docs, qs, n_features=args.features,
            labels_per_doc=args.labels_per_doc, words_per_doc=args.words_per_doc,
            label_words=args.label_words, label_share=args.label_share,
            zipf_exponent=args.zipf_exponent, test_fraction=args.test_fraction,
            seed=args.seed, fine_labels=args.fine_labels, block_size=args.block_size)
    except InputError as exc:
        ap.error(str(exc))
    for q, (train, test) in paths.items():
        print(f"{q} labels: {train} {test}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
