"""A damaged store is an error naming the store and the array, never zeros.

Real stores are damaged on disk (chunk files deleted, truncated or changed, zarr.json
files edited, the store moved or deleted while a fit runs) and met where a user meets
them: ``dmlfe fit`` on the session's 2-worker LocalCluster (``--scheduler``), ``dmlfe
info`` and ``dmlfe verify``. Each must end with exit 2, one line on stderr naming the
store and the array, and no model (nor anything else) written.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import write_store

import dmlfe.fit.run as fit_run
from dmlfe.cli import main
from dmlfe.store import layout as F
from dmlfe.store import open_store
from dmlfe.store.integrity import build_record
from dmlfe.store.verify import verify_store

N, D, Q, CHUNK_ROWS = 120, 17, 4, 16  # 8 row chunks: 8 dask blocks on 2 workers


def make_store(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.uniform(0.5, 2.0, X.nnz)
    Y = (rng.random((N, Q)) < 0.4).astype(np.uint8)
    splits = np.where(np.arange(N) % 4 == 0, "test", "train")
    return write_store(path, X, Y, splits, chunk_rows=CHUNK_ROWS)


def edit_json(path: Path, change) -> None:
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def make_legacy(store: Path) -> Path:
    """The store as dmlfe wrote it before integrity records existed."""
    edit_json(store / "zarr.json", lambda d: d["attributes"]["dmlfe"].pop("integrity"))
    return store


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


def run_cli(argv: list[str], capsys) -> tuple[int, list[str], str]:
    """(exit status, stderr lines, stdout) of ``dmlfe ARGV`` in this process."""
    capsys.readouterr()
    rc = main(argv)
    captured = capsys.readouterr()
    err = [line for line in captured.err.strip().splitlines()
           if line and not line.startswith("dask dashboard: ")]
    return rc, err, captured.out


def fit_argv(store: Path, out: Path, address: str) -> list[str]:
    return ["fit", str(store), "--method", "mvmd", "--dim", "2", "--split", "train",
            "--out", str(out), "--scheduler", address, "--quiet"]


# --------------------------------------------------------------------------- damage
def _delete(rel: str):
    def damage(store: Path) -> None:
        (store / rel).unlink()
    return damage


def _truncate(rel: str):
    def damage(store: Path) -> None:
        data = (store / rel).read_bytes()
        (store / rel).write_bytes(data[: len(data) // 2])
    return damage


def _flip_byte(rel: str):
    """Same size, one byte changed: only the checksum can tell."""
    def damage(store: Path) -> None:
        data = bytearray((store / rel).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (store / rel).write_bytes(bytes(data))
    return damage


def _set_key(rel: str, key: str, value):
    def damage(store: Path) -> None:
        edit_json(store / rel, lambda d: d.__setitem__(key, value))
    return damage


def _drop_key(rel: str, key: str):
    def damage(store: Path) -> None:
        edit_json(store / rel, lambda d: d.pop(key))
    return damage


def _drop_root_key(key: str):
    def damage(store: Path) -> None:
        edit_json(store / "zarr.json", lambda d: d["attributes"]["dmlfe"].pop(key))
    return damage


#: name -> (damage, the array (or key) the message must name)
DAMAGE = {
    "X-indices-chunk-deleted": (_delete("X/indices/c/0"), "X/indices"),
    "X-indptr-chunk-deleted": (_delete("X/indptr/c/3"), "X/indptr"),
    "X-data-chunk-deleted": (_delete("X/data/c/0"), "X/data"),
    "Y-chunk-deleted": (_delete("obsm/Y/indptr/c/2"), "obsm/Y/indptr"),
    "Y-indices-chunk-deleted": (_delete("obsm/Y/indices/c/0"), "obsm/Y/indices"),
    "X-data-chunk-truncated": (_truncate("X/data/c/0"), "X/data"),
    "Y-chunk-truncated": (_truncate("obsm/Y/indptr/c/5"), "obsm/Y/indptr"),
    "X-data-byte-changed": (_flip_byte("X/data/c/0"), "X/data"),
    # 64 rows = 4 whole chunks: zarr reads them fine, and they cover the train split
    "Y-shape-shrunk": (_set_key("obsm/Y/indptr/zarr.json", "shape", [65]), "obsm/Y/indptr"),
    "Y-dtype-edited": (_set_key("obsm/Y/data/zarr.json", "data_type", "int16"),
                       "obsm/Y/data"),
    "X-indices-dtype-edited": (_set_key("X/indices/zarr.json", "data_type", "int64"),
                               "X/indices"),
    "X-data-zarr-json-key-missing": (_drop_key("X/data/zarr.json", "codecs"), "X/data"),
    "Y-zarr-json-deleted": (_delete("obsm/Y/indices/zarr.json"), "obsm/Y/indices"),
    "root-zarr-json-key-missing": (_drop_root_key("nnz"), "'nnz'"),
}

#: Damage ``dmlfe info`` does not see: it stats every chunk file and reads Y and indptr.
INFO_BLIND = {"X-data-byte-changed"}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_store_fit_exits_2_naming_store_and_array(tmp_path, case, cluster_client,
                                                          capsys):
    damage, named = DAMAGE[case]
    store = make_store(tmp_path / "s.zarr")
    damage(store)
    before = files_under(tmp_path)

    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 2, err
    assert len(err) == 1, err
    assert str(store) in err[0] and named in err[0], err[0]
    assert err[0].startswith("dmlfe fit: error: ")
    assert not (tmp_path / "model").exists()
    assert files_under(tmp_path) == before  # nothing half-written, no stats cache

    rc, err, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and len(err) == 1 and str(store) in err[0] and "damaged" in err[0]
    assert named in out + err[0]

    rc, err, _ = run_cli(["info", str(store)], capsys)
    if case in INFO_BLIND:  # same size: info's stat sees nothing, and it reads no X/data
        assert rc == 0
    else:
        assert rc == 2 and len(err) == 1 and str(store) in err[0] and named in err[0], err


def test_intact_store_verifies_and_fits(tmp_path, cluster_client, capsys):
    store = make_store(tmp_path / "s.zarr")
    rc, err, out = run_cli(["verify", str(store)], capsys)
    assert rc == 0 and err == []
    assert "intact" in out and "CRC-32" in out

    rc, err, out = run_cli(["info", str(store)], capsys)
    assert rc == 0
    (line,) = [t for t in out.splitlines() if t.startswith("integrity: ")]
    assert "CRC-32 checksums of" in line and "recorded" in line

    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 0, err
    assert (tmp_path / "model").is_dir()


def test_verify_lists_every_problem(tmp_path, capsys):
    store = make_store(tmp_path / "s.zarr")
    _delete("X/indices/c/0")(store)
    _truncate("obsm/Y/indptr/c/1")(store)
    _flip_byte("X/indptr/c/2")(store)
    _set_key("obs/_index/zarr.json", "shape", [100])(store)
    rc, err, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and "4 problem(s)" in err[0]
    lines = [t for t in out.splitlines() if t.startswith(str(store))]
    assert len(lines) == 4, out
    text = "\n".join(lines)
    assert "X/indices: chunk c/0 is missing" in text
    assert "obsm/Y/indptr: chunk c/1 has" in text and "truncated" in text
    assert "X/indptr: chunk c/2 does not match its CRC-32" in text
    assert "obs/_index: its zarr.json gives shape (100,)" in text


@pytest.mark.parametrize("how", ["moved", "deleted"])
def test_store_moved_or_deleted_during_fit(tmp_path, how, cluster_client, capsys,
                                           monkeypatch):
    """The workers have the store open (they have read blocks of it) when it goes."""
    store = make_store(tmp_path / "s.zarr")
    original = fit_run.load_or_compute_stats

    def gone_midway(data_store, *args, **kwargs):
        data_store.row_nnz.sum().compute()  # the workers open the store and read it
        data_store.Y.compute()  # CSR blocks: no dask sum
        if how == "moved":
            os.rename(store, tmp_path / "elsewhere.zarr")
        else:
            shutil.rmtree(store)
        return original(data_store, *args, **kwargs)

    monkeypatch.setattr(fit_run, "load_or_compute_stats", gone_midway)
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 2, err
    assert len(err) == 1 and str(store) in err[0] and "moved or deleted" in err[0], err
    assert not (tmp_path / "model").exists()
    left = {p.name for p in tmp_path.iterdir()}
    assert left == ({"elsewhere.zarr"} if how == "moved" else set())


def test_checks_on_several_element_chunks_on_the_cluster(tmp_path, cluster_client, capsys,
                                                         monkeypatch):
    """X/data and X/indices in several chunks; the blocks are read by worker processes."""
    monkeypatch.setattr(F, "ELEM_CHUNK", 128)
    store = make_store(tmp_path / "s.zarr")
    n_chunks = len(list((store / "X" / "indices" / "c").iterdir()))
    assert n_chunks > 3
    assert verify_store(store).ok
    _delete("X/indices/c/2")(store)
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 2 and "X/indices: chunk c/2 is missing" in err[0], err
    assert not (tmp_path / "model").exists()


def test_ingest_on_the_cluster_records_every_chunk(tmp_path, cluster_client, capsys):
    """The chunk entries the workers computed while writing equal a fresh record."""
    out = tmp_path / "syn.zarr"
    rc, err, _ = run_cli(["ingest", "--format", "synthetic", "--out", str(out), "--n-docs",
                          "300", "--vocab-size", "80", "--n-labels", "3", "--chunk-rows",
                          "64", "--scheduler", cluster_client.scheduler.address, "--quiet"],
                         capsys)
    assert rc == 0, err
    stored = json.loads((out / "zarr.json").read_text())["attributes"]["dmlfe"]["integrity"]
    assert stored == build_record(out)
    assert len(stored["arrays"]["X/indptr"]["chunks"]) == 5  # 301 positions / 64
    assert verify_store(out).ok


# --------------------------------------------------------------------------- legacy
def test_store_without_record_opens_and_says_so(tmp_path, cluster_client, capsys):
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    rc, _, out = run_cli(["info", str(store)], capsys)
    assert rc == 0
    (line,) = [t for t in out.splitlines() if t.startswith("integrity: ")]
    assert "no checksums recorded" in line and f"dmlfe verify {store} --record" in line

    rc, err, out = run_cli(["verify", str(store)], capsys)
    assert rc == 0 and err == []
    assert "note: no integrity record" in out and "no damage found" in out

    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 0, err
    assert err == [unrecorded_warning("fit", store)], err


def unrecorded_warning(command: str, store: Path) -> str:
    return (f"dmlfe {command}: warning: store {store} has no integrity record (it was written "
            "before dmlfe recorded checksums): damage such as a deleted label chunk cannot be "
            f"detected (it reads as documents without labels); run dmlfe verify {store} "
            "--record on an intact copy to add one")


def test_fit_and_transform_of_a_store_without_record_warn_in_one_line(tmp_path,
                                                                      cluster_client, capsys):
    """What cannot be detected is said: a deleted split chunk of an old store (it reads
    as split code 0)."""
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _delete("obs/split/codes/c/2")(store)
    address = cluster_client.scheduler.address
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", address), capsys)
    assert rc == 0 and err == [unrecorded_warning("fit", store)], err
    rc, err, _ = run_cli(["transform", str(tmp_path / "model"), str(store), "--out",
                          str(tmp_path / "emb.zarr"), "--scheduler", address, "--quiet"],
                         capsys)
    assert rc == 0 and err == [unrecorded_warning("transform", store)], err
    # a store with its record says nothing
    rec = make_store(tmp_path / "r.zarr")
    rc, err, _ = run_cli(fit_argv(rec, tmp_path / "model2", address), capsys)
    assert rc == 0 and err == [], err


def test_verify_without_record_finds_a_deleted_indices_chunk(tmp_path, capsys):
    """Without a record, a deleted X/indices chunk reads as column 0: rows whose column
    indices stop increasing."""
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _delete("X/indices/c/0")(store)
    rc, err, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and str(store) in err[0]
    assert "X/indices" in out and "do not increase" in out


def test_verify_without_record_cannot_tell_a_deleted_split_chunk(tmp_path, capsys):
    """The limit of a store without a record: a deleted split chunk reads as code 0, a
    valid split; verify says it could not check it."""
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _delete("obs/split/codes/c/2")(store)
    rc, _, out = run_cli(["verify", str(store)], capsys)
    assert rc == 0
    assert "obs/split/codes: 1 of 8 chunks have no file (c/2)" in out
    assert "1 chunk(s) without a file could not be checked" in out


def test_verify_without_record_finds_a_deleted_label_chunk(tmp_path, capsys):
    """A deleted chunk of the CSR labels' row pointer reads as zeros: a falling pointer."""
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _delete("obsm/Y/indptr/c/2")(store)
    rc, _, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and "obsm/Y/indptr: not a row pointer rising" in out


