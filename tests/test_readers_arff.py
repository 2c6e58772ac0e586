"""Tests of the MULAN / MEKA ARFF readers against real data sets and hand-made files."""

from __future__ import annotations

import bz2
import gzip
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path
from scipy.io import arff as scipy_arff

from dmlfe.readers.arff import read_meka, read_mulan
from dmlfe.readers.base import DataFormatError, IngestReport, NumericBatch

MULAN_XML_HEAD = '<?xml version="1.0" encoding="utf-8"?>\n'


def collect(source, batch_size: int = 1000):
    """Concatenate every batch of a source: (X csr, Y, ids, splits, batches)."""
    batches = list(source.batches(batch_size))
    assert all(isinstance(b, NumericBatch) for b in batches)
    for b in batches:
        assert b.X.format == "csr" and b.X.dtype == np.float64
        assert b.Y.dtype == np.uint8
        assert b.X.shape == (len(b), len(source.feature_names))
        assert b.Y.shape == (len(b), len(source.label_names))
    X = sp.vstack([b.X for b in batches], format="csr")
    Y = np.vstack([b.Y.toarray() for b in batches])
    ids = [i for b in batches for i in b.ids]
    splits = [s for b in batches for s in b.splits]
    return X, Y, ids, splits, batches


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def xml_labels(path: Path, names: list[str]) -> Path:
    body = "".join(f'<label name="{n}"></label>\n' for n in names)
    return write(
        path,
        MULAN_XML_HEAD + f'<labels xmlns="http://mulan.sourceforge.net/labels">\n{body}</labels>\n',
    )


