"""Bad inputs through the command line: does each end in success or one clean line?

Runs hand-made bad inputs through ``dmlfe ingest`` / ``info`` / ``import`` /
``transform`` in this process (``dmlfe.cli.main``), and the cases of issue 35 (YAML
alias bombs, a port that is not dask, a scheduler without workers, TLS settings,
symbolic links as outputs, a negative seed, ``--overwrite`` onto a plain file, ``dmlfe
clean`` on a folder: :func:`cluster_hardening_cases`), and classifies each outcome:

* ``ok``: exit 0;
* ``clean``: exit 2 with one stderr line that names the input file or folder;
* ``unnamed``: exit 2, but the line does not name the input;
* ``crash``: exit 1 (an internal error) or an exception escaping ``main``.

Prints JSON (counts per category and every case's outcome and message); writes
bench-out/faults.json. Usage: ``python benchmarks/faults.py``.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import io
import json
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import write_store  # noqa: E402

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
XML = """<?xml version="1.0" encoding="utf-8"?>
<labels xmlns="http://mulan.sourceforge.net/labels"><label name="L1"></label>
<label name="L2"></label></labels>
"""


def run(argv: list[str], named: str) -> dict:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    except BaseException as exc:  # noqa: BLE001 - what escapes main is the finding
        return {"outcome": "crash", "message": f"{type(exc).__name__}: {exc}"[:300]}
    # the dashboard address of a started cluster is information, not part of the error
    text = [t for t in err.getvalue().strip().splitlines()
            if not t.startswith("dask dashboard: ")]
    line = text[-1] if text else ""
    if rc == 0:
        outcome = "ok"
    elif rc == 2:
        outcome = "clean" if named in line and len(text) == 1 else "unnamed"
    else:
        outcome = "crash"
    return {"outcome": outcome, "rc": rc, "message": line[:300]}


def arff_cases(d: Path) -> list[tuple[str, list[str], str]]:
    xml = d / "r.xml"
    xml.write_text(XML)
    cases = []

    def add(name: str, data: bytes, suffix: str = ".arff") -> None:
        p = d / f"{name}{suffix}"
        p.write_bytes(data)
        cases.append((name, ["ingest", str(p), "--format", "mulan", "--labels", str(xml),
                             "--out", str(d / f"{name}.zarr"), "--quiet"], p.name))

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
    cases.append(("missing_file", ["ingest", str(missing), "--format", "mulan", "--labels",
                                   str(xml), "--out", str(d / "m.zarr"), "--quiet"],
                  missing.name))
    p = d / "nolabels.arff"
    p.write_bytes(good)
    cases.append(("missing_labels_flag", ["ingest", str(p), "--format", "mulan", "--out",
                                          str(d / "nl.zarr"), "--quiet"], "--labels"))
    return cases


def text_cases(d: Path) -> list[tuple[str, list[str], str]]:
    cases = []

    def add(name: str, data: bytes, fmt: str, suffix: str) -> None:
        p = d / f"{name}{suffix}"
        p.write_bytes(data)
        cases.append((name, ["ingest", str(p), "--format", fmt, "--out",
                             str(d / f"{name}.zarr"), "--quiet", "--workers", "1"], p.name))

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


def other_cases(d: Path) -> list[tuple[str, list[str], str]]:
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
        ("info_plain_folder", ["info", str(folder)], folder.name),
        ("info_file", ["info", str(folder / "a.txt")], "a.txt"),
        ("import_garbage", ["import", str(garbage), "--out", str(d / "g.zarr")],
         garbage.name),
        ("transform_nan_model", ["transform", str(nan_model), str(store), "--out",
                                 str(d / "emb"), "--quiet"], "nan_model"),
        ("fit_on_folder", ["fit", str(folder), "--method", "pca", "--out",
                           str(d / "m2"), "--quiet"], folder.name),
        ("fit_on_corpus_file", ["fit", str(arff), "--method", "pca", "--out",
                                str(d / "m3"), "--quiet"], arff.name),
        ("unreachable_scheduler", ["ingest", "--format", "synthetic", "--n-docs", "20",
                                   "--out", str(d / "u.zarr"), "--scheduler",
                                   "tcp://127.0.0.1:1", "--connect-timeout", "1"],
         "tcp://127.0.0.1:1"),
        ("cluster_check_bad_profile", ["cluster", "check", str(profile)], profile.name),
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


def cluster_hardening_cases(d: Path, stack: contextlib.ExitStack
                            ) -> list[tuple[str, list[str], str]]:
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
    return [
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


def run_hardening(argv: list[str], named: str) -> dict:
    """:func:`run`, where an argparse refusal (SystemExit 2: usage lines, then one error
    line) counts by its error line, and the announced wait for a worker is information."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 1
        lines = err.getvalue().strip().splitlines()
        text = lines[-1:]
    except BaseException as exc:  # noqa: BLE001 - what escapes main is the finding
        return {"outcome": "crash", "message": f"{type(exc).__name__}: {exc}"[:300]}
    else:
        text = [t for t in err.getvalue().strip().splitlines()
                if not t.startswith(("dask dashboard: ", "waiting up to "))]
    line = text[-1] if text else ""
    if rc == 0:
        outcome = "ok"
    elif rc == 2:
        outcome = "clean" if named in line and len(text) == 1 else "unnamed"
    else:
        outcome = "crash"
    return {"outcome": outcome, "rc": rc, "message": line[:300]}


def main_() -> None:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        d = Path(tmp)
        cases = arff_cases(d) + text_cases(d) + other_cases(d)
        results = {name: run(argv, named) for name, argv, named in cases}
        results.update({name: run_hardening(argv, named) for name, argv, named
                        in cluster_hardening_cases(d, stack)})
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    report = {"cases": len(results), "counts": counts, "results": results}
    out = ROOT / "bench-out"
    out.mkdir(exist_ok=True)
    (out / "faults.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main_()
