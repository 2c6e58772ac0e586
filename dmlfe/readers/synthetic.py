"""A synthetic labelled text corpus, exactly reproducible from a seed.

The corpus is the project's embedded default (the demo job) and its scaling
workload, so it is generated chunk by chunk, vectorised, and document ``i``
depends only on ``(seed, i)`` and the model parameters, never on how the
corpus is cut into parts.

Generative model
----------------
Vocabulary
    Word ``r`` (``0 <= r < vocab_size``) is a deterministic pseudo-word built from
    consonant-vowel syllables (:func:`synthetic_word`): lowercase ASCII letters,
    at least two syllables (4 letters), unique per index. Words are separated by
    one space, so scikit-learn's default ``token_pattern`` recovers them exactly.
    The background distribution over words is Zipf's law, ``p(r) ∝ (r + 1)^-s``
    with ``s = zipf_exponent``, sampled by inverse CDF: ``np.searchsorted`` of
    uniforms in the precomputed CDF, sped up by a guide table (same result).
Themes and correlated label sets
    Labels are split (after a seeded permutation) into ``ceil(n_labels / 4)``
    latent themes of about four labels. Theme ``t`` has prior
    ``rho_t ∝ (t + 1)^-0.8``; inside a theme, label ``j`` is its "anchor" with
    probability ``alpha_j ∝ (j + 1)^-1``. Both decays give a spread of label
    frequencies. A document

    * is unlabelled with probability 0.04 (and then draws nothing below);
    * draws a primary theme from ``rho`` and one anchor label in it;
    * switches on every other label of its primary theme with probability ``c``
      (co-labels: this is what correlates labels);
    * with probability ``s`` draws a second theme and its anchor;
    * switches on each label independently with a small noise probability
      ``e_l ∝ rho_t(l) alpha_l`` (labels across themes).

    ``c``, ``s`` and ``sum_l e_l`` grow together with one knob ``x``
    (``c = 0.3x``, ``s = 0.3x``, ``sum e = 0.3x``, each clipped); the expected
    number of labels per document is exact in closed form
    (:meth:`SyntheticCorpus.expected_label_frequencies`), and ``x`` is solved by
    bisection so that it equals ``mean_labels_per_doc``. Below ``0.96`` labels per
    document the knob is zero and the unlabelled fraction grows instead.
Topics
    Each label owns a sparse topic: 50 characteristic words drawn uniformly from
    the ranks after the ``min(100, vocab_size // 10)`` most frequent ones (those
    act as stop words and never carry label information), with
    Dirichlet(1) weights. Draws are with replacement, so topics may overlap.
Documents
    Length ~ negative binomial with mean ``mean_doc_length`` and shape 3 (a
    heavy right tail, like news stories), sampled by inverse CDF; in addition a
    fraction 0.001 of documents is empty (length 0), because the pipeline must
    handle empty documents. Each token comes from one of the document's labels'
    topics (chosen uniformly) with probability 0.3, otherwise from the Zipf
    background; an unlabelled document is pure background.
Splits
    Each document is in ``"test"`` with probability ``test_fraction``, else
    ``"train"``.

Reproducibility
---------------
Documents are generated in fixed blocks of 1,024 whose random stream is
seeded by ``SeedSequence([stream, seed, block])``; a part is sliced from the
blocks it overlaps, so any ``part_size`` yields the same documents, and the
first ``n`` documents do not depend on ``n_docs``. Every random quantity is
derived from ``Generator.random`` (uniform doubles) by inverse CDF, argsort or
comparison, not from numpy's distribution samplers, whose algorithms numpy does
not promise to keep stable across versions.

The object holds only its parameters (it is sent to dask workers); the model
arrays, the vocabulary bytes and recently generated blocks are cached per
process with :func:`functools.lru_cache`.

Text is built as one byte gather per block, so generation is a small part of an
ingest (its speed: ``benchmarks/ingest.py``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import gammaln

from dmlfe.readers.base import TextBatch

__all__ = ["SyntheticCorpus", "synthetic_word", "synthetic_vocabulary"]

BLOCK_SIZE = 1024  # internal generation block: fixed, so documents never depend on part_size

_CONSONANTS = b"bdfghjklmnprstvz"
_VOWELS = b"aeiou"
_N_SYLLABLES = len(_CONSONANTS) * len(_VOWELS)  # 80 two-letter syllables
_MIN_SYLLABLES = 2  # every word has >= 4 letters

_UNLABELLED_FRACTION = 0.04
_LABELS_PER_THEME = 4
_THEME_DECAY = 0.8
_ANCHOR_DECAY = 1.0
_KNOB_RATE = 0.3  # co-label prob, second-theme prob and total noise per unit of the knob x
_CO_LABEL_MAX = 0.9
_SECOND_THEME_MAX = 0.9
_NOISE_MAX = 0.5
_TOPIC_SIZE = 50
_STOPWORD_RANKS = 100
_TOPIC_WEIGHT = 0.3
_LENGTH_SHAPE = 3.0
_EMPTY_FRACTION = 0.001

# Distinct SeedSequence streams so that model parameters and documents never share draws.
_MODEL_STREAM = 0x6D6F64656C
_DOC_STREAM = 0x646F6373


# ---------------------------------------------------------------- vocabulary


def _level_sizes(vocab_size: int) -> list[tuple[int, int, int]]:
    """(n_syllables, first index, count) of each word-length level covering vocab_size."""
    levels = []
    start, n_syl = 0, _MIN_SYLLABLES
    while start < vocab_size:
        count = min(_N_SYLLABLES**n_syl, vocab_size - start)
        levels.append((n_syl, start, count))
        start += count
        n_syl += 1
    return levels


def synthetic_word(index: int) -> str:
    """The pseudo-word of vocabulary index ``index`` (lowercase letters, >= 4 of them).

    Indices are numbered level by level: the first 80**2 indices are two-syllable
    words, the next 80**3 three-syllable words, and so on, so the mapping is
    one-to-one (a word's length fixes its level, its syllables fix the index).
    """
    if index < 0:
        raise ValueError(f"synthetic_word: index must be >= 0, got {index}")
    n_syl, rest = _MIN_SYLLABLES, int(index)
    while rest >= _N_SYLLABLES**n_syl:
        rest -= _N_SYLLABLES**n_syl
        n_syl += 1
    digits = []
    for _ in range(n_syl):
        rest, d = divmod(rest, _N_SYLLABLES)
        digits.append(d)
    out = bytearray()
    for d in reversed(digits):
        c, v = divmod(d, len(_VOWELS))
        out += bytes([_CONSONANTS[c], _VOWELS[v]])
    return out.decode("ascii")


@lru_cache(maxsize=4)
def _vocab_bytes(vocab_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All words as one uint8 buffer of ``"word "`` entries, with starts and lengths.

    Each entry carries its trailing space so that a document's text is a plain
    gather of entries (its last space is cut off afterwards).
    """
    syllables = np.empty((_N_SYLLABLES, 2), dtype=np.uint8)
    syllables[:, 0] = np.repeat(np.frombuffer(_CONSONANTS, np.uint8), len(_VOWELS))
    syllables[:, 1] = np.tile(np.frombuffer(_VOWELS, np.uint8), len(_CONSONANTS))
    pieces, lengths = [], []
    for n_syl, _, count in _level_sizes(vocab_size):
        rest = np.arange(count, dtype=np.int64)
        entry = np.empty((count, 2 * n_syl + 1), dtype=np.uint8)
        for pos in range(n_syl - 1, -1, -1):  # least significant syllable last
            rest, digit = np.divmod(rest, _N_SYLLABLES)
            entry[:, 2 * pos : 2 * pos + 2] = syllables[digit]
        entry[:, -1] = ord(" ")
        pieces.append(entry.ravel())
        lengths.append(np.full(count, 2 * n_syl + 1, dtype=np.int64))
    buf = np.concatenate(pieces) if pieces else np.empty(0, np.uint8)
    entry_len = np.concatenate(lengths) if lengths else np.empty(0, np.int64)
    starts = np.concatenate([[0], np.cumsum(entry_len)[:-1]]).astype(np.int64)
    return buf, starts, entry_len


def synthetic_vocabulary(vocab_size: int) -> list[str]:
    """The words of indices ``0 .. vocab_size - 1``, in index (= Zipf rank) order."""
    buf, _, _ = _vocab_bytes(int(vocab_size))
    text = buf.tobytes().decode("ascii")
    return text.split(" ")[:-1] if vocab_size else []


# ---------------------------------------------------------------- model


@dataclass(frozen=True)
class _Model:
    """Derived parameters of the generative model (cached per process, never pickled)."""

    unlabelled: float  # probability that a document has no labels
    label_theme: np.ndarray  # (q,) theme of each label
    theme_cdf: np.ndarray  # (T,) CDF of the primary/second theme
    theme_labels: np.ndarray  # (q,) labels ordered theme by theme
    theme_start: np.ndarray  # (T + 1,) offsets of each theme in theme_labels
    anchor_cdf: np.ndarray  # (q,) theme index + within-theme anchor CDF, theme by theme
    co_label: float
    second_theme: float
    noise: np.ndarray  # (q,) independent noise probability of each label
    marginals: np.ndarray  # (q,) exact P(label on)
    topic_words: np.ndarray  # (q, K) word indices of each label's topic
    topic_cdf: np.ndarray  # (q * K,) label index + within-topic CDF, label by label
    background_cdf: np.ndarray  # (V,) Zipf CDF
    background_guide: np.ndarray  # (M + 1,) guide table of background_cdf (see _inverse_cdf)


def _label_probabilities(
    x: float,
    unlabelled: float,
    rho_l: np.ndarray,
    alpha: np.ndarray,
    base_noise: np.ndarray,
) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Co-label prob, second-theme prob, noise and exact label marginals at knob ``x``.

    The primary-theme draws (anchor + co-labels), the second-theme draw and the
    noise are independent, so P(label on | labelled) = 1 - prod(1 - P(each route)).
    """
    co = min(_CO_LABEL_MAX, _KNOB_RATE * x)
    second = min(_SECOND_THEME_MAX, _KNOB_RATE * x)
    noise = np.minimum(_NOISE_MAX, _KNOB_RATE * x * base_noise)
    p_primary = rho_l * (alpha + (1.0 - alpha) * co)
    p_second = second * rho_l * alpha
    on = 1.0 - (1.0 - p_primary) * (1.0 - p_second) * (1.0 - noise)
    return co, second, noise, (1.0 - unlabelled) * on


def _guide_table(cdf: np.ndarray) -> np.ndarray:
    """``G[j] = searchsorted(cdf, j / M, "right")`` for ``j = 0 .. M``, M a power of two."""
    m = 1 << min(24, max(10, math.ceil(math.log2(2 * cdf.shape[0]))))
    guide = np.searchsorted(cdf, np.arange(m + 1, dtype=np.float64) / m, "right")
    return guide.astype(np.int32 if cdf.shape[0] < 2**31 - 1 else np.int64)  # halves memory


def _inverse_cdf(cdf: np.ndarray, guide: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``np.searchsorted(cdf, u, "right")`` for u in [0, 1), computed with a guide table.

    Plain searchsorted of random queries into a long CDF is cache-bound and was
    the largest cost of a block. The answer for u lies between ``G[j]`` and
    ``G[j + 1]`` with ``j = floor(u * M)`` (exact: M is a power of two); for the
    Zipf head that interval is empty, and only the few remaining queries are
    finished by a vectorised binary search. The result is identical to
    searchsorted (tested).
    """
    m = guide.shape[0] - 1
    j = (u * m).astype(np.int64)
    lo = guide[j]
    hi = guide[j + 1]
    act = np.flatnonzero(lo < hi)
    ua, la, ha = u[act], lo[act], hi[act]
    while act.size:
        mid = (la + ha) >> 1
        right = cdf[mid] <= ua
        la = np.where(right, mid + 1, la)
        ha = np.where(right, ha, mid)
        lo[act] = la
        keep = la < ha
        act, ua, la, ha = act[keep], ua[keep], la[keep], ha[keep]
    return lo


def _cdf(weights: np.ndarray) -> np.ndarray:
    cdf = np.cumsum(weights, dtype=np.float64)
    cdf /= cdf[-1]
    cdf[-1] = 1.0  # exact end so that u in [0, 1) never falls past it
    return cdf


@lru_cache(maxsize=4)
def _model(
    vocab_size: int, n_labels: int, mean_labels_per_doc: float, zipf_exponent: float, seed: int
) -> _Model:
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([_MODEL_STREAM, seed])))
    q = n_labels
    n_themes = math.ceil(q / _LABELS_PER_THEME)

    # Themes: a seeded permutation cut into near-equal groups, so each theme mixes
    # label indices; theme and anchor priors decay to spread label frequencies.
    perm = np.argsort(rng.random(q), kind="stable")
    label_theme = np.empty(q, dtype=np.int64)
    label_theme[perm] = np.arange(q) % n_themes
    theme_labels = np.argsort(label_theme, kind="stable")
    theme_size = np.bincount(label_theme, minlength=n_themes)
    theme_start = np.concatenate([[0], np.cumsum(theme_size)])
    rho = (np.arange(n_themes) + 1.0) ** -_THEME_DECAY
    rho /= rho.sum()
    rank_in_theme = np.arange(q) - np.repeat(theme_start[:-1], theme_size)
    anchor_w = (rank_in_theme + 1.0) ** -_ANCHOR_DECAY  # in theme_labels order
    anchor_w /= np.repeat(np.add.reduceat(anchor_w, theme_start[:-1]), theme_size)
    alpha = np.empty(q)
    alpha[theme_labels] = anchor_w
    # Each theme's anchor weights sum to 1, so the running sum is theme index + CDF.
    anchor_cdf = np.cumsum(anchor_w)
    anchor_cdf[theme_start[1:] - 1] = np.arange(1, n_themes + 1)
    rho_l = rho[label_theme]
    base_noise = rho_l * alpha / np.sum(rho_l * alpha)

    # Solve the knob x so that the expected number of labels is mean_labels_per_doc.
    unlabelled = _UNLABELLED_FRACTION
    floor = float(_label_probabilities(0.0, unlabelled, rho_l, alpha, base_noise)[3].sum())
    x_hi = 1e6 / _KNOB_RATE
    ceiling = float(_label_probabilities(x_hi, unlabelled, rho_l, alpha, base_noise)[3].sum())
    if mean_labels_per_doc > ceiling * (1 - 1e-9):
        raise ValueError(
            f"SyntheticCorpus: mean_labels_per_doc={mean_labels_per_doc} is too large for "
            f"n_labels={n_labels}; this model reaches at most {ceiling:.3f} labels per document. "
            "Lower mean_labels_per_doc or raise n_labels."
        )
    if mean_labels_per_doc <= floor:
        x = 0.0
        unlabelled = 1.0 - mean_labels_per_doc  # one label per labelled document at x = 0
    else:
        lo, hi = 0.0, x_hi
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            total = _label_probabilities(mid, unlabelled, rho_l, alpha, base_noise)[3].sum()
            lo, hi = (mid, hi) if total < mean_labels_per_doc else (lo, mid)
        x = 0.5 * (lo + hi)
    co, second, noise, marginals = _label_probabilities(x, unlabelled, rho_l, alpha, base_noise)

    # Topics: characteristic words below the stop-word ranks, Dirichlet(1) weights
    # (normalised exponentials of uniforms).
    skip = min(_STOPWORD_RANKS, vocab_size // 10)
    k = _TOPIC_SIZE
    topic_words = skip + np.floor(rng.random((q, k)) * (vocab_size - skip)).astype(np.int64)
    topic_words = np.minimum(topic_words, vocab_size - 1)
    topic_w = -np.log1p(-rng.random((q, k)))
    topic_cdf = np.cumsum(topic_w, axis=1)
    topic_cdf /= topic_cdf[:, -1:]
    topic_cdf[:, -1] = 1.0
    topic_cdf += np.arange(q)[:, None]

    ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
    background_cdf = _cdf(ranks**-zipf_exponent)
    return _Model(
        unlabelled=unlabelled,
        label_theme=label_theme,
        theme_cdf=_cdf(rho),
        theme_labels=theme_labels,
        theme_start=theme_start,
        anchor_cdf=anchor_cdf,
        co_label=co,
        second_theme=second,
        noise=noise,
        marginals=marginals,
        topic_words=topic_words,
        topic_cdf=topic_cdf.ravel(),
        background_cdf=background_cdf,
        background_guide=_guide_table(background_cdf),
    )


@lru_cache(maxsize=8)
def _length_cdf(mean: float) -> np.ndarray:
    """CDF of the negative binomial (mean ``mean``, shape 3) on 0 .. L_max."""
    if mean <= 0:
        return np.ones(1)
    r = _LENGTH_SHAPE
    sd = math.sqrt(mean + mean * mean / r)
    k = np.arange(int(mean + 40 * sd) + 10, dtype=np.float64)
    logp = (
        gammaln(k + r)
        - gammaln(r)
        - gammaln(k + 1)
        + r * math.log(r / (r + mean))
        + k * math.log(mean / (r + mean))
    )
    return _cdf(np.exp(logp))


# ---------------------------------------------------------------- blocks


@dataclass(frozen=True)
class _Block:
    texts: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    splits: tuple[str, ...]


def _sample_labels(model: _Model, rng: np.random.Generator, n: int) -> np.ndarray:
    """(n, q) boolean label matrix; the draws are made in a fixed order."""
    q = model.label_theme.shape[0]
    rows = np.arange(n)
    n_themes = model.theme_cdf.shape[0]

    def anchor(theme: np.ndarray, u: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(model.anchor_cdf, theme + u, side="right")
        pos = np.minimum(pos, model.theme_start[theme + 1] - 1)  # guard float round-up
        return model.theme_labels[pos]

    unlabelled = rng.random(n) < model.unlabelled
    theme1 = np.minimum(np.searchsorted(model.theme_cdf, rng.random(n), "right"), n_themes - 1)
    anchor1 = anchor(theme1, rng.random(n))
    co = (rng.random((n, q)) < model.co_label) & (model.label_theme[None, :] == theme1[:, None])
    has_second = rng.random(n) < model.second_theme
    theme2 = np.minimum(np.searchsorted(model.theme_cdf, rng.random(n), "right"), n_themes - 1)
    anchor2 = anchor(theme2, rng.random(n))
    y = (rng.random((n, q)) < model.noise[None, :]) | co
    y[rows, anchor1] = True
    y[rows[has_second], anchor2[has_second]] = True
    y[unlabelled] = False
    return y


def _block_head(key: tuple, block: int) -> tuple:
    """The block's model, its random stream after the per-document draws, and those
    draws (labels, lengths, test flags): the tokens come after them in the stream."""
    (vocab_size, n_labels, mean_doc_length, mean_labels, test_fraction, zipf, seed) = key
    model = _model(vocab_size, n_labels, mean_labels, zipf, seed)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([_DOC_STREAM, seed, block])))
    n = BLOCK_SIZE
    y = _sample_labels(model, rng, n)
    length_cdf = _length_cdf(float(mean_doc_length))
    lengths = np.minimum(np.searchsorted(length_cdf, rng.random(n), "right"), len(length_cdf) - 1)
    lengths[rng.random(n) < _EMPTY_FRACTION] = 0
    is_test = rng.random(n) < test_fraction
    return model, rng, y, lengths, is_test


