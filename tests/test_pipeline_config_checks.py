"""The pipeline file's integer, mapping and share checks (constraint objects of
dmlfe.params since issue 37) name the file and key and say what is wrong, in the words
they always used."""

from __future__ import annotations

import copy

import pytest

from dmlfe.pipeline.config import PipelineConfigError, parse_config

BASE = {
    "name": "t",
    "datasets": [{"name": "syn", "format": "synthetic", "chunk_rows": 100,
                  "options": {"n_docs": 50}, "split": {"train": "train", "test": "test"}}],
    "methods": ["pca"],
}


def _with(change):
    raw = copy.deepcopy(BASE)
    change(raw)
    return raw


def test_the_base_file_is_valid():
    cfg = parse_config(copy.deepcopy(BASE), "p.yaml")
    assert cfg.datasets[0].chunk_rows == 100


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r["datasets"][0].update(chunk_rows=0),
     "p.yaml: datasets[0].chunk_rows: must be an integer >= 1, got 0"),
    (lambda r: r["datasets"][0].update(chunk_rows=True),
     "p.yaml: datasets[0].chunk_rows: must be an integer >= 1, got True"),
    (lambda r: r["datasets"][0].update(chunk_rows=2.0),
     "p.yaml: datasets[0].chunk_rows: must be an integer >= 1, got 2.0"),
    (lambda r: r["datasets"][0].update(options=[1]),
     "p.yaml: datasets[0].options: must be a mapping, got list [1]"),
    (lambda r: r.update(datasets=["syn"]),
     "p.yaml: datasets[0]: must be a mapping, got str 'syn'"),
    (lambda r: r["datasets"][0].update(split={"stratified": {"train": 0.5, "test": 0}}),
     "p.yaml: datasets[0].split.stratified.test: must be a positive number (the part's "
     "share), got 0"),
    (lambda r: r["datasets"][0].update(split={"stratified": {"train": True, "test": 1}}),
     "p.yaml: datasets[0].split.stratified.train: must be a positive number (the part's "
     "share), got True"),
    (lambda r: r["datasets"][0].update(split={"stratified": {"train": 1, "test": 1},
                                              "seed": -1}),
     "p.yaml: datasets[0].split.seed: must be an integer >= 0, got -1"),
    (lambda r: r.update(select=3), "p.yaml: select: must be a mapping, got int 3"),
])
def test_bad_values_are_named_with_their_key(change, message):
    with pytest.raises(PipelineConfigError) as info:
        parse_config(_with(change), "p.yaml")
    assert str(info.value) == message


def test_integers_are_returned_as_int():
    import numpy as np
    cfg = parse_config(_with(lambda r: r["datasets"][0].update(
        chunk_rows=np.int64(7), split={"stratified": {"train": 1, "test": 1}, "seed": 3})),
        "p.yaml")
    assert type(cfg.datasets[0].chunk_rows) is int and cfg.datasets[0].chunk_rows == 7
    assert cfg.datasets[0].split.seed == 3
