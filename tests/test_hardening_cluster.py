"""Issue 35 (hardening), through the command line where a user meets each case: YAML
alias bombs, schedulers without workers or that are not dask, what a LocalCluster
listens on, symbolic links as outputs, bad seeds, outputs checked before the work, and
``dmlfe clean`` on a folder."""

from __future__ import annotations

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