def _labels_and_splits(y: np.ndarray, is_test: np.ndarray, n_labels: int
                       ) -> tuple[tuple[tuple[str, ...], ...], tuple[str, ...]]:
    doc_rows, doc_cols = np.nonzero(y)  # row-major: labels sorted within each document
    ptr = np.concatenate([[0], np.cumsum(np.bincount(doc_rows, minlength=y.shape[0]))])
    names = _label_names(n_labels)
    col_names = [names[c] for c in doc_cols.tolist()]
    ptr = ptr.tolist()
    labels = tuple(tuple(col_names[ptr[i] : ptr[i + 1]]) for i in range(y.shape[0]))
    splits = tuple("test" if t else "train" for t in is_test.tolist())
    return labels, splits


@lru_cache(maxsize=8)
def _block_labels(key: tuple, block: int) -> _Block:
    """The block's labels and splits without its text (``texts`` empty): what an ingest's
    second pass needs, at a fraction of the cost."""
    _, _, y, _, is_test = _block_head(key, block)
    labels, splits = _labels_and_splits(y, is_test, key[1])
    return _Block(texts=(), labels=labels, splits=splits)


@lru_cache(maxsize=8)
def _block(key: tuple, block: int) -> _Block:
    """Documents ``block * BLOCK_SIZE`` .. ``+ BLOCK_SIZE`` of the corpus with parameters key."""
    vocab_size, n_labels = key[0], key[1]
    model, rng, y, lengths, is_test = _block_head(key, block)
    n = BLOCK_SIZE

    # Tokens: each picks topic-or-background, then one of its document's labels,
    # then a word by inverse CDF.
    doc_rows, doc_cols = np.nonzero(y)  # row-major: labels sorted within each document
    n_doc_labels = np.bincount(doc_rows, minlength=n)
    label_ptr = np.concatenate([[0], np.cumsum(n_doc_labels)])
    tok_doc = np.repeat(np.arange(n), lengths)
    n_tok = tok_doc.shape[0]
    u_src, u_lab, u_word = rng.random(n_tok), rng.random(n_tok), rng.random(n_tok)
    k = n_doc_labels[tok_doc]
    from_topic = (u_src < _TOPIC_WEIGHT) & (k > 0)
    words = _inverse_cdf(model.background_cdf, model.background_guide, u_word)
    words = np.minimum(words, vocab_size - 1)
    sel = np.flatnonzero(from_topic)  # integer takes: cheaper than repeated boolean masks
    k_sel = k[sel]
    which = np.minimum((u_lab[sel] * k_sel).astype(np.int64), k_sel - 1)
    label = doc_cols[label_ptr[tok_doc[sel]] + which]
    n_topic = model.topic_words.shape[1]
    pos = np.searchsorted(model.topic_cdf, label + u_word[sel], "right")
    first = label * n_topic
    pos = np.minimum(np.maximum(pos, first), first + (n_topic - 1))  # guard float round-off
    words[sel] = model.topic_words.ravel()[pos]

    # Text: gather the "word " entries of all tokens into one byte string, then
    # cut it per document (dropping each document's trailing space).
    buf, starts, entry_len = _vocab_bytes(vocab_size)
    tl = entry_len[words]
    ends = np.cumsum(tl)
    gather = np.arange(int(ends[-1]) if n_tok else 0, dtype=np.int64)
    gather += np.repeat(starts[words] - (ends - tl), tl)
    text = buf[gather].tobytes().decode("ascii")
    char_at = np.concatenate([[0], ends]).astype(np.int64)
    tok_ptr = np.concatenate([[0], np.cumsum(lengths)])
    lo = char_at[tok_ptr[:-1]].tolist()
    hi = char_at[tok_ptr[1:]].tolist()
    texts = tuple(text[a : b - 1] if b > a else "" for a, b in zip(lo, hi, strict=True))

    labels, splits = _labels_and_splits(y, is_test, n_labels)
    return _Block(texts=texts, labels=labels, splits=splits)


