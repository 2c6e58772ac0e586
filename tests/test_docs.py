"""The documentation site builds with warnings as errors, and its generated pages cover
every registered method, every public name and every command-line option."""

from __future__ import annotations

import argparse
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dmlfe
from dmlfe.cli import build_parser
from dmlfe.methods.registry import all_methods

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs")
    res = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q",
                          "-b", "html", str(ROOT / "docs"), str(out)],
                         capture_output=True, text=True)
    assert res.returncode == 0, f"sphinx-build failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return out


def _page(site: Path, name: str) -> str:
    return html.unescape((site / f"{name}.html").read_text(encoding="utf-8"))


def _text(site: Path, name: str) -> str:
    """A page's text without its markup, whitespace collapsed (rST wraps its lines)."""
    return " ".join(re.sub(r"<[^>]+>", "", _page(site, name)).split())


def _literal(text: str) -> str:
    """How Sphinx writes a word of ``inline literal`` text."""
    return f'<span class="pre">{text}</span>'


def test_every_page_is_built(site):
    for name in ("index", "getting_started", "methods", "api", "cli", "store_format", "formats",
                 "pipeline_format", "cluster_profiles", "shared_cluster", "routes_memory",
                 "examples", "evaluation", "performance", "errors", "contributing", "scaling",
                 "incremental"):
        assert (site / f"{name}.html").is_file(), name


def test_method_table_lists_every_registered_method_with_its_paper(site):
    page = _page(site, "methods")
    for spec in all_methods().values():
        for name in (spec.name, *spec.aliases):
            assert _literal(name) in page, name
        assert f"dmlfe.{spec.estimator}" in page
    # the papers' full citations (journal, year), from the stored copies' headers
    for venue in ("ACM Transactions on Knowledge Discovery from Data",
                  "Knowledge-Based Systems", "Pattern Analysis and Machine Intelligence",
                  "Web-Age Information Management", "arXiv:2403.00307"):
        assert venue in page, venue


def test_api_reference_documents_every_public_name(site):
    page = _page(site, "api")
    for name in dmlfe.__all__:
        if name == "__version__":
            continue
        anchor = f'id="module-dmlfe.{name}"' if name == "metrics" else f'id="dmlfe.{name}"'
        assert anchor in page, name
    # every estimator of the method registry, MOPE's family included (issue 37)
    for spec in all_methods().values():
        assert f'id="dmlfe.{spec.estimator}"' in page, spec.estimator
    # the estimators' methods come from dmlfe's own base class
    for member in ("dmlfe.MVMD.fit", "dmlfe.MVMD.transform", "dmlfe.MultiLabelRidge.predict"):
        assert f'id="{member}"' in page, member


def test_cli_reference_lists_every_subcommand_and_option(site):
    page = _page(site, "cli")
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sub.choices
    for name, command in sub.choices.items():
        assert f"<h2>dmlfe {name}<a" in page, name
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):  # -h: left out on purpose
                continue
            for option in action.option_strings:
                assert _literal(option) in page, f"dmlfe {name} {option}"


def test_store_profiles_routes_and_getting_started_pages(site):
    assert _literal("obsm/Y") in _page(site, "store_format")
    assert _literal("uns/idf") in _page(site, "store_format")
    profiles = _page(site, "cluster_profiles")
    for path in (ROOT / "cluster_configs").glob("*.yaml"):
        assert _literal(f"cluster_configs/{path.name}") in profiles, path.name
    routes = _text(site, "routes_memory")
    for phrase in ("randomized subspace iteration with X read from the store on every pass",
                   "Ingestion streams", "Relation-feature route", "Graph methods"):
        assert phrase in routes, phrase
    assert "cluster check slurm" in profiles
    started = _text(site, "getting_started")
    assert "Install and run the main job on the embedded default" in started


