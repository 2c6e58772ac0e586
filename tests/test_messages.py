"""Errors say what is wrong: the CLI's error contract and the messages of odd inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from conftest import write_store

import dmlfe
import dmlfe.cli as cli
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

    monkeypatch.setattr(cli, "cmd_info", broken)
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
