"""Bad inputs through the command line: does each end in success or one clean line?

Runs hand-made bad inputs through ``dmlfe ingest`` / ``info`` / ``import`` /
``transform`` / ``fit`` / ``verify`` in this process (``dmlfe.cli.main``), among them
damaged stores (chunk files deleted, truncated or changed, zarr.json files edited, the
store moved or deleted while a fit runs, on a 2-worker LocalCluster) and the cluster
cases of issue 35 (YAML alias bombs, a port that is not dask, a scheduler without
workers, TLS settings, symbolic links as outputs, a negative seed, ``--overwrite`` onto
a plain file, ``dmlfe clean`` on a folder: :func:`cluster_hardening_cases`), lines
above the readers' limit and faults of the machine (a read-only output folder, a full
disk, a file-size limit, a worker over its memory limit, the scheduler killed mid-fit:
:func:`environment_cases`), a staged part over its text budget, a Parquet cell above
the line limit, a worker killed while it starts and a failing command without
``--quiet`` (:func:`bounds_and_output_cases`), damaged stores whose statistics are
cached, and classifies each outcome:

* ``ok``: exit 0 where that is right (a valid input);
* ``silent-wrong``: exit 0 where an error was due (damage read as data), unsaid;
* ``warned``: exit 0 where an error was due, but a warning says that damage could pass
  unseen (a store without an integrity record: a deleted label chunk reads as documents
  without labels, which no reader can tell);
* ``clean``: exit 2 with one stderr line that names the input file or folder;
* ``unnamed``: exit 2, but the line does not name the input (or there are several);
* ``exit 1``: exit 1 (dmlfe's "this is a bug") or another status;
* ``traceback``: an exception escaping ``main``;
* ``hang``: no answer within ``--timeout`` seconds (default 120).

Most cases run in this process; those that must see what other processes write to the
terminal (a local cluster's workers, dask's own log handlers) run ``python -m
dmlfe.cli`` as a child process (``Case.child``).

Separately, ``leftovers`` counts the failed commands that left something behind: their
output, a temporary, or any other new file beside the input.

Prints the table of counts and writes every case's outcome and message to
bench-out/faults.json. Usage: ``python benchmarks/faults.py [--only store]
[--case SUBSTRING ...]`` (``--case``: only the cases whose name holds one of these).
"""

from __future__ import annotations

import argparse
import bz2
import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import write_store  # noqa: E402

import dmlfe  # noqa: E402
from dmlfe.cli import main  # noqa: E402

ARFF = """@relation r
@attribute f1 numeric
@attribute f2 numeric
@attribute L1 {0,1}
@attribute L2 {0,1}
@data
0.5,1.0,1,0
0.0,2.0,0,1
"""
#: Corpus-input cases whose input is valid (exit 0 is right for them).
VALID = {"bom"}
XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels"><label name="L1"></label>
<label name="L2"></label></labels>
"""
#: The order of the table's columns.
OUTCOMES = ("ok", "clean", "unnamed", "traceback", "exit 1", "hang", "warned",
            "silent-wrong")


@dataclass
class Case:
    """One command on one bad (or good) input.

    ``named``: what the error line must name; ``error``: whether exit 0 is wrong;
    ``out``: the command's output, which must not exist after a failure; ``folder``:
    where nothing new may appear (``allowed``: but these names); ``setup``: run just
    before the command (it may return an undo callable, run after it); ``warns``: what
    the command's standard output says when it warns of damage it cannot see;
    ``child``: run as a child process (``env``: added to its environment), whose whole
    standard error is classified.
    """

    name: str
    argv: list[str]
    named: str
    error: bool = True
    out: Path | None = None
    folder: Path | None = None
    allowed: set[str] = field(default_factory=set)
    setup: Callable[[], Callable[[], None] | None] | None = None
    warns: str | None = None
    child: bool = False
    env: dict[str, str] = field(default_factory=dict)


class _Hang(BaseException):
    """Raised by the alarm: escapes ``main``'s handlers, which catch Exception."""


def _alarm(signum, frame):
    raise _Hang


def _listing(folder: Path | None) -> set[str]:
    return set() if folder is None or not folder.is_dir() else {p.name for p in folder.iterdir()}