@lru_cache(maxsize=8)
def _label_names(n_labels: int) -> tuple[str, ...]:
    width = max(2, len(str(n_labels - 1)))
    return tuple(f"label{i:0{width}d}" for i in range(n_labels))


# ---------------------------------------------------------------- public API


class SyntheticCorpus:
    """A reproducible synthetic multi-label text corpus (see the module docstring).

    Parameters
    ----------
    n_docs : int
        Number of documents.
    vocab_size : int
        Number of distinct words that can occur.
    n_labels : int
        Number of labels.
    mean_doc_length : float
        Mean number of words per document.
    mean_labels_per_doc : float
        Expected number of labels per document (exact in expectation).
    test_fraction : float
        Probability that a document is in the ``"test"`` split.
    zipf_exponent : float
        Exponent ``s`` of the background word law ``p(r) ∝ (r + 1)^-s``.
    seed : int
        Non-negative seed; every document is a function of ``(seed, index)``.
    """

    def __init__(
        self,
        n_docs: int = 10_000,
        *,
        vocab_size: int = 20_000,
        n_labels: int = 20,
        mean_doc_length: float = 80,
        mean_labels_per_doc: float = 2.0,
        test_fraction: float = 0.2,
        zipf_exponent: float = 1.1,
        seed: int = 0,
    ) -> None:
        def check(name: str, value: object, ok: bool, want: str) -> None:
            if not ok:
                raise ValueError(
                    f"SyntheticCorpus: parameter {name}={value!r} is invalid; it must be {want}."
                )

        def is_int(v: object) -> bool:
            return isinstance(v, int | np.integer) and not isinstance(v, bool)

        def is_num(v: object) -> bool:
            return is_int(v) or (isinstance(v, float | np.floating) and math.isfinite(v))

        check("n_docs", n_docs, is_int(n_docs) and n_docs >= 0, "an integer >= 0")
        check("vocab_size", vocab_size, is_int(vocab_size) and vocab_size >= 1, "an integer >= 1")
        check("n_labels", n_labels, is_int(n_labels) and n_labels >= 1, "an integer >= 1")
        check(
            "mean_doc_length",
            mean_doc_length,
            is_num(mean_doc_length) and 0 <= mean_doc_length <= 1e6,
            "a number in [0, 1e6]",
        )
        check(
            "mean_labels_per_doc",
            mean_labels_per_doc,
            is_num(mean_labels_per_doc) and mean_labels_per_doc >= 0,
            "a number >= 0",
        )
        check(
            "test_fraction",
            test_fraction,
            is_num(test_fraction) and 0 <= test_fraction <= 1,
            "a number in [0, 1]",
        )
        check(
            "zipf_exponent",
            zipf_exponent,
            is_num(zipf_exponent) and zipf_exponent >= 0,
            "a number >= 0",
        )
        check("seed", seed, is_int(seed) and seed >= 0, "an integer >= 0")
        self.n_docs = int(n_docs)
        self.vocab_size = int(vocab_size)
        self.n_labels = int(n_labels)
        self.mean_doc_length = mean_doc_length
        self.mean_labels_per_doc = mean_labels_per_doc
        self.test_fraction = test_fraction
        self.zipf_exponent = zipf_exponent
        self.seed = int(seed)
        self._get_model()  # fail now, not on a worker, when mean_labels_per_doc is unreachable

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"SyntheticCorpus({args})"

    def __len__(self) -> int:
        return self.n_docs

    @property
    def label_names(self) -> list[str]:
        """Label names ``label00``, ``label01``, ... (zero-padded, in label index order)."""
        return list(_label_names(self.n_labels))

    def params(self) -> dict:
        """All constructor parameters as a JSON-serialisable dict (``SyntheticCorpus(**p)``)."""
        return {
            "n_docs": self.n_docs,
            "vocab_size": self.vocab_size,
            "n_labels": self.n_labels,
            "mean_doc_length": float(self.mean_doc_length),
            "mean_labels_per_doc": float(self.mean_labels_per_doc),
            "test_fraction": float(self.test_fraction),
            "zipf_exponent": float(self.zipf_exponent),
            "seed": self.seed,
        }

    def vocabulary(self) -> list[str]:
        """Every word that can occur, in vocabulary-index (= Zipf rank) order."""
        return synthetic_vocabulary(self.vocab_size)

    def expected_label_frequencies(self) -> np.ndarray:
        """Exact probability that a document carries each label, shape (n_labels,)."""
        return self._get_model().marginals.copy()

    def label_themes(self) -> np.ndarray:
        """Latent theme of each label, shape (n_labels,); labels of a theme co-occur."""
        return self._get_model().label_theme.copy()

    def n_parts(self, part_size: int) -> int:
        """Number of parts of ``part_size`` documents (the last one may be shorter)."""
        _check_size("part_size", part_size)
        return -(-self.n_docs // part_size)

    def part(self, index: int, part_size: int, *, text: bool = True) -> TextBatch:
        """Documents ``[index * part_size, min(n_docs, (index + 1) * part_size))``.

        ``text=False``: their ids, labels and splits only (``texts`` empty), without
        drawing the tokens -- the same labels and splits as with the text."""
        n_parts = self.n_parts(part_size)
        if not (0 <= index < n_parts):
            raise IndexError(
                f"SyntheticCorpus.part: index={index} is out of range; with n_docs={self.n_docs} "
                f"and part_size={part_size} there are {n_parts} parts (0 .. {n_parts - 1})."
            )
        return self._slice(index * part_size, min(self.n_docs, (index + 1) * part_size), text)

    def batches(self, batch_size: int) -> Iterator[TextBatch]:
        """Stream the corpus as consecutive batches of ``batch_size`` documents."""
        for i in range(self.n_parts(batch_size)):
            yield self.part(i, batch_size)

    # -- internals

    def _get_model(self) -> _Model:
        return _model(
            self.vocab_size,
            self.n_labels,
            float(self.mean_labels_per_doc),
            float(self.zipf_exponent),
            self.seed,
        )

    def _block_key(self) -> tuple:
        return (
            self.vocab_size,
            self.n_labels,
            float(self.mean_doc_length),
            float(self.mean_labels_per_doc),
            float(self.test_fraction),
            float(self.zipf_exponent),
            self.seed,
        )

    def _slice(self, start: int, stop: int, text: bool = True) -> TextBatch:
        key = self._block_key()
        texts: list[str] = []
        labels: list[list[str]] = []
        splits: list[str] = []
        for b in range(start // BLOCK_SIZE, -(-stop // BLOCK_SIZE)):
            blk = _block(key, b) if text else _block_labels(key, b)
            lo = max(start - b * BLOCK_SIZE, 0)
            hi = min(stop - b * BLOCK_SIZE, BLOCK_SIZE)
            texts.extend(blk.texts[lo:hi])
            labels.extend(list(ls) for ls in blk.labels[lo:hi])
            splits.extend(blk.splits[lo:hi])
        ids = [f"doc{i:09d}" for i in range(start, stop)]
        return TextBatch(ids=ids, texts=texts, labels=labels, splits=splits)


def _check_size(name: str, value: int) -> None:
    if not (isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1):
        raise ValueError(
            f"SyntheticCorpus: {name}={value!r} is invalid; it must be an integer >= 1."
        )
