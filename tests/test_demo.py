"""README's main job: ``dmlfe demo`` runs pipelines/demo.yaml (here at a small size)."""

from __future__ import annotations

import json

import yaml

from dmlfe.cli import main as cli_main
from dmlfe.demo import demo_pipeline_path
from dmlfe.pipeline.config import load_config


def test_shipped_demo_pipeline_is_valid():
    cfg = load_config(demo_pipeline_path())
    assert cfg.name == "demo"


def test_demo_command_runs_the_demo_pipeline(tmp_path, monkeypatch, cluster_client, capsys):
    raw = yaml.safe_load(demo_pipeline_path().read_text())
    # the shipped file, shrunk: fewer documents and features, same methods and report
    raw["datasets"][0]["options"].update(n_docs=1200, max_features=300)
    raw["datasets"][0]["chunk_rows"] = 400
    (tmp_path / "pipes").mkdir()
    (tmp_path / "pipes" / "demo.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setenv("DMLFE_PIPELINES", str(tmp_path / "pipes"))
    work = tmp_path / "work"
    args = ["demo", "--work-dir", str(work), "--scheduler", cluster_client.scheduler.address]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "report.md" in out
    report = json.loads((work / "report" / "report.json").read_text())
    text = json.dumps(report)
    for method in ("mddm_p", "mvmd", "pca", "none"):
        assert method in text
    assert list((work / "report").glob("*.png"))
    # metric versus d for every reduction the demo compares, not only PCA's d grid
    assert set(report["curves"]["synthetic"]) == {"mddm_p", "mvmd", "pca"}
    # the second run reuses every stage
    assert cli_main(args) == 0
    assert " 0 ran" in capsys.readouterr().out
