"""Progress bars, ``--quiet`` and ``--verbose``."""

from __future__ import annotations

import io
import re
import time

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from helpers import write_store

import dmlfe.progress as progress
from dmlfe.cli import main
from dmlfe.compute import run
from dmlfe.progress import LocalProgress, ProgressLine, show_progress


def _slow(i: int) -> int:
    time.sleep(0.05)
    return i


def _graph(n: int):
    """n independent tasks and one that sums them: n + 1 tasks."""
    return dask.delayed(sum)([dask.delayed(_slow)(i) for i in range(n)])


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_line_text_and_modes(monkeypatch):
    log = io.StringIO()
    line = ProgressLine("statistics pass", stream=log)
    assert not line.tty and line.interval == progress.LOG_INTERVAL
    line.update(3, 12)  # within the first interval: nothing yet
    assert log.getvalue() == ""
    line.update(6, 12, force=True)
    text = log.getvalue()
    assert text.endswith("\n") and text.count("\n") == 1
    assert re.match(r"\[dmlfe\] statistics pass \[#{12}\.{12}\]  50%  6/12 tasks  \d+ s\n$",
                    text)

    tty = _Tty()
    bar = ProgressLine("pass", stream=tty)
    assert bar.tty and bar.interval == progress.TTY_INTERVAL
    bar.update(1, 4, force=True)
    bar.update(4, 4, force=True)
    bar.close()
    out = tty.getvalue()
    assert "\n" not in out and out.count("\r") == 4  # redrawn in place, then cleared
    assert "1/4 tasks" in out and "4/4 tasks" in out and out.endswith("\r")


def test_local_scheduler_progress_counts_every_task(monkeypatch):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    log = io.StringIO()
    with LocalProgress(ProgressLine("p", stream=log)):
        assert dask.compute(_graph(6), scheduler="threads")[0] == 15
    counts = [tuple(map(int, m)) for m in re.findall(r"(\d+)/(\d+) tasks", log.getvalue())]
    assert counts and counts[-1] == (7, 7)
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)


def test_distributed_progress_and_the_done_line(cluster_client, monkeypatch, capsys):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    (value,) = run(_graph(8), desc="test pass", progress=True, client=cluster_client)
    assert value == 28
    err = capsys.readouterr().err
    counts = [tuple(map(int, m)) for m in re.findall(r"test pass \[.*\] +\d+%  (\d+)/(\d+) "
                                                      r"tasks", err)]
    assert counts and {t for _, t in counts} == {9}  # the scheduler's count of the graph
    assert "[dmlfe] test pass: done in " in err.splitlines()[-1]
    # off unless asked: progress=None takes show_progress's default
    run(_graph(2), desc="quiet pass", client=cluster_client)
    assert capsys.readouterr().err == ""
    with show_progress():
        run(_graph(2), desc="shown pass", client=cluster_client)
        run(_graph(2), desc="not this one", client=cluster_client, progress=False)
    err = capsys.readouterr().err
    assert "shown pass" in err and "not this one" not in err


def test_windowed_fold_keeps_the_order_and_bounds_what_is_in_flight(cluster_client,
                                                                   monkeypatch, capsys):
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    submitted, folded = [], []
    real = cluster_client.compute
    monkeypatch.setattr(cluster_client, "compute",
                        lambda obj, **k: submitted.append(1) or real(obj, **k))

    def fold(value):
        # when result i is folded, at most ``window`` were submitted beyond the folded
        assert len(submitted) - len(folded) <= 2
        folded.append(value)

    parts = [dask.delayed(lambda i: i * i)(i) for i in range(7)]
    assert run(*parts, desc="windowed pass", progress=True, client=cluster_client,
               fold=fold, window=2) == ()
    assert folded == [i * i for i in range(7)] and len(submitted) == 7
    assert re.search(r"windowed pass \[.*\] +\d+%  7/7 tasks", capsys.readouterr().err)


@pytest.fixture
def small_store(tmp_path):
    rng = np.random.default_rng(0)
    X = sp.random(60, 12, density=0.4, format="csr", random_state=1)
    Y = (rng.random((60, 3)) < 0.4).astype(np.uint8)
    return write_store(tmp_path / "s.zarr", X, Y, np.array(["train"] * 60))


def test_quiet_fit_prints_nothing(small_store, tmp_path, cluster_client, capsys):
    address = cluster_client.scheduler.address
    assert main(["fit", str(small_store), "--method", "pca", "--dim", "2", "--out",
                 str(tmp_path / "m"), "--scheduler", address, "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    assert (tmp_path / "m" / "model.json").is_file()
    # errors still reach stderr under --quiet
    assert main(["fit", str(small_store), "--method", "pca", "--dim", "2", "--out",
                 str(tmp_path / "m"), "--scheduler", address, "--quiet"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "exists; pass --overwrite" in err
    # without --quiet: the summary on stdout, the dashboard address on stderr
    assert main(["fit", str(small_store), "--method", "pca", "--dim", "2", "--out",
                 str(tmp_path / "m"), "--scheduler", address, "--overwrite"]) == 0
    out, err = capsys.readouterr()
    assert "method: pca" in out and "dask dashboard: " in err


def test_verbose_logs_the_passes(small_store, tmp_path, cluster_client, capsys):
    import logging

    level = logging.getLogger("dmlfe").level
    assert main(["fit", str(small_store), "--method", "pca", "--dim", "2", "--out",
                 str(tmp_path / "m"), "--scheduler", cluster_client.scheduler.address,
                 "--verbose"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"dmlfe\.compute - INFO - statistics pass: done in [\d.]+ s", err)
    assert "dmlfe.cluster - INFO - " in err
    assert logging.getLogger("dmlfe").level == level  # restored
    with pytest.raises(SystemExit):  # argparse: not both
        main(["fit", str(small_store), "--method", "pca", "--quiet", "--verbose", "--out",
              str(tmp_path / "m2")])
