"""Sphinx configuration of the dmlfe documentation (build: see docs/README.md).

Why Sphinx with autodoc and numpydoc rather than mkdocs with mkdocstrings: every
docstring in dmlfe is numpy-style reStructuredText (``Parameters`` / ``Returns`` sections,
``:class:`` roles, reST tables such as the store layout in ``dmlfe.store.layout``), and
the estimators' docstrings are generated in that form from the method registry. numpydoc
is the scientific-Python standard reader of exactly that, and autodoc imports the real
objects, so the API pages show the generated docstrings. The pages generated from the
code (method table, API list, CLI reference, cluster profiles) are small directives in
``_ext/dmlfe_docs.py`` rather than extra dependencies: the CLI one walks
``dmlfe.cli.build_parser()`` in a few lines, where sphinx-argparse would add a package
to render the same parser. The pages are reStructuredText only: README.md links to them
and none of them includes it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import dmlfe  # noqa: E402  (after the path set-up above)

project = "dmlfe"
author = "the dmlfe developers"
copyright = "the dmlfe developers, BSD-3-Clause"
release = dmlfe.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "numpydoc",
    "dmlfe_docs",
]
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = ["_build", "README.md"]
root_doc = "index"

# numpydoc: the class pages list members through autodoc (:members:), not numpydoc's
# autosummary tables, which would need generated stub pages
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
autodoc_typehints = "none"  # the numpy docstrings state the types
autodoc_member_order = "bysource"

# straight quotes: the pages show code and messages as they are typed and printed
smartquotes = False
html_theme = "alabaster"
html_title = f"dmlfe {release}"
html_static_path: list[str] = []
