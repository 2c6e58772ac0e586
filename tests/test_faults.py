"""Faults on real files: damaged cache entries, killed processes, concurrent writers.

Nothing here is mocked: files are truncated or overwritten on disk, ingests are
SIGKILLed in a subprocess, and two processes fill the same statistics cache at once.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from helpers import count_computes, write_store

from dmlfe.errors import MissingPathError
from dmlfe.projection import write_embeddings
from dmlfe.stats import cache as stats_cache
from dmlfe.stats.cache import clean, load_or_compute_stats, stats_dir_for
from dmlfe.store import open_store

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- #
# Helpers
# --------------------------------------------------------------------------- #


def make_store(path: Path, n: int = 120, D: int = 17, q: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.standard_normal(X.nnz)
    Y = (rng.random((n, q)) < 0.4).astype(np.uint8)
    splits = np.where(np.arange(n) % 4 == 0, "test", "train")
    return write_store(path, X, Y, splits)


def assert_same_stats(a, b) -> None:
    assert a.n == b.n
    for name in ("sum_x", "sum_y", "xty", "yty", "xtx", "xtwx"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=name)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)


def entry_files(cache_dir: Path) -> tuple[Path, Path]:
    (npz,) = cache_dir.glob("*.npz")
    (js,) = cache_dir.glob("*.json")
    assert npz.stem == js.stem
    return npz, js


def no_warnings(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


# --------------------------------------------------------------------------- #
# Damaged statistics-cache entries heal themselves
# --------------------------------------------------------------------------- #
def _truncate_npz(npz: Path, js: Path) -> Path:
    data = npz.read_bytes()
    npz.write_bytes(data[: len(data) // 2])
    return npz


def _flipped_byte_npz(npz: Path, js: Path) -> Path:
    """One bit of an array's values changed where it lies: the zip's CRC-32 of it fails."""
    data = bytearray(npz.read_bytes())
    with zipfile.ZipFile(npz) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)  # X^T X's values
    at = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.file_size // 2
    data[at] ^= 1
    npz.write_bytes(bytes(data))
    return npz


def _empty_npz(npz: Path, js: Path) -> Path:
    npz.write_bytes(b"")
    return npz


def _garbage_json(npz: Path, js: Path) -> Path:
    js.write_bytes(b"\x00\xffnot json {")
    return js


def _json_not_an_object(npz: Path, js: Path) -> Path:
    js.write_text("[1, 2, 3]")
    return js


def _rewrite(npz: Path, js: Path, change) -> Path:
    """Change the arrays and record a matching digest, so only the content checks fail."""
    with np.load(npz) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    change(arrays)
    with open(npz, "wb") as f:
        np.savez(f, **arrays)
    meta = json.loads(js.read_text())
    meta["arrays"] = {k: list(a.shape) for k, a in arrays.items()}
    meta["crc32"] = stats_cache.npz_crc32(npz)
    js.write_text(json.dumps(meta))
    return npz


def _nan_npz(npz: Path, js: Path) -> Path:
    def change(arrays):
        arrays["xty"][1, 2] = np.nan

    return _rewrite(npz, js, change)


def _wrong_shape_npz(npz: Path, js: Path) -> Path:
    def change(arrays):
        arrays["xtx"] = arrays["xtx"][:-1]

    return _rewrite(npz, js, change)


def _other_writers_npz(npz: Path, js: Path) -> Path:
    """The npz of another write (different values) beside this record."""
    with np.load(npz) as z:
        arrays = {k: np.array(z[k]) for k in z.files}
    arrays["sum_x"] = arrays["sum_x"] + 1.0
    with open(npz, "wb") as f:
        np.savez(f, **arrays)
    return npz


DAMAGE = {
    "truncated-npz": _truncate_npz,
    "empty-npz": _empty_npz,
    "flipped-byte-npz": _flipped_byte_npz,
    "garbage-json": _garbage_json,
    "json-not-an-object": _json_not_an_object,
    "nan-in-npz": _nan_npz,
    "wrong-shape-npz": _wrong_shape_npz,
    "npz-of-another-write": _other_writers_npz,
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_entry_is_recomputed_and_replaced(tmp_path, damage):
    store = make_store(tmp_path / "s.zarr")
    clean_stats, n0 = count_computes(lambda: load_or_compute_stats(store, need_xtx=True))
    assert n0 == 1
    cache_dir = stats_dir_for(store)
    npz, js = entry_files(cache_dir)

    bad = DAMAGE[damage](npz, js)
    with pytest.warns(RuntimeWarning, match=re.escape(str(bad))):
        healed, n1 = count_computes(lambda: load_or_compute_stats(store, need_xtx=True))
    assert n1 == 1 and not healed.from_cache
    assert_same_stats(healed, clean_stats)

    # the recomputed entry replaced the damaged one: read back, no pass, no warning
    again, n2 = count_computes(lambda: no_warnings(
        lambda: load_or_compute_stats(store, need_xtx=True)))
    assert n2 == 0 and again.from_cache
    assert_same_stats(again, clean_stats)
    assert entry_files(cache_dir) == (npz, js)
    assert temporaries(cache_dir) == []


def test_record_without_arrays_is_ignored(tmp_path):
    """A record from before the digest existed (or hand-edited) is a miss, not a crash."""
    store = make_store(tmp_path / "s.zarr")
    ref = load_or_compute_stats(store)
    npz, js = entry_files(stats_dir_for(store))
    meta = json.loads(js.read_text())
    del meta["arrays"], meta["crc32"]
    js.write_text(json.dumps(meta))
    with pytest.warns(RuntimeWarning, match=re.escape(str(js))):
        again, n = count_computes(lambda: load_or_compute_stats(store))
    assert n == 1
    assert_same_stats(again, ref)


# --------------------------------------------------------------------------- #
# A kill inside the statistics save
# --------------------------------------------------------------------------- #
def test_stale_save_temporary_is_removed(tmp_path):
    store = make_store(tmp_path / "s.zarr")
    ref = load_or_compute_stats(store, need_xtx=True)
    cache_dir = stats_dir_for(store)
    npz, js = entry_files(cache_dir)
    key = npz.stem

    # killed before the rename: the temporary is there, the entry is not
    npz.unlink()
    js.unlink()
    stale = cache_dir / f".{key}.npz.tmp-{dead_pid()}-0123456789ab"
    stale.write_bytes(b"PK\x03\x04" + b"\x00" * 100_000)  # a half-written zip
    live_writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = cache_dir / f".{key}.json.tmp-{live_writer.pid}-ba9876543210"
        live.write_text("{")
        with pytest.warns(RuntimeWarning, match=re.escape(str(stale))):
            stats, n = count_computes(lambda: load_or_compute_stats(store, need_xtx=True))
        assert n == 1
        assert_same_stats(stats, ref)
        assert not stale.exists()
        assert live.exists()  # its process is alive: not touched
        assert temporaries(cache_dir) == [live.name]
    finally:
        live_writer.kill()
        live_writer.wait()
    live.unlink()

    # killed during an upgrade of a valid entry: a read alone (no save) removes it too
    stale2 = cache_dir / f".{key}.npz.tmp-{dead_pid()}-00ff00ff00ff"
    stale2.write_bytes(b"PK")
    with pytest.warns(RuntimeWarning, match=re.escape(str(stale2))):
        stats, n = count_computes(lambda: load_or_compute_stats(store, need_xtx=True))
    assert n == 0 and stats.from_cache
    assert temporaries(cache_dir) == []


# --------------------------------------------------------------------------- #
# Two processes fill the same cache at the same time
# --------------------------------------------------------------------------- #
_CONCURRENT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from dmlfe.stats.cache import load_or_compute_stats
    store, go, out = sys.argv[1:4]
    Path(out + ".ready").touch()
    deadline = time.monotonic() + 60
    while not Path(go).exists():
        if time.monotonic() > deadline:
            sys.exit("no go signal")
        time.sleep(0.001)
    s = load_or_compute_stats(store, need_xtx=True)
    np.savez(out, n=s.n, sum_x=s.sum_x, sum_y=s.sum_y, xty=s.xty, yty=s.yty, xtx=s.xtx)
    print("from cache" if s.from_cache else "computed")
""")


