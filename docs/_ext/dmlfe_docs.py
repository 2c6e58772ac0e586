"""Pages of the dmlfe documentation that are generated from the code, so they cannot go
stale: the method table (from the method registry), the API reference (from
``dmlfe.__all__``), the command-line reference (from the argparse parser), the
list of cluster profiles (from the files in ``cluster_configs/``), the cluster kinds (from
their registry) and the performance
tables (from the benchmarks' results in ``benchmarks/results/``).

Each directive emits reStructuredText that Sphinx then parses as if it were written in
the page. A method whose reference names no paper of :data:`PAPERS` is an error, and
with ``-W`` it fails the build.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import textwrap
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles

ROOT = Path(__file__).resolve().parents[2]

#: The papers dmlfe implements (copies in shared/seeds, see its README), with the
#: strings a method's ``reference`` uses for them.
PAPERS: dict[str, tuple[str, str]] = {
    "mddm": ("Zhang2010",
             "Y. Zhang and Z.-H. Zhou. Multilabel dimensionality reduction via dependence "
             "maximization. *ACM Transactions on Knowledge Discovery from Data* 4(3), "
             "article 14, 21 pages, October 2010. doi:10.1145/1839490.1839495."),
    "mvmd": ("Xu2016",
             "J. Xu, J. Liu, J. Yin and C. Sun. A multi-label feature extraction algorithm "
             "via maximizing feature variance and feature-label dependence simultaneously. "
             "*Knowledge-Based Systems* 98, 172-184, 2016. doi:10.1016/j.knosys.2016.01.032."),
    "mope": ("Mu2012",
             "T. Mu, J. Y. Goulermas, J. Tsujii and S. Ananiadou. Proximity-based frameworks "
             "for generating embeddings from multi-output data. *IEEE Transactions on "
             "Pattern Analysis and Machine Intelligence* 34(11), 2216-2232, November 2012."),
    "Sun, Ji & Ye 2008": (
        "Sun2008",
        "L. Sun, S. Ji and J. Ye. Hypergraph spectral learning for multi-label "
        "classification. In *Proceedings of the 14th ACM SIGKDD International Conference "
        "on Knowledge Discovery and Data Mining*, 668-676, 2008."),
}
#: Papers of the classifiers and the feature selection (not in the method registry).
OTHER_PAPERS: dict[str, tuple[str, str]] = {
    "ppml": ("Ma2014",
             "Z. Ma, H. Liu, K. Su and Z. Zheng. PPML: Penalized partial least squares "
             "discriminant analysis for multi-label learning. In *Web-Age Information "
             "Management (WAIM 2014)*, Lecture Notes in Computer Science 8485, 645-656, "
             "Springer, 2014. doi:10.1007/978-3-319-08010-9_69."),
    "grroor": ("Xu2024",
               "X. Xu, F. Wei, T. Jia, L. Zhuo, F. Nie and X. Wu. Embedded multi-label "
               "feature selection via orthogonal regression. arXiv:2403.00307, 2024 (the "
               "version dmlfe follows; a journal version appeared in *Pattern Recognition* "
               "163, 111477, 2025)."),
    "mlknn": ("Zhang2007",
              "M.-L. Zhang and Z.-H. Zhou. ML-KNN: A lazy learning approach to multi-label "
              "learning. *Pattern Recognition* 40(7), 2038-2048, 2007."),
}
#: Classes outside the registry and the paper each follows.
OTHER_CLASSES = [
    ("PPML", "ppml", "classifier: penalised PLS discriminant analysis (Alg. 1)"),
    ("MLkNN", "mlknn", "classifier: multi-label k-nearest neighbours"),
    ("GRROOR", "grroor", "feature selection by orthogonal regression (eq. 16, metric eq. 38)"),
]


def _rst(directive: Directive, lines: list[str]) -> list:
    """Parse generated reST in the directive's place (section titles allowed)."""
    source = directive.state.document.current_source or "<generated>"
    content = StringList()
    for i, line in enumerate(lines):
        content.append(line, source, i)
    node = nodes.section()
    node.document = directive.state.document
    nested_parse_with_titles(directive.state, content, node)
    return node.children


def _cell(text: str) -> str:
    return " ".join(text.split())


