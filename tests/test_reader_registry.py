"""The reader registry (issue 37): a format added by one ``register_reader`` call is
ingested by ``dmlfe ingest``, ``dmlfe.append`` and a pipeline, with its own flag."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from sklearn.feature_extraction.text import TfidfVectorizer

import dmlfe
from dmlfe.cli import build_parser
from dmlfe.cli import main as cli_main
from dmlfe.errors import InputError
from dmlfe.ingestion import FORMATS, NUMERIC_FORMATS, TEXT_FORMATS, format_options
from dmlfe.params import Param, one_of
from dmlfe.pipeline import load_config, run_pipeline
from dmlfe.readers.base import TextBatch, split_from_file_name
from dmlfe.readers.registry import (
    ReaderSpec,
    all_readers,
    get_reader,
    reader_names,
    register_reader,
    unregister_reader,
)
from dmlfe.store import open_store

BUILT_IN = ("reuters21578", "jsonl", "parquet", "synthetic", "mulan", "meka", "xmc",
            "svmlight")

#: ``dmlfe ingest``'s option strings before the registry (head 112dbeb), written out.
INGEST_FLAGS = {
    "-h", "--help", "--format", "--out", "--append", "--split", "--chunk-rows",
    "--overwrite", "--vectorizer", "--ngram-range", "--min-df", "--max-df",
    "--max-features", "--sublinear-tf", "--norm", "--n-features", "--fit-split",
    "--labels", "--label-map", "--feature-map", "--zero-based", "--modapte", "--top-n",
    "--text-field", "--labels-field", "--id-field", "--split-field", "--split-names",
    "--n-docs", "--vocab-size", "--n-labels", "--seed", "--labels-all", "--scheduler",
    "--cluster", "--workers", "--connect-timeout", "--worker-timeout", "--quiet",
    "--verbose", "--debug",
}


# ------------------------------------------------------------------ the toy "tsv" reader
def read_tsv(paths: list[Path], *, report, batch_size: int, label_sep: str = ","):
    """``id<TAB>label1,label2<TAB>text`` lines; each file's name gives its split."""
    for path in paths:
        split = split_from_file_name(path.name.split(".")[0])
        rows = [line.split("\t", 2) for line in path.read_text("utf-8").splitlines() if line]
        for start in range(0, len(rows), batch_size):
            part = rows[start:start + batch_size]
            yield TextBatch(ids=[r[0] for r in part], texts=[r[2] for r in part],
                            labels=[[lab for lab in r[1].split(label_sep) if lab]
                                    for r in part],
                            splits=[split] * len(part))


TSV = ReaderSpec(
    name="tsv", kind="text", read=read_tsv, description="id, labels and text per line",
    options=(Param("label_sep", ",", one_of(",", ";", "|"),
                   "str, default ','\n    the separator between labels",
                   {"default": None, "help": "tsv: the separator between labels"}),))


@pytest.fixture
def tsv_reader():
    register_reader(TSV)
    yield TSV
    unregister_reader("tsv")


TRAIN = [("d1", "sports;money", "the match ended with a late goal and a big prize"),
         ("d2", "money", "markets fell as the bank raised the rate again"),
         ("d3", "sports", "a late goal won the cup for the home team"),
         ("d4", "politics;money", "the minister spoke on the bank rate and the budget"),
         ("d5", "politics", "the vote on the budget was close"),
         ("d6", "", "nothing but words of no label at all")]
TEST = [("t1", "sports", "the team scored a goal"),
        ("t2", "money;politics", "the budget and the rate")]


def _write_tsv(path: Path, rows) -> Path:
    path.write_text("".join(f"{i}\t{labs}\t{text}\n" for i, labs, text in rows), "utf-8")
    return path


def _reference(rows, **vec):
    """tf-idf of the texts by scikit-learn and the 0/1 labels, built here from ``rows``."""
    tv = TfidfVectorizer(**vec)
    X = tv.fit_transform([text for _, _, text in rows])
    names = sorted({lab for _, labs, _ in rows for lab in labs.split(";") if lab})
    Y = np.array([[int(n in labs.split(";")) for n in names] for _, labs, _ in rows],
                 dtype=np.uint8)
    return X, Y, list(tv.get_feature_names_out()), names