def test_two_processes_fill_the_same_cache(tmp_path):
    store = make_store(tmp_path / "s.zarr", n=3000, D=300, q=6)
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(store), str(go),
                          str(tmp_path / f"out{i}.npz")], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]
    deadline = time.monotonic() + 90
    while not all((tmp_path / f"out{i}.npz.ready").exists() for i in range(2)):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()  # both have imported dmlfe: start them together
    how = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "Warning" not in err, err
        how.append(out.strip())
    print(f"\ntwo concurrent fits: {how}")
    with np.load(tmp_path / "out0.npz") as a, np.load(tmp_path / "out1.npz") as b:
        assert a.files == b.files
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
        ref = {k: np.array(a[k]) for k in a.files}

    cache_dir = stats_dir_for(store)
    entry_files(cache_dir)  # exactly one entry
    assert temporaries(cache_dir) == []
    stats, n = count_computes(lambda: no_warnings(
        lambda: load_or_compute_stats(store, need_xtx=True)))
    assert n == 0 and stats.from_cache
    for k, v in ref.items():
        np.testing.assert_array_equal(getattr(stats, k), v, err_msg=k)


_HAMMER = textwrap.dedent("""
    import sys
    import pickle
    from dmlfe.stats.cache import save_stats
    with open(sys.argv[1], "rb") as f:
        stats, params = pickle.load(f)
    for _ in range(int(sys.argv[3])):
        save_stats(stats, sys.argv[2], params)
""")