def _list_table(header: list[str], rows: list[list[str]], widths: str = "auto") -> list[str]:
    out = [".. list-table::", "   :header-rows: 1", f"   :widths: {widths}", ""]
    for row in [header, *rows]:
        out.append(f"   * - {_cell(row[0]) or ' '}")
        out += [f"     - {_cell(c) or ' '}" for c in row[1:]]
    out.append("")
    return out


def _papers_in(reference: str) -> list[str]:
    """Citation labels of the papers a registry reference names."""
    found = []
    for key, (label, _) in PAPERS.items():
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", reference):
            found.append(label)
    return found


def _bibliography(papers: dict[str, tuple[str, str]]) -> list[str]:
    out = []
    for label, text in papers.values():
        out += [f".. [{label}] {text}", ""]
    return out


class MethodTable(Directive):
    """``.. dmlfe-methods::`` -- every registered method with its paper and equations."""

    def run(self):
        from dmlfe.estimators import estimator_class
        from dmlfe.fit.plan import _dual_ok  # the planner's own rule
        from dmlfe.methods.registry import all_methods

        rows = []
        for spec in all_methods().values():
            labels = _papers_in(spec.reference)
            if not labels:
                raise self.error(f"method {spec.name}: its reference {spec.reference!r} names "
                                 f"none of the papers {sorted(PAPERS)}; add it to "
                                 "docs/_ext/dmlfe_docs.py PAPERS")
            estimator = f":class:`dmlfe.{spec.estimator}`"
            if spec.variant is not None:
                estimator += f" (``variant='{spec.variant}'``)"
            names = ", ".join(f"``{n}``" for n in (spec.name, *spec.aliases))
            if spec.needs_graph:
                data = "K-NN graph, X^T A X pass"
            elif spec.needs_kernel:
                data = "relation route only (p x p kernel)"
            elif spec.lowrank_only:
                data = "X^T Y only (thin SVD)"
            elif spec.needs_weighted_xtx:
                data = "X^T diag(w) X"
            else:
                data = "X^T X" + (", or matrix-free" if spec.operator_form else "")
            params = ", ".join(f"``{p.name}``" for p in spec.parameters) or "--"
            # the first paragraph of its class's docstring (written there, or the registry's)
            summary = inspect.getdoc(estimator_class(spec.estimator)).split("\n\n")[0]
            rows.append([names, estimator, summary,
                         "yes" if spec.supervised else "no", data,
                         "yes" if _dual_ok(spec) else "no", params,
                         f"{spec.reference} " + " ".join(f"[{lb}]_" for lb in labels)])
        table = _list_table(
            ["``--method``", "estimator", "what it is", "supervised", "needs",
             "dual route", "parameters", "paper"], rows)
        other = _list_table(
            ["class", "what it is", "paper"],
            [[f":class:`dmlfe.{cls}`", what, f"[{OTHER_PAPERS[key][0]}]_"]
             for cls, key, what in OTHER_CLASSES])
        return _rst(self, [*table, "Classifiers and feature selection", "-" * 33, "",
                           *other, "References", "-" * 10, "",
                           *_bibliography(PAPERS), *_bibliography(OTHER_PAPERS)])


class ApiReference(Directive):
    """``.. dmlfe-api::`` -- autodoc of every public name in ``dmlfe.__all__``."""

    def run(self):
        import dmlfe

        classes, functions, modules = [], [], []
        for name in sorted(dmlfe.__all__, key=str.lower):
            obj = getattr(dmlfe, name)
            if inspect.isclass(obj):
                classes.append(name)
            elif inspect.ismodule(obj):
                modules.append(name)
            elif callable(obj):
                functions.append(name)
        lines = ["Estimators and classifiers", "-" * 26, ""]
        for name in classes:
            lines += [f".. autoclass:: dmlfe.{name}", "   :members:",
                      "   :inherited-members:", ""]
        lines += ["Functions", "-" * 9, ""]
        lines += [f".. autofunction:: dmlfe.{name}" for name in functions]
        lines.append("")
        for name in modules:
            title = f"``dmlfe.{name}``"
            lines += [title, "-" * len(title), "", f".. automodule:: dmlfe.{name}",
                      "   :members:", ""]
        return _rst(self, lines)


