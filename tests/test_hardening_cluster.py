"""Issue 35 (hardening), through the command line where a user meets each case: YAML
alias bombs, schedulers without workers or that are not dask, what a LocalCluster
listens on, symbolic links as outputs, bad seeds, outputs checked before the work, and
``dmlfe clean`` on a folder."""

from __future__ import annotations

import logging
import re
import signal
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from dmlfe.cli import main
from dmlfe.yamlfiles import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES, read_yaml

ROOT = Path(__file__).resolve().parents[1]


def billion_laughs() -> str:
    """The classic: ten levels of nine aliases each, 9**10 scalars once expanded."""
    lines = ["l0: &l0 [" + ",".join(["lol"] * 9) + "]"]
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def one_error_line(err: str, command: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"dmlfe {command}: error: "), err
    return err


# --------------------------------------------------------------------------- YAML
def test_a_billion_laughs_profile_is_refused_at_once(tmp_path, capsys):
    profile = tmp_path / "laughs.yaml"
    text = billion_laughs()
    assert len(text) < 600
    profile.write_text("dmlfe:\n  cluster:\n    kind: local\n" + text)
    tracemalloc.start()
    start = time.monotonic()
    try:
        rc = main(["cluster", "check", str(profile)])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rc == 2
    assert time.monotonic() - start < 10
    assert peak < 50 * 2**20
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert f"cluster profile {profile} expands to more than {MAX_YAML_NODES}" in err


def test_a_billion_laughs_pipeline_is_refused_at_once(tmp_path, capsys):
    pipeline = tmp_path / "laughs.yaml"
    pipeline.write_text("name: laughs\n" + billion_laughs())
    start = time.monotonic()
    assert main(["run", str(pipeline), "--quiet"]) == 2
    assert time.monotonic() - start < 10
    err = one_error_line(capsys.readouterr().err, "run")
    assert f"pipeline file {pipeline} expands to more than" in err


