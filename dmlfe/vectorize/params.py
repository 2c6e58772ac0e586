"""Parameters of the text vectorisers, validated once and stored as provenance."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from numbers import Integral, Real

from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer

VECTORIZERS = ("tfidf", "hashing")
#: Version of the vectoriser record a store keeps (its ``vectorizer`` provenance: these
#: parameters, plus the vocabulary in ``var/_index`` and the idf in ``uns/idf``); 1 is
#: the first that keeps everything needed to vectorise new text identically.
VECTORIZER_VERSION = 1


@dataclass(frozen=True)
class VectorizerParams:
    """How raw text becomes a tf-idf matrix.

    ``kind="tfidf"`` learns a vocabulary with a distributed document-frequency pass
    (same semantics as scikit-learn's ``TfidfVectorizer``: ``min_df``/``max_df`` as
    counts when int and fractions when float, ``max_features`` keeps the terms with
    the largest corpus frequency, features sorted alphabetically).
    ``kind="hashing"`` is stateless (scikit-learn's ``HashingVectorizer`` with
    ``alternate_sign=False``) followed by idf; for million-dimension vocabularies.
    Both use smooth idf, ``idf = ln((1 + n) / (1 + df)) + 1``, optional sublinear tf
    ``1 + ln(tf)`` and row normalisation ``norm`` (``"l2"``, ``"l1"`` or None).
    """

    kind: str = "tfidf"
    ngram_range: tuple[int, int] = (1, 1)
    min_df: float = 1
    max_df: float = 1.0
    max_features: int | None = None
    sublinear_tf: bool = False
    norm: str | None = "l2"
    lowercase: bool = True
    n_features: int = 2**20

    def __post_init__(self) -> None:
        if self.kind not in VECTORIZERS:
            raise ValueError(f"vectorizer must be one of {VECTORIZERS}, got {self.kind!r}")
        lo, hi = self.ngram_range
        if not (isinstance(lo, Integral) and isinstance(hi, Integral) and 1 <= lo <= hi):
            raise ValueError(f"ngram_range must be (min_n, max_n) with 1 <= min_n <= max_n, "
                             f"got {self.ngram_range!r}")
        object.__setattr__(self, "ngram_range", (int(lo), int(hi)))
        for name in ("min_df", "max_df"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, Real) or v < 0:
                raise ValueError(f"{name} must be a non-negative int (documents) or float "
                                 f"(fraction), got {v!r}")
            if not isinstance(v, Integral) and v > 1:
                raise ValueError(f"{name} as a float is a fraction of documents and must be "
                                 f"in [0, 1], got {v!r}")
        if self.max_features is not None and self.max_features < 1:
            raise ValueError(f"max_features must be a positive int or None, got "
                             f"{self.max_features!r}")
        if self.norm not in ("l1", "l2", None):
            raise ValueError(f"norm must be 'l2', 'l1' or None, got {self.norm!r}")
        if not 1 <= self.n_features <= 2**31 - 1:
            raise ValueError(f"n_features must be in [1, 2**31 - 1], got {self.n_features!r}")
        if self.kind == "hashing" and self.max_features is not None:
            raise ValueError("max_features applies to kind='tfidf' only; hashing has a fixed "
                             "n_features")

    @classmethod
    def from_dict(cls, d: dict) -> VectorizerParams:
        """The parameters :meth:`to_dict` wrote (other keys, e.g. "version", ignored)."""
        fields = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in d.items() if k in fields}
        if "ngram_range" in kw:
            kw["ngram_range"] = tuple(kw["ngram_range"])
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ngram_range"] = list(self.ngram_range)
        return d

    def count_vectorizer(self, vocabulary: dict[str, int] | None = None) -> CountVectorizer:
        """A CountVectorizer with this tokenisation (and a fixed vocabulary if given)."""
        return CountVectorizer(
            ngram_range=self.ngram_range,
            lowercase=self.lowercase,
            vocabulary=vocabulary,
            dtype="int64",
        )

    def hashing_vectorizer(self) -> HashingVectorizer:
        return HashingVectorizer(
            n_features=self.n_features,
            ngram_range=self.ngram_range,
            lowercase=self.lowercase,
            alternate_sign=False,
            norm=None,
            dtype="float64",
        )