def _skip_foreign_member(app, what, name, obj, skip, options):
    """Members inherited from scikit-learn (fit_transform, score, set_output...) are
    documented by scikit-learn; the API pages show those dmlfe itself defines."""
    target = obj.fget if isinstance(obj, property) else obj
    module = getattr(target, "__module__", None) or ""
    if what == "class" and module and not module.startswith("dmlfe"):
        return True
    return None


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> list[str]:
    """Each argument group of a parser as a definition list (argparse's own grouping)."""
    out: list[str] = []
    for group in parser._action_groups:
        # the subcommands get sections of their own
        actions = [a for a in group._group_actions if a.help is not argparse.SUPPRESS
                   and not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)]
        if not actions:
            continue
        out += [f"**{group.title}**", ""]
        for a in actions:
            if a.option_strings:
                metavar = ""
                if a.nargs != 0:
                    metavar = " " + (a.metavar or (("{" + ",".join(map(str, a.choices)) + "}")
                                                   if a.choices else a.dest.upper()))
                term = ", ".join(f"``{o}{metavar}``" for o in a.option_strings)
            else:
                term = f"``{a.metavar or a.dest}``"
            text = (a.help or "") % {"default": a.default, "prog": parser.prog} \
                if "%(" in (a.help or "") else (a.help or "")
            out += [term, "   " + _cell(text).replace("*", r"\*"), ""]
    return out


class CliReference(Directive):
    """``.. dmlfe-cli::`` -- every subcommand of ``dmlfe``, from the argparse parser."""

    def run(self):
        from dmlfe.cli import build_parser

        parser = build_parser()
        lines = ["::", "", textwrap.indent(parser.format_usage().strip(), "   "), ""]
        lines += _options(parser)
        for name, sub in _subcommands(parser).items():
            title = f"dmlfe {name}"
            lines += [f".. _cli-{name}:", "", title, "-" * len(title), ""]
            if sub.description:
                lines += [_cell(sub.description), ""]
            lines += ["::", "", textwrap.indent(sub.format_usage().strip(), "   "), ""]
            lines += _options(sub)
            if sub.epilog:
                example = sub.epilog.removeprefix("example:").strip()
                lines += ["Example::", "", "   " + example, ""]
        return _rst(self, lines)


class ReaderTable(Directive):
    """``.. dmlfe-readers::`` -- every corpus format, from the reader registry
    (:mod:`dmlfe.readers.registry`): its kind, its options with their flags, what it is."""

    def run(self):
        from dmlfe.readers.registry import all_readers

        rows = []
        for spec in all_readers().values():
            options = [f"``{p.name}``" + (f" (``{p.option}``)" if p.flag else "")
                       for p in spec.options]
            rows.append([f"``{spec.name}``", spec.kind, ", ".join(options) or "--",
                         spec.description])
        return _rst(self, _list_table(["format", "kind", "options (flag)", "what it reads"],
                                      rows, "15 10 40 35"))


class ClusterProfiles(Directive):
    """``.. dmlfe-cluster-profiles::`` -- each profile in ``cluster_configs/``, in full."""

    def run(self):
        lines: list[str] = []
        for path in sorted((ROOT / "cluster_configs").glob("*.y*ml")):
            title = f"``{path.stem}``"
            lines += [title, "^" * len(title), "",
                      f"``--cluster {path.stem}`` (``cluster_configs/{path.name}``):", "",
                      f".. literalinclude:: /../cluster_configs/{path.name}",
                      "   :language: yaml", ""]
        if not lines:
            raise self.error(f"no cluster profiles in {ROOT / 'cluster_configs'}")
        return _rst(self, lines)


def _seconds(v: float | None) -> str:
    return "" if v is None else f"{v:.2f}"


def _mib(v: float | None) -> str:
    return "" if v is None else f"{v:,.0f}"


