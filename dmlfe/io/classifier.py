"""A fitted classifier stage saved beside its model: JSON + npz, never pickle.

``dmlfe fit ... --classifier NAME`` fits one of the registered classifiers
(:mod:`dmlfe.evaluation.registry`) on the model's embeddings of its training
documents and saves it in the model directory::

    model/classifier/
      classifier.json  -- format name and version, dmlfe version, the classifier's name
                          and class, its constructor parameters and its fitted scalars
      classifier.npz   -- its fitted arrays (numeric dtypes only; loaded without pickle)

so that ``dmlfe predict`` uses it instead of fitting one at predict time. A fitted
classifier's state is its instance attributes beyond the constructor parameters; only
classifiers whose state is arrays and JSON scalars can be saved (binary relevance holds
scikit-learn estimators and is refused with a message). Loading builds only a registered
class, so a saved file cannot name arbitrary code.

A sparse matrix in a fitted state is saved as the arrays of its CSR form: knn-vote
fitted on raw sparse features keeps its training rows as ``train_data_``,
``train_indices_`` and ``train_indptr_`` (plus ``train_sq_norms_`` for euclidean), so
they round-trip through ``classifier.npz`` like any array (O(nnz) on disk, never
densified) and the loaded classifier searches sparsely again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from dmlfe._version import __version__
from dmlfe.errors import ModelFormatError
from dmlfe.evaluation.registry import all_classifiers, predict_classifiers
from dmlfe.params import LiveChoices
from dmlfe.tempfiles import move_into_place, remove_stale, temp_sibling

FORMAT_NAME = "dmlfe-classifier"
FORMAT_VERSION = 1
#: The folder of a model directory holding its saved classifier.
CLASSIFIER_DIR = "classifier"
CLASSIFIER_JSON = "classifier.json"
CLASSIFIER_NPZ = "classifier.npz"

_SCALARS = (type(None), bool, int, float, str)
#: The classifiers ``dmlfe fit --classifier`` saves for ``dmlfe predict``, which writes
#: predict_proba scores (those declared with ``predict=True``, read at each access).
PREDICT_CLASSIFIERS = LiveChoices(predict_classifiers)


def _classes() -> dict[str, type]:
    """Classifier name -> class, as the pipeline and ``--classifier`` name them."""
    return {name: spec.cls for name, spec in all_classifiers().items()}


def save_classifier(classifier: Any, model_dir: str | os.PathLike[str], *, name: str) -> Path:
    """Save a fitted ``classifier`` into ``model_dir/classifier`` (replacing an old one).

    Parameters
    ----------
    classifier : fitted classifier of :mod:`dmlfe.evaluation.classifiers`
    model_dir : path
        The model directory (written by ``MultiLabelProjection.save``).
    name : str
        Its registered name (:mod:`dmlfe.evaluation.registry`: ``ridge``, ``mlknn``, ...).

    Raises
    ------
    ValueError
        An unknown name, a classifier of another class, or a fitted state that is not
        arrays and scalars (the message names the attribute).
    """
    classes = _classes()
    if name not in classes:
        raise ValueError(f"classifier name {name!r} is not one of {', '.join(classes)}")
    if type(classifier) is not classes[name]:
        raise ValueError(f"classifier {name!r} must be a {classes[name].__name__}, got "
                         f"{type(classifier).__name__}")
    params = classifier.get_params(deep=False)
    scalars: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for key, value in vars(classifier).items():
        if key in params:
            continue
        if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            arrays[key] = value
        elif isinstance(value, np.generic) or isinstance(value, _SCALARS):
            scalars[key] = value.item() if isinstance(value, np.generic) else value
        else:
            raise ValueError(f"classifier {name!r} cannot be saved: its fitted attribute "
                             f"{key} is a {type(value).__name__}, not an array or a scalar; "
                             f"save one of {', '.join(PREDICT_CLASSIFIERS)} instead")
    if "n_features_in_" not in scalars:
        raise ValueError(f"classifier {name!r} is not fitted: fit it before saving")
    meta = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "dmlfe_version": __version__, "name": name, "class": type(classifier).__name__,
            "params": params, "state": scalars, "arrays": sorted(arrays)}
    out = Path(model_dir) / CLASSIFIER_DIR
    remove_stale(out)
    tmp = temp_sibling(out)
    try:
        tmp.mkdir()
        (tmp / CLASSIFIER_JSON).write_text(json.dumps(meta, indent=2), encoding="utf-8")
        np.savez(tmp / CLASSIFIER_NPZ, **arrays)
        move_into_place(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def has_classifier(model_dir: str | os.PathLike[str]) -> bool:
    """Whether ``model_dir`` holds a saved classifier."""
    return (Path(model_dir) / CLASSIFIER_DIR / CLASSIFIER_JSON).is_file()


def load_classifier(model_dir: str | os.PathLike[str]) -> tuple[str, Any]:
    """(name, fitted classifier) saved in ``model_dir/classifier``.

    Raises
    ------
    dmlfe.errors.ModelFormatError
        The files are missing, damaged or not a dmlfe classifier (the message names the
        file and the key).
    """
    folder = Path(model_dir) / CLASSIFIER_DIR
    path = folder / CLASSIFIER_JSON

    def bad(what: str) -> ModelFormatError:
        return ModelFormatError(f"{path}: {what}; save the classifier again with "
                                "dmlfe fit --classifier")

    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise bad("not found") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise bad(f"not readable JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise bad(f"'format' is not {FORMAT_NAME!r}")
    version = meta.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise bad(f"format_version {version!r} is not one this dmlfe reads (1.."
                  f"{FORMAT_VERSION}); upgrade dmlfe")
    classes = _classes()
    name = meta.get("name")
    if name not in classes or meta.get("class") != classes[name].__name__:
        raise bad(f"name {name!r} / class {meta.get('class')!r} is not one of "
                  f"{', '.join(classes)}")
    params, state, names = meta.get("params"), meta.get("state"), meta.get("arrays")
    if not isinstance(params, dict) or not isinstance(state, dict) or not isinstance(names,
                                                                                     list):
        raise bad("'params' and 'state' must be objects and 'arrays' a list")
    try:
        clf = classes[name](**params)
    except TypeError as exc:
        raise bad(f"'params' do not fit {classes[name].__name__}: {exc}") from exc
    npz_path = folder / CLASSIFIER_NPZ
    try:
        with np.load(npz_path, allow_pickle=False) as z:
            if sorted(z.files) != sorted(names):
                raise ModelFormatError(f"{npz_path}: holds arrays {sorted(z.files)}, "
                                       f"{CLASSIFIER_JSON} lists {sorted(names)}")
            arrays = {k: z[k] for k in names}
    except (OSError, ValueError) as exc:
        if isinstance(exc, ModelFormatError):
            raise
        raise ModelFormatError(f"{npz_path}: not a readable npz file ({exc})") from exc
    for key, value in {**state, **arrays}.items():
        if key in params or not isinstance(key, str):
            raise bad(f"state key {key!r} clashes with a parameter")
        setattr(clf, key, value)
    return name, clf
