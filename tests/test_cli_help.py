"""Every command-line option says what it does, every subcommand shows an example, and
the pipeline and cluster YAML files are found where an install puts them (the wheel
itself: tests/test_install.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from dmlfe.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("name", sorted(_subcommands()))
def test_every_option_has_help_and_the_command_an_example(name):
    cmd = _subcommands()[name]
    missing = [a.option_strings[0] if a.option_strings else a.dest for a in cmd._actions
               if not a.help]
    assert not missing, f"dmlfe {name}: options without help: {missing}"
    assert cmd.epilog and f"dmlfe {name}" in cmd.epilog, f"dmlfe {name}: no example epilog"
    assert f"dmlfe {name}" in cmd.format_help()


def test_demo_and_profiles_are_found_in_an_installed_tree(monkeypatch, tmp_path):
    import dmlfe.cluster as cluster
    import dmlfe.demo as demo

    # as from site-packages: no source tree above the package
    monkeypatch.setattr(demo, "_SOURCE_PIPELINES", tmp_path / "absent")
    monkeypatch.setattr(demo, "_INSTALLED_PIPELINES", ROOT / "pipelines")
    assert demo.demo_pipeline_path() == ROOT / "pipelines" / "demo.yaml"
    monkeypatch.setattr(cluster, "_SOURCE_CONFIGS", tmp_path / "absent")
    monkeypatch.setattr(cluster, "_INSTALLED_CONFIGS", ROOT / "cluster_configs")
    monkeypatch.chdir(tmp_path)
    assert cluster.find_profile("local") == ROOT / "cluster_configs" / "local.yaml"


def test_quiet_keeps_stdout_and_stderr_empty_and_a_started_cluster_shows_its_dashboard(
        tmp_path, capsys):
    from dmlfe.cli import main
    from dmlfe.cluster import get_client

    assert main(["ingest", "--format", "synthetic", "--out", str(tmp_path / "s.zarr"),
                 "--n-docs", "50", "--workers", "1", "--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == ""  # no progress, no dashboard address, no dask log lines
    assert out == ""  # and no result summary
    assert (tmp_path / "s.zarr").is_dir()
    with get_client(announce=True, n_workers=1, processes=False) as client:
        # where the dashboard listens (loopback), not the host of dask's inproc:// address
        port = client.dashboard_link.rsplit(":", 1)[1]
        assert f"dask dashboard: http://127.0.0.1:{port}\n" == capsys.readouterr().err