def _fits_table(rows: list[dict]) -> list[str]:
    svd = next((r for r in rows if r["kind"] == "sklearn"), None)
    body = []
    for r in rows:
        name = "TruncatedSVD(100)" if r["kind"] == "sklearn" else f"``{r['method']}``"
        ratio = ""
        if svd is not None and r["kind"] != "sklearn" and r["median_seconds"]:
            ratio = f"{svd['median_seconds'] / r['median_seconds']:.1f}"
        body.append([name, _seconds(r["median_seconds"]),
                     f"{_seconds(r['min_seconds'])}-{_seconds(r['max_seconds'])}",
                     _mib(r["peak_rss_total_mib_max"]), ratio])
    return _list_table(["fit", "median (s)", "range (s)", "peak memory (MiB)",
                        "TruncatedSVD's median / this"], body)


def _plain(text: str) -> str:
    """Recorded text as reST text: ``|x|`` (a magnitude) is not a substitution."""
    return text.replace("|", r"\|").replace("*", r"\*")


def _exactness_table(rows: list[dict]) -> list[str]:
    return _list_table(
        ["method", "route", "solver", "reference", "largest relative eigenvalue error"],
        [[f"``{r['method']}``", r["route"], f"``{r['solver']}``", r["reference"],
          _plain(f"{r['max_rel_eigenvalue_err']:.1e} (of the {r['relative_to']})"
                 + (f"; {r['note']}" if r.get("note") else ""))] for r in rows])


def _stages_table(rows: list[dict]) -> list[str]:
    body = []
    for r in rows:
        solve = ""
        if "solver" in r:
            solve = f"``{r['solver']}``, d = {r['d']}, {r['n_passes']} passes"
            if r.get("max_residual") is not None:
                solve += f", ``max_residual_`` {r['max_residual']:.1e}"
        body.append([r["stage"], _seconds(r["seconds"]), _mib(r["peak_rss_total_mib"]),
                     _mib(r["peak_rss_driver_mib"]), solve])
    return _list_table(["stage", "seconds", "peak memory, all (MiB)",
                        "peak memory, driver (MiB)", "solve"], body)


def _workers_table(rows: list[dict]) -> list[str]:
    body = []
    for r in rows:
        residual = "" if r["max_residual"] is None else f"{r['max_residual']:.1e}"
        speedup = "" if r["speedup_vs_1"] is None else f"{r['speedup_vs_1']:.2f}"
        passes = "" if r["n_passes"] is None else str(r["n_passes"])
        body.append([f"{r['docs']:,}", f"``{r['method']}``", r["code"], str(r["workers"]),
                     _seconds(r["seconds"]) or r.get("status", ""), speedup, passes,
                     residual])
    return _list_table(["documents", "method", "code", "workers", "seconds",
                        "speed-up over 1 worker", "passes", "``max_residual_``"], body)


def _refits_table(rows: list[dict]) -> list[str]:
    body = []
    for r in rows:
        passes = "" if r.get("passes") is None else \
            f"{r['passes']['warm']} / {r['passes']['fresh']}"
        body.append([f"``{r['method']}``", r["store"], _seconds(r["refit_seconds"]),
                     _seconds(r["fresh_seconds"]),
                     f"{r['refit_seconds'] / r['fresh_seconds']:.2f}",
                     f"{r['rows_read']['refit']:,} / {r['rows_read']['fresh']:,}", passes,
                     f"{r['eigenvalues_max_rel_diff']:.1e}"])
    return _list_table(["fit", "store", "refit (s)", "fresh fit (s)", "refit / fresh",
                        "rows read, refit / fresh", "passes, refit / fresh",
                        "eigenvalues' largest relative difference"], body)


def _prototypes_table(rows: list[dict]) -> list[str]:
    return _list_table(
        ["method", "prototypes", "p", "selection", "seconds", "peak memory (MiB)",
         "average precision", "micro-F1", "macro-F1", "one-error"],
        [[f"``{r['method']}``", r["variant"], str(r["p"]), r["prototype_selection"],
          _seconds(r["seconds"]), _mib(r["peak_rss_total_mib"]),
          *(f"{r[m]:.4f}" for m in ("average_precision", "micro_f1", "macro_f1",
                                    "one_error"))] for r in rows])


