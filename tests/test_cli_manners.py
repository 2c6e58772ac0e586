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
    # LPP: its K-NN graph keeps the workers busy for seconds after the cluster is up, so
    # the interrupt lands during the fit, not after it (MLSI could finish first)
    cmd = [sys.executable, "-m", "dmlfe.cli", "fit", str(store), "--method", "lpp",
           "--dim", "5", "--out", str(tmp_path / "m"), "--workers", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # started as a shell starts a foreground command: SIGINT at its default action, whatever
    # this test process has (an ignored SIGINT would be inherited, and Python would then
    # install no KeyboardInterrupt handler in the command)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(p.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while not any("dashboard" in line for line in lines):  # the workers are running
        assert p.poll() is None and time.monotonic() < deadline, "".join(lines)
        time.sleep(0.1)
    seen = len(lines)
    time.sleep(0.2)
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


def test_warnings_are_one_line_in_the_flags_terms(tmp_path, cluster_client, capsys):
    import numpy as np
    import scipy.sparse as sp
    from helpers import write_store

    from dmlfe.cli import main

    rng = np.random.default_rng(0)
    X = sp.csr_matrix(rng.uniform(size=(60, 12)))
    Y = (rng.uniform(size=(60, 3)) < 0.5).astype(np.uint8)
    st = write_store(tmp_path / "s.zarr", X, Y, ["train"] * 60)
    # MDDM_f's objective has rank <= q = 3: d = 5 reaches past it
    assert main(["fit", str(st), "--method", "mddm_f", "--dim", "5", "--out",
                 str(tmp_path / "m"), "--scheduler", cluster_client.scheduler.address,
                 "--quiet"]) == 0
    err = capsys.readouterr().err.splitlines()
    warned = [line for line in err if "warning" in line]
    assert len(warned) == 1, err
    assert warned[0].startswith("dmlfe fit: warning: mddm_f: --dim 5 but only 3 eigenvalues")
    assert "n_components" not in warned[0] and "warnings.warn" not in "\n".join(err)
    assert not any(line.lstrip().startswith("File ") for line in err)  # no source line


def test_cli_terms_translate_parameter_names():
    from dmlfe.cli import build_parser, cli_terms

    parser = build_parser()
    msg = ("the top 32 computed eigenvalues hold 0.8 of the total, below the threshold "
           "t=0.999; keeping 32 components (raise max_components or pass an int\n"
           "n_components)")
    assert cli_terms(msg, parser, "fit") == (
        "the top 32 computed eigenvalues hold 0.8 of the total, below the threshold t=0.999; "
        "keeping 32 components (raise --max-components or pass --dim)")
    assert cli_terms("n_components=0.9 and n_prototypes=50", parser, "fit") == (
        "--threshold 0.9 and --prototypes 50")
    # words that are flags of another command only, or plain words, stay
    assert cli_terms("split max_components", parser, "info") == "split max_components"


def test_embed_takes_quiet_verbose_and_scheduler(tmp_path, cluster_client, capsys):
    import json

    import numpy as np

    from dmlfe.cli import main
    from dmlfe.projection import read_embeddings

    recs = [{"text": t, "labels": [lab]} for t, lab in
            [("red sky sea", "a"), ("green leaf tree", "b"), ("red sea wave", "a"),
             ("green grass leaf", "b")] * 10]
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = dmlfe.ingest(src, format="jsonl", out=tmp_path / "s.zarr", chunk_rows=8)
    model_dir = dmlfe.MDDM(n_components=1).fit(st).save(tmp_path / "m")
    ref = dmlfe.load_model(model_dir).transform(dmlfe.open_store(st).X).compute()
    out = tmp_path / "emb"
    address = cluster_client.scheduler.address
    assert main(["embed", str(model_dir), str(src), "--out", str(out), "--scheduler", address,
                 "--quiet"]) == 0
    assert capsys.readouterr().out == ""  # --quiet: no summary
    np.testing.assert_allclose(read_embeddings(out), ref, atol=1e-12)
    assert main(["embed", str(model_dir), str(src), "--out", str(out), "--overwrite",
                 "--verbose"]) == 0
    assert "40 documents x 1 components" in capsys.readouterr().out
    assert main(["embed", str(model_dir), str(src), "--out", "-"]) == 2
    assert "cannot be written to standard output" in capsys.readouterr().err


def _olpp_fit(n: int, D: int, d: int):
    import warnings

    import numpy as np

    from dmlfe.estimators import make_estimator

    rng = np.random.default_rng(4)
    X = rng.normal(size=(n, D)) + rng.uniform(0, 1, size=D)
    Y = (rng.uniform(size=(n, 2)) < 0.5).astype(np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = make_estimator("olpp", n_components=d, route="feature").fit(X, Y)
    told = [str(w.message) for w in caught if "carry no information" in str(w.message)]
    Z = np.asarray(est.transform(X))
    return told, Z.std(axis=0) / np.abs(X).std()


def test_olpp_warns_only_when_components_carry_no_information():
    # more documents than features: OLPP's components are real projections (no
    # document is sent to one value); its spectrum is non-positive all the same
    told, spread = _olpp_fit(n=80, D=10, d=3)
    assert told == [] and (spread > 1e-3).all(), (told, spread)
    # more features than documents: the leading components lie where X p = 0 and
    # every document gets the same value; the warning says so
    told, spread = _olpp_fit(n=20, D=60, d=3)
    assert len(told) == 1 and "components 1..3 of the 3" in told[0], told
    assert (spread < 1e-8).all(), spread


def test_olpp_needs_dim_on_the_command_line(tmp_path, capsys):
    from dmlfe.cli import main

    assert main(["fit", str(tmp_path), "--method", "olpp", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--method olpp needs --dim" in err
