"""Issue 35 (hardening), through the command line where a user meets each case: lines
longer than the readers' limit (decompression bombs), and faults of the environment
(a read-only output folder, a full disk, a file-size limit, a scheduler or worker
lost mid-fit). Each is one line naming what and where, exit 2, nothing half-written."""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import json
import tracemalloc
from pathlib import Path

import pytest

from dmlfe import staging
from dmlfe.cli import main
from dmlfe.errors import InputError
from dmlfe.readers import base
from dmlfe.readers.base import TextBatch
from dmlfe.readers.tabular import read_jsonl

ROOT = Path(__file__).resolve().parents[1]

#: The line limit the tests lower MAX_LINE_BYTES to: small, so that a bomb stays light.
LIMIT = 64 * 1024


def one_error_line(err: str, command: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"dmlfe {command}: error: "), err
    return err


def nothing_left(folder: Path, out: Path) -> None:
    """``out`` was not written, and no temporary of it is left in ``folder``."""
    assert not out.exists()
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]


@pytest.fixture
def low_limit(monkeypatch):
    monkeypatch.setattr(base, "MAX_LINE_BYTES", LIMIT)
    return LIMIT


def jsonl_line(text: str, labels=("a",)) -> bytes:
    return (json.dumps({"text": text, "labels": list(labels)}) + "\n").encode()


def bz2_bomb(path: Path, n_bytes: int, head: bytes = b"") -> Path:
    """A bz2 file: ``head``, then one line of ``n_bytes`` bytes (compressed in pieces,
    so that the test never holds the expanded line)."""
    comp = bz2.BZ2Compressor(9)
    parts = [comp.compress(head)]
    piece = b"x" * (1 << 20)
    left = n_bytes
    while left > 0:
        parts.append(comp.compress(piece[: min(left, len(piece))]))
        left -= len(piece)
    parts.append(comp.flush())
    path.write_bytes(b"".join(parts))
    return path


# --------------------------------------------------------------------------- line limit
def test_a_bz2_bomb_of_one_long_line_is_refused_with_file_and_line(tmp_path, capsys,
                                                                   low_limit):
    good = jsonl_line("one fine document") + jsonl_line("another one", ["b"])
    bomb = bz2_bomb(tmp_path / "bomb.jsonl", 64 * LIMIT, head=good)
    assert bomb.stat().st_size < 2000  # a few hundred bytes expanding to 4 MiB
    out = tmp_path / "s.zarr"
    rc = main(["ingest", str(bomb), "--format", "jsonl", "--out", str(out), "--quiet"])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{bomb}, line 3: longer than {LIMIT:,} bytes" in err
    assert "MAX_LINE_BYTES" in err
    nothing_left(tmp_path, out)