def test_truncated_chunk_without_record_is_exit_2(tmp_path, cluster_client, capsys):
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _truncate("X/data/c/0")(store)
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 2 and len(err) == 1, err
    assert str(store) in err[0] and "X/data" in err[0] and "cannot be decoded" in err[0]
    assert not (tmp_path / "model").exists()
    rc, _, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and "X/data" in out


def test_record_added_to_an_old_store(tmp_path, cluster_client, capsys):
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    uuid = open_store(store).fingerprint["uuid"]
    rc, err, out = run_cli(["verify", str(store), "--record"], capsys)
    assert rc == 0, err
    assert "recorded CRC-32 checksums" in out
    assert open_store(store).fingerprint["uuid"] == uuid  # same store, same caches
    assert verify_store(store).recorded and verify_store(store).ok
    assert not [p for p in store.iterdir() if ".tmp-" in p.name]

    _delete("obsm/Y/indptr/c/2")(store)  # now it is caught where it is read
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "model", cluster_client.scheduler.address),
                         capsys)
    assert rc == 2 and "obsm/Y/indptr: chunk c/2 is missing" in err[0], err


def test_record_refused_for_a_damaged_old_store(tmp_path, capsys):
    store = make_legacy(make_store(tmp_path / "s.zarr"))
    _delete("X/indices/c/0")(store)
    rc, err, _ = run_cli(["verify", str(store), "--record"], capsys)
    assert rc == 2 and "damaged" in err[0]
    meta = json.loads((store / "zarr.json").read_text())["attributes"]["dmlfe"]
    assert "integrity" not in meta


