"""Shared benchmark plumbing: wall time and peak RSS of a process tree, JSON output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil  # a dependency of distributed

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DMLFE_DATA", ROOT.parent / "shared" / "data"))
OUT = ROOT / "bench-out"


class TreeRSS:
    """Samples the summed RSS of this process and all its descendants (dask workers)."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak_total = 0
        self.peak_driver = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                procs = [me, *me.children(recursive=True)]
                rss = []
                for p in procs:
                    try:
                        rss.append(p.memory_info().rss)
                    except psutil.Error:
                        rss.append(0)
                self.peak_total = max(self.peak_total, sum(rss))
                self.peak_driver = max(self.peak_driver, rss[0])
            except psutil.Error:
                pass
            time.sleep(self.interval)

    def __enter__(self) -> TreeRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def measured(record: dict):
    """Adds seconds, peak_rss_total_mib and peak_rss_driver_mib to ``record``."""
    with TreeRSS() as rss:
        t0 = time.perf_counter()
        yield
        record["seconds"] = round(time.perf_counter() - t0, 3)
    record["peak_rss_total_mib"] = round(rss.peak_total / 2**20, 1)
    record["peak_rss_driver_mib"] = round(rss.peak_driver / 2**20, 1)


def run_reference(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter; it fills a dict named ``result``.

    The child's own peak RSS (getrusage of itself) is added, so the reference
    tool is measured apart from the dmlfe run in this process.
    """
    tail = (
        "\nimport json as _j, resource as _r\n"
        "result['peak_rss_mib'] = round(_r.getrusage(_r.RUSAGE_SELF).ru_maxrss / 1024, 1)\n"
        "print(_j.dumps(result))\n"
    )
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code + tail, *args], check=True,
                         capture_output=True, text=True)
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec["process_seconds"] = round(time.perf_counter() - t0, 3)
    return rec


def run_case_child(script: str, case: dict, pythonpath: str | None = None,
                   timeout: float = 900) -> dict:
    """``script --case JSON`` in a fresh interpreter (``pythonpath`` first on its path,
    for a "before" checkout): the JSON its last output line holds, with ``status`` and
    ``process_seconds``; a timeout or a failure is a record saying so."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, script, "--case", json.dumps(case)],
                             capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {**case, "status": f"stopped after {timeout:.0f} s"}
    if out.returncode != 0:
        return {**case, "status": "failed", "error": out.stderr.strip()[-1500:]}
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    rec["status"] = "ok"
    rec["process_seconds"] = round(time.perf_counter() - t0, 2)
    return rec


def dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def emit(result: dict, name: str) -> None:
    OUT.mkdir(exist_ok=True)
    text = json.dumps(result, indent=2)
    (OUT / f"{name}.json").write_text(text)
    print(text)
