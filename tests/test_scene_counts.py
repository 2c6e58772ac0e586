"""The MVMD paper's eigenvalue counts on scene-train at t = 0.999 (mvmd section 7.4).

"PCA, MLSI and DMLDA require 271, 276 and 294 eigenvalues, whereas MDDMp, MDDMf,
CCA and MLDA need 5, 6, 6 and 5 ones. But our MVMD has 47 eigenvalues."
Parameters as in that comparison (mvmd section 7.2): beta = 0.5 for MVMD and
MLSI, mu = 0.5 for MDDMf (mddm section 4), gamma_x = gamma_y = gamma_xy = 0.1.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import data_path

from dmlfe.methods import (
    cca,
    dmlda,
    label_correlation,
    mddm_f,
    mddm_p,
    mlda,
    mlda_weighted_labels,
    mlsi,
    mvmd,
    pca,
    weighted_scatter,
)
from dmlfe.solvers.dense import solve_dense
from dmlfe.stats.sufficient import SufficientStats

EXPECTED = {
    "pca": 271,
    "mlsi": 276,
    "dmlda": 294,
    "mddm_p": 5,
    "mddm_f": 6,
    "cca": 6,
    "mlda": 5,
    "mvmd": 47,
}


def _stats(X: np.ndarray, Y: np.ndarray) -> SufficientStats:
    return SufficientStats(
        n=X.shape[0],
        sum_x=X.sum(axis=0),
        sum_y=Y.sum(axis=0),
        xty=X.T @ Y,
        yty=Y.T @ Y,
        xtx=X.T @ X,
    )


@pytest.fixture(scope="module")
def scene():
    from dmlfe.readers.arff import read_mulan

    src = read_mulan(data_path("mulan", "scene-train.arff"), data_path("mulan", "scene.xml"))
    batches = list(src.batches(500))
    X = sp.vstack([b.X for b in batches]).toarray().astype(np.float64)
    Y = sp.vstack([b.Y for b in batches]).toarray().astype(np.float64)
    assert X.shape == (1211, 294) and Y.shape == (1211, 6)
    return X, Y, _stats(X, Y)


def _template(name: str, X: np.ndarray, Y: np.ndarray, stats: SufficientStats):
    if name == "mlda":
        Yw = mlda_weighted_labels(Y, label_correlation(stats.yty))
        return mlda(_stats(X, Yw), weighted_scatter(X, Yw.sum(axis=1)), gamma_xy=0.1)
    if name == "dmlda":
        return dmlda(stats, weighted_scatter(X, Y.sum(axis=1)), gamma_xy=0.1)
    return {
        "pca": lambda s: pca(s),
        "mlsi": lambda s: mlsi(s, beta=0.5, gamma_x=0.1, gamma_xy=0.1),
        "mddm_p": lambda s: mddm_p(s),
        "mddm_f": lambda s: mddm_f(s, mu=0.5),
        "cca": lambda s: cca(s, gamma_x=0.1, gamma_y=0.1),
        "mvmd": lambda s: mvmd(s, beta=0.5),
    }[name](stats)


@pytest.mark.parametrize(("name", "expected"), sorted(EXPECTED.items()))
def test_scene_train_counts(scene, name, expected):
    X, Y, stats = scene
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no regularisation beyond the methods' own
        res = solve_dense(_template(name, X, Y, stats), n_components=0.999)
    assert res.n_components == expected
    assert res.components.shape == (294, expected)