def data_lines(path: Path) -> list[str]:
    """The data rows of a plain ARFF file (independent of the reader: after @data)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(i for i, l in enumerate(lines) if l.strip().lower() == "@data")
    return [l for l in lines[start + 1 :] if l.strip() and not l.startswith("%")]


def hand_parse_sparse(line: str) -> dict[int, float]:
    """Tiny independent parse of a sparse row '{i v,i v}' into {attribute position: value}."""
    body = line.strip()[1:-1]
    out = {}
    for item in body.split(","):
        i, v = item.split()
        out[int(i)] = float(v)
    return out


# ----------------------------------------------------------------------------- real MULAN sets

MULAN_SHAPES = {
    "scene": (1211, 294, 6),
    "yeast": (1500, 103, 14),
    "enron": (1123, 1001, 53),
    "medical": (333, 1449, 45),
    "emotions": (391, 72, 6),
}


@pytest.mark.parametrize("name", sorted(MULAN_SHAPES))
def test_mulan_train_shapes(name):
    arff_path = data_path("mulan", f"{name}-train.arff")
    xml = data_path("mulan", f"{name}.xml")
    report = IngestReport()
    src = read_mulan(arff_path, xml, report=report)
    n, d, q = MULAN_SHAPES[name]
    X, Y, ids, splits, _ = collect(src)
    assert X.shape == (n, d)
    assert Y.shape == (n, q)
    assert len(src.feature_names) == d and len(src.label_names) == q
    assert ids[0] == f"{name}-train:0" and ids[-1] == f"{name}-train:{n - 1}"
    assert set(splits) == {"train"}
    assert report.n_read == n and report.n_skipped == 0
    assert set(np.unique(Y)) <= {0, 1}


@pytest.mark.parametrize("name", ["scene", "yeast", "emotions"])
def test_mulan_dense_matches_scipy_loadarff(name):
    arff_path = data_path("mulan", f"{name}-train.arff")
    xml = data_path("mulan", f"{name}.xml")
    src = read_mulan(arff_path, xml)
    X, Y, _, _, _ = collect(src, batch_size=257)

    data, meta = scipy_arff.loadarff(arff_path)
    names = meta.names()
    label_set = set(src.label_names)
    assert src.feature_names == [n for n in names if n not in label_set]
    X_ref = np.column_stack([data[n].astype(np.float64) for n in src.feature_names])
    Y_ref = np.column_stack([data[n].astype(np.uint8) for n in src.label_names])
    np.testing.assert_array_equal(X.toarray(), X_ref)
    np.testing.assert_array_equal(Y, Y_ref)


def test_mulan_label_order_follows_xml():
    # yeast.xml lists Class6 before Class4: the label columns follow the XML.
    xml = data_path("mulan", "yeast.xml")
    src = read_mulan(data_path("mulan", "yeast-train.arff"), xml)
    listed = re.findall(r'name="([^"]+)"', xml.read_text())
    assert src.label_names == listed
    assert src.label_names[3:5] == ["Class6", "Class4"]


@pytest.mark.parametrize("name", ["medical", "enron"])
def test_mulan_sparse_rows_match_hand_parse(name):
    arff_path = data_path("mulan", f"{name}-train.arff")
    src = read_mulan(arff_path, data_path("mulan", f"{name}.xml"))
    X, Y, _, _, _ = collect(src, batch_size=100)
    header = arff_path.read_text().splitlines()
    attr_names = [l.split()[1] for l in header if l.lower().startswith("@attribute")]
    lines = data_lines(arff_path)
    assert len(lines) == X.shape[0]
    for r in [0, 1, 57, len(lines) - 1]:
        entries = hand_parse_sparse(lines[r])
        by_name = {attr_names[i]: v for i, v in entries.items()}
        x_expected = np.array([by_name.get(n, 0.0) for n in src.feature_names])
        y_expected = np.array([by_name.get(n, 0.0) for n in src.label_names], dtype=np.uint8)
        np.testing.assert_array_equal(X[r].toarray().ravel(), x_expected)
        np.testing.assert_array_equal(Y[r], y_expected)


def test_mulan_train_test_as_one_corpus():
    files = [data_path("mulan", "emotions-train.arff"), data_path("mulan", "emotions-test.arff")]
    src = read_mulan(files, data_path("mulan", "emotions.xml"))
    X, Y, ids, splits, _ = collect(src, batch_size=100)
    assert X.shape == (391 + 202, 72)
    assert splits == ["train"] * 391 + ["test"] * 202
    assert ids[391] == "emotions-test:0" and ids[390] == "emotions-train:390"
    assert len(set(ids)) == len(ids)
    assert src.report.n_read == 593


def test_meka_enron_equals_mulan_enron_train_test():
    mulan = read_mulan(
        [data_path("mulan", "enron-train.arff"), data_path("mulan", "enron-test.arff")],
        data_path("mulan", "enron.xml"),
    )
    meka = read_meka(data_path("meka", "Enron.arff.bz2"))
    Xm, Ym, _, _, _ = collect(mulan)
    Xk, Yk, ids, splits, _ = collect(meka)
    assert ids[0] == "Enron:0" and set(splits) == {"Enron"}
    # Same word features in the same order; the labels come first in MEKA, in another order.
    assert meka.feature_names == mulan.feature_names
    assert sorted(meka.label_names) == sorted(mulan.label_names)
    assert meka.label_names != mulan.label_names
    order = [meka.label_names.index(n) for n in mulan.label_names]
    Yk = Yk[:, order]

    def rows(X, Y):
        X = X.tocsr()
        return Counter(
            (
                tuple(X.indices[X.indptr[i] : X.indptr[i + 1]]),
                tuple(X.data[X.indptr[i] : X.indptr[i + 1]]),
                tuple(Y[i]),
            )
            for i in range(X.shape[0])
        )

    assert Xk.shape == Xm.shape == (1702, 1001)
    assert rows(Xk, Yk) == rows(Xm, Ym)


def test_meka_imdb_shape():
    path = data_path("meka", "IMDB.arff.bz2")
    src = read_meka(path)
    assert len(src.feature_names) == 1001 and len(src.label_names) == 28
    n = 0
    first = None
    label_counts = np.zeros(28, dtype=np.int64)
    for b in src.batches(20000):
        if first is None:
            first = (b.X[0].toarray().ravel(), b.Y[0].toarray().ravel())
        n += len(b)
        label_counts += np.asarray(b.Y.sum(axis=0, dtype=np.int64)).ravel()
    assert n == 120919
    assert src.report.n_read == 120919
    assert (label_counts > 0).all()
    # The first row against an independent parse of the first data line.
    with bz2.open(path, "rt", encoding="utf-8") as fh:
        line = next(l for l in fh if l.startswith("{"))
    entries = hand_parse_sparse(line)
    x_expected = np.zeros(1001)
    y_expected = np.zeros(28, dtype=np.uint8)
    for i, v in entries.items():
        if i < 28:
            y_expected[i] = v
        else:
            x_expected[i - 28] = v
    np.testing.assert_array_equal(first[0], x_expected)
    np.testing.assert_array_equal(first[1], y_expected)


# ----------------------------------------------------------------------------- hand-made files

# 5 attributes: f1 numeric, 'my attr' numeric, L1 {0,1}, colour {red,green,blue}, L2 {0,1}.
SMALL_HEADER = """% a comment before the relation
@RELATION small

