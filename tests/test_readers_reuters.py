"""Tests of the Reuters-21578 reader: hand-made SGML with every oddity, and the real
collection's published split sizes (Lewis splits, ModApte, R10)."""

from __future__ import annotations

import io
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from helpers import data_path

from dmlfe.readers.base import DataFormatError, IngestReport, TextBatch
from dmlfe.readers.reuters import read_reuters21578, reuters_label_counts

# Two small files in the distribution's layout. Oddities: a stray '&' (AT&T), &lt; and
# &amp; entities, &#2;/&#3; markers, a raw \x03 and \x7f, a latin-1 byte (0xFC, u-umlaut),
# a story without TITLE, one without BODY, one with neither (TYPE="UNPROC"), one with
# an empty <TOPICS>.
SGM_000 = (
    b'<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
    b'<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="5" NEWID="10">\n'
    b"<DATE>26-FEB-1987 15:01:01.79</DATE>\n"
    b"<TOPICS><D>grain</D><D>wheat</D></TOPICS>\n"
    b"<PLACES><D>usa</D></PLACES>\n"
    b"<UNKNOWN>&#5;&#5;C T</UNKNOWN>\n"
    b"<TEXT>&#2;\n"
    b"<TITLE>AT&T &lt;T> BUYS WHEAT</TITLE>\n"
    b"<DATELINE>    NEW YORK, March 1 - </DATELINE><BODY>Body one says 5 &amp; 6.\n"
    b" Reuter\n"
    b"&#3;</BODY></TEXT>\n"
    b"</REUTERS>\n"
    b'<REUTERS TOPICS="YES" LEWISSPLIT="TEST" CGISPLIT="TRAINING-SET" OLDID="6" NEWID="11">\n'
    b"<TOPICS><D>earn</D></TOPICS>\n"
    b"<TEXT>&#2;\n"
    b"<DATELINE>MUNICH, March 2 - </DATELINE><BODY>No title\x03 in M\xfcnchen.\n"
    b" Reuter\n"
    b"&#3;</BODY></TEXT>\n"
    b"</REUTERS>\n"
)
SGM_001 = (
    b'<!DOCTYPE lewis SYSTEM "lewis.dtd">\n'
    b'<REUTERS TOPICS="NO" LEWISSPLIT="NOT-USED" CGISPLIT="PUBLISHED-TESTSET" OLDID="7" '
    b'NEWID="12">\n'
    b"<TOPICS></TOPICS>\n"
    b'<TEXT TYPE="BRIEF">&#2;\n'
    b"<TITLE>BRIEF TITLE ONLY\x7f</TITLE>\n"
    b"&#3;</TEXT>\n"
    b"</REUTERS>\n"
    b'<REUTERS TOPICS="BYPASS" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" OLDID="8" NEWID="13">\n'
    b"<TOPICS><D>acq</D></TOPICS>\n"
    b'<TEXT TYPE="UNPROC">&#2;\n'
    b"RAW TABLE &lt;X>\n"
    b" line 2\n"
    b"&#3;</TEXT>\n"
    b"</REUTERS>\n"
)

# The four stories as the docstring's rules say they must be read.
EXPECTED = {
    "ids": ["10", "11", "12", "13"],
    "texts": [
        "AT&T <T> BUYS WHEAT\nBody one says 5 & 6.\n Reuter",
        "No title in M\u00fcnchen.\n Reuter",
        "BRIEF TITLE ONLY",
        "RAW TABLE <X>\n line 2",
    ],
    "labels": [["grain", "wheat"], ["earn"], [], ["acq"]],
    "splits": ["train", "test", "not-used", "train"],
    "lewissplit": ["TRAIN", "TEST", "NOT-USED", "TRAIN"],
    "cgisplit": ["TRAINING-SET", "TRAINING-SET", "PUBLISHED-TESTSET", "TRAINING-SET"],
    "topics_attr": ["YES", "YES", "NO", "BYPASS"],
}


