"""Tests of the JSON Lines and Parquet text readers on hand-made files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dmlfe.readers.base import DataFormatError, IngestReport, TextBatch
from dmlfe.readers.tabular import read_jsonl, read_parquet

RECORDS = [
    {"doc": "d1", "body": "first text", "tags": ["a", "b"], "part": "train"},
    {"doc": "d2", "body": None, "tags": ["b"], "part": "train"},
    {"doc": 7, "body": "third", "tags": None, "part": "test"},
    {"doc": "d4", "body": "fourth", "tags": [], "part": "test"},
    {"doc": "d5", "body": "fifth", "tags": ["c", "a", "c"], "part": "train"},
]
FIELDS = {"text_field": "body", "labels_field": "tags", "id_field": "doc", "split_field": "part"}
# What the readers must give for RECORDS with FIELDS, following their docstrings.
EXPECTED = {
    "ids": ["d1", "d2", "7", "d4", "d5"],
    "texts": ["first text", "", "third", "fourth", "fifth"],
    "labels": [["a", "b"], ["b"], [], [], ["c", "a"]],
    "splits": ["train", "train", "test", "test", "train"],
}


def _collect(batches) -> dict[str, list]:
    out: dict[str, list] = {"ids": [], "texts": [], "labels": [], "splits": []}
    for b in batches:
        assert isinstance(b, TextBatch) and b.meta == {}
        out["ids"] += b.ids
        out["texts"] += b.texts
        out["labels"] += b.labels
        if b.splits is None:
            out["splits"] = None
        else:
            out["splits"] += b.splits
    return out


def _write_jsonl(path: Path, lines: list[str], gz: bool = False) -> Path:
    data = ("\n".join(lines) + "\n").encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _records_lines() -> list[str]:
    lines = [json.dumps(r) for r in RECORDS]
    lines.insert(2, "")  # a blank line and a white-space line: skipped, not documents
    lines.insert(4, "   ")
    return lines


# --- JSON Lines -------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_fields(tmp_path: Path, gz: bool) -> None:
    # The .gz file keeps a .jsonl name: compression is detected from the content.
    path = _write_jsonl(tmp_path / "c.jsonl", _records_lines(), gz=gz)
    report = IngestReport()
    assert _collect(read_jsonl(path, **FIELDS, report=report)) == EXPECTED
    assert report.n_read == 5 and report.n_skipped == 0
    assert sorted(report.notes) == sorted(
        [
            "jsonl: 2 blank lines skipped (not documents)",
            "jsonl: 1 documents with null text (read as empty documents)",
            "jsonl: 1 documents with null labels (read as documents without labels)",
            "jsonl: 1 documents listing a label twice (duplicate dropped)",
        ]
    )


def test_jsonl_default_fields_and_ids(tmp_path: Path) -> None:
    lines = ['{"text": "x", "labels": ["p"]}', "", '{"text": "y", "labels": []}']
    path = _write_jsonl(tmp_path / "d.jsonl.gz", lines, gz=True)
    got = _collect(read_jsonl(path))
    # ids are document numbers: the blank line does not count.
    assert got == {"ids": ["0", "1"], "texts": ["x", "y"], "labels": [["p"], []], "splits": None}


@pytest.mark.parametrize("batch_size", [1, 2, 3, 5, 1000])
def test_jsonl_batch_size_independence(tmp_path: Path, batch_size: int) -> None:
    path = _write_jsonl(tmp_path / "c.jsonl", _records_lines())
    batches = list(read_jsonl(path, **FIELDS, batch_size=batch_size))
    sizes = [len(b) for b in batches]
    assert sizes == [batch_size] * (5 // batch_size) + ([5 % batch_size] if 5 % batch_size else [])
    assert _collect(batches) == EXPECTED


BAD_JSONL = [
    # (third line, message fragments)
    (
        '{"body": "t", "part": "x", "doc": "z"}',
        ["'tags'", "line 3", "missing", "'body'", "labels_field="],
    ),
    ('{"tags": [], "part": "x", "doc": "z"}', ["'body'", "line 3", "missing"]),
    ('{"body": "t", "tags": "a", "part": "x", "doc": "z"}', ["'tags'", "line 3", "str 'a'"]),
    ('{"body": "t", "tags": 3, "part": "x", "doc": "z"}', ["'tags'", "line 3", "int 3"]),
    ('{"body": "t", "tags": ["a", 1], "part": "x", "doc": "z"}', ["line 3", "only strings"]),
    ('{"body": 5, "tags": [], "part": "x", "doc": "z"}', ["'body'", "line 3", "int 5"]),
    ('{"body": "t", "tags": [], "part": null, "doc": "z"}', ["'part'", "line 3", "None"]),
    ('{"body": "t", "tags": [], "part": "x", "doc": 1.5}', ["'doc'", "line 3", "float 1.5"]),
    ('{"body": "t", "tags": [], "part": "x"}', ["'doc'", "line 3", "missing"]),
    ('{"body": "t", "tags": [] ', ["line 3", "invalid JSON"]),
    ('["not", "an", "object"]', ["line 3", "expected a JSON object", "list"]),
    ('{"body": "t", "tags": [], "part": "x", "doc": "d1"}', ["'d1'", "line 3", "line 1"]),
]


@pytest.mark.parametrize(("bad", "fragments"), BAD_JSONL)
def test_jsonl_errors(tmp_path: Path, bad: str, fragments: list[str]) -> None:
    lines = [json.dumps(RECORDS[0]), json.dumps(RECORDS[1]), bad]
    path = _write_jsonl(tmp_path / "bad.jsonl", lines)
    with pytest.raises(DataFormatError) as err:
        list(read_jsonl(path, **FIELDS))
    message = str(err.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message


def test_jsonl_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "ok", "labels": []}\n{"text": "M\xfcnchen", "labels": []}\n')
    with pytest.raises(DataFormatError, match="line 2: not valid UTF-8"):
        list(read_jsonl(path))


# --- Parquet ----------------------------------------------------------------------


def _table(records: list[dict]) -> pa.Table:
    # ids as strings: a Parquet column has one type (the JSONL case covers int ids).
    return pa.table(
        {
            "doc": pa.array([str(r["doc"]) for r in records], pa.string()),
            "body": pa.array([r["body"] for r in records], pa.string()),
            "tags": pa.array([r["tags"] for r in records], pa.list_(pa.string())),
            "part": pa.array([r["part"] for r in records], pa.string()),
        }
    )


@pytest.fixture
def parquet_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "pq"
    (folder / "sub").mkdir(parents=True)
    pq.write_table(_table(RECORDS[:2]), folder / "part-0.parquet", row_group_size=1)
    pq.write_table(_table(RECORDS[2:]), folder / "sub" / "part-1.parquet")
    (folder / "README.txt").write_text("not a parquet file, ignored")
    return folder


def test_parquet_file(tmp_path: Path) -> None:
    path = tmp_path / "one.parquet"
    pq.write_table(_table(RECORDS), path, row_group_size=2)
    report = IngestReport()
    assert _collect(read_parquet(path, **FIELDS, report=report)) == EXPECTED
    assert report.n_read == 5
    assert sorted(report.notes) == sorted(
        [
            "parquet: 1 documents with null text (read as empty documents)",
            "parquet: 1 documents with null labels (read as documents without labels)",
            "parquet: 1 documents listing a label twice (duplicate dropped)",
        ]
    )


@pytest.mark.parametrize("batch_size", [1, 2, 3, 4, 1000])
def test_parquet_folder_batch_size_independence(parquet_folder: Path, batch_size: int) -> None:
    batches = list(read_parquet(parquet_folder, **FIELDS, batch_size=batch_size))
    # Batches span files: all full but the last.
    sizes = [len(b) for b in batches]
    assert sizes == [batch_size] * (5 // batch_size) + ([5 % batch_size] if 5 % batch_size else [])
    assert _collect(batches) == EXPECTED


def test_parquet_default_ids_span_files(parquet_folder: Path) -> None:
    got = _collect(read_parquet(parquet_folder, text_field="body", labels_field="tags"))
    assert got["ids"] == ["0", "1", "2", "3", "4"]
    assert got["splits"] is None


def test_parquet_missing_column(parquet_folder: Path) -> None:
    with pytest.raises(DataFormatError) as err:
        list(read_parquet(parquet_folder, text_field="body", labels_field="labels"))
    message = str(err.value)
    assert "column 'labels' is missing" in message
    assert "part-0.parquet" in message
    assert "'doc', 'body', 'tags', 'part'" in message
    assert "labels_field=" in message


def test_parquet_duplicate_id_across_files(tmp_path: Path) -> None:
    folder = tmp_path / "dup"
    folder.mkdir()
    pq.write_table(_table(RECORDS[:3]), folder / "a.parquet")
    pq.write_table(_table(RECORDS[2:]), folder / "b.parquet")
    with pytest.raises(DataFormatError) as err:
        list(read_parquet(folder, **FIELDS))
    message = str(err.value)
    assert "document id '7'" in message
    assert f"{folder / 'b.parquet'}, row 0" in message
    assert f"{folder / 'a.parquet'}, row 2" in message


def test_parquet_labels_not_a_list(tmp_path: Path) -> None:
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table({"text": ["u", "v"], "labels": ["a", "b|c"]}), path)
    with pytest.raises(DataFormatError) as err:
        list(read_parquet(path))
    message = str(err.value)
    assert f"{path}, row 0" in message and "'labels'" in message and "str 'a'" in message


def test_parquet_bad_inputs(tmp_path: Path) -> None:
    fake = tmp_path / "fake.parquet"
    fake.write_text("hello")
    with pytest.raises(DataFormatError, match="not a readable Parquet file"):
        list(read_parquet(fake))
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataFormatError, match="holds no"):
        list(read_parquet(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError):
        list(read_parquet(tmp_path / "nope.parquet"))


# --- damaged input: a DataFormatError naming the file, never a raw gzip/json/pyarrow error


def test_jsonl_truncated_gzip_names_file_and_line(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"document {i}", "labels": ["a"]}) for i in range(2000)]
    packed = gzip.compress(("\n".join(lines) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(packed[: len(packed) // 2])  # was EOFError
    with pytest.raises(DataFormatError) as err:
        list(read_jsonl(path))
    message = str(err.value)
    assert str(path) in message and "truncated or corrupt" in message
    assert "after line" in message


def test_jsonl_bad_gzip_header(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\x1f\x8b\x00garbage that is not deflate")  # was BadGzipFile
    with pytest.raises(DataFormatError, match=str(path)):
        list(read_jsonl(path))


def test_jsonl_bom_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a", "labels": ["x"]}\n{"text": "b", "labels": []}\n')
    (batch,) = read_jsonl(path)
    assert batch.texts == ["a", "b"] and batch.labels == [["x"], []]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"text": "a \\ud800 b", "labels": []}', "lone UTF-16 surrogate"),
        ('{"text": "a", "labels": [], "n": ' + "9" * 5000 + "}", "cannot be read"),
        ('{"text": "a", "labels": []' + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "cannot be read"),
    ],
)
def test_jsonl_json_that_python_cannot_hold(tmp_path: Path, line: str, words: str) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_text('{"text": "ok", "labels": []}\n' + line + "\n")
    with pytest.raises(DataFormatError) as err:
        list(read_jsonl(path))
    assert f"{path}, line 2" in str(err.value) and words in str(err.value)


def test_parquet_damaged_data_page(tmp_path: Path) -> None:
    path = tmp_path / "damaged.parquet"
    pq.write_table(pa.table({"text": [f"text {i}" * 20 for i in range(200)],
                             "labels": [["a"]] * 200}), path, compression="snappy")
    data = bytearray(path.read_bytes())
    data[8:200] = b"\xff" * 192  # the first column chunk; the footer stays intact
    path.write_bytes(bytes(data))
    with pytest.raises(DataFormatError) as err:
        list(read_parquet(path))
    assert str(path) in str(err.value)


def test_missing_files_are_missing_path_errors(tmp_path: Path) -> None:
    from dmlfe.errors import MissingPathError

    with pytest.raises(MissingPathError, match="nope.jsonl"):
        list(read_jsonl(tmp_path / "nope.jsonl"))
    with pytest.raises(MissingPathError, match="nope.parquet"):
        list(read_parquet(tmp_path / "nope.parquet"))