def _assert_store(path, rows, **vec):
    X, Y, features, labels = _reference(rows, **vec)
    store = open_store(path)
    assert store.feature_names == features
    assert store.label_names == labels
    np.testing.assert_allclose(store.X.compute().toarray(), X.toarray(), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_array_equal(store.Y.compute().toarray(), Y)
    assert list(store.ids.compute()) == [i for i, _, _ in rows]
    return store


# ------------------------------------------------------------------------------- tests
def test_the_registry_holds_the_formats_that_were_there():
    assert tuple(all_readers()) == BUILT_IN == reader_names()
    assert FORMATS == BUILT_IN
    assert TEXT_FORMATS == ("reuters21578", "jsonl", "parquet", "synthetic")
    assert NUMERIC_FORMATS == ("mulan", "meka", "xmc", "svmlight")
    assert format_options("meka") == {"split_names"}
    assert format_options("xmc") == {"label_map", "feature_map", "split_names"}
    assert "split_names" not in format_options("synthetic")
    assert {"n_docs", "zipf_exponent", "min_df", "fit_split"} <= format_options("synthetic")


def _ingest_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    return sub.choices["ingest"]


def test_ingest_flags_are_those_there_were_and_a_registered_reader_adds_its_own(tsv_reader):
    unregister_reader("tsv")
    try:
        ingest = _ingest_parser()
        assert {s for a in ingest._actions for s in a.option_strings} == INGEST_FLAGS
        fmt = next(a for a in ingest._actions if "--format" in a.option_strings)
        assert tuple(fmt.choices) == BUILT_IN
        helps = {a.option_strings[0]: a.help for a in ingest._actions if a.option_strings}
        assert helps["--top-n"] == "reuters21578: keep the N most frequent topics (10 = R10)"
        assert helps["--zero-based"].startswith("svmlight: whether feature indices start")
    finally:
        register_reader(TSV)
    ingest = _ingest_parser()
    assert {s for a in ingest._actions for s in a.option_strings} == INGEST_FLAGS | {
        "--label-sep"}
    fmt = next(a for a in ingest._actions if "--format" in a.option_strings)
    assert tuple(fmt.choices) == (*BUILT_IN, "tsv")


def test_a_registered_reader_is_ingested_by_the_command_line_on_a_cluster(
        tsv_reader, tmp_path, cluster_client, capsys):
    train = _write_tsv(tmp_path / "news-train.tsv", TRAIN)
    test = _write_tsv(tmp_path / "news-test.tsv", TEST)
    out = tmp_path / "tsv.zarr"
    assert cli_main(["ingest", str(train), str(test), "--format", "tsv", "--label-sep", ";",
                     "--chunk-rows", "3", "--out", str(out), "--scheduler",
                     cluster_client.scheduler.address, "--quiet"]) == 0
    store = _assert_store(out, TRAIN + TEST)
    assert store.X.numblocks[0] == 3  # several chunks, written by the two workers
    assert list(store.split.compute()) == ["train"] * len(TRAIN) + ["test"] * len(TEST)
    assert store.attrs["format"] == "tsv"
    assert store.attrs["reader_options"] == {"label_sep": ";"}

    # the store's own reader options apply to an append in its format
    more = [("n1", "money;sports", "a goal and a prize")]
    entry = dmlfe.append(out, _write_tsv(tmp_path / "more.tsv", more), client=cluster_client)
    assert list(entry["rows"]) == [len(TRAIN + TEST), len(TRAIN + TEST) + 1]
    Y = open_store(out).Y.compute().toarray()
    assert Y[-1].tolist() == [1, 0, 1]  # money, politics, sports


def test_a_registered_reader_checks_its_options_and_its_flag_goes_with_it_only(
        tsv_reader, tmp_path, capsys):
    train = _write_tsv(tmp_path / "train.tsv", TRAIN)
    with pytest.raises(InputError, match=r"format 'tsv': parameter label_sep=':' is not one "
                       r"of"):
        dmlfe.ingest(train, "tsv", tmp_path / "a.zarr", label_sep=":")
    assert not (tmp_path / "a.zarr").exists()
    assert cli_main(["ingest", str(train), "--format", "jsonl", "--label-sep", ";",
                     "--out", str(tmp_path / "b.zarr")]) == 2
    assert "--label-sep does not apply to --format jsonl" in capsys.readouterr().err
    with pytest.raises(TypeError, match="valid options:.*label_sep"):
        dmlfe.ingest(train, "tsv", tmp_path / "c.zarr", top_n=3)


def test_a_registered_reader_is_a_pipeline_format(tsv_reader, tmp_path, cluster_client):
    data = tmp_path / "data"
    data.mkdir()
    # three copies of each row (ids kept unique by the copy's number)
    for name, rows in (("news-train.tsv", TRAIN), ("news-test.tsv", TEST)):
        _write_tsv(data / name, [(f"{i}.{k}", labs, text) for k in range(3)
                                 for i, labs, text in rows])
    cfg = {"name": "toy", "data_dir": str(data),
           "datasets": [{"name": "news", "format": "tsv",
                         "source": ["news-train.tsv", "news-test.tsv"], "chunk_rows": 8,
                         "options": {"label_sep": ";", "min_df": 2}}],
           "methods": ["none"], "classifiers": ["ridge"], "metrics": ["hamming_loss"]}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(cfg), "utf-8")
    parsed = load_config(path)
    assert parsed.datasets[0].format == "tsv"
    assert parsed.datasets[0].options == {"label_sep": ";", "min_df": 2}
    res = run_pipeline(path, work_dir=tmp_path / "work", client=cluster_client,
                       progress=False)
    assert res.report["results"], json.dumps(res.report)[:500]
    (store,) = (tmp_path / "work").rglob("store.zarr")
    rows = [(f"{i}.{k}", labs, text) for k in range(3) for i, labs, text in TRAIN] + \
        [(f"{i}.{k}", labs, text) for k in range(3) for i, labs, text in TEST]
    _assert_store(store, rows, min_df=2)

    cfg["datasets"][0]["options"] = {"label_seperator": ";"}
    path.write_text(yaml.safe_dump(cfg), "utf-8")
    with pytest.raises(ValueError, match=r"datasets\[0\]\.options.*label_sep"):
        load_config(path)