@ATTRIBUTE f1 NUMERIC
@attribute 'my attr' real
@Attribute L1 {0,1}
% comments may sit anywhere
@attribute colour {red, green, blue}
@attribute L2 {0,1}

@DATA
"""
SMALL_SPARSE_ROWS = """{0 1.5,2 1,3 blue}

% a comment between rows
{1 -2,4 1}
{}
{0 3, 1 4, 2 1, 3 green, 4 1}
"""
SMALL_DENSE_ROWS = """1.5,0,1,blue,0
0,-2,0,red,1
0,0,0,red,0
3,4,1,green,1
"""
# Features: f1, 'my attr', colour (index-coded); labels in XML order: L2, L1.
SMALL_X = np.array([[1.5, 0, 2], [0, -2, 0], [0, 0, 0], [3, 4, 1]], dtype=np.float64)
SMALL_Y = np.array([[0, 1], [1, 0], [0, 0], [1, 1]], dtype=np.uint8)


@pytest.fixture
def small_xml(tmp_path):
    # Nested hierarchy, namespaced, listing L2 before L1.
    return write(
        tmp_path / "small.xml",
        MULAN_XML_HEAD + '<labels xmlns="http://mulan.sourceforge.net/labels">\n'
        '<label name="L2"><label name="L1"></label></label>\n</labels>\n',
    )


@pytest.mark.parametrize("rows", [SMALL_SPARSE_ROWS, SMALL_DENSE_ROWS], ids=["sparse", "dense"])
def test_small_mulan(tmp_path, small_xml, rows):
    path = write(tmp_path / "small-train.arff", SMALL_HEADER + rows)
    report = IngestReport()
    src = read_mulan(path, small_xml, report=report)
    assert src.feature_names == ["f1", "my attr", "colour"]
    assert src.label_names == ["L2", "L1"]
    X, Y, ids, splits, _ = collect(src)
    np.testing.assert_array_equal(X.toarray(), SMALL_X)
    np.testing.assert_array_equal(Y, SMALL_Y)
    assert X.nnz == np.count_nonzero(SMALL_X)  # explicit zeros are not stored
    assert ids == ["small-train:0", "small-train:1", "small-train:2", "small-train:3"]
    assert splits == ["train"] * 4
    assert report.n_read == 4
    assert any("colour" in n and "category indices" in n for n in report.notes)


@pytest.mark.parametrize("opener,suffix", [(gzip.open, ".gz"), (bz2.open, ".bz2")])
def test_compressed_files(tmp_path, small_xml, opener, suffix):
    path = tmp_path / f"small-test.arff{suffix}"
    with opener(path, "wt", encoding="utf-8") as fh:
        fh.write(SMALL_HEADER + SMALL_SPARSE_ROWS)
    X, Y, ids, splits, _ = collect(read_mulan(path, small_xml))
    np.testing.assert_array_equal(X.toarray(), SMALL_X)
    np.testing.assert_array_equal(Y, SMALL_Y)
    assert ids[0] == "small-test:0" and splits == ["test"] * 4


def test_batch_boundaries_across_files(tmp_path, small_xml):
    a = write(tmp_path / "small-train.arff", SMALL_HEADER + SMALL_SPARSE_ROWS)
    b = write(tmp_path / "small-test.arff", SMALL_HEADER + SMALL_DENSE_ROWS)
    c = write(tmp_path / "extra.arff", SMALL_HEADER + SMALL_DENSE_ROWS + SMALL_SPARSE_ROWS)
    src = read_mulan([a, b, c], small_xml)
    X1, Y1, ids1, splits1, batches1 = collect(src, batch_size=1000)
    X3, Y3, ids3, splits3, batches3 = collect(src, batch_size=3)
    assert [len(x) for x in batches1] == [16]
    assert [len(x) for x in batches3] == [3, 3, 3, 3, 3, 1]
    assert (X1 != X3).nnz == 0 and X1.shape == X3.shape == (16, 3)
    np.testing.assert_array_equal(Y1, Y3)
    assert ids1 == ids3 and splits1 == splits3
    assert splits1 == ["train"] * 4 + ["test"] * 4 + ["extra"] * 8
    np.testing.assert_array_equal(X1.toarray(), np.vstack([SMALL_X] * 4))
    # Re-reading does not double the count.
    assert src.report.n_read == 16


def test_meka_positive_and_negative_c(tmp_path):
    rows = "{0 1,3 2.5}\n1,0,7,0\n"
    pos = write(
        tmp_path / "pos.arff",
        "@relation 'pos: -C 2 -extra'\n@attribute a {0,1}\n@attribute b numeric\n"
        "@attribute c numeric\n@attribute d numeric\n@data\n" + rows,
    )
    src = read_meka(pos)
    assert src.label_names == ["a", "b"] and src.feature_names == ["c", "d"]
    X, Y, _, _, _ = collect(src)
    np.testing.assert_array_equal(X.toarray(), [[0, 2.5], [7, 0]])
    np.testing.assert_array_equal(Y, [[1, 0], [1, 0]])

    neg = write(
        tmp_path / "neg.arff",
        '@relation "neg: -C -2"\n@attribute a numeric\n@attribute b numeric\n'
        "@attribute c {0,1}\n@attribute d numeric\n@data\n{0 1,3 1}\n1,0,1,0\n",
    )
    src = read_meka(neg)
    assert src.feature_names == ["a", "b"] and src.label_names == ["c", "d"]
    X, Y, _, _, _ = collect(src)
    np.testing.assert_array_equal(X.toarray(), [[1, 0], [1, 0]])
    np.testing.assert_array_equal(Y, [[0, 1], [1, 0]])


def test_meka_without_c_is_refused(tmp_path):
    path = write(tmp_path / "x.arff", "@relation plain\n@attribute a numeric\n@data\n1\n")
    with pytest.raises(DataFormatError, match=r"x\.arff.*-C"):
        read_meka(path)


def test_sparse_omitted_nominal_is_first_value(tmp_path):
    # Omitted sparse values are the internal value 0, i.e. a nominal attribute's first value.
    path = write(
        tmp_path / "d.arff",
        "@relation 'd: -C 1'\n@attribute L {1,0}\n@attribute f {5,7}\n@attribute g numeric\n"
        "@data\n{}\n{0 0,1 7,2 3}\n",
    )
    X, Y, _, _, _ = collect(read_meka(path))
    np.testing.assert_array_equal(X.toarray(), [[5, 0], [7, 3]])
    np.testing.assert_array_equal(Y, [[1], [0]])


def test_quoted_values_and_inline_comment(tmp_path):
    path = write(
        tmp_path / "q.arff",
        "@relation 'q: -C 1'\n@attribute L {0,1}\n@attribute 'the colour' {'dark red',blue}\n"
        "@attribute \"x y\" numeric\n@data\n1,'dark red',2 % trailing comment\n"
        "{1 'blue', 2 4}\n",
    )
    src = read_meka(path)
    assert src.feature_names == ["the colour", "x y"]
    X, Y, _, _, _ = collect(src)
    np.testing.assert_array_equal(X.toarray(), [[0, 2], [1, 4]])
    np.testing.assert_array_equal(Y, [[1], [0]])


BAD_ROWS = [
    ("1,2,1,red", r"4 values.*5 attributes"),  # dense row too short
    ("1,2,1,red,0,9", r"6 values.*5 attributes"),  # dense row too long
    ("1,abc,1,red,0", r"'abc'.*'my attr'.*not a finite number"),
    ("1,nan,1,red,0", r"'my attr'.*finite"),
    ("1,2,1,purple,0", r"'purple'.*'colour'.*declared values"),
    ("{0 1,9 1}", r"index 9 is out of range"),
    ("{0 1,-1 1}", r"index -1 is out of range"),
    ("{x 1}", r"index 'x' is not an integer"),
    ("{0 1,3}", r"malformed sparse entry '3'"),
    ("{2 1,0 1}", r"index 0 follows index 2"),
    ("{0 1,0 2}", r"index 0 follows index 0"),
    ("{0 1,2 1", r"no closing"),
    ("{0 1},{3}", r"weighted instance"),
    ("1,2,1,red,0,{3}", r"weighted instance"),
    ("1,2,2,red,0", r"'2'.*nominal attribute 'L1'"),
    ("1,?,1,red,0", r"missing value '\?' for feature attribute 'my attr'.*complete numeric"),
    ("{0 1,4 ?}", r"missing value '\?' for label attribute 'L2'"),
]


@pytest.mark.parametrize("row,pattern", BAD_ROWS)
def test_malformed_rows_name_file_and_line(tmp_path, small_xml, row, pattern):
    # The bad row is the third data row, on line 14 of the file (11 header lines + 2 rows).
    text = SMALL_HEADER + "1,2,1,red,0\n{0 1}\n" + row + "\n"
    path = write(tmp_path / "bad.arff", text)
    assert text.splitlines()[13] == row
    src = read_mulan(path, small_xml)
    with pytest.raises(DataFormatError) as err:
        collect(src, batch_size=2)
    msg = str(err.value)
    assert f"{path}, line 14" in msg
    assert re.search(pattern, msg), msg


def test_numeric_label_must_be_zero_or_one(tmp_path):
    path = write(
        tmp_path / "n.arff",
        "@relation 'n: -C 1'\n@attribute L numeric\n@attribute f numeric\n@data\n1,2\n2,3\n",
    )
    pattern = r"n\.arff, line 6: label attribute 'L' has value '2'"
    with pytest.raises(DataFormatError, match=pattern):
        collect(read_meka(path))


def test_nominal_label_with_other_values_is_refused(tmp_path):
    path = write(
        tmp_path / "n.arff",
        "@relation 'n: -C 1'\n@attribute L {0,1,2}\n@attribute f numeric\n@data\n1,2\n",
    )
    with pytest.raises(DataFormatError, match=r"n\.arff, line 2: label attribute 'L'.*'2'"):
        read_meka(path)


def test_string_attribute_is_refused(tmp_path):
    path = write(
        tmp_path / "s.arff",
        "@relation 's: -C 1'\n@attribute L {0,1}\n@attribute text string\n@data\n1,'hi'\n",
    )
    with pytest.raises(DataFormatError, match=r"s\.arff, line 3: attribute 'text' has type string"):
        read_meka(path)


def test_xml_labels_missing_from_arff(tmp_path):
    path = write(tmp_path / "small.arff", SMALL_HEADER + SMALL_DENSE_ROWS)
    xml = xml_labels(tmp_path / "other.xml", ["L1", "Nope", "L2", "Gone"])
    with pytest.raises(DataFormatError, match=r"2 label\(s\).*'Nope', 'Gone'"):
        read_mulan(path, xml)


def test_files_with_different_attributes_are_refused(tmp_path, small_xml):
    a = write(tmp_path / "a-train.arff", SMALL_HEADER + SMALL_DENSE_ROWS)
    b = write(
        tmp_path / "a-test.arff",
        SMALL_HEADER.replace("@attribute colour {red, green, blue}", "@attribute colour numeric"),
    )
    with pytest.raises(DataFormatError) as err:
        read_mulan([a, b], small_xml)
    msg = str(err.value)
    assert str(a) in msg and str(b) in msg and "colour" in msg


def test_bad_batch_size(tmp_path, small_xml):
    src = read_mulan(write(tmp_path / "s.arff", SMALL_HEADER + SMALL_DENSE_ROWS), small_xml)
    with pytest.raises(ValueError, match="batch_size"):
        src.batches(0)


# --- damaged, compressed and empty input: every failure is a DataFormatError naming the file

MEKA_TEXT = (
    "@relation 'm: -C 2'\n@attribute a {0,1}\n@attribute b {0,1}\n"
    "@attribute x numeric\n@attribute y numeric\n@data\n"
    + "".join(f"{i % 2},{(i // 2) % 2},{i}.5,{-i}\n" for i in range(400))
)


def _read_all(path):
    return collect(read_meka(path))


def test_truncated_bz2_names_the_file(tmp_path):
    packed = bz2.compress(MEKA_TEXT.encode())
    path = tmp_path / "cut.arff.bz2"
    path.write_bytes(packed[: len(packed) // 2])  # was a raw EOFError
    with pytest.raises(DataFormatError) as err:
        _read_all(path)
    message = str(err.value)
    assert str(path) in message and "truncated or not bzip2-compressed" in message


def test_bz2_name_over_plain_data(tmp_path):
    path = write(tmp_path / "plain.arff.bz2", MEKA_TEXT)  # was OSError: Invalid data stream
    with pytest.raises(DataFormatError) as err:
        _read_all(path)
    message = str(err.value)
    assert str(path) in message and "not bzip2-compressed" in message
    assert "plain text" in message  # and says what the content looks like


@pytest.mark.parametrize(
    ("name", "content", "words"),
    [
        ("gz-over-plain.arff.gz", lambda t: t, "not gzip-compressed"),  # was BadGzipFile
        ("gz-over-bz2.arff.gz", bz2.compress, "content is bzip2-compressed"),
        ("bz2-over-gz.arff.bz2", gzip.compress, "content is gzip-compressed"),
        ("cut.arff.gz", lambda t: gzip.compress(t)[:-30], "truncated"),  # was EOFError
        ("plain-over-gz.arff", gzip.compress, "not valid UTF-8"),  # was UnicodeDecodeError
    ],
)
def test_wrong_or_damaged_compression(tmp_path, name, content, words):
    path = tmp_path / name
    path.write_bytes(content(MEKA_TEXT.encode()))
    with pytest.raises(DataFormatError) as err:
        _read_all(path)
    assert str(path) in str(err.value) and words in str(err.value)


def test_corrupt_deflate_block_names_the_file(tmp_path):
    packed = bytearray(gzip.compress(MEKA_TEXT.encode()))
    packed[40:60] = b"\xff" * 20  # zlib.error or a CRC mismatch, depending on the bytes
    path = tmp_path / "corrupt.arff.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises(DataFormatError, match=re.escape(str(path))):
        _read_all(path)


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.arff"
    path.write_bytes(MEKA_TEXT.encode().replace(b"@attribute x", b"@attribute M\xfcnchen"))
    with pytest.raises(DataFormatError, match=re.escape(str(path)) + ".*not valid UTF-8"):
        _read_all(path)


@pytest.mark.parametrize("compress", ["", ".gz", ".bz2"])
def test_utf8_bom_is_accepted(tmp_path, compress):
    raw = MEKA_TEXT.encode()
    pack = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress}[compress]
    plain = tmp_path / f"plain.arff{compress}"
    plain.write_bytes(pack(raw))
    bom = tmp_path / f"bom.arff{compress}"
    bom.write_bytes(pack(b"\xef\xbb\xbf" + raw))
    a, b = read_meka(plain), read_meka(bom)
    assert (a.feature_names, a.label_names) == (b.feature_names, b.label_names)
    Xa, Ya, _, _, _ = collect(a)
    Xb, Yb, _, _, _ = collect(b)
    assert Xa.shape == (400, 2)
    assert (Xa != Xb).nnz == 0
    np.testing.assert_array_equal(Ya, Yb)


def test_missing_files_are_missing_path_errors(tmp_path, small_xml):
    from dmlfe.errors import MissingPathError

    with pytest.raises(MissingPathError, match=re.escape(str(tmp_path / "nope.arff"))):
        read_meka(tmp_path / "nope.arff")
    arff = write(tmp_path / "a.arff", "@relation a\n@attribute L1 {0,1}\n@attribute L2 {0,1}\n"
                 "@attribute f numeric\n@data\n0,1,2\n")
    with pytest.raises(MissingPathError, match="nope.xml"):
        read_mulan(arff, tmp_path / "nope.xml")
    assert issubclass(MissingPathError, FileNotFoundError)


def test_only_label_attributes_is_refused(tmp_path, small_xml):
    path = write(tmp_path / "labels-only.arff",
                 "@relation a\n@attribute L1 {0,1}\n@attribute L2 {0,1}\n@data\n0,1\n")
    with pytest.raises(DataFormatError, match=r"labels-only\.arff.*no feature attribute"):
        read_mulan(path, small_xml)


def test_attribute_without_name(tmp_path):
    path = write(tmp_path / "noname.arff", "@relation 'x: -C 1'\n@attribute {0,1}\n@data\n")
    with pytest.raises(DataFormatError, match=r"noname\.arff, line 2: @attribute without a name"):
        read_meka(path)  # was an AssertionError