def _collect(batches) -> dict[str, list]:
    out: dict[str, list] = {k: [] for k in EXPECTED}
    for b in batches:
        assert isinstance(b, TextBatch)
        out["ids"] += b.ids
        out["texts"] += b.texts
        out["labels"] += b.labels
        out["splits"] += b.splits
        for key in ("lewissplit", "cgisplit", "topics_attr"):
            out[key] += b.meta[key]
    return out


@pytest.fixture
def small_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "reuters21578"
    folder.mkdir()
    (folder / "reut2-000.sgm").write_bytes(SGM_000)
    (folder / "reut2-001.sgm").write_bytes(SGM_001)
    (folder / "lewis.dtd").write_text("<!ELEMENT LEWIS - - (REUTERS*)>\n")
    return folder


@pytest.fixture
def small_tar(tmp_path: Path) -> Path:
    """The same files packed like the distribution (a folder prefix, other members)."""
    path = tmp_path / "small.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, data in [
            ("reuters21578/lewis.dtd", b"<!ELEMENT LEWIS - - (REUTERS*)>\n"),
            ("reuters21578/reut2-000.sgm", SGM_000),
            ("reuters21578/reut2-001.sgm", SGM_001),
            ("reuters21578/all-topics-strings.lc.txt", b"acq\nearn\n"),
        ]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_small_fields_exact(small_folder: Path) -> None:
    report = IngestReport()
    got = _collect(read_reuters21578(small_folder, report=report))
    assert got == EXPECTED
    assert report.n_read == 4 and report.n_skipped == 0
    # Control characters in the parsed parts: &#3; in two bodies, the raw \x03,
    # the \x7f in a title, and &#2; + &#3; in the UNPROC TEXT element -> 6.
    assert "reuters21578: 6 control characters" in " | ".join(report.notes)
    assert any(n.startswith("reuters21578: 1 stray '&'") for n in report.notes)
    assert any(n.startswith("reuters21578: 1 bytes outside ASCII") for n in report.notes)
    assert any(n.startswith("reuters21578: 1 stories with neither TITLE") for n in report.notes)


def test_tar_equals_folder_and_single_file(small_folder: Path, small_tar: Path) -> None:
    from_folder = _collect(read_reuters21578(small_folder))
    assert _collect(read_reuters21578(small_tar)) == from_folder
    first = _collect(read_reuters21578(small_folder / "reut2-000.sgm"))
    assert first["ids"] == ["10", "11"] and first["texts"] == EXPECTED["texts"][:2]


@pytest.mark.parametrize("batch_size", [1, 3, 4, 100])
def test_batch_size_independence(small_tar: Path, batch_size: int) -> None:
    batches = list(read_reuters21578(small_tar, batch_size=batch_size))
    assert [len(b) for b in batches][:-1] == [batch_size] * (len(batches) - 1)
    assert 1 <= len(batches[-1]) <= batch_size
    assert _collect(batches) == EXPECTED


def test_small_modapte_and_top_n(small_folder: Path) -> None:
    report = IngestReport()
    got = _collect(read_reuters21578(small_folder, modapte=True, report=report))
    assert got["ids"] == ["10", "11"]
    assert report.skipped_reasons == {"not in the ModApte split": 2}

    # Without modapte every topic occurs once: the tie is broken by name -> "acq".
    assert reuters_label_counts(small_folder) == {"acq": 1, "earn": 1, "grain": 1, "wheat": 1}
    report = IngestReport()
    got = _collect(read_reuters21578(small_folder, top_n=1, report=report))
    assert got["ids"] == ["13"] and got["labels"] == [["acq"]]
    assert report.n_read == 1 and report.skipped_reasons == {
        "no topic among the 1 most frequent": 3
    }

    # With modapte, frequencies come from ModApte training stories only (story 10):
    # grain and wheat tie, grain wins by name; story 11 (earn) is then left out.
    assert reuters_label_counts(small_folder, modapte=True) == {"grain": 1, "wheat": 1}
    report = IngestReport()
    got = _collect(read_reuters21578(small_folder, modapte=True, top_n=1, report=report))
    assert got["ids"] == ["10"] and got["labels"] == [["grain"]]
    assert report.skipped_reasons == {
        "not in the ModApte split": 2,
        "no topic among the 1 most frequent": 1,
    }