def test_reader_never_sees_a_half_written_pair(tmp_path):
    """Two processes rewrite one entry over and over; every read is a miss or exact."""
    import pickle

    store = make_store(tmp_path / "s.zarr", n=400, D=60, q=5)
    ref = load_or_compute_stats(store, need_xtx=True, cache=False)
    params = {"case": "hammer"}
    spec = tmp_path / "spec.pkl"
    spec.write_bytes(pickle.dumps((ref, params)))
    cache_dir = tmp_path / "cache"
    procs = [subprocess.Popen([sys.executable, "-c", _HAMMER, str(spec), str(cache_dir), "60"],
                              cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    hits = misses = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        while any(p.poll() is None for p in procs):
            got = stats_cache.load_stats(cache_dir, params, need_xtx=True)
            if got is None:
                misses += 1
            else:
                hits += 1
                assert_same_stats(got, ref)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    assert hits > 0
    assert_same_stats(stats_cache.load_stats(cache_dir, params, need_xtx=True), ref)
    assert temporaries(cache_dir) == []


# --------------------------------------------------------------------------- #
# clean()
# --------------------------------------------------------------------------- #
def test_clean_removes_cache_and_stale_temporaries(tmp_path):
    store = make_store(tmp_path / "s.zarr")
    ref = load_or_compute_stats(store, need_xtx=True)
    cache_dir = stats_dir_for(store)
    key = entry_files(cache_dir)[0].stem
    pid = dead_pid()
    stale_store = tmp_path / f".s.zarr.tmp-{pid}-aaaaaaaaaaaa"
    (stale_store / "pieces" / "00000000").mkdir(parents=True)
    (stale_store / "pieces" / "00000000" / "data.npy").write_bytes(b"\x00" * 50_000)
    stale_entry = cache_dir / f".{key}.npz.tmp-{pid}-bbbbbbbbbbbb"
    stale_entry.write_bytes(b"PK")
    live_store = tmp_path / f".s.zarr.tmp-{os.getpid()}-cccccccccccc"  # ours: alive
    live_store.mkdir()
    other = tmp_path / "notes.txt"
    other.write_text("keep")

    removed = clean(store)
    assert set(removed) == {cache_dir, stale_store}
    assert not cache_dir.exists() and not stale_store.exists()
    assert live_store.exists() and other.exists()
    # the store is intact
    assert open_store(store).n_docs == 120
    again, n = count_computes(lambda: load_or_compute_stats(store, need_xtx=True))
    assert n == 1
    assert_same_stats(again, ref)

    shutil.rmtree(live_store)
    shutil.rmtree(cache_dir)
    assert clean(store) == []
    with pytest.raises(MissingPathError, match="absent.zarr"):
        clean(tmp_path / "absent.zarr")
    # a killed ingest that never produced its store: clean removes what it left
    ghost = tmp_path / f".never.zarr.tmp-{pid}-dddddddddddd"
    ghost.mkdir()
    assert clean(tmp_path / "never.zarr") == [ghost]


def test_clean_keeps_a_live_writers_temporary(tmp_path):
    store = make_store(tmp_path / "s.zarr")
    load_or_compute_stats(store)
    cache_dir = stats_dir_for(store)
    npz, js = entry_files(cache_dir)
    live = cache_dir / f".{npz.name}.tmp-{os.getpid()}-eeeeeeeeeeee"
    live.write_bytes(b"PK")
    removed = clean(store)
    assert set(removed) == {npz, js}
    assert [p.name for p in cache_dir.iterdir()] == [live.name]


# --------------------------------------------------------------------------- #
# Embeddings: stale temporaries of the output are removed
# --------------------------------------------------------------------------- #
def test_write_embeddings_removes_stale_temporaries(tmp_path):
    out = tmp_path / "emb.zarr"
    stale = tmp_path / f".emb.zarr.tmp-{dead_pid()}-0123456789ab"
    (stale / "Z").mkdir(parents=True)
    with pytest.warns(RuntimeWarning, match=re.escape(str(stale))):
        write_embeddings(np.ones((5, 2)), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["emb.zarr"]


# --------------------------------------------------------------------------- #
# SIGKILL of an ingest, then the same ingest again
# --------------------------------------------------------------------------- #
INGEST = ["-m", "dmlfe.cli", "ingest", "--format", "synthetic", "--n-docs", "20000",
          "--vocab-size", "2000", "--n-labels", "5", "--chunk-rows", "2000", "--out", "OUT",
          "--workers", "1", "--quiet"]
ARRAYS = ("X/data", "X/indices", "X/indptr", "obsm/Y/data", "obsm/Y/indices", "obsm/Y/indptr",
          "obs/_index", "obs/split/codes")


def _ingest_cmd(out: Path) -> list[str]:
    return [sys.executable] + [str(out) if a == "OUT" else a for a in INGEST]


def _run_ingest(out: Path, cwd: Path) -> str:
    r = subprocess.run(_ingest_cmd(out), cwd=cwd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr


def _store_arrays(path: Path) -> dict[str, np.ndarray]:
    open_store(path)  # opens as a complete store
    g = zarr.open_group(str(path), mode="r")
    return {k: g[k][:] for k in ARRAYS}


def _own_temporary(out: Path, pid: int) -> Path | None:
    found = list(out.parent.glob(f".{out.name}.tmp-{pid}-*"))
    return found[0] if found else None


def _start_ingest(out: Path, cwd: Path) -> tuple[subprocess.Popen, float | None]:
    """Start an ingest; return it and the seconds until its temporary store appeared."""
    proc = subprocess.Popen(_ingest_cmd(out), cwd=cwd, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < 100:
        if _own_temporary(out, proc.pid) is not None:
            return proc, time.monotonic() - t0
        time.sleep(0.005)
    return proc, None


def test_sigkilled_ingest_then_rerun(tmp_path):
    """Kill an ingest (and its dask workers) three times at seeded random points while
    it writes its temporary store, each time starting the same ingest again; then run it
    to completion: the store equals a clean ingest and nothing of the killed runs
    remains. Each new run removes what the killed one left before it writes, so killed
    runs never pile up."""
    ref_out = tmp_path / "ref.zarr"
    proc, t_appear = _start_ingest(ref_out, tmp_path)
    t0 = time.monotonic()
    while not ref_out.exists() and proc.poll() is None:
        time.sleep(0.005)
    write_phase = time.monotonic() - t0  # from the temporary appearing to the rename
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and t_appear is not None, err
    ref = _store_arrays(ref_out)

    rng = random.Random(20240611)
    delays = [rng.uniform(0.0, 0.8 * write_phase) for _ in range(3)]
    out = tmp_path / "killed.zarr"
    report = []
    left: list[Path] = []
    for delay in delays:
        proc, appeared = _start_ingest(out, tmp_path)
        assert appeared is not None, proc.communicate()[1]
        # the new temporary exists: what the previous kill left is gone already
        assert not [p for p in left if p.exists()]
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the ingest and its dask workers
        _, err = proc.communicate()
        for p in left:
            assert f"removed {p}" in err  # the warning named it
        if proc.returncode == 0:  # a fast run finished first: complete, nothing left
            done = _store_arrays(out)
            for k in ARRAYS:
                np.testing.assert_array_equal(done[k], ref[k], err_msg=k)
            assert sorted(tmp_path.glob(".killed.zarr.tmp-*")) == []
            shutil.rmtree(out)
            left = []
            report.append(f"finished before the kill at {delay:.2f} s")
            continue
        assert proc.returncode == -signal.SIGKILL, err
        assert not out.exists()
        left = sorted(tmp_path.glob(".killed.zarr.tmp-*"))
        assert [p.name for p in left] == [_own_temporary(out, proc.pid).name]
        size = sum(f.stat().st_size for p in left for f in p.rglob("*") if f.is_file())
        report.append(f"killed {delay:.2f} s after its temporary appeared: left "
                      f"{[p.name for p in left]} ({size / 1e6:.1f} MB)")

    err = _run_ingest(out, tmp_path)
    for p in left:
        assert f"removed {p}" in err
    after = sorted(p.name for p in tmp_path.glob(".killed.zarr.tmp-*"))
    assert after == []
    got = _store_arrays(out)
    for k in ARRAYS:
        np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
    print(f"\nclean ingest: temporary after {t_appear:.1f} s, renamed {write_phase:.1f} s "
          "later", *report, f"rerun: removed {[p.name for p in left]}, left {after}, "
          "store equal to the clean one", sep="\n  ")
