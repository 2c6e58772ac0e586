"""Errors say what is wrong: the CLI's error contract and the messages of odd inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import write_store

import dmlfe
import dmlfe.cli as cli
from dmlfe.cli import fit as cli_fit
from dmlfe.cli import ingest as cli_ingest
from dmlfe.cli import store as cli_store
from dmlfe.errors import DmlfeError, InputError, StoreError


def _small_store(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(30, 8, density=0.4, format="csr", random_state=1)
    Y = (rng.random((30, 3)) < 0.4).astype(np.uint8)
    return write_store(tmp_path / "s.zarr", X, Y, np.array(["train"] * 30))


def test_info_on_things_that_are_not_stores(tmp_path, capsys):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    assert cli.main(["info", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "is not a dmlfe store: it has no zarr.json" in err and "re-run" not in err
    assert cli.main(["info", str(folder / "notes.txt")]) == 2
    assert "is a file, not a dmlfe store" in capsys.readouterr().err
    with pytest.raises(StoreError):
        dmlfe.open_store(folder)
    assert cli.main(["info", str(tmp_path / "absent")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_export_has_overwrite(tmp_path, capsys):
    store = _small_store(tmp_path)
    out = tmp_path / "x.parquet"
    assert cli.main(["export", str(store), "--out", str(out)]) == 0
    capsys.readouterr()
    assert cli.main(["export", str(store), "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(["export", str(store), "--out", str(out), "--overwrite"]) == 0


def test_unexpected_errors_are_one_line_and_a_request_to_report(tmp_path, capsys,
                                                               monkeypatch):
    def broken(args):
        raise TypeError("an internal slip")

    monkeypatch.setattr(cli_store, "cmd_info", broken)
    assert cli.main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: TypeError: an internal slip" in err
    assert "please report" in err and "Traceback" not in err
    assert cli.main(["info", str(tmp_path), "--debug"]) == 1
    assert "Traceback" in capsys.readouterr().err
    assert cli.main(["--debug", "info", str(tmp_path)]) == 1
    assert "Traceback" in capsys.readouterr().err


def test_no_variance_and_no_information_say_so():
    rng = np.random.default_rng(2)
    Y = (rng.random((40, 3)) < 0.4).astype(np.uint8)
    with pytest.raises(InputError, match="is zero: the training data have no variance"):
        dmlfe.OPLS(n_components=2).fit(sp.csr_matrix((40, 6)), Y)
    X = sp.random(40, 6, density=0.5, random_state=1, format="csr")
    every_label = np.ones((40, 3), dtype=np.uint8)  # the labels tell nothing apart
    for cls in (dmlfe.MLDA, dmlfe.DMLDA):
        with pytest.warns(RuntimeWarning, match="only 0 eigenvalues are above round-off"):
            est = cls(n_components=2).fit(X, every_label)
        assert np.all(est.eigenvalues_ == 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an informative labelling keeps its eigenvalues
        assert dmlfe.MLDA(n_components=2).fit(X, Y).eigenvalues_[0] > 0


@pytest.mark.parametrize(("X", "Y", "match"), [
    # in memory: scikit-learn's wording, which its estimator checks look for
    (sp.csr_matrix((0, 5)), np.zeros((0, 2), dtype=np.uint8), r"CCA: .*0 sample\(s\)"),
    (sp.csr_matrix((10, 0)), np.ones((10, 2), dtype=np.uint8), r"CCA: .*0 feature\(s\)"),
    (sp.random(10, 5, density=0.5, format="csr", random_state=0),
     np.zeros((10, 0), dtype=np.uint8), "no labels"),
])
def test_empty_inputs_are_refused_at_fit(X, Y, match):
    with pytest.raises(InputError, match=match) as info:
        dmlfe.CCA(n_components=1).fit(X, Y)
    assert isinstance(info.value, DmlfeError)


def test_clean_command(tmp_path, capsys):
    store = _small_store(tmp_path)
    dmlfe.PCA(n_components=2).fit(str(store))  # fills store.zarr.stats/
    stats_dir = tmp_path / "s.zarr.stats"
    assert stats_dir.is_dir()
    assert cli.main(["clean", str(store)]) == 0
    out = capsys.readouterr().out
    assert f"removed {stats_dir}" in out and not stats_dir.exists()
    assert dmlfe.open_store(store).n_docs == 30  # the store is kept
    assert cli.main(["clean", str(tmp_path / "nothing.zarr")]) == 2


def test_a_file_given_as_a_store_says_what_it_is_and_what_to_do(tmp_path, capsys):
    corpus = tmp_path / "emotions.arff"
    corpus.write_text("@relation r\n@attribute f numeric\n@attribute L {0,1}\n@data\n1,0\n")
    for argv in (["info", str(corpus)],
                 ["fit", str(corpus), "--method", "pca", "--out", str(tmp_path / "m")]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "interrupted" not in err
        assert f"{corpus} is a file, not a dmlfe store: a store is a folder" in err
        assert f"run: dmlfe ingest {corpus} --format mulan --labels" in err
    assert not (tmp_path / "m").exists()


@pytest.fixture
def no_cluster(monkeypatch):
    """Any start of a cluster fails the command as a bug (exit 1, not 2)."""
    def refuse(args):
        raise AssertionError("a cluster was started before the input was checked")

    for module in (cli_ingest, cli_fit):  # the commands these tests run
        monkeypatch.setattr(module, "client_from_args", refuse)


def test_mulan_without_labels_names_the_flag_before_a_cluster_starts(tmp_path, capsys,
                                                                    no_cluster):
    corpus = tmp_path / "c.arff"
    corpus.write_text("@relation r\n@attribute f numeric\n@attribute L {0,1}\n@data\n1,0\n")
    assert cli.main(["ingest", str(corpus), "--format", "mulan", "--out",
                     str(tmp_path / "s.zarr")]) == 2
    err = capsys.readouterr().err
    assert "format mulan needs --labels FILE.xml" in err and "labels=" not in err


def test_bad_inputs_fail_before_a_cluster_starts(tmp_path, capsys, no_cluster):
    garbage = tmp_path / "g.parquet"
    garbage.write_bytes(b"not parquet")
    assert cli.main(["import", str(garbage), "--out", str(tmp_path / "i.zarr")]) == 2
    assert "g.parquet is not a readable Parquet file" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "labels": [\n')
    assert cli.main(["ingest", str(bad), "--format", "jsonl", "--out",
                     str(tmp_path / "j.zarr")]) == 2
    assert "bad.jsonl" in capsys.readouterr().err
    store = _small_store(tmp_path)
    export = tmp_path / "s.parquet"
    dmlfe.store.export_parquet(store, export)
    for argv in (["import", str(export), "--out", str(store)],
                 ["ingest", "--format", "synthetic", "--n-docs", "20", "--out", str(store)]):
        assert cli.main(argv) == 2
        assert "exists" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp-*"))  # nothing left behind


@pytest.mark.parametrize("flag,value,expected", [
    ("--threshold", "1.5", "a share of the eigenvalue sum"),
    ("--threshold", "abc", "a share of the eigenvalue sum"),
    ("--dim", "0", "a number of components"),
    ("--dim", "2.5", "a number of components"),
])
def test_dim_and_threshold_errors_speak_of_the_flag(tmp_path, capsys, flag, value, expected):
    # one argparse line in the command line's terms: the flag and its value, not the
    # Python parameter (n_components) behind it
    with pytest.raises(SystemExit) as info:
        cli.main(["fit", str(tmp_path / "s.zarr"), "--method", "pca", flag, value])
    assert info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"argument {flag}:" in line and expected in line and repr(value) in line, line
    assert "n_components" not in line


def test_info_lists_the_most_frequent_labels_unless_asked_for_all(tmp_path, capsys):
    # 30 labels, label k carried by 30 - k documents: info shows the 20 most frequent and
    # a count of the rest; --labels-all and --json give all of them
    n, q = 60, 30
    Y = (np.arange(n)[:, None] < (q - np.arange(q))[None, :]).astype(np.uint8)
    X = sp.random(n, 7, density=0.5, format="csr", random_state=0)
    store = write_store(tmp_path / "s.zarr", X, Y, np.array(["train"] * n))
    assert cli.main(["info", str(store)]) == 0
    out = capsys.readouterr().out
    shown = [line for line in out.splitlines() if line.startswith("  L")]
    assert len(shown) == cli.LABELS_SHOWN and "... and 10 more" in out
    counts = [int(line.rsplit(":", 1)[1]) for line in shown]
    assert counts == sorted(counts, reverse=True) and counts[0] == 30
    assert cli.main(["info", str(store), "--labels-all"]) == 0
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if line.startswith("  L")]) == q
    assert "more" not in out