@pytest.mark.parametrize("text, message", [
    ("a: &a [1, *a]\n", "alias (*name) inside the node it refers to"),
    ("[" * 5000 + "]" * 5000, f"more than {MAX_YAML_DEPTH} deep"),
    ("".join(" " * i + "a:\n" for i in range(MAX_YAML_DEPTH + 5)),
     f"more than {MAX_YAML_DEPTH} deep"),
    ("# padding\n" * (MAX_YAML_BYTES // 10 + 1), f"larger than {MAX_YAML_BYTES} bytes"),
    ("dmlfe: [1\n", "is not valid YAML"),
])
def test_other_hostile_profiles_are_one_line(tmp_path, capsys, text, message):
    profile = tmp_path / "bad.yaml"
    profile.write_text(text)
    start = time.monotonic()
    assert main(["cluster", "check", str(profile)]) == 2
    assert time.monotonic() - start < 10
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert str(profile) in err and message in err


def test_anchors_and_aliases_within_the_limits_still_read(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("base: &base {cores: 4, memory: 8GiB}\nother: {<<: *base, cores: 8}\n"
                    "both: [*base, *base]\n")
    assert read_yaml(path, ValueError, "test file") == {
        "base": {"cores": 4, "memory": "8GiB"}, "other": {"cores": 8, "memory": "8GiB"},
        "both": [{"cores": 4, "memory": "8GiB"}] * 2}
    # every YAML file the project ships reads the same as with yaml.safe_load
    shipped = [*(ROOT / "cluster_configs").glob("*.yaml"), *(ROOT / "pipelines").glob("*.yaml")]
    assert len(shipped) >= 9
    for p in shipped:
        assert read_yaml(p, ValueError, "test file") == yaml.safe_load(p.read_text()), p


def test_every_yaml_reader_of_the_project_goes_through_read_yaml():
    readers = []
    for p in (ROOT / "dmlfe").rglob("*.py"):
        text = p.read_text()
        if any(f"yaml.{call}(" in text for call in ("safe_load", "load", "full_load",
                                                    "unsafe_load", "load_all")):
            readers.append(p.relative_to(ROOT).as_posix())
    assert readers == [], readers


# --------------------------------------------------------------------------- schedulers
def small_store(path: Path) -> Path:
    import numpy as np
    import scipy.sparse as sp
    from helpers import write_store

    rng = np.random.default_rng(0)
    X = sp.random(40, 8, density=0.5, format="csr", random_state=1)
    Y = (rng.random((40, 3)) < 0.5).astype(np.uint8)
    return write_store(path, X, Y, np.array(["train"] * 40))


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections and never says a word (not dask)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


def test_a_port_that_is_not_dask_fails_within_the_connect_timeout(tmp_path, capsys,
                                                                 silent_server):
    address, accepted = silent_server
    store = small_store(tmp_path / "s.zarr")
    # the regression is a hang: an alarm ends the test instead of the CI's limit (a
    # guard, not a speed check: the message below says which timeout answered)
    def hang(signum, frame):
        raise AssertionError("the command did not answer within 120 s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(120)
    try:
        rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out",
                   str(tmp_path / "m"), "--scheduler", address, "--connect-timeout", "2"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert rc == 2 and accepted  # it did connect: the wait was dask's handshake
    err = one_error_line(capsys.readouterr().err, "fit")
    assert (f"{address} (--scheduler) accepted a connection but did not answer as a dask "
            "scheduler within 2 s") in err and "--connect-timeout" in err
    assert not (tmp_path / "m").exists()


def test_a_worker_address_and_tls_without_certificates_are_one_line(tmp_path, capsys):
    from distributed import LocalCluster

    out = str(tmp_path / "never.zarr")
    with LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0",
                      protocol="tcp://", host="127.0.0.1") as lc:
        worker = next(iter(lc.scheduler.workers))
        assert main(["ingest", "--format", "synthetic", "--n-docs", "20", "--out", out,
                     "--scheduler", worker, "--quiet"]) == 2
        err = one_error_line(capsys.readouterr().err, "ingest")
        assert f"{worker} (--scheduler) is a dask Worker, not a scheduler" in err
    assert main(["ingest", "--format", "synthetic", "--n-docs", "20", "--out", out,
                 "--scheduler", "tls://127.0.0.1:1", "--quiet"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert "a tls:// address needs dask's TLS settings" in err
    assert not Path(out).exists()


@pytest.fixture
def no_worker_scheduler():
    """A real scheduler (TCP, on loopback) that no worker ever joins."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=True, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as lc:
        yield lc.scheduler_address


def test_a_scheduler_without_workers_is_one_line_after_the_worker_timeout(
        tmp_path, capsys, no_worker_scheduler):
    address = no_worker_scheduler
    store = small_store(tmp_path / "s.zarr")
    start = time.monotonic()
    rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out",
               str(tmp_path / "m"), "--scheduler", address, "--worker-timeout", "1",
               "--quiet"])
    assert rc == 2 and time.monotonic() - start < 15
    err = one_error_line(capsys.readouterr().err, "fit")
    assert (f"no dask worker joined the scheduler at {address} (--scheduler) within 1 s"
            in err) and "--worker-timeout" in err
    # without --quiet the wait is announced first; a profile sets the wait too
    profile = tmp_path / "remote.yaml"
    profile.write_text(f"dmlfe:\n  cluster:\n    kind: scheduler\n    address: {address}\n"
                       "    worker_timeout: 0.5\n")
    rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out",
               str(tmp_path / "m"), "--cluster", str(profile)])
    assert rc == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-2] == (f"waiting up to 0.5 s for a dask worker to join the scheduler at "
                         f"{address}")
    assert lines[-1].startswith(f"dmlfe fit: error: no dask worker joined the scheduler at "
                                f"{address} ({profile}: dmlfe.cluster.address) within 0.5 s")
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("value, message", [
    ("-1", "must be a number of seconds (0 or more) or null"),
    ("ten", "must be a number of seconds (0 or more) or null"),
])
def test_worker_timeout_in_a_profile_is_checked(tmp_path, capsys, value, message):
    profile = tmp_path / "p.yaml"
    profile.write_text(f"dmlfe:\n  cluster:\n    kind: local\n    worker_timeout: {value}\n")
    assert main(["cluster", "check", str(profile)]) == 2
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert "dmlfe.cluster.worker_timeout" in err and message in err


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--worker-timeout", "-1"],
                                  ["--connect-timeout", "nan"]])
def test_bad_cluster_flags_are_refused_by_the_parser(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as stop:
        main(["ingest", "--format", "synthetic", "--out", str(tmp_path / "s.zarr"), *argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and not (tmp_path / "s.zarr").exists()


# --------------------------------------------------------------------------- loopback
def listening() -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket of this process and its children."""
    import psutil

    me = psutil.Process()
    found = []
    for proc in [me, *me.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found += [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return found


@pytest.mark.parametrize("processes", [True, False])
def test_a_local_cluster_listens_on_loopback_and_says_where(capsys, processes):
    from dmlfe.cluster import get_client

    before = set(listening())
    with get_client(announce=True, n_workers=1, processes=processes):
        ours = set(listening()) - before
        line = capsys.readouterr().err.strip()
    assert ours  # the dashboard at least
    assert {ip for ip, _ in ours} == {"127.0.0.1"}, ours
    port = int(line.rsplit(":", 1)[1].split("/")[0])
    assert line == f"dask dashboard: http://127.0.0.1:{port}/status"
    assert ("127.0.0.1", port) in ours


def test_a_profile_opens_the_local_cluster(tmp_path, capsys):
    from dmlfe.cluster import get_client

    profile = tmp_path / "open.yaml"
    profile.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                       "    processes: false\n    host: 0.0.0.0\n")
    assert main(["cluster", "check", str(profile)]) == 0
    assert '"dashboard_address": "0.0.0.0:0"' in capsys.readouterr().out
    before = set(listening())
    with get_client(cluster=str(profile), announce=True):
        ours = set(listening()) - before
        line = capsys.readouterr().err.strip()
    port = int(re.search(r"0\.0\.0\.0:(\d+)/", line).group(1))
    assert ("0.0.0.0", port) in ours
    assert line == (f"dask dashboard: http://0.0.0.0:{port}/status (listening on every "
                    "interface)")


def test_cluster_check_shows_the_loopback_default(capsys):
    assert main(["cluster", "check", "local"]) == 0
    out = capsys.readouterr().out
    assert '"host": "127.0.0.1"' in out and '"dashboard_address": "127.0.0.1:0"' in out


# --------------------------------------------------------------------------- outputs
def links(tmp_path: Path) -> dict[str, Path]:
    """A dangling and a looping symbolic link."""
    dangling, loop_a, loop_b = tmp_path / "dangling", tmp_path / "loop_a", tmp_path / "loop_b"
    dangling.symlink_to(tmp_path / "nowhere")
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    return {"dangling": dangling, "looping": loop_a}


@pytest.mark.parametrize("kind", ["dangling", "looping"])
def test_a_symbolic_link_as_out_is_refused_without_overwrite(tmp_path, capsys, kind):
    import dmlfe

    link = links(tmp_path)[kind]
    store = small_store(tmp_path / "s.zarr")
    model = tmp_path / "model"
    dmlfe.PCA(n_components=2).fit(str(store)).save(model)
    docs = tmp_path / "docs.txt"
    docs.write_text("a b\nc d\n")
    commands = {
        "fit": ["fit", str(store), "--method", "pca", "--dim", "2"],
        "ingest": ["ingest", "--format", "synthetic", "--n-docs", "20", "--quiet"],
        "import": ["import", str(tmp_path / "s.parquet")],
        "export": ["export", str(store)],
        "transform": ["transform", str(model), str(store), "--quiet"],
    }
    assert main(["export", str(store), "--out", str(tmp_path / "s.parquet")]) == 0
    capsys.readouterr()
    for command, argv in commands.items():
        rc = main([*argv, "--out", str(link), "--workers", "1"] if command in (
            "fit", "ingest", "import", "transform") else [*argv, "--out", str(link)])
        err = capsys.readouterr().err
        assert rc == 2, (command, err)
        one_error_line(err, command)
        assert f"{link} " in err and "exists" in err and "symbolic link" in err, err
        assert link.is_symlink() and not link.exists(), command  # left as it was


def test_overwrite_onto_a_plain_file_is_refused_before_any_work(tmp_path, capsys,
                                                                monkeypatch):
    from dmlfe.cli import fit as cli_fit
    from dmlfe.cli import ingest as cli_ingest

    store = small_store(tmp_path / "s.zarr")
    plain = tmp_path / "notes.txt"
    plain.write_text("mine")

    def refuse(args):
        raise AssertionError("a cluster was started before the output was checked")

    for module in (cli_fit, cli_ingest):  # fit and import
        monkeypatch.setattr(module, "client_from_args", refuse)
    assert main(["fit", str(store), "--method", "pca", "--dim", "2", "--out", str(plain),
                 "--overwrite"]) == 2
    err = one_error_line(capsys.readouterr().err, "fit")
    assert f"{plain} exists and is not a dmlfe model" in err
    assert not (tmp_path / "s.zarr.stats").exists()  # no statistics pass ran
    assert main(["export", str(store), "--out", str(tmp_path / "s.parquet")]) == 0
    assert main(["import", str(tmp_path / "s.parquet"), "--out", str(plain),
                 "--overwrite"]) == 2
    err = one_error_line(capsys.readouterr().err, "import")
    assert f"{plain} exists and is not a directory" in err
    assert plain.read_text() == "mine"


@pytest.mark.parametrize("seed", ["-5", "4294967296", "x"])
def test_a_bad_random_state_is_refused_by_the_parser(tmp_path, capsys, seed):
    with pytest.raises(SystemExit) as stop:
        main(["fit", str(tmp_path / "s.zarr"), "--method", "pca", "--out",
              str(tmp_path / "m"), "--random-state", seed])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --random-state: expected a seed from 0 to 4294967295, got '{seed}'" in err


def test_a_negative_random_state_is_refused_by_the_estimator():
    import dmlfe

    with pytest.raises(ValueError, match="random_state=-5"):
        dmlfe.PCA(n_components=2, random_state=-5).fit([[0.0, 1.0], [1.0, 0.0]], [[1], [0]])


# --------------------------------------------------------------------------- clean FOLDER
def test_clean_a_folder_removes_left_over_temporaries_and_keeps_live_ones(tmp_path, capsys):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    store = small_store(runs / "a" / "s.zarr")
    left = runs / "a" / f".big.zarr.tmp-{dead.pid}-0123456789ab"  # a killed ingest
    (left / "pieces").mkdir(parents=True)
    (left / "pieces" / "0.npz").write_bytes(b"x" * 5120)
    model_left = runs / f".model.tmp-{dead.pid}-abcdef012345"
    model_left.write_bytes(b"y" * 100)
    import os

    live = runs / f".emb.zarr.tmp-{os.getpid()}-00000000000a"  # this process writes it
    live.mkdir()
    mine = runs / ".notes.tmp-keep"  # not a name dmlfe makes
    mine.write_text("mine")

    assert main(["clean", str(runs), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"would remove {left} (5.00 kiB)" in out
    assert f"would remove {model_left} (100 B)" in out
    assert f"kept {live} (0 B): process {os.getpid()} is still running" in out
    assert left.exists() and model_left.exists()

    assert main(["clean", str(runs)]) == 0
    out = capsys.readouterr().out
    assert f"removed {left} (5.00 kiB)" in out
    assert out.splitlines()[-1] == (f"2 left-over temporaries removed under {runs} "
                                    "(5.10 kiB); 1 in use kept")
    assert not left.exists() and not model_left.exists()
    assert live.exists() and mine.exists() and (store / "zarr.json").exists()


def test_clean_a_store_still_removes_its_cache_and_says_how_much(tmp_path, capsys):
    import dmlfe

    store = small_store(tmp_path / "s.zarr")
    dmlfe.PCA(n_components=2).fit(str(store))
    cache = tmp_path / "s.zarr.stats"
    assert cache.is_dir()
    assert main(["clean", str(store), "--dry-run"]) == 0
    assert f"would remove {cache} (" in capsys.readouterr().out and cache.is_dir()
    assert main(["clean", str(store)]) == 0
    assert f"removed {cache} (" in capsys.readouterr().out and not cache.exists()


# --------------------------------------------------------------------------- encryption
def test_required_encryption_is_checked_for_real(tmp_path, capsys):
    pytest.importorskip("cryptography")
    profile = tmp_path / "tls.yaml"
    profile.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                       "    processes: false\ndistributed:\n  comm:\n"
                       "    require-encryption: true\n")
    assert main(["cluster", "check", str(profile)]) == 0
    assert "TLS: temporary self-signed credentials" in capsys.readouterr().out
    # and it does start: a local cluster with temporary credentials, tls:// throughout
    store = tmp_path / "s.zarr"
    assert main(["ingest", "--format", "synthetic", "--n-docs", "20", "--out", str(store),
                 "--cluster", str(profile), "--quiet"]) == 0
    assert (store / "zarr.json").is_file()

    remote = tmp_path / "remote.yaml"
    remote.write_text("dmlfe:\n  cluster:\n    kind: scheduler\n    address: "
                      "tcp://127.0.0.1:8786\ndistributed:\n  comm:\n"
                      "    require-encryption: true\n    tls:\n      ca-file: "
                      f"{tmp_path / 'absent-ca.pem'}\n      client:\n        cert: "
                      f"{tmp_path / 'absent.pem'}\n")
    for argv in (["cluster", "check", str(remote)],
                 ["ingest", "--format", "synthetic", "--n-docs", "20", "--out",
                  str(tmp_path / "never.zarr"), "--cluster", str(remote), "--quiet"]):
        assert main(argv) == 2
        err = one_error_line(capsys.readouterr().err, argv[0])
        assert f"cluster profile {remote}: distributed.comm.tls" in err
        assert "cannot be loaded" in err
    remote.write_text("dmlfe:\n  cluster:\n    kind: scheduler\n    address: "
                      "tcp://127.0.0.1:8786\ndistributed:\n  comm:\n"
                      "    require-encryption: true\n")
    assert main(["cluster", "check", str(remote)]) == 2
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert "require-encryption is true but no TLS certificates are set" in err
    assert not (tmp_path / "never.zarr").exists()


# --------------------------------------------------------------------------- log lines
def _damaged_store(path: Path) -> Path:
    import numpy as np
    import scipy.sparse as sp
    from helpers import write_store

    rng = np.random.default_rng(0)
    X = sp.random(64, 9, density=0.4, format="csr", random_state=0)
    Y = (rng.random((64, 3)) < 0.5).astype(np.uint8)
    store = write_store(path, X, Y, np.array(["train"] * 64), chunk_rows=16)
    (store / "X/data/c/0").unlink()
    return store


def test_without_quiet_a_failing_command_ends_with_its_error_and_no_dask_lines(tmp_path,
                                                                               capfd):
    """The local workers' "Compute Failed" (other processes: seen on the file
    descriptor) and this process's dask lines do not come before the error."""
    store = _damaged_store(tmp_path / "s.zarr")
    capfd.readouterr()
    rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out",
               str(tmp_path / "m"), "--workers", "2"])
    assert rc == 2
    lines = [t for t in capfd.readouterr().err.splitlines() if t.strip()]
    assert lines[-1].startswith("dmlfe fit: error: store ") and "X/data" in lines[-1], lines
    assert [t for t in lines[:-1] if not t.startswith("dask dashboard: ")] == [], lines


def test_dask_lines_are_held_and_shown_only_when_the_command_succeeds():
    import io

    from dmlfe.cli import _output

    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    top = logging.getLogger("distributed")
    top.addHandler(handler)
    log = logging.getLogger("distributed.worker")
    try:
        with _output(False, False):
            log.warning("a line of a command that succeeds")
            assert sink.getvalue() == ""  # held while the command runs
        assert "a line of a command that succeeds" in sink.getvalue()
        with pytest.raises(RuntimeError), _output(False, False):
            log.warning("a line of a command that fails")
            raise RuntimeError("failed")
        assert "a line of a command that fails" not in sink.getvalue()
        log.warning("after the command")  # the handlers are as they were
        assert "after the command" in sink.getvalue()
    finally:
        top.removeHandler(handler)


# --------------------------------------------------------------------------- start
def test_a_worker_killed_while_starting_is_one_line_exit_2(tmp_path, capfd):
    import dask

    killer = tmp_path / "killer.py"
    killer.write_text("import os\nimport signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = tmp_path / "s.zarr"
    capfd.readouterr()
    with dask.config.set({"distributed.worker.preload": [str(killer)]}):
        rc = main(["ingest", "--format", "synthetic", "--n-docs", "30", "--out", str(out),
                   "--workers", "1", "--quiet"])
    assert rc == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert err == [
        "dmlfe ingest: error: a dask worker of the local cluster died while starting "
        "(killed, out of memory, or a failing preload or setup? --verbose shows the "
        "workers' log lines); nothing was written"], err
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
