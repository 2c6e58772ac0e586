"""The corpus readers, each declared once: its name, options, reading function and kind.

A :class:`ReaderSpec` says everything the rest of dmlfe needs to know about a corpus
format: :func:`dmlfe.ingest` and :func:`dmlfe.append` dispatch through it, ``dmlfe
ingest --format`` takes its choices and its reader flags from it, and a pipeline's
``datasets[i].format`` and ``options`` keys come from it. Adding a format is one
:func:`register_reader` call::

    from dmlfe.params import Param, anything
    from dmlfe.readers.registry import ReaderSpec, register_reader

    def read_tsv(paths, *, report, batch_size, label_sep=","):
        ...  # yields dmlfe.readers.base.TextBatch

    register_reader(ReaderSpec(
        name="tsv", kind="text", read=read_tsv, description="id, labels, text per line",
        options=(Param("label_sep", ",", anything, "str, default ','\\n    the label "
                       "separator", {"default": None, "help": "tsv: the label separator"}),)))

The reading function gets the source paths as a list of :class:`~pathlib.Path`,
``report`` (an :class:`~dmlfe.readers.base.IngestReport` to count what it leaves out),
``batch_size`` and the options given. A text reader returns an iterator of
:class:`~dmlfe.readers.base.TextBatch`; a numeric one a
:class:`~dmlfe.readers.base.NumericSource`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmlfe.errors import InputError
from dmlfe.params import Param, anything
from dmlfe.readers.arff import read_meka, read_mulan
from dmlfe.readers.base import IngestReport, NumericSource, TextBatch
from dmlfe.readers.reuters import read_reuters21578
from dmlfe.readers.synthetic import SyntheticCorpus
from dmlfe.readers.tabular import jsonl_has_field, parquet_has_field, read_jsonl, read_parquet
from dmlfe.readers.xmc import read_svmlight, read_xmc

#: The kinds of corpus: raw documents still to vectorise, or numeric features.
KINDS = ("text", "numeric")


@dataclass(frozen=True)
class ReaderSpec:
    """One corpus format.

    Attributes
    ----------
    name : str
        The format's name (``dmlfe ingest --format NAME``, ``dmlfe.ingest(..., NAME)``).
    kind : {"text", "numeric"}
        "text": documents the ingest vectorises; "numeric": features as they are.
    read : callable or None
        ``read(paths, *, report, batch_size, **options)``: an iterator of
        :class:`~dmlfe.readers.base.TextBatch` (text) or a
        :class:`~dmlfe.readers.base.NumericSource` (numeric). None for a corpus
        generated on the workers (``generate``).
    options : tuple of Param
        The reader's options: name, default, check, doc and ``dmlfe ingest`` flag
        (``flag`` None: no flag). Readers that share an option share its Param.
    description : str
        One line: what the format is.
    generate : callable or None
        A generated corpus (no source path): ``generate(**options)`` gives an object with
        ``n_parts(size)``, ``part(index, size, text=...)``, ``label_names`` and
        ``params()``, like :class:`~dmlfe.readers.synthetic.SyntheticCorpus`.
    appendable : bool
        Whether :func:`dmlfe.append` takes documents in this format.
    one_source : bool
        Whether the format takes exactly one source path (``read`` then gets a list of
        one).
    required : tuple of str
        Options that must be given.
    path_options : tuple of str
        Options that name a file, resolved against a pipeline's ``data_dir``.
    first_record_has : callable or None
        ``first_record_has(path, field) -> bool``; with a ``split_field`` option, the
        field ``split`` names the splits when the first record has it.
    suffixes : tuple of str
        File name endings of the format (compression suffixes removed), for guessing a
        file's format by its name.
    group : str
        Title of the ``dmlfe ingest --help`` group of its flags.
    """

    name: str
    kind: str
    read: Callable[..., Iterator[TextBatch] | NumericSource] | None
    options: tuple[Param, ...] = ()
    description: str = ""
    generate: Callable[..., Any] | None = None
    appendable: bool = True
    one_source: bool = False
    required: tuple[str, ...] = ()
    path_options: tuple[str, ...] = ()
    first_record_has: Callable[[Path, str], bool] | None = None
    suffixes: tuple[str, ...] = ()
    group: str = "reader options"

    @property
    def option_names(self) -> tuple[str, ...]:
        """The names of the reader's options, in declaration order."""
        return tuple(p.name for p in self.options)

    @property
    def needs_source(self) -> bool:
        """Whether the format reads files (every format but a generated corpus)."""
        return self.generate is None

    def option(self, name: str) -> Param:
        """The declaration of option ``name``."""
        return next(p for p in self.options if p.name == name)

    def flag_words(self, name: str) -> str:
        """Option ``name``'s flag as its help shows it, e.g. ``--labels FILE.xml``."""
        p = self.option(name)
        metavar = (p.flag or {}).get("metavar")
        return p.option + (f" {metavar}" if metavar else "")

    def check_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` (this reader's only) checked by their declarations; InputError
        naming the format and the option for a value refused, or a required one missing."""
        for name in self.required:
            if options.get(name) in (None, ""):
                doc = self.option(name).doc.partition("\n")[2].strip()
                raise InputError(f"format {self.name!r} needs {doc}: {name}= (command line: "
                                 f"{self.flag_words(name)})")
        out = dict(options)
        for p in self.options:
            if p.name in out:
                try:
                    out[p.name] = p.check(p.name, out[p.name])
                except (TypeError, ValueError) as exc:
                    raise InputError(f"format {self.name!r}: {exc}") from None
        return out


_READERS: dict[str, ReaderSpec] = {}


def register_reader(spec: ReaderSpec) -> ReaderSpec:
    """Add ``spec`` to the registry (ingest, the command line and pipelines take it).

    Raises
    ------
    ValueError
        The name is taken, the kind unknown, the spec neither reads nor generates, or an
        option shares a name with another reader's option but not its flag.
    """
    if spec.name in _READERS:
        raise ValueError(f"reader {spec.name!r} is registered already; unregister_reader "
                         "it first")
    if spec.kind not in KINDS:
        raise ValueError(f"reader {spec.name!r}: kind {spec.kind!r} is not one of {KINDS}")
    if (spec.read is None) == (spec.generate is None):
        raise ValueError(f"reader {spec.name!r} needs exactly one of read and generate")
    for p in spec.options:
        for other in _READERS.values():
            mine = next((q for q in other.options if q.name == p.name), None)
            if mine is not None and mine.flag != p.flag:
                raise ValueError(f"reader {spec.name!r}: option {p.name!r} is declared by "
                                 f"reader {other.name!r} with another flag; share its Param")
    _READERS[spec.name] = spec
    return spec


def unregister_reader(name: str) -> None:
    """Remove reader ``name`` (a test's toy reader); unknown names are an InputError."""
    get_reader(name)
    del _READERS[name]


def get_reader(name: Any) -> ReaderSpec:
    """The spec of format ``name``; InputError listing the formats for any other name."""
    spec = _READERS.get(name) if isinstance(name, str) else None
    if spec is None:
        raise InputError(f"unknown format {name!r}; choose one of {', '.join(_READERS)}")
    return spec


def all_readers() -> dict[str, ReaderSpec]:
    """Every registered reader by name, in registration order."""
    return dict(_READERS)


def reader_names(kind: str | None = None) -> tuple[str, ...]:
    """The registered format names (of ``kind`` "text" or "numeric" only, when given)."""
    return tuple(n for n, s in _READERS.items() if kind is None or s.kind == kind)


def reader_options() -> list[tuple[Param, str]]:
    """Every reader option once (options shared by readers appear once), in registration
    order, with the ``dmlfe ingest --help`` group of the first reader that declares it."""
    seen: dict[str, tuple[Param, str]] = {}
    for spec in _READERS.values():
        for p in spec.options:
            seen.setdefault(p.name, (p, spec.group))
    return list(seen.values())


def readers_with_option(name: str) -> tuple[str, ...]:
    """The formats that take option ``name``."""
    return tuple(n for n, s in _READERS.items() if name in s.option_names)


# ----------------------------------------------------------------------- the built-in ones
def _read_reuters(paths: list[Path], *, report: IngestReport, batch_size: int,
                  **options: Any) -> Iterator[TextBatch]:
    return read_reuters21578(paths[0], batch_size=batch_size,
                             report=report, **options)


def _read_jsonl(paths: list[Path], *, report: IngestReport, batch_size: int,
                **options: Any) -> Iterator[TextBatch]:
    return read_jsonl(paths[0], batch_size=batch_size, report=report,
                      **options)


def _read_parquet(paths: list[Path], *, report: IngestReport, batch_size: int,
                  **options: Any) -> Iterator[TextBatch]:
    return read_parquet(paths[0], batch_size=batch_size, report=report,
                        **options)


def _read_mulan(paths: list[Path], *, report: IngestReport, batch_size: int,
                labels: Any = None) -> NumericSource:
    return read_mulan(paths, labels, report=report)


def _read_meka(paths: list[Path], *, report: IngestReport, batch_size: int) -> NumericSource:
    return read_meka(paths, report=report)


def _read_xmc(paths: list[Path], *, report: IngestReport, batch_size: int,
              **options: Any) -> NumericSource:
    return read_xmc(paths, report=report, **options)


def _read_svmlight(paths: list[Path], *, report: IngestReport, batch_size: int,
                   **options: Any) -> NumericSource:
    return read_svmlight(paths, report=report, **options)


def _option(name: str, default: Any, doc: str, flag: dict[str, Any] | None = None) -> Param:
    # The readers check their own options where they read them (one place for each
    # check): the registry's declarations pass values on as they are.
    return Param(name, default, anything, doc, flag)


MODAPTE = _option("modapte", False, "bool, default False\n    the ModApte split",
                  {"action": "store_true", "default": None,
                   "help": "reuters21578: the ModApte split"})
TOP_N = _option("top_n", None, "int, optional\n    keep the N most frequent topics",
                {"type": int, "default": None,
                 "help": "reuters21578: keep the N most frequent topics (10 = R10)"})
TEXT_FIELD, LABELS_FIELD, ID_FIELD = (
    _option(f"{f}_field", d, f"str, default {d!r}\n    the {f} field",
            {"default": None, "help": f"jsonl/parquet: the {f} field"})
    for f, d in (("text", "text"), ("labels", "labels"), ("id", None)))
SPLIT_FIELD = _option(
    "split_field", None, "str, optional\n    the split field",
    {"default": None, "help": "jsonl/parquet: the split field (default: split, when the "
     "first record has it; else the corpus has no splits)"})
LABELS_XML = _option("labels", None, "path\n    the MULAN .xml file naming the labels (it "
                     "comes with the .arff files)",
                     {"default": None, "metavar": "FILE.xml",
                      "help": "mulan: the .xml file naming the labels"})
LABEL_MAP = _option("label_map", None, "path, optional\n    the label names, one a line",
                    {"default": None, "metavar": "FILE",
                     "help": "xmc/svmlight: the label names, one a line (line i names label "
                     "i; default: the indices)"})
FEATURE_MAP = _option("feature_map", None, "path, optional\n    the feature names, one a line",
                      {"default": None, "metavar": "FILE",
                       "help": "xmc/svmlight: the feature names, one a line (default: the "
                       "indices)"})
ZERO_BASED = _option("zero_based", "auto", "{'auto', True, False}, default 'auto'\n    "
                     "whether feature indices start at 0",
                     {"choices": ["auto", "true", "false"], "default": None,
                      "help": "svmlight: whether feature indices start at 0; auto (default): "
                      "yes when some line holds feature index 0"})
_SYNTHETIC_FLAGS = {"n_docs": "number of documents", "vocab_size": "number of distinct words",
                    "n_labels": "number of labels", "seed": "random seed of the corpus"}
SYNTHETIC_OPTIONS = tuple(
    _option(name, p.default, f"{type(p.default).__name__}, default {p.default}\n    "
            "see :class:`~dmlfe.readers.synthetic.SyntheticCorpus`",
            {"type": int, "default": None, "help": _SYNTHETIC_FLAGS[name]}
            if name in _SYNTHETIC_FLAGS else None)
    for name, p in inspect.signature(SyntheticCorpus).parameters.items())
_TABULAR = (TEXT_FIELD, LABELS_FIELD, ID_FIELD, SPLIT_FIELD)

for _spec in (
    ReaderSpec("reuters21578", "text", _read_reuters, (MODAPTE, TOP_N), one_source=True,
               description="the Reuters-21578 .tar.gz or a folder of its .sgm files"),
    ReaderSpec("jsonl", "text", _read_jsonl, _TABULAR, one_source=True,
               first_record_has=jsonl_has_field, suffixes=(".jsonl", ".ndjson", ".json"),
               description="JSON Lines, one document a line (plain, gzip, bzip2 or xz)"),
    ReaderSpec("parquet", "text", _read_parquet, _TABULAR, one_source=True,
               first_record_has=parquet_has_field, suffixes=(".parquet",),
               description="a Parquet file or a folder of them"),
    ReaderSpec("synthetic", "text", None, SYNTHETIC_OPTIONS, generate=SyntheticCorpus,
               appendable=False, group="synthetic corpus",
               description="a reproducible synthetic corpus generated on the workers"),
    ReaderSpec("mulan", "numeric", _read_mulan, (LABELS_XML,), required=("labels",),
               path_options=("labels",), suffixes=(".arff",),
               description="MULAN ARFF files and the .xml naming the labels"),
    ReaderSpec("meka", "numeric", _read_meka, suffixes=(".arff",),
               description="MEKA ARFF files (the labels counted by -C in @relation)"),
    ReaderSpec("xmc", "numeric", _read_xmc, (LABEL_MAP, FEATURE_MAP),
               description="the Extreme Classification Repository's sparse text files"),
    ReaderSpec("svmlight", "numeric", _read_svmlight, (ZERO_BASED, LABEL_MAP, FEATURE_MAP),
               description="svmlight / LibSVM multi-label files"),
):
    register_reader(_spec)
