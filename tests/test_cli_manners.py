"""Command-line manners: Ctrl-C, warnings in the CLI's terms, embed's output flags,
OLPP's d."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import dmlfe

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("manners")
    return dmlfe.ingest(None, format="synthetic", out=tmp / "s.zarr", chunk_rows=1000,
                        n_docs=8000, vocab_size=2000, n_labels=10, seed=0)


@pytest.mark.skipif(sys.platform == "win32", reason="process groups and SIGINT are POSIX")
def test_ctrl_c_during_a_fit_on_a_local_cluster_prints_one_line(store, tmp_path):
    # a terminal's Ctrl-C reaches the whole foreground process group: the command and
    # its LocalCluster's worker processes
    cmd = [sys.executable, "-m", "dmlfe.cli", "fit", str(store), "--method", "mlsi",
           "--dim", "5", "--out", str(tmp_path / "m"), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not any("dashboard" in line for line in lines):  # the workers are running
        assert p.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    seen = len(lines)
    time.sleep(0.5)
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    reader.join(timeout=10)
    after = [line for line in lines[seen:] if not line.startswith("[dmlfe]")]  # progress
    assert p.returncode == 130, "".join(lines)
    assert after == ["dmlfe fit: interrupted\n"], "".join(after)