# --------------------------------------------------------------------------- anndata
def test_recorded_store_still_opens_in_anndata(tmp_path):
    anndata = pytest.importorskip("anndata")
    store = make_store(tmp_path / "s.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        adata = anndata.read_zarr(store)
    assert adata.shape == (N, D) and adata.obsm["Y"].shape == (N, Q)
    assert sp.issparse(adata.obsm["Y"])
    np.testing.assert_array_equal(adata.obsm["Y"].toarray(),
                                  open_store(store).Y.compute().toarray())


def test_verify_names_a_missing_group_zarr_json(tmp_path, capsys):
    store = make_store(tmp_path / "s.zarr")
    (store / "obsm" / "zarr.json").unlink()
    rc, _, out = run_cli(["verify", str(store)], capsys)
    assert rc == 2 and "obsm: its group zarr.json" in out


# --------------------------------------------------------------------------- stats cache
@pytest.mark.parametrize("damage, named", [
    (_delete("obsm/Y/indptr/c/2"), "obsm/Y/indptr: chunk c/2"),
    (_truncate("X/indices/c/0"), "X/indices: chunk c/0"),
])
def test_a_cache_hit_is_not_served_for_a_damaged_store(tmp_path, damage, named,
                                                       cluster_client, capsys):
    """The second fit's statistics come from the cache (no chunk read): the chunk files
    are still checked against the record."""
    store = make_store(tmp_path / "s.zarr")
    address = cluster_client.scheduler.address
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "m1", address), capsys)
    assert rc == 0, err
    assert any(Path(str(store) + ".stats").iterdir())  # the cache was filled
    damage(store)
    rc, err, _ = run_cli(fit_argv(store, tmp_path / "m2", address), capsys)
    assert rc == 2, err
    assert len(err) == 1 and err[0].startswith("dmlfe fit: error: "), err
    assert str(store) in err[0] and named in err[0], err[0]
    assert not (tmp_path / "m2").exists()
