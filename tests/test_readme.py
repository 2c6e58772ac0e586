"""README.md's tour runs as written: its command-line block and its Python block, on a
small JSON Lines corpus shaped as the README describes, on a real LocalCluster."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest

from dmlfe.cli import main as cli_main
from dmlfe.projection import read_embeddings
from dmlfe.store import open_store

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("grain", "trade", "crude", "ship")


def _tour() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split("## A tour", 1)[1].split("\n## ", 1)[0]


def _block(lang: str) -> str:
    blocks = re.findall(rf"```{lang}\n(.*?)```", _tour(), flags=re.S)
    assert blocks, f"README.md's tour has no {lang} block"
    return blocks[0]


def _commands() -> list[list[str]]:
    """The tour's command lines (continuations joined, comments dropped)."""
    text = _block("bash").replace("\\\n", " ")
    return [shlex.split(line, comments=True) for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _words(label: str) -> list[str]:
    return [f"{label}{i}" for i in range(25)]


def _write_corpus(folder: Path, n: int = 240, seed: int = 3) -> None:
    """corpus.jsonl as the README shows it (id, text, labels, split) and new.txt: each
    document's words come from its labels' own vocabularies and a common one."""
    rng = np.random.default_rng(seed)
    common = [f"the{i}" for i in range(40)]
    example = json.loads(_block("json"))
    assert set(example) == {"id", "text", "labels", "split"}
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as f:
        for i in range(n):
            labels = list(rng.choice(LABELS, size=int(rng.integers(1, 3)), replace=False))
            words = [w for lb in labels for w in rng.choice(_words(lb), 12)]
            words += list(rng.choice(common, 15))
            rng.shuffle(words)
            record = {"id": f"d{i}", "text": " ".join(words), "labels": labels,
                      "split": "train" if i < 0.8 * n else "test"}
            f.write(json.dumps(record) + "\n")
    with open(folder / "more.jsonl", "w", encoding="utf-8") as f:  # appended later
        for i in range(n, n + 20):
            labels = [str(rng.choice(LABELS))]
            record = {"id": f"d{i}", "text": " ".join(rng.choice(_words(labels[0]), 12)),
                      "labels": labels, "split": "test"}
            f.write(json.dumps(record) + "\n")
    (folder / "new.txt").write_text(
        "".join(" ".join(rng.choice(_words(lb), 15)) + "\n" for lb in LABELS),
        encoding="utf-8")


def test_readme_tour_commands_run_as_written(tmp_path, monkeypatch, cluster_client):
    _write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    commands = _commands()
    assert [c[:2] for c in commands][:1] == [["dmlfe", "ingest"]]
    for command in commands:
        assert command[0] == "dmlfe", command
        args = [*command[1:], "--scheduler", cluster_client.scheduler.address]
        assert cli_main(args) == 0, " ".join(command)
    # what the tour says each step leaves behind
    n_test = sum(json.loads(line)["split"] == "test"
                 for line in (tmp_path / "corpus.jsonl").read_text().splitlines())
    Z = read_embeddings(tmp_path / "test-embeddings.zarr")
    assert Z.shape == (n_test, 8) and np.isfinite(Z).all()
    assert np.abs(Z).sum(axis=1).min() > 0  # every row written (no chunk left as zeros)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0.5 < metrics["metrics"]["micro_f1"] <= 1.0, metrics["metrics"]
    scored = (tmp_path / "test-labels.jsonl").read_text().splitlines()
    assert len(scored) == n_test
    store = open_store(tmp_path / "corpus.zarr")
    assert store.n_docs == 240 + 20 and [e["kind"] for e in store.history()] == [
        "ingest", "append"]
    records = [json.loads(line) for line in (tmp_path / "labels.jsonl").read_text().splitlines()]
    assert len(records) == len(LABELS)
    for record in records:
        assert set(record["scores"]) == set(LABELS)
    # each new document is made of one label's own words: that label is its top score
    top = [max(r["scores"], key=r["scores"].get) for r in records]
    assert sum(t == lb for t, lb in zip(top, LABELS, strict=True)) >= 3, top


def test_readme_tour_python_runs_as_written(tmp_path, monkeypatch, cluster_client, capsys):
    _write_corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    exec(compile(_block("python"), "README.md", "exec"), {})
    f1 = float(capsys.readouterr().out.split()[-1])
    assert 0.5 < f1 <= 1.0, f1  # labels that the words determine
    assert (tmp_path / "mvmd.model").is_dir()


@pytest.mark.parametrize("step", ["ingest", "fit", "evaluate", "transform", "predict"])
def test_readme_tour_has_each_step(step):
    assert any(c[1] == step for c in _commands()), step