def _fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def test_getting_started_shows_the_readme_two_commands_verbatim(site):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    commands = [block.strip() for block in _fenced(section, "bash")]
    assert len(commands) == 2
    assert commands[1] == (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    page = _text(site, "getting_started")
    for command in commands:
        assert command in page, command


def test_docs_include_nothing_from_the_readme_and_the_readme_links_them():
    for path in (ROOT / "docs").glob("*.rst"):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"include::.*README", text), path.name
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= 8000, f"README.md has {len(readme)} characters (at most 8,000)"
    for target in re.findall(r"\]\((docs/[\w.]+)\)", readme):
        assert (ROOT / target).is_file(), target
    for page in ("routes_memory", "performance", "contributing", "cluster_profiles",
                 "store_format", "methods", "api", "cli"):
        assert f"(docs/{page}.rst)" in readme, page


def test_readme_method_table_names_every_registered_estimator():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("## Methods", 1)[1].split("\n## ", 1)[0]
    for spec in all_methods().values():
        assert f"`{spec.estimator}`" in table, spec.estimator


def test_performance_page_renders_every_result(site):
    page = _text(site, "performance")
    paths = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert paths
    for path in paths:
        result = json.loads(path.read_text(encoding="utf-8"))
        for field in ("title", "benchmark", "date", "corpus"):
            assert result[field] in page, (path.name, field)
        assert f"{result['machine']['cpus']} CPUs" in page
        assert f"benchmarks/results/{path.name}" in page
        assert result["rows"], path.name
        for row in result["rows"]:
            name = row.get("method") or row.get("stage")
            if name is None:  # the scikit-learn reference row
                name = "TruncatedSVD(100)"
            assert name in page, (path.name, name)
            for key in ("median_seconds", "seconds"):
                if row.get(key) is not None:
                    assert f"{row[key]:.2f}" in page, (path.name, name, key)
            if row.get("seconds", 0) is None:  # a fit that did not finish says why
                assert row["status"] in page, (path.name, name)
            if row.get("max_rel_eigenvalue_err") is not None:
                assert f"{row['max_rel_eigenvalue_err']:.1e}" in page, (path.name, name)


def test_pipeline_format_page_lists_every_key(site):
    from dmlfe.ingestion import FORMATS, format_options
    from dmlfe.pipeline.config import CLASSIFIERS, PIPELINE_KEYS, classifier_params

    page = _page(site, "pipeline_format")
    text = " ".join(re.sub(r"<[^>]+>", "", page).replace("\u2019", "'").split())
    for where, keys in PIPELINE_KEYS.items():
        if where:
            assert _literal(where) in page, where
        for key in keys:
            if not key.name.startswith("("):
                assert _literal(key.name) in page, f"{where}.{key.name}"
            for told in (key.type, key.default, key.meaning):
                assert " ".join(told.replace("``", "").split()) in text, f"{where}.{key.name}"
    for fmt in FORMATS:
        for option in format_options(fmt):
            assert _literal(option) in page, option
    for name in CLASSIFIERS:
        for param in classifier_params(name):
            assert _literal(param) in page, f"{name}.{param}"


def _key_paths(value, where: str = ""):
    """(place in PIPELINE_KEYS, key) of every mapping key in a parsed pipeline file."""
    if isinstance(value, list):
        for item in value:
            yield from _key_paths(item, f"{where}[i]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield where, key
            yield from _key_paths(item, f"{where}.{key}" if where else key)


def test_shipped_pipelines_use_declared_keys_only():
    """A key the shipped pipelines use is declared (so documented), at its place."""
    import yaml

    from dmlfe.pipeline.config import PIPELINE_KEYS, keys_at

    free = ("options", "defaults", "stratified")  # options, parameters and role shares
    files = sorted((ROOT / "pipelines").glob("*.yaml"))
    assert files
    for path in files:
        for where, key in _key_paths(yaml.safe_load(path.read_text())):
            if where.endswith(free) or where.startswith(("methods", "classifiers",
                                                         "selection.selectors",
                                                         "selection.classifier")):
                continue  # generated from the registries, checked above
            assert where in PIPELINE_KEYS and key in keys_at(where), f"{path.name}: {where}.{key}"


def test_contributing_page_lists_every_registered_reader(site):
    from dmlfe.readers.registry import all_readers

    page = _page(site, "contributing")
    text = _text(site, "contributing")
    for spec in all_readers().values():
        assert _literal(spec.name) in page, spec.name
        assert " ".join(spec.description.split()) in text, spec.name
        for p in spec.options:
            assert _literal(p.name) in page, (spec.name, p.name)
