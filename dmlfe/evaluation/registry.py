"""The classifier registry: each multi-label classifier on embeddings declared once.

A :class:`ClassifierDeclaration` gives a classifier's name (as the pipeline's
``classifiers:`` entries, ``dmlfe fit --classifier`` and ``dmlfe predict --classifier``
spell it), its class, the pipeline's default parameters, and whether ``dmlfe fit
--classifier`` saves it for ``dmlfe predict``. The pipeline configuration and runner
(:mod:`dmlfe.pipeline`), the saved classifier files (:mod:`dmlfe.io.classifier`) and
the command line read it.

The saved form is the same for every classifier (:mod:`dmlfe.io.classifier`): its
constructor parameters and fitted scalars in JSON, its fitted arrays in npz, loaded by
building the registered class -- so a classifier whose fitted state is arrays and JSON
scalars needs nothing more than its declaration.

Adding a classifier = a class with ``fit(Z, Y)``, ``predict``, ``decision_function``
(and ``predict_proba`` to be saved for ``dmlfe predict``) and scikit-learn's
``get_params``, and a call of :func:`register_classifier`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dmlfe.evaluation.classifiers import (
    PPML,
    BinaryRelevance,
    KNNLabelVote,
    MLkNN,
    MultiLabelRidge,
    PerLabelFLDA,
)


@dataclass(frozen=True)
class ClassifierDeclaration:
    """One classifier on embeddings.

    Attributes
    ----------
    name : str
        Registry key (lower case), as pipeline files and the command line spell it.
    cls : type
        The classifier class; its constructor's keywords are the parameters a pipeline
        entry may give.
    defaults : dict
        Parameters a pipeline ``classifiers:`` entry starts from (the entry's own
        override them).
    predict : bool
        ``dmlfe fit --classifier`` offers it and saves it for ``dmlfe predict``: its
        fitted state is arrays and JSON scalars and it has ``predict_proba``.
    prepare : callable, optional
        ``prepare(params) -> params`` before the class is built, for a pipeline
        parameter that is spelled otherwise in the class (binary relevance's
        ``estimator``); raises ValueError for a value it does not take.
    doc : str
        One line for the documentation.
    """

    name: str
    cls: type
    defaults: dict[str, Any] = field(default_factory=dict)
    predict: bool = False
    prepare: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    doc: str = ""

    def make(self, params: Mapping[str, Any] | None = None) -> Any:
        """An unfitted classifier with ``params`` (the defaults are not added here)."""
        p = dict(params or {})
        if self.prepare is not None:
            p = self.prepare(p)
        return self.cls(**p)


_REGISTRY: dict[str, ClassifierDeclaration] = {}


def register_classifier(spec: ClassifierDeclaration) -> ClassifierDeclaration:
    """Add a classifier: pipeline entries, ``--classifier`` and the saved files follow."""
    name = str(spec.name).lower()
    if name in _REGISTRY:
        raise ValueError(f"a classifier named {name!r} is registered already")
    spec = replace(spec, name=name, defaults=dict(spec.defaults))
    _REGISTRY[name] = spec
    return spec


def unregister_classifier(name: str) -> None:
    """Remove a classifier (for tests and plug-ins that replace one)."""
    _REGISTRY.pop(get_classifier(name).name)


def all_classifiers() -> dict[str, ClassifierDeclaration]:
    """Every registered classifier, in registration order."""
    return dict(_REGISTRY)


def get_classifier(name: str) -> ClassifierDeclaration:
    """A classifier by name (case-insensitive)."""
    found = _REGISTRY.get(name.lower()) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"classifier {name!r} is not one of {', '.join(_REGISTRY)}")
    return found


class ClassifierTable(Mapping[str, tuple[str, dict[str, Any]]]):
    """name -> (class name, default parameters) of every registered classifier, read at
    each access (the form of the former ``dmlfe.pipeline.config.CLASSIFIERS``)."""

    def __getitem__(self, name: str) -> tuple[str, dict[str, Any]]:
        spec = _REGISTRY[name]
        return spec.cls.__name__, dict(spec.defaults)

    def __iter__(self) -> Iterator[str]:
        return iter(list(_REGISTRY))

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __repr__(self) -> str:
        return repr(dict(self))


def predict_classifiers() -> tuple[str, ...]:
    """The names ``dmlfe fit --classifier`` saves for ``dmlfe predict``."""
    return tuple(n for n, s in _REGISTRY.items() if s.predict)


# --------------------------------------------------------------------------- dmlfe's own
def _logistic_only(params: dict[str, Any]) -> dict[str, Any]:
    est = params.get("estimator", "logistic")
    if est not in (None, "logistic"):
        raise ValueError(f"estimator={est!r}: binary relevance takes 'logistic' (L2 "
                         "logistic regression, C by cross-validation on the training set)")
    return {**params, "estimator": None}


for _spec in (
    ClassifierDeclaration("ridge", MultiLabelRidge, {"alpha": 0.01}, predict=True,
                          doc="multi-label ridge regression (MVMD's baseline)"),
    ClassifierDeclaration("mlknn", MLkNN, {"k": 10, "s": 1.0}, predict=True,
                          doc="ML-kNN (Zhang & Zhou 2007)"),
    # sparse (CSR) scores and label sets: the saved training labels are CSR arrays
    ClassifierDeclaration("knn-vote", KNNLabelVote, {"n_neighbors": 10}, predict=True,
                          doc="exact k-nearest-neighbour label vote (sparse scores)"),
    # holds scikit-learn estimators: not saveable without pickle
    ClassifierDeclaration("br", BinaryRelevance, {}, prepare=_logistic_only,
                          doc="binary relevance with L2 logistic regression"),
    ClassifierDeclaration("flda", PerLabelFLDA, {}, predict=True,
                          doc="per-label Fisher LDA (MOPE's classifier)"),
    # no predict_proba, so not offered for dmlfe predict's scores
    ClassifierDeclaration("ppml", PPML, {"n_components": 300, "penalty": 30.0,
                                         "threshold": 0.5},
                          doc="penalised PLS-DA (Ma et al. 2014)"),
):
    register_classifier(_spec)
