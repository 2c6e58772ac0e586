"""Every public class of ``dmlfe.__all__`` has a numpy-style ``Examples`` section whose
``>>>`` lines run as doctests (the estimators' from their generated docstrings)."""

from __future__ import annotations

import doctest
import inspect

import pytest

import dmlfe

CLASSES = sorted(name for name in dmlfe.__all__
                 if name != "__version__" and inspect.isclass(getattr(dmlfe, name)))


def test_every_public_class_is_covered():
    # the registry's estimators and the classifiers and selector outside it
    assert {"MVMD", "MOPE", "KernelMDDM", "PPML", "MLkNN", "GRROOR"} <= set(CLASSES)


@pytest.mark.parametrize("name", CLASSES)
def test_class_examples_run(name):
    cls = getattr(dmlfe, name)
    doc = inspect.getdoc(cls) or ""
    assert "\nExamples\n--------\n" in doc, f"dmlfe.{name} has no Examples section"
    finder = doctest.DocTestFinder(recurse=False)
    tests = [t for t in finder.find(cls, f"dmlfe.{name}", globs={}) if t.examples]
    assert tests, f"dmlfe.{name}'s Examples have no >>> lines"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS
                                   | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"dmlfe.{name}: {result.failed} example(s) failed (see above)"


def test_a_wrong_example_fails():
    # the runner reports a mismatch: the check above can fail
    test = doctest.DocTestParser().get_doctest(">>> 1 + 1\n3\n", {}, "wrong", None, 0)
    runner = doctest.DocTestRunner()
    runner.run(test, out=lambda _: None)
    assert runner.summarize(verbose=False).failed == 1