def test_oddities_do_not_crash(tmp_path: Path) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    story = '<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" CGISPLIT="TRAINING-SET" NEWID="{}">'
    text = (
        story.format(1) + "<TOPICS><D>a</D><D>a</D><D></D></TOPICS><TEXT><BODY>one &bogus; x"
        "</BODY></TEXT></REUTERS>\n"
        # no closing tag: ends where the next story opens
        + story.format(2)
        + "<TOPICS><D>b</D></TOPICS><TEXT><TITLE>two</TITLE></TEXT>\n"
        + '<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN">no newid</REUTERS>\n'
        + story.format(1)
        + "<TOPICS></TOPICS><TEXT><TITLE>dup</TITLE></TEXT></REUTERS>\n"
        + "junk between stories\n"
        + '<REUTERS NEWID="5"><TEXT></TEXT></REUTERS>\n'
        # the file ends inside a story
        + story.format(6)
        + "<TEXT><TITLE>last</TITLE>"
    )
    (folder / "reut2-000.sgm").write_bytes(text.encode("latin-1"))
    report = IngestReport()
    got = _collect(read_reuters21578(folder, report=report))
    assert got["ids"] == ["1", "2", "5", "6"]
    assert got["texts"] == ["one &bogus; x", "two", "", "last"]
    assert got["labels"] == [["a"], ["b"], [], []]
    assert got["splits"] == ["train", "train", "", "train"]
    assert got["topics_attr"] == ["YES", "YES", "", "YES"]
    assert report.skipped_reasons == {
        "story without a NEWID attribute (in reut2-000.sgm)": 1,
        "story repeating an earlier NEWID (first one kept)": 1,
    }
    notes = " | ".join(report.notes)
    for expected in [
        "2 stories without a closing </REUTERS>",
        "1 unknown or invalid character entities",
        "1 stories listing a topic twice",
        "1 empty <D></D> topic items",
        "1 stories with no text at all",
        "1 files with text outside <REUTERS>",
        "2 stories without a <TOPICS> element",
        "1 stories without a LEWISSPLIT, CGISPLIT or TOPICS attribute",
    ]:
        assert f"reuters21578: {expected}" in notes


def test_bad_inputs(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="no reut2-NNN.sgm file in folder"):
        next(read_reuters21578(tmp_path / "empty"))
    not_tar = tmp_path / "x.tar.gz"
    not_tar.write_bytes(b"not an archive")
    with pytest.raises(DataFormatError, match="not a readable tar archive"):
        next(read_reuters21578(not_tar))
    with pytest.raises(FileNotFoundError):
        next(read_reuters21578(tmp_path / "missing.tar.gz"))
    with pytest.raises(ValueError, match="top_n"):
        next(read_reuters21578(tmp_path / "empty", top_n=0))


# --- the real collection -----------------------------------------------------------

R10 = {"earn", "acq", "money-fx", "grain", "crude", "trade", "interest", "ship", "wheat", "corn"}


def _split_counts(batches) -> tuple[Counter, Counter, list[TextBatch]]:
    splits: Counter = Counter()
    labels: Counter = Counter()
    kept = []
    for b in batches:
        splits.update(b.splits)
        for split, labs in zip(b.splits, b.labels, strict=True):
            labels.update((split, lab) for lab in labs)
        kept.append(b)
    return splits, labels, kept