def test_a_jsonl_line_above_the_limit_is_refused_and_one_at_it_is_read(tmp_path, capsys,
                                                                      low_limit):
    overhead = len(jsonl_line(""))
    at_limit = jsonl_line("w " * ((LIMIT - overhead) // 2))
    assert len(at_limit) <= LIMIT
    ok = tmp_path / "ok.jsonl"
    ok.write_bytes(at_limit + jsonl_line("short", ["b"]))
    assert main(["ingest", str(ok), "--format", "jsonl", "--out", str(tmp_path / "ok.zarr"),
                 "--quiet"]) == 0
    capsys.readouterr()
    long = tmp_path / "long.jsonl"
    long.write_bytes(jsonl_line("fine") + jsonl_line("w " * LIMIT))
    out = tmp_path / "long.zarr"
    assert main(["ingest", str(long), "--format", "jsonl", "--out", str(out), "--quiet"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{long}, line 2: longer than {LIMIT:,} bytes" in err
    nothing_left(tmp_path, out)


def test_reading_a_bomb_holds_about_one_limit_of_memory(tmp_path, low_limit):
    """Python's allocations while the reader meets a 32 MiB line stay near the limit
    (before: the whole line, and its decoded copies)."""
    bomb = bz2_bomb(tmp_path / "bomb.jsonl", 512 * LIMIT, head=jsonl_line("fine"))
    tracemalloc.start()
    try:
        with pytest.raises(base.DataFormatError, match="line 2: longer than"):
            for _ in read_jsonl(bomb):
                pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT, peak


def test_an_arff_line_above_the_limit_is_refused(tmp_path, capsys, low_limit):
    arff = tmp_path / "big-train.arff.gz"
    header = ("@relation big\n@attribute f0 numeric\n@attribute f1 numeric\n"
              "@attribute l0 {0,1}\n@data\n0.5,1,1\n")
    with gzip.open(arff, "wt") as f:
        f.write(header)
        f.write("%" + "x" * (2 * LIMIT) + "\n")  # a comment line: still a line
        f.write("1,0,0\n")
    xml = tmp_path / "big.xml"
    xml.write_text('<?xml version="1.0"?><labels xmlns="http://mulan.sourceforge.net/labels">'
                   '<label name="l0"></label></labels>\n')
    out = tmp_path / "s.zarr"
    rc = main(["ingest", str(arff), "--format", "mulan", "--labels", str(xml), "--out",
               str(out), "--quiet"])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{arff}, line 7: longer than {LIMIT:,} bytes" in err
    nothing_left(tmp_path, out)


def test_a_reuters_story_above_the_limit_is_refused(tmp_path, capsys, low_limit):
    story = ('<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" NEWID="{i}">\n<TOPICS><D>{t}</D>'
             "</TOPICS>\n<TEXT><BODY>{body}</BODY></TEXT>\n</REUTERS>\n")
    sgm = tmp_path / "reut2-000.sgm"
    # two fine stories, then one whose body never ends (no closing tag, no next story)
    sgm.write_text("<!DOCTYPE lewis SYSTEM \"lewis.dtd\">\n"
                   + story.format(i=1, t="grain", body="wheat prices rose")
                   + story.format(i=2, t="corn", body="corn fell")
                   + '<REUTERS TOPICS="YES" NEWID="3">\n<TEXT><BODY>'
                   + ("word " * LIMIT))
    out = tmp_path / "s.zarr"
    rc = main(["ingest", str(sgm), "--format", "reuters21578", "--out", str(out), "--quiet"])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{sgm}, the story starting at line 10: longer than {LIMIT:,} bytes" in err
    assert "without the story's closing tag" in err
    nothing_left(tmp_path, out)
    # the same story inside the archive: named by the archive and the member
    import tarfile

    archive = tmp_path / "reuters21578.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(sgm, arcname="reut2-000.sgm")
    assert main(["ingest", str(archive), "--format", "reuters21578", "--out", str(out),
                 "--quiet"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{archive}, member reut2-000.sgm, the story starting at line 10" in err
    nothing_left(tmp_path, out)


def test_reuters_stories_without_closing_tags_still_read_past_the_limit(tmp_path, low_limit):
    """Many unclosed stories (each short) add up past the limit: they are handed out
    where the next one opens, not refused."""
    from dmlfe.readers.reuters import read_reuters21578

    body = "grain prices " * 40
    n = 3 * LIMIT // len(body)
    sgm = tmp_path / "reut2-000.sgm"
    sgm.write_text("".join(f'<REUTERS TOPICS="YES" LEWISSPLIT="TRAIN" NEWID="{i}">'
                           f"<TOPICS><D>grain</D></TOPICS><TEXT><BODY>{body}</BODY></TEXT>\n"
                           for i in range(1, n + 1)))
    report = base.IngestReport()
    docs = sum(len(b) for b in read_reuters21578(sgm, report=report))
    assert docs == n


# --------------------------------------------------------------------------- the machine
def run_dmlfe(argv: list[str], fsize: int | None = None, timeout: float = 120):
    """``dmlfe ARGV`` in a child process, under a file-size limit of ``fsize`` bytes."""
    import resource
    import subprocess
    import sys

    def limit() -> None:
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    code = "import sys; from dmlfe.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                          text=True, timeout=timeout, preexec_fn=limit, cwd=ROOT,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def store300(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("store") / "s.zarr"
    assert main(["ingest", "--format", "synthetic", "--n-docs", "300", "--out", str(out),
                 "--quiet", "--workers", "1"]) == 0
    # one fit fills the statistics cache beside the store: the fits of the tests then
    # write nothing but their model
    assert main(["fit", str(out), "--method", "pca", "--dim", "2", "--split", "train",
                 "--out", str(out.parent / "m0"), "--quiet", "--workers", "1"]) == 0
    return out


@pytest.fixture
def thread_profile(tmp_path) -> Path:
    """A local cluster of one thread worker: the monkeypatched writes reach its tasks."""
    p = tmp_path / "threads.yaml"
    p.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                 "    processes: false\n")
    return p


def test_a_file_size_limit_is_one_line_naming_the_output(tmp_path):
    """ulimit -f: SIGXFSZ would kill dmlfe (and its workers) mid-write; it is ignored
    and the EFBIG that follows is one line naming the output, exit 2, nothing kept."""
    out = tmp_path / "s.zarr"
    res = run_dmlfe(["ingest", "--format", "synthetic", "--n-docs", "3000", "--out", str(out),
                     "--quiet", "--workers", "1"], fsize=200_000)
    assert res.returncode == 2, res
    err = one_error_line(res.stderr, "ingest")
    assert f"cannot write {out}" in err and "file-size limit (ulimit -f)" in err
    nothing_left(tmp_path, out)


def test_a_file_size_limit_while_saving_a_model(tmp_path, store300):
    out = tmp_path / "m"
    res = run_dmlfe(["fit", str(store300), "--method", "pca", "--dim", "2", "--out", str(out),
                     "--split", "train", "--quiet", "--workers", "1"],
                    fsize=4096)
    assert res.returncode == 2, res
    err = one_error_line(res.stderr, "fit")
    assert f"cannot write {out}" in err and "file-size limit" in err
    nothing_left(tmp_path, out)


def test_a_full_disk_while_writing_a_store(tmp_path, capsys, monkeypatch, thread_profile):
    import errno
    import os

    import zarr.storage._local as local

    real = local._put
    calls = [0]

    def put(path, value, exclusive=False):
        calls[0] += 1
        if calls[0] > 5:  # a few files in: the store is half-written when the disk fills
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, value, exclusive)

    monkeypatch.setattr(local, "_put", put)
    out = tmp_path / "s.zarr"
    assert main(["ingest", "--format", "synthetic", "--n-docs", "300", "--out", str(out),
                 "--quiet", "--cluster", str(thread_profile)]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"cannot write {out} (writing " in err
    assert "no space left on the device; free some space or write the output elsewhere" in err
    nothing_left(tmp_path, out)


def test_a_full_disk_while_saving_a_model(tmp_path, capsys, monkeypatch, store300,
                                          thread_profile):
    import errno

    import numpy as np

    def savez(file, *args, **kwds):
        file.write(b"PK")  # a first piece is written, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", savez)
    out = tmp_path / "m"
    rc = main(["fit", str(store300), "--method", "pca", "--dim", "2", "--out", str(out),
               "--split", "train", "--quiet", "--cluster", str(thread_profile)])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "fit")
    assert f"cannot write {out}: no space left on the device" in err
    nothing_left(tmp_path, out)


@pytest.mark.parametrize("command", ["ingest", "fit"])
def test_a_read_only_output_folder(tmp_path, capsys, monkeypatch, store300, command):
    """A read-only file system fails the first mkdir of the output's temporary (EROFS:
    injected, as root writes through any permission bits)."""
    import errno
    import os

    real = Path.mkdir
    ro = tmp_path / "ro"
    ro.mkdir()

    def mkdir(self, *args, **kwargs):
        if Path(self).parent == ro:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    out = ro / ("s.zarr" if command == "ingest" else "m")
    argv = (["ingest", "--format", "synthetic", "--n-docs", "50"] if command == "ingest"
            else ["fit", str(store300), "--method", "pca", "--dim", "2", "--split", "train"])
    assert main([*argv, "--out", str(out), "--quiet", "--workers", "1"]) == 2
    err = one_error_line(capsys.readouterr().err, command)
    assert f"cannot write {out}: the file system is read-only; write the output elsewhere" in err
    nothing_left(ro, out)


@pytest.mark.skipif(os_geteuid() == 0 if (os_geteuid := getattr(__import__("os"), "geteuid",
                                                                None)) else True,
                    reason="root writes through permission bits")
def test_a_folder_without_write_permission(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    out = ro / "s.zarr"
    assert main(["ingest", "--format", "synthetic", "--n-docs", "50", "--out", str(out),
                 "--quiet", "--workers", "1"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"cannot write {out}: permission denied" in err
    nothing_left(ro, out)


# --------------------------------------------------------------------------- the cluster
HOG = '''"""Worker preload: the first block of a statistics pass outgrows the worker's memory."""
import time

import numpy as np

import dmlfe.stats.pass_ as pass_


def _hog(*args, **kwargs):
    held = []
    for _ in range(400):  # up to 4 GB, 10 MB at a time: the nanny kills the worker first
        held.append(np.ones(10 * 2**20 // 8))
        time.sleep(0.01)
    raise AssertionError("the worker was not killed")


pass_._block_partial = _hog
'''


def test_a_worker_over_its_memory_limit_is_one_line(tmp_path, capsys, store300):
    """A real LocalCluster whose worker's task outgrows memory_limit: the nanny kills the
    worker; with no retry allowed, distributed's KilledWorker is one line, exit 2."""
    import shutil

    import dask

    store = tmp_path / "s.zarr"
    shutil.copytree(store300, store)  # without the statistics cache: the pass must run
    hog = tmp_path / "hog.py"
    hog.write_text(HOG)
    profile = tmp_path / "small.yaml"
    profile.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                       "    threads_per_worker: 1\n    memory_limit: 400MB\n")
    out = tmp_path / "m"
    with dask.config.set({"distributed.scheduler.allowed-failures": 0,
                          "distributed.worker.preload": [str(hog)]}):
        rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out", str(out),
                   "--split", "train", "--quiet", "--cluster", str(profile)])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "fit")
    assert f"dask workers of the cluster profile {profile} died once while computing" in err
    assert "over their memory limit?" in err and "memory_limit" in err
    nothing_left(tmp_path, out)


def test_the_scheduler_killed_mid_fit_is_one_line(tmp_path, capsys, store300):
    import socket
    import subprocess
    import sys
    import threading
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                              "--host", "127.0.0.1", "--port", str(port),
                              "--dashboard-address", "127.0.0.1:0"], **quiet)
    slow = tmp_path / "slow.py"  # the passes' blocks take 60 s: the kill is mid-fit
    slow.write_text("import time\nimport dmlfe.stats.pass_ as p\n"
                    "p._block_partial = lambda *a, **k: time.sleep(60)\n")
    work = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                             "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                             "--preload", str(slow)], **quiet,
                            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    store = tmp_path / "s.zarr"
    __import__("shutil").copytree(store300, store)  # no cache: the fit has passes to run
    try:
        from distributed import Client

        with Client(address, timeout=30) as c:
            c.wait_for_workers(1, timeout=30)

        def kill_when_running() -> None:
            # the fit connects (about 0.1 s), then waits on its first pass: kill it there
            time.sleep(1.5)
            sched.kill()

        threading.Thread(target=kill_when_running, daemon=True).start()
        out = tmp_path / "m"
        rc = main(["fit", str(store), "--method", "pca", "--dim", "2", "--out", str(out),
                   "--split", "train", "--quiet", "--scheduler", address])
    finally:
        sched.kill()
        work.kill()
        sched.wait()
        work.wait()
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "fit")
    assert (f"lost the connection to the dask scheduler of {address} (--scheduler) mid-run"
            in err)
    nothing_left(tmp_path, out)


