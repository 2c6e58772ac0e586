"""Every ``dmlfe`` subcommand keeps its flags and their choices (issue 37).

The lists below were written from ``dmlfe X --help`` before the common flags moved
into one table and before the choices were read from the parameters' constraints:
any flag lost, added or renamed, or a choice changed, fails here.
"""

from __future__ import annotations

import argparse

import pytest

from dmlfe.cli import build_parser

_WHERE = ["--cluster", "--connect-timeout", "--quiet", "--scheduler", "--verbose",
          "--worker-timeout", "--workers"]
_HELP = ["--debug", "--help", "-h"]

FLAGS: dict[str, list[str]] = {
    "ingest": ["--append", "--chunk-rows", "--feature-map", "--fit-split", "--format",
               "--id-field", "--label-map", "--labels", "--labels-all", "--labels-field",
               "--max-df", "--max-features", "--min-df", "--modapte", "--n-docs",
               "--n-features", "--n-labels", "--ngram-range", "--norm", "--out",
               "--overwrite", "--seed", "--split", "--split-field", "--split-names",
               "--sublinear-tf", "--text-field", "--top-n", "--vectorizer", "--vocab-size",
               "--zero-based", *_WHERE],
    "info": ["--json", "--labels-all"],
    "verify": ["--record"],
    "demo": ["--fresh", "--work-dir", *_WHERE],
    "run": ["--fresh", "--work-dir", *_WHERE],
    "export": ["--feature-map", "--format", "--label-map", "--out", "--overwrite"],
    "clean": ["--dry-run"],
    "import": ["--chunk-rows", "--out", "--overwrite", *_WHERE],
    "cluster": [],
    "cluster check": [],
    "fit": ["--a", "--b", "--base", "--beta", "--classifier", "--combination",
            "--components-dtype", "--constraint", "--dim", "--feature-tau",
            "--feature-weight", "--gamma", "--gamma-x", "--gamma-xy", "--gamma-y",
            "--graph-mode", "--hypergraph", "--knn-search", "--label-components",
            "--label-kernel", "--label-rank", "--label-similarity", "--label-tau",
            "--max-components",
            "--max-dense-features", "--max-dual-samples", "--max-gather-bytes",
            "--max-passes", "--method", "--minkowski-p", "--mu", "--n-iter",
            "--n-neighbors", "--n-oversamples", "--out", "--overwrite",
            "--prototype-selection", "--prototypes", "--random-state", "--rbf-gamma",
            "--reg", "--route", "--scheme", "--similarity", "--solver", "--split", "--tau",
            "--threshold", "--threshold-memory", "--tol", "--unlabelled-split",
            "--unsupervised-weight", "--variant", "--weighting", *_WHERE],
    "transform": ["--format", "--out", "--overwrite", "--split", *_WHERE],
    "embed": ["--format", "--id-field", "--input-format", "--out", "--overwrite",
              "--store", "--text-field", *_WHERE],
    "predict": ["--classifier", "--id-field", "--input-format", "--out", "--overwrite",
                "--split", "--store", "--text-field", "--top-k", *_WHERE],
    "evaluate": ["--all-metrics", "--json", "--k", "--overwrite", "--split", "--xmc",
                 *_WHERE],
}

CHOICES: dict[tuple[str, str], list] = {
    ("ingest", "--format"): ["reuters21578", "jsonl", "parquet", "synthetic", "mulan", "meka",
                             "xmc", "svmlight"],
    ("ingest", "--vectorizer"): ["tfidf", "hashing"],
    ("ingest", "--norm"): ["l2", "l1", "none"],
    ("ingest", "--zero-based"): ["auto", "true", "false"],
    ("export", "--format"): ["parquet", "xmc", "svmlight"],
    ("fit", "--label-kernel"): ["linear", "rbf"],
    # the similarity registry's order (dmlfe.relation.similarities)
    ("fit", "--feature-weight"): ["constant", "cosine", "gaussian", "local_scaling", "eq9"],
    ("fit", "--graph-mode"): ["symmetrized", "mutual"],
    ("fit", "--scheme"): [1, 2, 3],
    ("fit", "--label-similarity"): ["cosine", "hamming", "hamming_exp", "jaccard", "minkowski",
                                    "scaled_sorensen", "sorensen", "tanimoto", "yty"],
    ("fit", "--combination"): ["priority", "hadamard", "weighted_sum"],
    ("fit", "--constraint"): ["orthogonal", "embedding", "degree"],
    ("fit", "--base"): ["fda", "lfda", "mmc", "olpp_r"],
    ("fit", "--weighting"): ["unweighted", "weighted"],
    ("fit", "--hypergraph"): ["clique", "hypergraph"],
    ("fit", "--variant"): ["p", "f"],
    ("fit", "--route"): ["feature", "relation", "dual", "auto"],
    # "auto" added by issue 33 (the default: all at p = n, else stratified)
    ("fit", "--prototype-selection"): ["auto", "all", "random", "stratified", "kmeans++"],
    # with the aliases the Python API has always accepted (eq7, rbf, eq8)
    ("fit", "--similarity"): ["linear", "cosine", "gaussian", "local_scaling",
                              "inverse_normalized_distance", "eq7", "rbf", "eq8", "eq9"],
    ("fit", "--knn-search"): ["auto", "exact", "approximate"],
    ("fit", "--solver"): ["auto", "dense", "randomized", "lanczos"],
    ("fit", "--components-dtype"): ["float64", "float32"],
    # the classifier registry's order
    ("fit", "--classifier"): ["ridge", "mlknn", "knn-vote", "flda"],
    ("transform", "--format"): ["zarr", "parquet"],
    ("embed", "--input-format"): ["jsonl", "parquet", "text"],
    ("embed", "--format"): ["zarr", "parquet"],
    ("predict", "--input-format"): ["jsonl", "parquet", "text"],
    ("predict", "--classifier"): ["ridge", "mlknn", "knn-vote", "br", "flda", "ppml"],
}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(parser: argparse.ArgumentParser, prefix: str = ""
              ) -> dict[str, argparse.ArgumentParser]:
    out = {}
    for name, sub in _subparsers(parser).items():
        key = f"{prefix} {name}".strip()
        out[key] = sub
        out.update(_commands(sub, key))
    return out


COMMANDS = _commands(build_parser())


def test_every_command_is_listed():
    assert sorted(COMMANDS) == sorted(FLAGS)


@pytest.mark.parametrize("command", sorted(FLAGS))
def test_flags_of_each_command(command):
    given = sorted(o for a in COMMANDS[command]._actions for o in a.option_strings)
    assert given == sorted(FLAGS[command] + _HELP)


@pytest.mark.parametrize(("command", "flag"), sorted(CHOICES))
def test_choices_of_each_flag(command, flag):
    action = next(a for a in COMMANDS[command]._actions if flag in a.option_strings)
    assert list(action.choices) == CHOICES[command, flag]


def test_no_other_flag_has_choices():
    with_choices = {(c, a.option_strings[0]) for c, p in COMMANDS.items() for a in p._actions
                    if a.option_strings and a.choices is not None}
    assert with_choices == set(CHOICES)


def test_help_of_every_command_lists_its_flags(capsys):
    for command, flags in FLAGS.items():
        with pytest.raises(SystemExit):
            build_parser().parse_args([*command.split(), "--help"])
        out = capsys.readouterr().out
        for flag in flags:
            assert flag in out, (command, flag)