def test_real_all_stories_lewis_split() -> None:
    path = data_path("reuters21578", "reuters21578.tar.gz")
    report = IngestReport()
    splits, _, batches = _split_counts(read_reuters21578(path, batch_size=5000, report=report))
    # Lewis split sizes from the distribution's README.
    assert splits == {"train": 14668, "test": 6188, "not-used": 722}
    assert all(len(b) <= 5000 for b in batches)
    ids = [i for b in batches for i in b.ids]
    assert ids == [str(k) for k in range(1, 21579)]
    first = batches[0]
    assert first.texts[0].startswith("BAHIA COCOA REVIEW\nShowers continued throughout")
    assert first.labels[0] == ["cocoa"]
    assert report.n_read == 21578 and report.n_skipped == 0


def test_real_modapte() -> None:
    path = data_path("reuters21578", "reuters21578.tar.gz")
    report = IngestReport()
    splits, _, _ = _split_counts(read_reuters21578(path, modapte=True, report=report))
    assert splits == {"train": 9603, "test": 3299}
    assert report.skipped_reasons == {"not in the ModApte split": 21578 - 9603 - 3299}


def test_real_r10() -> None:
    path = data_path("reuters21578", "reuters21578.tar.gz")
    counts = reuters_label_counts(path, modapte=True)
    assert set(list(counts)[:10]) == R10
    # The published ModApte training sizes of the R10 categories.
    assert {k: counts[k] for k in R10} == {
        "earn": 2877, "acq": 1650, "money-fx": 538, "grain": 433, "crude": 389,
        "trade": 369, "interest": 347, "ship": 197, "wheat": 212, "corn": 181,
    }  # fmt: skip
    splits, labels, _ = _split_counts(read_reuters21578(path, modapte=True, top_n=10))
    assert splits == {"train": 6490, "test": 2545}
    assert {lab for _, lab in labels} == R10
    assert labels["train", "earn"] == 2877 and labels["test", "earn"] == 1087


def test_real_top10_all_stories() -> None:
    path = data_path("reuters21578", "reuters21578.tar.gz")
    report = IngestReport()
    splits, labels, _ = _split_counts(read_reuters21578(path, top_n=10, report=report))
    assert sum(splits.values()) == 9400
    assert {lab for _, lab in labels} == R10
    assert report.n_read + report.n_skipped == 21578


# --- damaged archives: a DataFormatError naming the archive, never a raw tarfile/zlib error


def _read_everything(path: Path) -> None:
    for _ in read_reuters21578(path):
        pass


@pytest.mark.parametrize("keep", [0.3, 0.6, 0.9, 0.99])
def test_truncated_small_tar_gz(small_tar: Path, tmp_path: Path, keep: float) -> None:
    data = small_tar.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: int(len(data) * keep)])  # was tarfile.ReadError / EOFError
    with pytest.raises(DataFormatError) as err:
        _read_everything(cut)
    message = str(err.value)
    assert str(cut) in message and "truncated or corrupt" in message


def test_truncated_real_tar_gz(tmp_path: Path) -> None:
    real = data_path("reuters21578", "reuters21578.tar.gz")
    cut = tmp_path / "reuters21578.tar.gz"
    with open(real, "rb") as f:
        cut.write_bytes(f.read(300_000))  # ends inside reut2-000.sgm
    with pytest.raises(DataFormatError) as err:
        _read_everything(cut)
    message = str(err.value)
    assert str(cut) in message and "truncated or corrupt" in message
    assert "reut2-000.sgm" in message  # the member being read


def test_corrupt_gzip_in_the_middle(small_tar: Path, tmp_path: Path) -> None:
    data = bytearray(small_tar.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 16] = bytes(16)
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(data))
    with pytest.raises(DataFormatError, match=str(bad)):
        _read_everything(bad)


def test_missing_input_is_a_missing_path_error(tmp_path: Path) -> None:
    from dmlfe.errors import MissingPathError

    with pytest.raises(MissingPathError, match="missing.tar.gz"):
        next(read_reuters21578(tmp_path / "missing.tar.gz"))
