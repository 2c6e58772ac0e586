"""A normal (non-editable) install ships everything ``dmlfe demo`` and ``--cluster local``
need: the wheel is built from the source tree and installed into a folder of its own,
and the installed command runs from a directory outside the source tree."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    assert res.returncode == 0, (f"{' '.join(map(str, cmd))} exited {res.returncode}:\n"
                                 f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return res


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The wheel of this source tree, installed with ``pip install --target``: the dev
    environment (where dmlfe is an editable install) is left as it is."""
    tmp = tmp_path_factory.mktemp("install")
    # a copy of the files git would commit: pip builds in the tree it is given, and a
    # stale build/ or egg-info in the work tree must neither be used nor be written
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                  cwd=ROOT).stdout.split("\0")
    src = tmp / "src"
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is not listed
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    # --no-build-isolation and --no-index: no network (setuptools and wheel come with
    # the test extra)
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
          "-w", str(tmp / "wheel"), str(src)])
    (wheel,) = (tmp / "wheel").glob("dmlfe-*.whl")
    _run([*pip, "install", "-q", "--no-deps", "--no-index", "--target", str(tmp / "site"),
          str(wheel)])
    return tmp / "site"


def _env(site: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DMLFE_PIPELINES", "DMLFE_CLUSTER_CONFIGS", "PYTHONPATH")}
    # ahead of the dev environment's site-packages, where the editable dmlfe is
    env["PYTHONPATH"] = str(site)
    env.update(extra)
    return env


def _dmlfe(site: Path) -> list[str]:
    """The installed console script, run by this interpreter (which has the dependencies)."""
    return [sys.executable, str(site / "bin" / "dmlfe")]


def _check_report(report_dir: Path, stdout: str) -> dict:
    """The demo's report: every method of demo.yaml classified, micro-F1 in [0, 1]."""
    assert str(report_dir / "report.md") in stdout
    report = json.loads((report_dir / "report.json").read_text())
    (micro_f1,) = report["tables"]["ridge"]["micro_f1"].values()  # one dataset
    assert set(micro_f1) == {"mddm_p", "mvmd", "pca", "none"}
    assert all(0.0 <= v <= 1.0 for v in micro_f1.values())
    assert {p.name for p in report_dir.glob("*.png")} >= {
        "methods-synthetic.png", "spectrum-synthetic.png"}
    return report


def test_wheel_holds_the_code_pipelines_and_cluster_profiles(site):
    def names(folder: Path, pattern: str) -> set[str]:
        return {str(p.relative_to(folder)) for p in folder.rglob(pattern)
                if "__pycache__" not in p.parts}

    assert names(site / "dmlfe", "*.py") == names(ROOT / "dmlfe", "*.py")
    for folder in ("pipelines", "cluster_configs"):
        assert names(site / "dmlfe" / folder, "*.yaml") == names(ROOT / folder, "*.yaml")
    assert (site / "bin" / "dmlfe").is_file()


def test_installed_package_finds_its_demo_pipeline_and_local_profile(site, tmp_path):
    code = ("import json, dmlfe, dmlfe.demo, dmlfe.cluster; print(json.dumps({"
            "'module': dmlfe.__file__, 'demo': str(dmlfe.demo.demo_pipeline_path()), "
            "'local': str(dmlfe.cluster.find_profile('local')), "
            "'kind': dmlfe.cluster.load_profile('local')['dmlfe']['cluster']['kind']}))")
    found = json.loads(_run([sys.executable, "-c", code], cwd=tmp_path,
                            env=_env(site)).stdout)
    installed = site.resolve() / "dmlfe"
    assert Path(found["module"]).resolve() == installed / "__init__.py"
    assert Path(found["demo"]).resolve() == installed / "pipelines" / "demo.yaml"
    assert Path(found["local"]).resolve() == installed / "cluster_configs" / "local.yaml"
    assert found["kind"] == "local"


def test_installed_demo_command_runs_its_shipped_pipeline_at_a_small_size(site, tmp_path):
    # the installed demo.yaml, shrunk as tests/test_demo.py shrinks it; the full-size run
    # is test_installed_demo_command_at_full_size
    raw = yaml.safe_load((site / "dmlfe" / "pipelines" / "demo.yaml").read_text())
    raw["datasets"][0]["options"].update(n_docs=600, max_features=200)
    raw["datasets"][0]["chunk_rows"] = 200
    (tmp_path / "pipes").mkdir()
    (tmp_path / "pipes" / "demo.yaml").write_text(yaml.safe_dump(raw))
    work = tmp_path / "work"
    res = _run([*_dmlfe(site), "demo", "--work-dir", str(work), "--workers", "1"],
               cwd=tmp_path, env=_env(site, DMLFE_PIPELINES=str(tmp_path / "pipes")))
    _check_report(work / "report", res.stdout)