def _labels_table(rows: list[dict]) -> list[str]:
    """``benchmarks/labels.py``'s sweep: each fit at each label count, with its ratio to
    the same method's fit at the fewest labels."""
    first: dict[str, float] = {}
    for r in sorted(rows, key=lambda r: r["q"]):
        if r["status"] == "ok":
            first.setdefault(r["method"], r["seconds"])
    body = []
    for r in rows:
        ok = r["status"] == "ok"
        base = first.get(r["method"])
        ratio = f"{r['seconds'] / base:.2f}" if ok and base else ""
        what = "" if ok else _plain(f"{r['status']}: {r.get('error') or ''}")
        body.append([f"``{r['method']}``", f"{r['q']:,}", _seconds(r["seconds"]), ratio,
                     _mib(r.get("peak_mib")), what])
    return _list_table(["fit", "labels", "seconds (of the process, for a refusal)",
                        "/ seconds at the fewest labels",
                        "peak memory, driver and workers (MiB)", "refused or stopped"],
                       body)


def _label_steps_table(rows: list[dict]) -> list[str]:
    """``benchmarks/labels.py --parts million``: each step's seconds and peak memory."""
    body = [[r["step"], _seconds(r.get("seconds")), _mib(r.get("peak_mib")),
             _plain(r["status"] + (f": {r['error']}" if r.get("error") else ""))]
            for r in rows]
    return _list_table(["step", "seconds", "peak memory, the process and its workers (MiB)",
                        "status"], body)


def _label_quality_table(rows: list[dict]) -> list[str]:
    """``benchmarks/labels.py --parts quality``: the measures of each vote or tool."""
    keys = ("P@1", "P@3", "P@5", "nDCG@5", "PSP@5")
    body = [[_plain(r.get("features", r["method"])),
             *[("" if r.get(k) is None else f"{r[k]:.4f}") for k in keys],
             _seconds(r.get("seconds")),
             "" if r["status"] == "ok" else _plain(f"{r['status']}: {r.get('error') or ''}")]
            for r in rows]
    return _list_table(["features (classifier)", *keys, "seconds (classifier)", "failed"],
                       body)


#: How each ``kind`` of results file is rendered.
RESULT_TABLES = {"fits": _fits_table, "exactness": _exactness_table,
                 "stages": _stages_table, "workers": _workers_table,
                 "refits": _refits_table, "prototypes": _prototypes_table,
                 "labels": _labels_table, "label-steps": _label_steps_table,
                 "label-quality": _label_quality_table}


class Performance(Directive):
    """``.. dmlfe-performance:: [NAME ...]`` -- results files of ``benchmarks/results/``
    (every one, as sections, without arguments; the named ones, under rubrics, with):
    what was run, on which machine and when, and its table."""

    optional_arguments = 8

    def run(self):
        folder = ROOT / "benchmarks" / "results"
        paths = ([folder / f"{name}.json" for name in self.arguments] if self.arguments
                 else sorted(folder.glob("*.json")))
        if not paths:
            raise self.error(f"no results in {folder}")
        for path in paths:
            if not path.is_file():
                raise self.error(f"no results file {path}")
        lines: list[str] = []
        for path in paths:
            result = json.loads(path.read_text(encoding="utf-8"))
            table = RESULT_TABLES.get(result.get("kind"))
            if table is None:
                raise self.error(f"{path.name}: kind {result.get('kind')!r} is not one of "
                                 f"{sorted(RESULT_TABLES)} (docs/_ext/dmlfe_docs.py)")
            self.state.document.settings.record_dependencies.add(str(path))
            machine = result["machine"]
            title = result["title"]
            heading = ([f".. rubric:: {title}"] if self.arguments
                       else [title, "-" * len(title)])
            lines += [*heading, "",
                      f"``{result['benchmark']}`` on {result['date']}, "
                      f"{machine['description']} ({machine['cpus']} CPUs"
                      + (f"; load {machine['loadavg_at_start'][0]:.1f} at the start, "
                         f"{machine['loadavg_at_end'][0]:.1f} at the end"
                         if "loadavg_at_start" in machine else "")
                      + f"). {result['corpus']}; {result['settings']}. "
                      f"From ``benchmarks/results/{path.name}`` "
                      f"(copied from ``{result['source']}``).", "",
                      *table(result["rows"])]
        return _rst(self, lines)


