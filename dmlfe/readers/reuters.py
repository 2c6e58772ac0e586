"""Reader for the Reuters-21578 collection (Distribution 1.0, SGML).

The 22 files ``reut2-000.sgm`` ... ``reut2-021.sgm`` hold 21,578 ``<REUTERS>``
stories. The SGML is not well-formed XML (raw control characters, ``&#3;``
end-of-story markers, possible stray ``&``), so each story is cut out of the byte
stream and its parts are found with regular expressions; an XML parser would
reject the files. The files are latin-1: every byte decodes (one byte, 0xFC in
``reut2-017.sgm``, lies outside ASCII), so decoding can never fail.

Stories are streamed straight from the ``.tar.gz`` (no extraction to disk) or from
a folder of ``reut2-*.sgm`` files, and yielded as bounded :class:`TextBatch` es.
Every oddity that is tolerated is counted in the :class:`IngestReport`. An input
that cannot be read (a truncated or corrupt archive, a file that is not a tar
archive) is a :class:`~dmlfe.errors.DataFormatError` naming the file (and the
archive member); a missing one a :class:`~dmlfe.errors.MissingPathError`.
"""

from __future__ import annotations

import lzma
import re
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dmlfe.errors import MissingPathError
from dmlfe.readers import base
from dmlfe.readers.base import DataFormatError, IngestReport, TextBatch, open_by_content

__all__ = ["read_reuters21578", "reuters_label_counts", "MODAPTE_SKIP_REASON"]

MODAPTE_SKIP_REASON = "not in the ModApte split"

_MEMBER_RE = re.compile(r"(?:^|/)reut2-\d+\.sgm$")
_OPEN_RE = re.compile(r"<REUTERS(\s[^>]*)?>", re.IGNORECASE)
_CLOSE = "</REUTERS>"
_ATTR_RE = re.compile(r"([A-Za-z_][\w-]*)\s*=\s*(?:\"([^\"]*)\"|'([^']*)'|([^\s>\"']+))")
_TOPICS_RE = re.compile(r"<TOPICS>(.*?)</TOPICS>", re.DOTALL | re.IGNORECASE)
_D_RE = re.compile(r"<D>(.*?)</D>", re.DOTALL | re.IGNORECASE)
_TITLE_RE = re.compile(r"<TITLE>(.*?)</TITLE>", re.DOTALL | re.IGNORECASE)
_BODY_RE = re.compile(r"<BODY>(.*?)</BODY>", re.DOTALL | re.IGNORECASE)
_TEXT_RE = re.compile(r"<TEXT(?:\s[^>]*)?>(.*?)</TEXT>", re.DOTALL | re.IGNORECASE)
_TAG_RE = re.compile(r"<[^>]*>")
_DOCTYPE_RE = re.compile(r"<!DOCTYPE[^>]*>", re.IGNORECASE)
# An '&' followed by nothing that makes an entity is a stray ampersand, kept as text.
_ENTITY_RE = re.compile(r"&(?:#(\d+);|#[xX]([0-9a-fA-F]+);|([A-Za-z][A-Za-z0-9]*);)?")
# C0 and C1 control characters except tab and newline (\r goes too: lines end in \n).
_CTRL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_NON_ASCII_RE = re.compile(rb"[\x80-\xff]")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"', "apos": "'"}
_CHUNK = 1 << 20
# What reading a (compressed) file or a tar archive raises when its bytes are bad:
# tarfile.ReadError & co., EOFError (truncated stream), zlib/lzma errors, OSError
# (gzip.BadGzipFile, bz2's "Invalid data stream", a file that cannot be read).
_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError)

# Oddities counted while reading; each becomes one report note with its count.
_ODD_CTRL = "control characters removed from titles, bodies and topics (e.g. &#3; markers)"
_ODD_STRAY_AMP = "stray '&' not starting an entity, kept as text"
_ODD_UNKNOWN_ENTITY = "unknown or invalid character entities, kept as text"
_ODD_NON_ASCII = "bytes outside ASCII, decoded as latin-1"
_ODD_UNPROC = (
    "stories with neither TITLE nor BODY (TEXT TYPE=UNPROC): text taken from the whole "
    "TEXT element with tags removed"
)
_ODD_EMPTY = "stories with no text at all (read as empty documents)"
_ODD_NO_TOPICS_EL = "stories without a <TOPICS> element (read as having no topics)"
_ODD_DUP_TOPIC = "stories listing a topic twice (duplicate dropped)"
_ODD_EMPTY_TOPIC = "empty <D></D> topic items ignored"
_ODD_UNCLOSED = "stories without a closing </REUTERS> tag (read up to the next story)"
_ODD_OUTSIDE = "files with text outside <REUTERS> elements (ignored)"
_ODD_NO_ATTR = "stories without a LEWISSPLIT, CGISPLIT or TOPICS attribute (read as '')"
_ODD_ORDER = "tar members not in name order (read in archive order)"


