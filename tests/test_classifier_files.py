"""Fitted classifiers saved beside a model (JSON + npz) and read back."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dmlfe.classifier_files import (
    CLASSIFIER_DIR,
    CLASSIFIER_JSON,
    has_classifier,
    load_classifier,
    save_classifier,
)
from dmlfe.errors import ModelFormatError
from dmlfe.evaluation import PPML, BinaryRelevance, MLkNN, MultiLabelRidge, PerLabelFLDA


def _data(n: int = 80, d: int = 5, q: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((n, d))
    Y = (Z[:, :q] + 0.5 * rng.standard_normal((n, q)) > 0).astype(np.uint8)
    return Z, Y


@pytest.mark.parametrize("name,clf", [
    ("ridge", MultiLabelRidge(alpha=0.5)), ("flda", PerLabelFLDA(threshold="prior")),
    ("mlknn", MLkNN(k=7)), ("ppml", PPML(n_components=3)),
])
def test_saved_classifiers_predict_as_the_fitted_ones(tmp_path, name, clf):
    Z, Y = _data()
    clf.fit(Z[:60], Y[:60])
    assert not has_classifier(tmp_path)
    save_classifier(clf, tmp_path, name=name)
    assert has_classifier(tmp_path)
    got_name, got = load_classifier(tmp_path)
    assert got_name == name and type(got) is type(clf)
    assert got.get_params() == clf.get_params()
    for method in ("predict", "decision_function"):
        np.testing.assert_array_equal(getattr(got, method)(Z[60:]),
                                      getattr(clf, method)(Z[60:]))
    if hasattr(clf, "classes_"):  # PPML has none
        np.testing.assert_array_equal(got.classes_, clf.classes_)


def test_unsaveable_and_unfitted_classifiers_are_refused(tmp_path):
    Z, Y = _data()
    with pytest.raises(ValueError, match="estimators_ is a list"):
        save_classifier(BinaryRelevance().fit(Z, Y), tmp_path, name="br")
    with pytest.raises(ValueError, match="not fitted"):
        save_classifier(MultiLabelRidge(), tmp_path, name="ridge")
    with pytest.raises(ValueError, match="must be a MLkNN"):
        save_classifier(MultiLabelRidge().fit(Z, Y), tmp_path, name="mlknn")
    assert not (tmp_path / CLASSIFIER_DIR).exists()


def test_damaged_files_name_the_file_and_key(tmp_path):
    Z, Y = _data()
    save_classifier(MultiLabelRidge().fit(Z, Y), tmp_path, name="ridge")
    path = tmp_path / CLASSIFIER_DIR / CLASSIFIER_JSON
    meta = json.loads(path.read_text())
    for key, value, message in [("class", "os.system", "is not one of"),
                                ("format_version", 99, "format_version 99"),
                                ("arrays", ["coef_"], "lists")]:
        path.write_text(json.dumps({**meta, key: value}))
        with pytest.raises(ModelFormatError, match=message) as err:
            load_classifier(tmp_path)
        assert "classifier" in str(err.value)
