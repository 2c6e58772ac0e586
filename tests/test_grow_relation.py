"""Issue 34, the relation route after an append: with fixed prototypes (their row
positions given as ``prototype_selection``, e.g. an earlier fit's ``prototype_indices_``)
the relation statistics saved before the append are extended by the appended rows only
(``rows_read_`` counts them alone), and the refit equals a fresh fit on a store ingested
from all documents at once with the same prototypes. Prototypes chosen from all rows
change with n: those statistics are computed again, and the fit says why.

References: fresh fits on the ``whole`` store (:func:`test_append_exact.assert_same_fit`),
and the prototypes' rows read with numpy from its X.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
from test_append_exact import assert_same_fit
from test_incremental_stats import APPEND, grown_and_whole

import dmlfe
from dmlfe.relation.prototypes import fixed_rows
from dmlfe.store import open_store

#: Training-view positions of the prototypes: among the 150 training documents ingested
#: first, which keep their positions in the view after the append.
ROWS = np.sort(np.random.default_rng(3).choice(150, size=40, replace=False))
CASES = [(dmlfe.MDDM, "local_scaling"), (dmlfe.KernelMDDM, "gaussian"),
         (dmlfe.MDDM, "linear")]


def test_fixed_prototypes_extend_the_relation_statistics_on_a_cluster(
        tmp_path, cluster_client) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    both = ["first", "train"]
    # max_gather_bytes=0: the passes run on the workers (a gather would read every row)
    kw = dict(n_components=2, route="relation", client=cluster_client, max_gather_bytes=0)
    for cls, sim in CASES:
        first = cls(split="train", prototype_selection=ROWS.tolist(), similarity=sim,
                    **kw).fit(str(grown))
        assert first.rows_read_ == 150
        np.testing.assert_array_equal(first.prototype_indices_, ROWS)
    dmlfe.append(grown, new, client=cluster_client, **APPEND)
    X = open_store(whole).subset(both).X.compute()
    for cls, sim in CASES:
        what = f"{cls.__name__} relation {sim}"
        refit = cls(split="train", prototype_selection=ROWS, similarity=sim,
                    **kw).fit(str(grown))
        assert refit.n_samples_ == 200
        assert refit.rows_read_ == 50, what  # the appended training documents only
        assert refit.relation_["prototype_selection"] == "rows"
        P = refit.relation_map_.prototypes
        assert (P != X[ROWS]).nnz == 0, what
        fresh = cls(split=both, prototype_selection=ROWS.tolist(), similarity=sim,
                    cache=False, **kw).fit(str(whole))
        assert fresh.rows_read_ == 200
        np.testing.assert_array_equal(refit.prototype_indices_, fresh.prototype_indices_)
        assert_same_fit(refit, fresh, X.toarray(), what)


def test_prototypes_chosen_from_all_rows_are_recomputed_and_the_fit_says_so(
        tmp_path, caplog) -> None:
    grown, whole, new = grown_and_whole(tmp_path)
    kw = dict(n_components=2, route="relation", split="train", max_gather_bytes=0)
    dmlfe.MDDM(**kw).fit(str(grown))
    dmlfe.append(grown, new, **APPEND)
    with caplog.at_level(logging.INFO, logger="dmlfe.fit.run"):
        refit = dmlfe.MDDM(**kw).fit(str(grown))
    assert refit.rows_read_ == 200 and refit.prototype_indices_.size == 200
    assert "prototype_selection=<an earlier fit's prototype_indices_>" in caplog.text
    fresh = dmlfe.MDDM(**{**kw, "split": ["first", "train"]}, cache=False).fit(str(whole))
    X = open_store(whole).subset(["first", "train"]).X.compute().toarray()
    assert_same_fit(refit, fresh, X, "MDDM relation, all rows as prototypes")


@pytest.mark.parametrize("rows,message", [
    ([3, 3], "names row 3 more than once"),
    ([0, 150], "row 150 is not a training document: positions lie in \\[0, 150\\)"),
    ([1, 2.5], "holds 2.5, not a row position"),
    ([], "empty list of rows"),
    ([-1], "row -1 is not a training document"),
])
def test_bad_prototype_rows_are_refused_with_the_row(tmp_path, rows, message) -> None:
    grown, _, _ = grown_and_whole(tmp_path)
    with pytest.raises(ValueError, match=message):
        dmlfe.MDDM(n_components=2, route="relation", split="train",
                   prototype_selection=rows).fit(str(grown))


def test_fixed_rows_and_n_prototypes() -> None:
    np.testing.assert_array_equal(fixed_rows([5, 1, np.int32(3)], 6), [1, 3, 5])
    X = np.eye(6) + np.arange(6)[:, None]
    Y = np.array([[1.0, 0.0], [0, 1], [1, 1], [1, 0], [0, 1], [1, 0]])
    with pytest.raises(ValueError, match="n_prototypes=2 but prototype_selection names 3"):
        dmlfe.MDDM(n_components=1, route="relation", n_prototypes=2,
                   prototype_selection=[0, 1, 2]).fit(X, Y)
    est = dmlfe.MDDM(n_components=1, route="relation", prototype_selection=[4, 0, 2]).fit(X, Y)
    np.testing.assert_array_equal(est.prototype_indices_, [0, 2, 4])
    np.testing.assert_array_equal(est.relation_map_.prototypes.toarray(), X[[0, 2, 4]])