def _run_child(case: Case, timeout: int) -> tuple[int | None, str, str, str | None]:
    """(exit status, stdout, stderr, "hang" or None) of ``python -m dmlfe.cli ARGV``."""
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(ROOT), **case.env}
    try:
        done = subprocess.run([sys.executable, "-m", "dmlfe.cli", *case.argv], env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "", "", "hang"
    return done.returncode, done.stdout, done.stderr, None


def run(case: Case, timeout: int = 120) -> dict:
    before = _listing(case.folder)
    undo = case.setup() if case.setup is not None else None
    err = io.StringIO()
    out = io.StringIO()
    rc: int | None = None
    usage = False
    outcome = None
    message = ""
    if case.child:
        try:
            rc, stdout, stderr, hang = _run_child(case, timeout)
        finally:
            if undo is not None:
                undo()
        out.write(stdout)
        err.write(stderr)
        if hang:
            outcome, message = "hang", f"no answer within {timeout} s"
    else:
        rc, usage, outcome, message = _run_here(case, timeout, err, out, undo)
    # the dashboard address of a started cluster and the announced wait for a worker
    # are information, not part of the error
    text = [t for t in err.getvalue().strip().splitlines()
            if not t.startswith(("dask dashboard: ", "waiting up to "))]
    if usage:
        text = text[-1:]
    if outcome is None:
        message = text[-1] if text else ""
        if rc == 0:
            warned = (any(": warning: " in t for t in text)
                      or (case.warns is not None and case.warns in out.getvalue()))
            outcome = ("ok" if not case.error else "warned" if warned else "silent-wrong")
        elif rc == 2:
            outcome = "clean" if case.named in message and len(text) == 1 else "unnamed"
        else:
            outcome = "exit 1"
    left: list[str] = []
    if rc != 0:  # a failed command leaves nothing (what a success writes is its output)
        left = sorted((_listing(case.folder) - before) - case.allowed)
        if case.out is not None and case.out.exists() and case.out.name not in left:
            left.append(case.out.name)
    return {"outcome": outcome, "rc": rc, "message": message[:300], "leftovers": left}


def _run_here(case: Case, timeout: int, err: io.StringIO, out: io.StringIO,
              undo: Callable[[], None] | None) -> tuple[int | None, bool, str | None, str]:
    """``main(ARGV)`` in this process: (exit status, argparse's usage error?, outcome
    when it is a hang or a traceback, its message)."""
    rc: int | None = None
    usage = False
    outcome = None
    message = ""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = main(case.argv)
    except _Hang:
        outcome, message = "hang", f"no answer within {timeout} s"
    except SystemExit as exc:  # argparse: usage lines, then its one error line
        rc = exc.code if isinstance(exc.code, int) else 1
        usage = True
    except BaseException as exc:  # noqa: BLE001 - what escapes main is the finding
        outcome, message = "traceback", f"{type(exc).__name__}: {exc}"[:300]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if undo is not None:
            undo()
    return rc, usage, outcome, message


def arff_cases(d: Path) -> list[Case]:
    xml = d / "r.xml"
    xml.write_text(XML)
    cases = []

    def add(name: str, data: bytes, suffix: str = ".arff") -> None:
        p = d / f"{name}{suffix}"
        p.write_bytes(data)
        out = d / f"{name}.zarr"
        cases.append(Case(name, ["ingest", str(p), "--format", "mulan", "--labels", str(xml),
                                 "--out", str(out), "--quiet"], p.name,
                          error=name not in VALID, out=out))

    good = ARFF.encode()
    add("empty_file", b"")
    add("header_only", ARFF.split("@data")[0].encode() + b"@data\n")
    add("binary_garbage", bytes(range(256)) * 4)
    add("bom", b"\xef\xbb\xbf" + good)
    add("latin1_name", good.replace(b"@relation r", b"@relation caf\xe9"))
    add("missing_value", good.replace(b"0.5,1.0,1,0", b"?,1.0,1,0"))
    add("label_2", good.replace(b"0.5,1.0,1,0", b"0.5,1.0,2,0"))
    add("short_row", good.replace(b"0.5,1.0,1,0", b"0.5,1.0"))
    add("long_row", good.replace(b"0.5,1.0,1,0", b"0.5,1.0,1,0,7"))
    add("text_value", good.replace(b"0.5,1.0,1,0", b"abc,1.0,1,0"))
    add("unclosed_sparse", good.replace(b"0.5,1.0,1,0", b"{0 0.5, 2 1"))
    add("sparse_out_of_range", good.replace(b"0.5,1.0,1,0", b"{0 0.5, 9 1}"))
    add("no_data_line", ARFF.split("@data")[0].encode())
    add("no_features", b"@relation r\n@attribute L1 {0,1}\n@attribute L2 {0,1}\n@data\n1,0\n")
    add("truncated_bz2", bz2.compress(good)[:40], ".arff.bz2")
    add("bz2_name_plain", good, ".arff.bz2")
    add("truncated_gz", gzip.compress(good)[:30], ".arff.gz")
    add("gz_name_bz2", bz2.compress(good), ".arff.gz")
    add("nul_bytes", good.replace(b"0.0,2.0", b"0.0\x00,2.0"))
    missing = d / "absent.arff"
    cases.append(Case("missing_file", ["ingest", str(missing), "--format", "mulan", "--labels",
                                       str(xml), "--out", str(d / "m.zarr"), "--quiet"],
                      missing.name, out=d / "m.zarr"))
    p = d / "nolabels.arff"
    p.write_bytes(good)
    cases.append(Case("missing_labels_flag", ["ingest", str(p), "--format", "mulan", "--out",
                                              str(d / "nl.zarr"), "--quiet"], "--labels",
                      out=d / "nl.zarr"))
    return cases


def text_cases(d: Path) -> list[Case]:
    cases = []

    def add(name: str, data: bytes, fmt: str, suffix: str) -> None:
        p = d / f"{name}{suffix}"
        p.write_bytes(data)
        out = d / f"{name}.zarr"
        cases.append(Case(name, ["ingest", str(p), "--format", fmt, "--out", str(out),
                                 "--quiet", "--workers", "1"], p.name, out=out))

    good = b'{"text": "a b c", "labels": ["x"]}\n{"text": "b c d", "labels": ["y"]}\n'
    add("jsonl_bad_json", good + b'{"text": "a", "labels": [\n', "jsonl", ".jsonl")
    add("jsonl_labels_not_list", b'{"text": "a", "labels": 3}\n', "jsonl", ".jsonl")
    add("jsonl_empty", b"", "jsonl", ".jsonl")
    add("jsonl_truncated_gz", gzip.compress(good)[:20], "jsonl", ".jsonl.gz")
    add("parquet_garbage", b"PAR1 this is not parquet PAR1", "parquet", ".parquet")
    sgm = b"<REUTERS NEWID=\"1\"><TOPICS><D>x</D></TOPICS><TEXT><BODY>a b</BODY></TEXT>"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("reut2-000.sgm")
        info.size = len(sgm)
        tar.addfile(info, io.BytesIO(sgm))
    add("reuters_truncated_tar", buf.getvalue()[:60], "reuters21578", ".tar.gz")
    return cases


def other_cases(d: Path) -> list[Case]:
    folder = d / "plain_folder"
    folder.mkdir()
    (folder / "a.txt").write_text("x")
    garbage = d / "garbage.parquet"
    garbage.write_bytes(b"not parquet at all")
    arff = d / "corpus.arff"
    arff.write_text(ARFF)
    profile = d / "slurm-site.yaml"  # an unquoted walltime: YAML reads it as a number
    profile.write_text("dmlfe:\n  cluster:\n    kind: slurm\njobqueue:\n  slurm:\n"
                       "    cores: 4\n    memory: 8GiB\n    walltime: 1:00:00\n")
    rng = np.random.default_rng(0)
    X = sp.random(30, 6, density=0.5, format="csr", random_state=1)
    Y = (rng.random((30, 2)) < 0.5).astype(np.uint8)
    store = write_store(d / "s.zarr", X, Y, np.array(["train"] * 30))
    model = d / "model"
    dmlfe.PCA(n_components=2).fit(X, Y).save(model)
    with np.load(model / "arrays.npz") as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    arrays["components_"][0, 0] = np.nan
    nan_model = d / "nan_model"
    nan_model.mkdir()
    (nan_model / "model.json").write_text((model / "model.json").read_text())
    np.savez(nan_model / "arrays.npz", **arrays)
    return [
        Case("info_plain_folder", ["info", str(folder)], folder.name),
        Case("info_file", ["info", str(folder / "a.txt")], "a.txt"),
        Case("import_garbage", ["import", str(garbage), "--out", str(d / "g.zarr")],
             garbage.name, out=d / "g.zarr"),
        Case("transform_nan_model", ["transform", str(nan_model), str(store), "--out",
                                     str(d / "emb"), "--quiet"], "nan_model", out=d / "emb"),
        Case("fit_on_folder", ["fit", str(folder), "--method", "pca", "--out",
                               str(d / "m2"), "--quiet"], folder.name, out=d / "m2"),
        Case("fit_on_corpus_file", ["fit", str(arff), "--method", "pca", "--out",
                                    str(d / "m3"), "--quiet"], arff.name, out=d / "m3"),
        Case("unreachable_scheduler", ["ingest", "--format", "synthetic", "--n-docs", "20",
                                       "--out", str(d / "u.zarr"), "--scheduler",
                                       "tcp://127.0.0.1:1", "--connect-timeout", "1"],
             "tcp://127.0.0.1:1", out=d / "u.zarr"),
        Case("cluster_check_bad_profile", ["cluster", "check", str(profile)], profile.name),
    ]


# --------------------------------------------------------------------------- issue 35
def _billion_laughs() -> str:
    lines = ["l0: &l0 [" + ",".join(["lol"] * 9) + "]"]
    lines += [f"l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 9) + "]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def _silent_server(stack: contextlib.ExitStack) -> str:
    """A TCP port that accepts connections and never speaks (not dask)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    stack.callback(server.close)
    kept: list[socket.socket] = []
    stack.callback(lambda: [c.close() for c in kept])

    def serve() -> None:
        while True:
            try:
                kept.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=serve, daemon=True).start()
    return f"tcp://127.0.0.1:{server.getsockname()[1]}"


def cluster_hardening_cases(d: Path, stack: contextlib.ExitStack) -> list[Case]:
    """Hangs, alias bombs, symbolic links, seeds, outputs and leftovers of issue 35."""
    from distributed import LocalCluster

    d = d / "hardening"
    d.mkdir()
    laughs = d / "laughs.yaml"
    laughs.write_text("dmlfe:\n  cluster:\n    kind: local\n" + _billion_laughs())
    pipeline = d / "laughs-pipeline.yaml"
    pipeline.write_text("name: laughs\n" + _billion_laughs())
    deep = d / "deep.yaml"
    deep.write_text("[" * 5000 + "]" * 5000)
    rng = np.random.default_rng(0)
    X = sp.random(30, 6, density=0.5, format="csr", random_state=1)
    Y = (rng.random((30, 2)) < 0.5).astype(np.uint8)
    store = write_store(d / "s.zarr", X, Y, np.array(["train"] * 30))
    fit = ["fit", str(store), "--method", "pca", "--dim", "2"]
    dangling, loop = d / "dangling", d / "loop"
    dangling.symlink_to(d / "nowhere")
    loop.symlink_to(loop)
    plain = d / "notes.txt"
    plain.write_text("mine")
    silent = _silent_server(stack)
    empty = stack.enter_context(LocalCluster(
        n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
        dashboard_address="127.0.0.1:0"))
    remote = d / "tls-remote.yaml"
    remote.write_text("dmlfe:\n  cluster:\n    kind: scheduler\n    address: "
                      "tcp://127.0.0.1:8786\ndistributed:\n  comm:\n"
                      "    require-encryption: true\n")
    runs = d / "runs"
    (runs / "a").mkdir(parents=True)
    left = runs / "a" / ".big.zarr.tmp-999999999-0123456789ab"  # no such process
    left.mkdir()
    (left / "piece.npz").write_bytes(b"x" * 1000)
    cases = [
        ("cluster_check_billion_laughs", ["cluster", "check", str(laughs)], laughs.name),
        ("run_billion_laughs", ["run", str(pipeline), "--quiet"], pipeline.name),
        ("cluster_check_deep_nesting", ["cluster", "check", str(deep)], deep.name),
        ("scheduler_port_not_dask", [*fit, "--out", str(d / "m1"), "--scheduler", silent,
                                     "--connect-timeout", "2"], silent),
        ("scheduler_without_workers", [*fit, "--out", str(d / "m2"), "--scheduler",
                                       empty.scheduler_address, "--worker-timeout", "1"],
         empty.scheduler_address),
        ("tls_address_without_certificates", [*fit, "--out", str(d / "m3"), "--scheduler",
                                              "tls://127.0.0.1:8786"], "tls://127.0.0.1:8786"),
        ("required_encryption_tcp_profile", ["cluster", "check", str(remote)], remote.name),
        ("out_dangling_symlink", [*fit, "--out", str(dangling)], dangling.name),
        ("out_looping_symlink", ["ingest", "--format", "synthetic", "--n-docs", "20",
                                 "--out", str(loop), "--quiet"], loop.name),
        ("random_state_negative", [*fit, "--out", str(d / "m4"), "--random-state", "-5"],
         "--random-state"),
        ("overwrite_plain_file", [*fit, "--out", str(plain), "--overwrite"], plain.name),
        ("clean_folder_leftovers", ["clean", str(runs)], str(runs)),
    ]


    ok = {"clean_folder_leftovers"}  # it succeeds: the temporary of a gone process goes
    return [Case(name, argv, named, folder=d, error=name not in ok)
            for name, argv, named in cases]


# --------------------------------------------------------------------------- environment
#: Worker preload of the memory case: the first block of a statistics pass outgrows the
#: worker's memory_limit (the nanny kills the worker).
_HOG = """import time
import numpy as np
import dmlfe.stats.pass_ as p
def _hog(*a, **k):
    held = []
    for _ in range(400):
        held.append(np.ones(10 * 2**20 // 8))
        time.sleep(0.01)
p._block_partial = _hog
"""


def _bomb(path: Path, n_bytes: int, head: bytes, tail: bytes, kind: str = "bz2") -> Path:
    """``head``, one line of ``n_bytes`` x's, ``tail``: compressed in pieces."""
    import zlib

    comp = (bz2.BZ2Compressor(9) if kind == "bz2"
            else zlib.compressobj(9, zlib.DEFLATED, 31))  # 31: a gzip stream
    parts = [comp.compress(head)]
    piece = b"x" * (1 << 22)
    for start in range(0, n_bytes, len(piece)):
        parts.append(comp.compress(piece[: min(len(piece), n_bytes - start)]))
    parts += [comp.compress(tail), comp.flush()]
    path.write_bytes(b"".join(parts))
    return path


def _patched(obj, name: str, value) -> Callable[[], Callable[[], None]]:
    """A setup that sets ``obj.name`` to ``value`` for one case."""
    def setup() -> Callable[[], None]:
        old = getattr(obj, name)
        setattr(obj, name, value)
        return lambda: setattr(obj, name, old)
    return setup


def environment_cases(d: Path, stack: contextlib.ExitStack) -> list[Case]:
    """Issue 35's hostile inputs and faults of the machine: lines above the readers'
    limit (decompression bombs), a read-only output folder, a full disk, a file-size
    limit, a worker over its memory limit, the scheduler killed mid-fit."""
    import errno
    import resource
    import socket
    import subprocess
    import threading
    import time

    import dask
    import zarr.storage._local as zarr_local

    d = d / "environment"
    d.mkdir()
    line = (json.dumps({"text": "fine", "labels": ["a"]}) + "\n").encode()
    big = 64 * 2**20  # four times the limit
    jbomb = _bomb(d / "bomb.jsonl.bz2", big, line + b'{"text": "', b'", "labels": []}\n')
    long = d / "long.jsonl"
    with open(long, "wb") as f:
        f.write(line)
        f.write(json.dumps({"text": "word " * (10 * 2**20), "labels": []}).encode() + b"\n")
    abomb = _bomb(d / "bomb-train.arff.gz", big, ARFF.encode() + b"%", b"\n", kind="gz")
    (d / "bomb.xml").write_text(XML)
    sgm = d / "reut2-000.sgm"
    sgm.write_text('<REUTERS TOPICS="YES" NEWID="1"><TEXT><BODY>' + "word " * (4 * 2**20))
    threads = d / "threads.yaml"
    threads.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                       "    processes: false\n")
    small = d / "small.yaml"
    small.write_text("dmlfe:\n  cluster:\n    kind: local\n    n_workers: 1\n"
                     "    threads_per_worker: 1\n    memory_limit: 400MB\n")
    hog = d / "hog.py"
    hog.write_text(_HOG)
    slow = d / "slow.py"
    slow.write_text("import time\nimport dmlfe.stats.pass_ as p\n"
                    "p._block_partial = lambda *a, **k: time.sleep(60)\n")
    # thousands of features: the fit's statistics pass runs the blocks the preloads slow
    store = d / "s.zarr"
    with contextlib.redirect_stderr(io.StringIO()):
        main(["ingest", "--format", "synthetic", "--n-docs", "300", "--out", str(store),
              "--quiet", "--workers", "1"])
    ro = d / "ro"
    ro.mkdir()

    real_mkdir = Path.mkdir

    def read_only_mkdir(self, *args, **kwargs):
        if Path(self).parent == ro:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    real_put = zarr_local._put
    calls = [0]

    def full_put(path, value, exclusive=False):
        calls[0] += 1
        if calls[0] > 5:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real_put(path, value, exclusive)

    def file_size_limit() -> Callable[[], None]:
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, hard))
        return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    def memory_hog() -> Callable[[], None]:
        cm = dask.config.set({"distributed.scheduler.allowed-failures": 0,
                              "distributed.worker.preload": [str(hog)]})
        cm.__enter__()
        return lambda: cm.__exit__(None, None, None)

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler",
                              "--host", "127.0.0.1", "--port", str(port),
                              "--dashboard-address", "127.0.0.1:0"], **quiet)
    stack.callback(sched.kill)
    work = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                             "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                             "--preload", str(slow)], env=env, **quiet)
    stack.callback(work.kill)

    def kill_scheduler_soon() -> None:
        from distributed import Client

        with Client(address, timeout=30) as c:
            c.wait_for_workers(1, timeout=30)
        threading.Thread(target=lambda: (time.sleep(1.5), sched.kill()), daemon=True).start()

    def fit(out: Path, *extra: str) -> list[str]:
        # a store of its own: no statistics cache that another case's fit left
        own = shutil.copytree(store, d / f"{out.name}.zarr")
        return ["fit", str(own), "--method", "pca", "--dim", "2", "--out", str(out),
                "--quiet", *extra]

    synthetic = ["ingest", "--format", "synthetic", "--quiet"]
    cases = [
        Case("jsonl_bz2_bomb_64MiB_line", ["ingest", str(jbomb), "--format", "jsonl", "--out",
                                           str(d / "j.zarr"), "--quiet"], f"{jbomb}, line 2"),
        Case("jsonl_40MiB_line", ["ingest", str(long), "--format", "jsonl", "--out",
                                  str(d / "l.zarr"), "--quiet"], f"{long}, line 2"),
        Case("arff_gz_bomb_64MiB_line", ["ingest", str(abomb), "--format", "mulan", "--labels",
                                         str(d / "bomb.xml"), "--out", str(d / "a.zarr"),
                                         "--quiet"], f"{abomb}, line"),
        Case("reuters_story_20MiB", ["ingest", str(sgm), "--format", "reuters21578", "--out",
                                     str(d / "r.zarr"), "--quiet"], f"{sgm}, the story"),
        Case("read_only_out_ingest", [*synthetic, "--n-docs", "50", "--out",
                                      str(ro / "s.zarr"), "--workers", "1"], str(ro / "s.zarr"),
             setup=_patched(Path, "mkdir", read_only_mkdir)),
        Case("read_only_out_fit", fit(ro / "m", "--workers", "1"), str(ro / "m"),
             setup=_patched(Path, "mkdir", read_only_mkdir)),
        Case("disk_full_ingest", [*synthetic, "--n-docs", "300", "--out", str(d / "f.zarr"),
                                  "--cluster", str(threads)], str(d / "f.zarr"),
             setup=_patched(zarr_local, "_put", full_put)),
        Case("file_size_limit_ingest", [*synthetic, "--n-docs", "3000", "--out",
                                        str(d / "e.zarr"), "--workers", "1"], str(d / "e.zarr"),
             setup=file_size_limit),
        Case("worker_over_memory_limit", fit(d / "m5", "--cluster", str(small)), small.name,
             setup=memory_hog, allowed={"m5.zarr.stats"}),
        Case("scheduler_killed_mid_fit", fit(d / "m6", "--scheduler", address), address,
             setup=lambda: kill_scheduler_soon(), allowed={"m6.zarr.stats"}),
    ]
    for case in cases:
        case.folder = ro if case.name.startswith("read_only") else d
    return cases