# --------------------------------------------------------------------------- TLS, batch
SLURM_TLS = """dmlfe:
  cluster:
    kind: {kind}
    jobs: 1
jobqueue:
  {kind}:
    cores: 4
    memory: 8GiB
    walltime: "01:00:00"
{extra}distributed:
  comm:
    require-encryption: true
{tls}"""


def tls_profile(tmp_path: Path, kind: str = "slurm", shared: Path | None = None,
                tls: str = "") -> Path:
    extra = f"    shared-temp-directory: {shared}\n" if shared is not None else ""
    p = tmp_path / f"{kind}-tls.yaml"
    p.write_text(SLURM_TLS.format(kind=kind, extra=extra, tls=tls))
    return p


def certificate_files(folder: Path) -> str:
    """Certificate and key files (a temporary self-signed pair), as profile lines."""
    from distributed.security import Security

    sec = Security.temporary()
    (folder / "ca.pem").write_text(sec.tls_ca_file)
    (folder / "cert.pem").write_text(sec.tls_worker_cert)
    (folder / "key.pem").write_text(sec.tls_worker_key)
    lines = [f"      ca-file: {folder / 'ca.pem'}"]
    for role in ("scheduler", "worker", "client"):
        lines += [f"      {role}:", f"        cert: {folder / 'cert.pem'}",
                  f"        key: {folder / 'key.pem'}"]
    return "    tls:\n" + "\n".join(lines) + "\n"