@dataclass
class _RawStory:
    """One story cut out of a file: its opening-tag attributes and its content."""

    attrs: dict[str, str]
    content: str
    source: str


def _clean(raw: str, odd: Counter) -> str:
    """Unescape entities and remove control characters; count what was tolerated."""

    def repl(m: re.Match[str]) -> str:
        dec, hexa, name = m.groups()
        if dec is None and hexa is None and name is None:
            odd[_ODD_STRAY_AMP] += 1
            return "&"
        if name is not None:
            if name in _NAMED:
                return _NAMED[name]
            odd[_ODD_UNKNOWN_ENTITY] += 1
            return m.group(0)
        code = int(dec) if dec is not None else int(hexa, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            odd[_ODD_UNKNOWN_ENTITY] += 1
            return m.group(0)
        return chr(code)

    text = _ENTITY_RE.sub(repl, raw)
    text, n_ctrl = _CTRL_RE.subn("", text)
    odd[_ODD_CTRL] += n_ctrl
    return text


def _parse_attrs(s: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, dq, sq, bare in _ATTR_RE.findall(s or ""):
        # findall gives "" for the alternatives that did not match.
        out[name.upper()] = dq or sq or bare
    return out


def _stories_in_text(text: str, source: str, odd: Counter) -> Iterator[_RawStory]:
    """Stories of ``text`` ending at a ``</REUTERS>``; the text holds no closing tag otherwise."""
    opens = list(_OPEN_RE.finditer(text))
    if len(opens) > 1:
        # A story without its closing tag ends where the next one opens.
        odd[_ODD_UNCLOSED] += len(opens) - 1
    for i, m in enumerate(opens):
        end = opens[i + 1].start() if i + 1 < len(opens) else len(text)
        yield _RawStory(_parse_attrs(m.group(1)), text[m.end() : end], source)


def _iter_file_stories(fobj: IO[bytes], source: str, odd: Counter,
                       where: str | None = None) -> Iterator[_RawStory]:
    """Stream the stories of one SGML file, reading it in chunks of 1 MiB.

    The unfinished story held between chunks is bounded: a story longer than
    :data:`dmlfe.readers.base.MAX_LINE_BYTES` (a file without closing tags, a
    decompression bomb) is a :class:`DataFormatError` naming ``where`` (default
    ``source``) and the line the story starts on, and is never read whole.
    """
    limit = base.MAX_LINE_BYTES  # at call time, so that tests can lower it
    where = source if where is None else where
    buf = ""
    outside = False
    lines_before = 0  # lines of the file before buf's start: for the error message
    while True:
        chunk = fobj.read(_CHUNK)
        if not chunk:
            break
        odd[_ODD_NON_ASCII] += len(_NON_ASCII_RE.findall(chunk))
        # latin-1 maps each byte to one character, so chunk boundaries are safe.
        buf += chunk.decode("latin-1")
        pos = 0
        # Scan by position and cut the buffer once per chunk, not once per story.
        while (end := buf.find(_CLOSE, pos)) >= 0:
            piece, pos = buf[pos:end], end + len(_CLOSE)
            first = _OPEN_RE.search(piece)
            head = piece if first is None else piece[: first.start()]
            outside |= bool(_DOCTYPE_RE.sub("", head).strip())
            yield from _stories_in_text(piece, source, odd)
        lines_before += buf.count("\n", 0, pos)
        buf = buf[pos:]
        if len(buf) > limit:
            opens = list(_OPEN_RE.finditer(buf))
            if len(opens) > 1:
                # Stories without closing tags end where the next one opens: hand them
                # out now rather than hold them all until a closing tag comes.
                cut = opens[-1].start()
                piece = buf[:cut]
                outside |= bool(_DOCTYPE_RE.sub("", piece[: opens[0].start()]).strip())
                odd[_ODD_UNCLOSED] += 1  # the piece's last story is unclosed too
                yield from _stories_in_text(piece, source, odd)
                lines_before += buf.count("\n", 0, cut)
                buf = buf[cut:]
            if len(buf) > limit:
                start = _OPEN_RE.search(buf)
                at = lines_before + buf.count("\n", 0, start.start() if start else 0) + 1
                raise base.line_too_long(f"{where}, the story starting at line {at}", limit,
                                         "story")
    first = _OPEN_RE.search(buf)
    head = buf if first is None else buf[: first.start()]
    outside |= bool(_DOCTYPE_RE.sub("", head).strip())
    if first is not None:
        # The file ends inside a story: read what there is.
        odd[_ODD_UNCLOSED] += 1
        yield from _stories_in_text(buf, source, odd)
    if outside:
        odd[_ODD_OUTSIDE] += 1


def _iter_raw_stories(path: str | Path, odd: Counter) -> Iterator[_RawStory]:
    """Every story of a .tar(.gz), a folder of reut2-*.sgm or a single .sgm file, in order."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if _MEMBER_RE.search(f.name))
        if not files:
            raise DataFormatError(
                f"no reut2-NNN.sgm file in folder {p}: pass the Reuters-21578 .tar.gz or "
                "the folder it unpacks to"
            )
        for f in files:
            yield from _sgm_stories(f, odd)
        return
    if not p.exists():
        raise MissingPathError(f"Reuters-21578 input {p} does not exist")
    if p.suffix.lower() == ".sgm":
        yield from _sgm_stories(p, odd)
        return
    yield from _tar_stories(p, odd)


def _sgm_stories(path: Path, odd: Counter) -> Iterator[_RawStory]:
    """The stories of one plain .sgm file; a failure to read it names the file."""
    try:
        with open(path, "rb") as fobj:
            yield from _iter_file_stories(fobj, path.name, odd, str(path))
    except FileNotFoundError as exc:
        raise MissingPathError(f"Reuters-21578 file {path} does not exist") from exc
    except OSError as exc:
        raise DataFormatError(f"{path}: cannot be read ({type(exc).__name__}: {exc})") from exc


def _tar_stories(p: Path, odd: Counter) -> Iterator[_RawStory]:
    """The stories of the reut2-*.sgm members of a tar archive (plain, gz, bz2 or xz).

    The one place that opens and reads an archive: any failure to read, decompress or
    unpack it is a :class:`DataFormatError` naming the archive and the member.
    """
    n_found = 0
    n_stories = 0
    last = ""
    ended = False
    try:
        # Stream mode ("r|"): members are read once, in archive order, never extracted.
        with open_by_content(p)[0] as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
            for member in tar:
                if not (member.isfile() and _MEMBER_RE.search(member.name)):
                    continue
                n_found += 1
                if member.name < last:
                    odd[_ODD_ORDER] = 1
                last = member.name
                fobj = tar.extractfile(member)
                if fobj is None:  # pragma: no cover - isfile() members always extract
                    continue
                for story in _iter_file_stories(fobj, Path(member.name).name, odd,
                                                f"{p}, member {member.name}"):
                    n_stories += 1
                    yield story
            # Read to the end of the compressed stream, so that its checksum is checked.
            ended = True
            while raw.read(_CHUNK):
                pass
    except FileNotFoundError as exc:
        raise MissingPathError(f"Reuters-21578 input {p} does not exist") from exc
    except _READ_ERRORS as exc:
        detail = f"{type(exc).__name__}: {exc}"
        if n_found == 0:
            raise DataFormatError(
                f"{p} is not a readable tar archive, or it is truncated or corrupt ({detail}): "
                "pass the Reuters-21578 .tar.gz, a folder of reut2-*.sgm files or one .sgm file"
            ) from exc
        where = "at its end" if ended else f"in member {last!r}"
        raise DataFormatError(
            f"{p}: the archive is truncated or corrupt: reading failed {where}, after "
            f"{n_stories} stories ({detail}); download the archive again"
        ) from exc
    if n_found == 0:
        raise DataFormatError(
            f"no reut2-NNN.sgm member in archive {p}: is this the Reuters-21578 archive?"
        )


def _topics(story: _RawStory, odd: Counter) -> list[str]:
    m = _TOPICS_RE.search(story.content)
    if m is None:
        odd[_ODD_NO_TOPICS_EL] += 1
        return []
    labels: list[str] = []
    for raw in _D_RE.findall(m.group(1)):
        label = _clean(raw, odd).strip()
        if not label:
            odd[_ODD_EMPTY_TOPIC] += 1
        elif label in labels:
            odd[_ODD_DUP_TOPIC] += 1
        else:
            labels.append(label)
    return labels


def _text(story: _RawStory, odd: Counter) -> str:
    parts = []
    for rx in (_TITLE_RE, _BODY_RE):
        m = rx.search(story.content)
        if m is not None:
            part = _clean(m.group(1), odd).strip()
            if part:
                parts.append(part)
    if parts:
        return "\n".join(parts)
    m = _TEXT_RE.search(story.content)
    if m is not None:
        text = _clean(_TAG_RE.sub("", m.group(1)), odd).strip()
        if text:
            odd[_ODD_UNPROC] += 1
            return text
    odd[_ODD_EMPTY] += 1
    return ""


def _in_modapte(attrs: dict[str, str]) -> bool:
    return attrs.get("TOPICS") == "YES" and attrs.get("LEWISSPLIT") in ("TRAIN", "TEST")


def reuters_label_counts(path: str | Path, *, modapte: bool = False) -> dict[str, int]:
    """Number of stories carrying each topic, most frequent first (ties by name).

    Parameters
    ----------
    path : str or Path
        The Reuters-21578 ``.tar.gz``, a folder of ``reut2-*.sgm`` or one ``.sgm`` file.
    modapte : bool
        False: count over all 21,578 stories (any LEWISSPLIT, any TOPICS attribute).
        True: count over the ModApte *training* stories only (LEWISSPLIT="TRAIN" and
        TOPICS="YES", 9,603 stories), the set on which the R10 ranking is defined.

    Returns
    -------
    dict of str to int
        Topic -> number of stories, ordered by decreasing count then by name.
    """
    odd: Counter = Counter()
    counts: Counter = Counter()
    for story in _iter_raw_stories(path, odd):
        if modapte and not (_in_modapte(story.attrs) and story.attrs["LEWISSPLIT"] == "TRAIN"):
            continue
        counts.update(_topics(story, odd))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _top_labels(path: str | Path, top_n: int, modapte: bool, report: IngestReport) -> set[str]:
    counts = reuters_label_counts(path, modapte=modapte)
    if len(counts) < top_n:
        report.note(
            f"reuters21578: top_n={top_n} asked but only {len(counts)} topics occur; "
            "all of them kept"
        )
    return set(list(counts)[:top_n])


def read_reuters21578(
    path: str | Path,
    *,
    modapte: bool = False,
    top_n: int | None = None,
    batch_size: int = 1000,
    report: IngestReport | None = None,
) -> Iterator[TextBatch]:
    """Stream the Reuters-21578 stories as batches of documents.

    Each ``<REUTERS>`` story becomes one document:

    * id: the NEWID attribute;
    * text: TITLE and BODY joined by a newline, each unescaped (``&lt;`` -> ``<``,
      ``&amp;`` -> ``&``, ``&#3;`` -> control character), stripped of control
      characters (tab and newline kept) and of surrounding white space. When one is
      absent or empty the other alone is the text. When both are absent (the 737
      ``TEXT TYPE="UNPROC"`` stories) the whole TEXT element, tags removed, is the
      text; when that is empty too the document is empty. Both cases are counted;
    * labels: the ``<D>`` items of ``<TOPICS>``, in file order (a repeated item is
      dropped and counted);
    * split: LEWISSPLIT lower-cased ("train", "test", "not-used");
    * meta: ``lewissplit`` and ``cgisplit`` (attribute values as written) and
      ``topics_attr`` (the TOPICS attribute: YES, NO or BYPASS).

    Parameters
    ----------
    path : str or Path
        The distribution's ``.tar.gz`` (members ``reut2-*.sgm`` read in archive order
        straight from the archive, nothing extracted), a folder holding the
        ``reut2-*.sgm`` files (read in name order), or a single ``.sgm`` file.
    modapte : bool
        Keep only the ModApte split: LEWISSPLIT TRAIN or TEST with TOPICS="YES"
        (9,603 train / 3,299 test stories). Others are counted in the report as
        skipped, reason :data:`MODAPTE_SKIP_REASON`.
    top_n : int, optional
        Keep only the ``top_n`` most frequent topics (ties broken by name) as labels,
        and only the stories carrying at least one of them; the others are counted as
        skipped. Frequencies are numbers of stories, counted in a first pass:

        * with ``modapte=True``, over the ModApte training stories; ``top_n=10`` gives
          the usual R10 set (earn, acq, money-fx, grain, crude, trade, interest, ship,
          wheat, corn) and 6,490 train / 2,545 test stories;
        * without, over all 21,578 stories (any LEWISSPLIT, any TOPICS attribute), and
          every story of the collection carrying one of those topics is kept whatever
          its split: ``top_n=10`` gives the same ten topics and 9,400 stories (the
          "every story carrying one of those topics" protocol).
    batch_size : int
        Maximum number of documents per batch (the last one may be smaller).
    report : IngestReport, optional
        Filled as the stream is read: ``n_read`` counts the documents yielded,
        ``skip`` the stories left out (with reasons), and notes give the count of each
        tolerated oddity (written when the stream ends or is closed).

    Yields
    ------
    TextBatch
        With ``splits`` and ``meta`` filled.

    Raises
    ------
    DataFormatError
        When the input holds no ``reut2-*.sgm`` file, is not a readable archive, or is
        truncated or corrupt (the message names the archive and the member).
    MissingPathError
        When the path does not exist.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    if top_n is not None and top_n < 1:
        raise ValueError(f"top_n must be a positive integer or None, got {top_n}")
    report = report if report is not None else IngestReport()
    keep = _top_labels(path, top_n, modapte, report) if top_n is not None else None
    top_reason = f"no topic among the {top_n} most frequent"
    odd: Counter = Counter()
    seen: set[str] = set()
    try:
        yield from _batches(
            _documents(path, modapte, keep, top_reason, seen, odd, report), batch_size
        )
    finally:
        for message, n in odd.items():
            if n:
                report.note(f"reuters21578: {n} {message}")


_Doc = tuple[str, str, list[str], str, str, str, str]


def _documents(
    path: str | Path,
    modapte: bool,
    keep: set[str] | None,
    top_reason: str,
    seen: set[str],
    odd: Counter,
    report: IngestReport,
) -> Iterator[_Doc]:
    for story in _iter_raw_stories(path, odd):
        attrs = story.attrs
        newid = attrs.get("NEWID", "").strip()
        if not newid:
            report.skip(f"story without a NEWID attribute (in {story.source})")
            continue
        if newid in seen:
            report.skip("story repeating an earlier NEWID (first one kept)")
            continue
        seen.add(newid)
        if modapte and not _in_modapte(attrs):
            report.skip(MODAPTE_SKIP_REASON)
            continue
        labels = _topics(story, odd)
        if keep is not None:
            labels = [lab for lab in labels if lab in keep]
            if not labels:
                report.skip(top_reason)
                continue
        if not all(k in attrs for k in ("LEWISSPLIT", "CGISPLIT", "TOPICS")):
            odd[_ODD_NO_ATTR] += 1
        lewis = attrs.get("LEWISSPLIT", "")
        report.n_read += 1
        yield (
            newid,
            _text(story, odd),
            labels,
            lewis.lower(),
            lewis,
            attrs.get("CGISPLIT", ""),
            attrs.get("TOPICS", ""),
        )


def _batches(docs: Iterable[_Doc], batch_size: int) -> Iterator[TextBatch]:
    buf: list[_Doc] = []
    chars = 0
    for doc in docs:
        buf.append(doc)
        chars += len(doc[1])
        if base.batch_full(len(buf), chars, batch_size):
            yield _to_batch(buf)
            buf, chars = [], 0
    if buf:
        yield _to_batch(buf)


def _to_batch(docs: list[_Doc]) -> TextBatch:
    ids, texts, labels, splits, lewis, cgi, topics = (list(col) for col in zip(*docs, strict=True))
    return TextBatch(
        ids=ids,
        texts=texts,
        labels=labels,
        splits=splits,
        meta={"lewissplit": lewis, "cgisplit": cgi, "topics_attr": topics},
    )