def bounds_and_output_cases(d: Path) -> list[Case]:
    """Issue 35's last gaps: a staged part over its text budget, a Parquet cell above the
    line limit, a worker killed while it starts, and the last line of a failing command
    without ``--quiet`` (local workers' log lines included: run as child processes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dmlfe import staging

    d = d / "bounds"
    d.mkdir()
    corpus = d / "budget.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"w{i:02d} " * 25, "labels": ["a"]}) + "\n"
                              for i in range(30)))
    cell = d / "cell.parquet"
    pq.write_table(pa.table({"text": ["fine", "word " * (4 * 2**20), "fine too"],
                             "labels": [["a"], ["b"], ["a"]]}), cell)
    killer = d / "killer.py"
    killer.write_text("import os\nimport signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    damaged = _store(d / "damaged.zarr")
    (damaged / "X/data/c/0").unlink()
    synthetic = ["ingest", "--format", "synthetic", "--n-docs", "30"]
    return [
        Case("jsonl_part_over_text_budget", ["ingest", str(corpus), "--format", "jsonl",
                                             "--out", str(d / "b.zarr"), "--chunk-rows",
                                             "15", "--quiet", "--workers", "1"],
             f"{corpus}: documents 1 to 15", out=d / "b.zarr", folder=d,
             setup=_patched(staging, "MAX_PART_BYTES", 1000)),
        Case("parquet_cell_20MiB", ["ingest", str(cell), "--format", "parquet", "--out",
                                    str(d / "c.zarr"), "--quiet", "--workers", "1"],
             f"{cell}, row 1: field 'text'", out=d / "c.zarr", folder=d),
        Case("worker_killed_while_starting", [*synthetic, "--out", str(d / "k.zarr"),
                                              "--workers", "1"],
             "the local cluster", out=d / "k.zarr", folder=d, child=True,
             env={"DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(killer)])}),
        Case("fit_damaged_store_without_quiet", ["fit", str(damaged), "--method", "pca",
                                                 "--dim", "2", "--out", str(d / "m"),
                                                 "--workers", "2"],
             str(damaged), out=d / "m", folder=d, child=True),
    ]


# --------------------------------------------------------------------------- stores
def _store(path: Path) -> Path:
    """120 documents in 8 row chunks (8 blocks for the workers)."""
    rng = np.random.default_rng(0)
    X = sp.random(120, 17, density=0.3, format="csr", random_state=0)
    X.data = rng.uniform(0.5, 2.0, X.nnz)
    Y = (rng.random((120, 4)) < 0.4).astype(np.uint8)
    return write_store(path, X, Y, np.where(np.arange(120) % 4 == 0, "test", "train"))


def _edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _unrecord(store: Path) -> None:
    """The store as written before dmlfe recorded checksums."""
    _edit_json(store / "zarr.json", lambda d: d["attributes"]["dmlfe"].pop("integrity", None))


#: name -> damage of a store (its folder).
STORE_DAMAGE: dict[str, Callable[[Path], object]] = {
    "X_indices_chunk_deleted": lambda s: (s / "X/indices/c/0").unlink(),
    "X_indptr_chunk_deleted": lambda s: (s / "X/indptr/c/3").unlink(),
    "X_data_chunk_deleted": lambda s: (s / "X/data/c/0").unlink(),
    "Y_chunk_deleted": lambda s: (s / "obsm/Y/c/2/0").unlink(),
    "X_data_chunk_truncated": lambda s: _truncate(s / "X/data/c/0"),
    "Y_chunk_truncated": lambda s: _truncate(s / "obsm/Y/c/5/0"),
    "X_data_byte_changed": lambda s: _flip(s / "X/data/c/0"),
    "Y_shape_shrunk": lambda s: _edit_json(s / "obsm/Y/zarr.json",
                                           lambda d: d.__setitem__("shape", [64, 4])),
    "Y_dtype_edited": lambda s: _edit_json(s / "obsm/Y/zarr.json",
                                           lambda d: d.__setitem__("data_type", "int16")),
    "X_data_zarr_json_key_missing": lambda s: _edit_json(s / "X/data/zarr.json",
                                                         lambda d: d.pop("codecs")),
    "Y_zarr_json_deleted": lambda s: (s / "obsm/Y/zarr.json").unlink(),
    "root_zarr_json_key_missing": lambda s: _edit_json(
        s / "zarr.json", lambda d: d["attributes"]["dmlfe"].pop("nnz")),
    # stores written before checksums were recorded
    "unrecorded_X_data_chunk_truncated": lambda s: (_unrecord(s), _truncate(s / "X/data/c/0")),
    "unrecorded_X_indptr_chunk_deleted": lambda s: (_unrecord(s),
                                                    (s / "X/indptr/c/3").unlink()),
}
#: Damage to values ``dmlfe info`` neither reads nor depends on (it reads Y and indptr
#: and stats every recorded chunk file): its output is right, exit 0 is no silent error.
INFO_UNREAD = {"X_data_byte_changed", "unrecorded_X_data_chunk_truncated"}
#: Damage no reader can see without a record (a deleted chunk of labels reads as "no
#: label", which a store may hold): only ``dmlfe verify --record`` on an intact store
#: protects against it. ``fit`` ends with a warning line saying so, ``info`` and
#: ``verify`` say it on standard output (``UNSEEN_WARNS``): "warned", not exit 2.
STORE_DAMAGE_UNSEEN = {
    "unrecorded_Y_chunk_deleted": lambda s: (_unrecord(s), (s / "obsm/Y/c/2/0").unlink()),
}
#: command -> what its standard output says of damage it cannot see.
UNSEEN_WARNS = {"info": "no checksums recorded", "verify": "could not be checked"}


def _gone_during_fit(store: Path, how: str) -> Callable[[], Callable[[], None]]:
    """A setup that makes the store disappear once the workers have read blocks of it."""
    import dmlfe.fit.run as fit_run

    def setup() -> Callable[[], None]:
        original = fit_run.load_or_compute_stats

        def gone(data_store, *args, **kwargs):
            data_store.row_nnz.sum().compute()  # the workers have the store open
            if how == "moved":
                os.rename(store, store.with_name("elsewhere.zarr"))
            else:
                shutil.rmtree(store)
            return original(data_store, *args, **kwargs)

        fit_run.load_or_compute_stats = gone

        def undo() -> None:
            fit_run.load_or_compute_stats = original
        return undo
    return setup


def store_cases(d: Path, address: str) -> list[Case]:
    """Damaged stores through ``fit`` (on the cluster at ``address``), ``info``, ``verify``."""
    cases = []

    def fit(name: str, store: Path, **kw) -> Case:
        out = store.parent / "model"
        return Case(name, ["fit", str(store), "--method", "mvmd", "--dim", "2", "--split",
                           "train", "--out", str(out), "--scheduler", address, "--quiet"],
                    str(store), out=out, folder=store.parent, **kw)

    damages = {**STORE_DAMAGE, **STORE_DAMAGE_UNSEEN}
    for name, damage in damages.items():
        for command in ("fit", "info", "verify"):
            folder = d / f"{command}_{name}"
            folder.mkdir()
            store = _store(folder / "s.zarr")
            damage(store)
            warns = UNSEEN_WARNS.get(command) if name in STORE_DAMAGE_UNSEEN else None
            if command == "fit":
                cases.append(fit(f"fit_{name}", store, warns=warns))
            else:
                cases.append(Case(f"{command}_{name}", [command, str(store)], str(store),
                                  folder=folder, warns=warns,
                                  error=not (command == "info" and name in INFO_UNREAD)))
    # statistics from the cache read no chunk: the chunk files are checked all the same
    for name, damage in (("Y_chunk_deleted", STORE_DAMAGE["Y_chunk_deleted"]),
                         ("X_data_chunk_truncated", STORE_DAMAGE["X_data_chunk_truncated"])):
        folder = d / f"fit_cache_hit_{name}"
        folder.mkdir()
        store = _store(folder / "s.zarr")
        first = fit("first", store)
        first.argv[first.argv.index("--out") + 1] = str(folder / "first_model")
        with contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()):
            assert main(first.argv) == 0  # fills the cache
        damage(store)
        cases.append(fit(f"fit_cache_hit_{name}", store))
    for how in ("moved", "deleted"):
        folder = d / f"fit_store_{how}_during_fit"
        folder.mkdir()
        store = _store(folder / "s.zarr")
        cases.append(fit(f"fit_store_{how}_during_fit", store, setup=_gone_during_fit(store, how),
                         allowed={"elsewhere.zarr"} if how == "moved" else set()))
    folder = d / "intact"
    folder.mkdir()
    store = _store(folder / "s.zarr")
    cases += [fit("fit_intact_store", store, error=False),
              Case("verify_intact_store", ["verify", str(store)], str(store), error=False)]
    return cases


def main_() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["inputs", "store"], default=None,
                    help="run only the corpus-input cases or only the store cases")
    ap.add_argument("--case", action="append", default=None, metavar="SUBSTRING",
                    help="run only the cases whose name holds SUBSTRING (repeatable; the "
                    "inputs of the others are still prepared)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds before a case hangs")
    opts = ap.parse_args()
    results = {}

    def run_case(case: Case) -> None:
        if opts.case is None or any(c in case.name for c in opts.case):
            results[case.name] = run(case, opts.timeout)

    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        d = Path(tmp)
        if opts.only != "store":
            inputs = d / "inputs"
            inputs.mkdir()
            for case in arff_cases(inputs) + text_cases(inputs) + other_cases(inputs):
                case.folder = case.folder or inputs
                run_case(case)
            for case in cluster_hardening_cases(d, stack):
                run_case(case)
            for case in environment_cases(d, stack):
                run_case(case)
            for case in bounds_and_output_cases(d):
                run_case(case)
        if opts.only != "inputs":
            from distributed import Client, LocalCluster

            with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                              dashboard_address=":0") as cluster, Client(cluster):
                (d / "stores").mkdir()
                for case in store_cases(d / "stores", cluster.scheduler_address):
                    run_case(case)
    counts = {k: sum(r["outcome"] == k for r in results.values()) for k in OUTCOMES}
    table = {"cases": len(results), **counts,
             "leftovers": sum(bool(r["leftovers"]) for r in results.values())}
    report = {"table": table, "results": results}
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    (out / "faults.json").write_text(json.dumps(report, indent=2))
    for name, r in results.items():
        if r["outcome"] not in ("clean", "ok", "warned") or r["leftovers"]:
            print(f"{name}: {r['outcome']} (rc {r['rc']}) {r['message'][:160]}"
                  + (f" leftovers: {r['leftovers']}" if r["leftovers"] else ""))
    print("  ".join(f"{k}: {v}" for k, v in table.items()))


if __name__ == "__main__":
    main_()
