"""README's main job (``dmlfe demo``), small, on the session cluster."""

from __future__ import annotations

import json

import numpy as np
import zarr

from dmlfe.cli import main as cli_main
from dmlfe.store import open_store


def test_demo_end_to_end(tmp_path, cluster_client, capsys):
    out = tmp_path / "demo"
    rc = cli_main(["demo", "--out", str(out), "--n-docs", "1500", "--chunk-rows", "400",
                   "--max-features", "400", "--scheduler", cluster_client.scheduler.address,
                   "--quiet"])
    assert rc == 0
    printed = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["methods"]) == {"mddm_p", "mvmd", "pca"}
    store = open_store(summary["store"])
    n_test = int((store.split.compute() == "test").sum())
    for name, m in summary["methods"].items():
        assert name in printed
        z = zarr.open_group(m["embeddings"], mode="r")
        Z = z["Z"][:]
        assert Z.shape == (n_test, m["n_components"])
        assert np.isfinite(Z).all()
    # MDDMp with the linear label kernel has at most q non-zero eigenvalues
    assert summary["methods"]["mddm_p"]["n_components"] <= summary["labels"]
    assert summary["methods"]["pca"]["n_components"] == 50