def test_a_batch_profile_with_temporary_tls_needs_a_private_shared_folder(tmp_path, capsys,
                                                                         monkeypatch):
    pytest.importorskip("dask_jobqueue")
    profile = tls_profile(tmp_path)
    assert main(["cluster", "check", str(profile)]) == 2
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert f"{profile}: jobqueue.slurm.shared-temp-directory is missing" in err
    open_ = tmp_path / "open"
    open_.mkdir(mode=0o755)
    open_.chmod(0o755)
    profile = tls_profile(tmp_path, shared=open_)
    assert main(["cluster", "check", str(profile)]) == 2
    err = one_error_line(capsys.readouterr().err, "cluster")
    assert "can be read by others (mode 755)" in err and "chmod 700" in err
    here = tmp_path / "here"
    here.mkdir(mode=0o700)
    monkeypatch.chdir(here)
    profile = tls_profile(tmp_path, shared=here)
    assert main(["cluster", "check", str(profile)]) == 2
    assert "is the working directory" in one_error_line(capsys.readouterr().err, "cluster")


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_a_batch_profile_with_temporary_tls_shows_the_workers_tls_files(tmp_path, capsys,
                                                                       kind):
    pytest.importorskip("dask_jobqueue")
    pytest.importorskip("cryptography")
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    profile = tls_profile(tmp_path, kind, shared=private)
    assert main(["cluster", "check", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "dask_worker tls://<insert-scheduler-address-here>:8786" in out
    assert f"--tls-key {private}/.dask-jobqueue.worker.tls_worker_key.<random>" in out
    assert (f"TLS: temporary self-signed credentials made when the cluster starts; the "
            f"workers' key and certificate are written to {private} (private, mode 700)"
            in out)


def test_a_batch_profile_with_certificate_files(tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    profile = tls_profile(tmp_path, "pbs", tls=certificate_files(tmp_path))
    assert main(["cluster", "check", str(profile)]) == 0
    out = capsys.readouterr().out
    assert f"--tls-cert {tmp_path / 'cert.pem'}" in out
    assert ("TLS: certificates of distributed.comm.tls.* (loaded); the batch jobs (a shared "
            "file system) must read the same files at the same paths") in out


def test_ssh_and_kubernetes_profiles_show_where_their_certificates_must_be(tmp_path, capsys):
    pytest.importorskip("asyncssh")
    tls = certificate_files(tmp_path)
    ssh = tmp_path / "ssh.yaml"
    ssh.write_text("dmlfe:\n  cluster:\n    kind: ssh\n    hosts: [a, b]\n"
                   "distributed:\n  comm:\n    require-encryption: true\n" + tls)
    assert main(["cluster", "check", str(ssh)]) == 0
    out = capsys.readouterr().out
    assert "the hosts must read the same files at the same paths" in out
    assert str(tmp_path / "key.pem") in out
    if importlib.util.find_spec("dask_kubernetes") is None:
        return
    import yaml

    cfg = yaml.safe_load((ROOT / "cluster_configs" / "kubernetes.yaml").read_text())
    cfg["distributed"]["comm"] = yaml.safe_load(ssh.read_text())["distributed"]["comm"]
    k8s = tmp_path / "k8s.yaml"
    k8s.write_text(yaml.safe_dump(cfg))
    assert main(["cluster", "check", str(k8s)]) == 0
    assert ("the pods (mount them, e.g. from a Secret) must read the same files at the same "
            "paths") in capsys.readouterr().out


def test_a_batch_cluster_starts_with_the_security_and_the_shared_folder(tmp_path,
                                                                       monkeypatch):
    dask_jobqueue = pytest.importorskip("dask_jobqueue")
    pytest.importorskip("cryptography")
    from dmlfe.cluster.profiles import read_profile_file, start_cluster

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    seen = {}

    class Fake:
        def __init__(self, **kwargs):
            seen.update(kwargs)

        def scale(self, **kwargs):
            pass

    monkeypatch.setattr(dask_jobqueue, "SLURMCluster", Fake)
    start_cluster(read_profile_file(tls_profile(tmp_path, shared=private)))
    assert seen["protocol"] == "tls://" and seen["shared_temp_directory"] == str(private)
    assert seen["security"].require_encryption
    assert "BEGIN" in seen["security"].tls_worker_key  # in memory: jobqueue writes it out


# --------------------------------------------------------------------------- part budget
def test_a_part_over_the_text_budget_is_refused_with_the_chunk_rows_that_fit(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(staging, "MAX_PART_BYTES", 1000)
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(b"".join(jsonl_line(f"w{i:02d} " * 25) for i in range(30)))  # 100 each
    out = tmp_path / "s.zarr"
    rc = main(["ingest", str(corpus), "--format", "jsonl", "--out", str(out), "--quiet",
               "--chunk-rows", "15"])
    assert rc == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{corpus}: documents 1 to 15 (counted from 1) hold more than 1,000" in err
    assert "--chunk-rows 15 documents" in err and "MAX_PART_BYTES" in err
    assert "ingest with --chunk-rows 10 or fewer" in err
    nothing_left(tmp_path, out)
    # the advice is right: ten documents of 100 characters fit
    assert main(["ingest", str(corpus), "--format", "jsonl", "--out", str(out), "--quiet",
                 "--chunk-rows", "10"]) == 0


def test_an_append_over_the_text_budget_is_refused(tmp_path, capsys, monkeypatch):
    first = tmp_path / "a.jsonl"
    first.write_bytes(b"".join(jsonl_line(f"w{i:02d} " * 25) for i in range(4)))
    store = tmp_path / "s.zarr"
    assert main(["ingest", str(first), "--format", "jsonl", "--out", str(store), "--quiet",
                 "--chunk-rows", "8"]) == 0
    monkeypatch.setattr(staging, "MAX_PART_BYTES", 500)
    more = tmp_path / "more.jsonl"
    more.write_bytes(b"".join(jsonl_line(f"v{i:02d} " * 25) for i in range(8)))
    capsys.readouterr()
    assert main(["ingest", str(more), "--format", "jsonl", "--append", str(store),
                 "--quiet"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{more}: documents 1 to 8" in err
    assert "fixed at 8 documents" in err and "--chunk-rows 5 or fewer" in err


def test_the_part_budget_is_checked_while_the_part_is_gathered():
    """The stream is abandoned once the gathered text passes the budget: long before the
    part of 1,000 documents is complete."""
    pulled = []

    def stream():
        for i in range(1000):
            pulled.append(i)
            yield TextBatch(ids=[str(i)], texts=["x" * 100], labels=[[]])

    with pytest.raises(InputError, match=r"here: documents 1 to 11 .* --chunk-rows 10 or"):
        list(staging.rebatch(stream(), 1000, "here", max_bytes=1000))
    assert len(pulled) == 11
    # at the budget, parts are cut as asked
    parts = list(staging.rebatch(stream(), 10, "here", max_bytes=1000))
    assert [len(p) for p in parts] == [10] * 100


def test_readers_hand_over_batches_of_about_one_line_of_text(tmp_path, low_limit):
    """A reader's batch stops growing at MAX_LINE_BYTES characters: the documents a part
    gathers arrive in pieces that the part budget can stop."""
    corpus = tmp_path / "c.jsonl"
    doc = jsonl_line("y" * (LIMIT // 4))
    corpus.write_bytes(doc * 20)
    sizes = [len(b) for b in read_jsonl(corpus, batch_size=1000)]
    assert sum(sizes) == 20 and max(sizes) == 4


def test_a_parquet_cell_above_the_limit_is_refused_with_file_row_and_field(
        tmp_path, capsys, low_limit):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["fine", "w " * LIMIT, "also fine"]
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": texts, "labels": [["a"], ["b"], ["a"]]}), path)
    out = tmp_path / "s.zarr"
    assert main(["ingest", str(path), "--format", "parquet", "--out", str(out),
                 "--quiet"]) == 2
    err = one_error_line(capsys.readouterr().err, "ingest")
    assert f"{path}, row 1: field 'text' holds {2 * LIMIT:,} bytes" in err
    assert "MAX_LINE_BYTES" in err
    nothing_left(tmp_path, out)
    # a cell at the limit is read
    ok = tmp_path / "ok.parquet"
    pq.write_table(pa.table({"text": ["fine", "w" * LIMIT], "labels": [["a"], ["b"]]}), ok)
    assert main(["ingest", str(ok), "--format", "parquet", "--out",
                 str(tmp_path / "ok.zarr"), "--quiet"]) == 0