def test_unknown_format_lists_the_formats(tmp_path, tsv_reader):
    names = ", ".join((*BUILT_IN, "tsv"))
    with pytest.raises(InputError, match=f"unknown format 'csv'; choose one of {names}$"):
        get_reader("csv")
    with pytest.raises(InputError, match=f"choose one of {names}$"):
        dmlfe.ingest(tmp_path / "x.csv", "csv", tmp_path / "x.zarr")
    with pytest.raises(InputError, match=f"choose one of {names}$"):
        unregister_reader("csv")


def test_register_refuses_a_taken_name_and_a_clashing_flag(tsv_reader):
    with pytest.raises(ValueError, match="'tsv' is registered already"):
        register_reader(TSV)
    clash = ReaderSpec("tsv2", "text", read_tsv, options=(
        Param("top_n", None, one_of(None), "int\n    other", {"help": "another --top-n"}),))
    with pytest.raises(ValueError, match="option 'top_n' is declared by reader "
                       "'reuters21578' with another flag"):
        register_reader(clash)
    with pytest.raises(ValueError, match="kind 'audio'"):
        register_reader(ReaderSpec("wav", "audio", read_tsv))
    assert "tsv2" not in reader_names() and "wav" not in reader_names()


def test_a_required_option_is_named_with_its_flag(tmp_path, capsys):
    arff = tmp_path / "x-train.arff"
    arff.write_text("@relation x\n@attribute a numeric\n@data\n1\n", "utf-8")
    with pytest.raises(InputError, match=r"format 'mulan' needs the MULAN \.xml file naming "
                       r"the labels .*labels= \(command line: --labels FILE\.xml\)"):
        dmlfe.ingest(arff, "mulan", tmp_path / "m.zarr")
    assert cli_main(["ingest", str(arff), "--format", "mulan", "--out",
                     str(tmp_path / "m.zarr")]) == 2
    assert "format mulan needs --labels FILE.xml, the MULAN .xml file naming the labels" \
        in capsys.readouterr().err


def test_a_one_source_format_refuses_two_paths(tmp_path):
    a, b = (tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    for p in (a, b):
        p.write_text('{"text": "x", "labels": ["l"]}\n', "utf-8")
    with pytest.raises(InputError, match="format 'jsonl' takes one source path, got 2"):
        dmlfe.ingest([a, b], "jsonl", tmp_path / "s.zarr")
    assert not (tmp_path / "s.zarr").exists()