class ClusterKinds(Directive):
    """``.. dmlfe-cluster-kinds::`` -- every registered cluster kind, its ``dmlfe.cluster``
    settings and the extra it needs (:func:`dmlfe.cluster.profiles.all_cluster_kinds`)."""

    def run(self):
        from dmlfe.cluster.profiles import all_cluster_kinds

        rows = []
        for kind in all_cluster_kinds().values():
            fields = [f"``{p.name}``" + (" (required)" if p.name in kind.required else "")
                      for p in kind.all_fields()]
            extra = f"``pip install 'dmlfe[{kind.extra[1]}]'``" if kind.extra else "(none)"
            rows.append([f"``{kind.name}``", ", ".join(fields), extra])
        return _rst(self, _list_table(["kind", "``dmlfe.cluster`` settings", "extra"], rows,
                                      "15 55 30"))


class PipelineKeys(Directive):
    """``.. dmlfe-pipeline-keys::`` -- every key of a pipeline file, from
    :data:`dmlfe.pipeline.config.PIPELINE_KEYS`, the ingest options of each format and
    the classifiers' parameters."""

    def run(self):
        from dmlfe.cli import build_parser
        from dmlfe.ingestion import format_options
        from dmlfe.pipeline.config import CLASSIFIERS, PIPELINE_KEYS, classifier_params
        from dmlfe.readers.registry import reader_names

        lines: list[str] = []
        for where, keys in PIPELINE_KEYS.items():
            title = f"``{where}``" if where else "Top level"
            lines += [title, "^" * len(title), ""]
            lines += _list_table(["key", "type", "default", "meaning"],
                                 [[f"``{k.name}``" if not k.name.startswith("(") else k.name,
                                   k.type, k.default, k.meaning] for k in keys], "15 15 15 55")
            if where == "datasets[i]":
                lines += self._options(build_parser(), reader_names(), format_options)
        lines += ["Classifier parameters", "^" * 21, "",
                  "A ``classifiers[i]`` (or ``selection.classifier``) mapping may give these "
                  "parameters of its classifier (defaults in parentheses where the pipeline "
                  "sets its own):", ""]
        rows = []
        for name, (cls, defaults) in CLASSIFIERS.items():
            params = [f"``{p}``" + (f" ({defaults[p]})" if p in defaults else "")
                      for p in sorted(classifier_params(name))]
            rows.append([f"``{name}``", f":class:`dmlfe.{cls}`", ", ".join(params) or "--"])
        lines += _list_table(["name", "class", "parameters"], rows, "15 25 60")
        return _rst(self, lines)

    @staticmethod
    def _options(parser, formats, format_options) -> list[str]:
        """``datasets[i].options``: each ingest option, its formats and the help of its
        ``dmlfe ingest`` flag (whose dest is the option's name)."""
        ingest = _subcommands(parser)["ingest"]
        helps = {a.dest: (a.option_strings[0], a.help) for a in ingest._actions
                 if a.option_strings}
        formats_of: dict[str, list[str]] = {}
        for fmt in formats:
            for opt in sorted(format_options(fmt)):
                formats_of.setdefault(opt, []).append(fmt)
        rows = []
        for opt, fmts in sorted(formats_of.items()):
            if opt in helps:
                option, text = helps[opt]
                meaning = f"{text} (``dmlfe ingest {option}``)"
            else:
                meaning = "see :func:`dmlfe.ingest` (no command-line flag)"
            rows.append([f"``{opt}``", ", ".join(fmts), meaning])
        title = "``datasets[i].options``"
        return [title, "^" * len(title), "",
                "The options of :func:`dmlfe.ingest` for the data set's format (the flags of "
                "``dmlfe ingest`` without the dashes; lists for ranges, a mapping for "
                "``split_names``):", "",
                *_list_table(["option", "formats", "meaning"], rows, "15 20 65")]


def setup(app):
    app.add_directive("dmlfe-pipeline-keys", PipelineKeys)
    app.add_directive("dmlfe-methods", MethodTable)
    app.add_directive("dmlfe-api", ApiReference)
    app.add_directive("dmlfe-cli", CliReference)
    app.add_directive("dmlfe-readers", ReaderTable)
    app.add_directive("dmlfe-cluster-profiles", ClusterProfiles)
    app.add_directive("dmlfe-cluster-kinds", ClusterKinds)
    app.add_directive("dmlfe-performance", Performance)
    app.connect("autodoc-skip-member", _skip_foreign_member)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
