"""Cluster kinds are declared once (issue 37): a kind registered here alone -- its
fields, describe and start -- is accepted by profiles, ``dmlfe cluster check`` and
``dmlfe fit --cluster``, which then runs on the real LocalCluster its start returns."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import yaml
from distributed import LocalCluster
from helpers import write_store

from dmlfe.cli import main
from dmlfe.cluster_profiles import (
    KINDS,
    ClusterKind,
    all_cluster_kinds,
    get_cluster_kind,
    parse_profile,
    register_cluster_kind,
    unregister_cluster_kind,
)
from dmlfe.errors import ClusterProfileError
from dmlfe.model_io import load_model
from dmlfe.params import Param, Worded, interval

STARTED: list[LocalCluster] = []


def _start(profile, options):
    cluster = LocalCluster(n_workers=profile.spec["n_workers"], threads_per_worker=1,
                           processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0",
                           memory_limit="2GiB", silence_logs=options.get("silence_logs", 50))
    STARTED.append(cluster)
    return cluster


TOY = ClusterKind(
    "toy", describe=lambda p: f"a toy cluster of {p.spec['n_workers']} workers", start=_start,
    fields=(Param("n_workers", None, Worded(interval(1, None, integer=True),
                                            "must be a positive integer, got {value!r}"),
                  "int\n    Workers."),),
    required=("n_workers",))


@pytest.fixture
def toy():
    register_cluster_kind(TOY)
    STARTED.clear()
    yield TOY
    unregister_cluster_kind("toy")


def _profile(**spec):
    return {"dmlfe": {"cluster": {"kind": "toy", **spec}}}


def test_the_built_in_kinds():
    assert KINDS == ("local", "scheduler", "ssh", "slurm", "pbs", "kubernetes")
    assert list(all_cluster_kinds()) == list(KINDS)
    assert get_cluster_kind("ssh").extra == ("asyncssh", "ssh")


def test_a_registered_kind_is_accepted_and_checked(toy):
    profile = parse_profile(_profile(n_workers=2), None)
    assert (profile.kind, profile.spec) == ("toy", {"n_workers": 2})
    with pytest.raises(ClusterProfileError, match=r"^cluster profile: dmlfe.cluster.n_workers "
                       r"must be a positive integer, got 0$"):
        parse_profile(_profile(n_workers=0), None)
    with pytest.raises(ClusterProfileError, match=r"dmlfe.cluster.colour is not a setting of "
                       r"this kind; known: n_workers, worker_timeout$"):
        parse_profile(_profile(n_workers=2, colour="red"), None)
    with pytest.raises(ClusterProfileError, match=r"dmlfe.cluster.n_workers is missing \(kind "
                       r"'toy' needs it\)"):
        parse_profile(_profile(), None)
    with pytest.raises(ValueError, match="already registered"):
        register_cluster_kind(TOY)


def test_an_unregistered_kind_is_refused():
    with pytest.raises(ClusterProfileError, match=r"dmlfe.cluster.kind must be one of local, "
                       r"scheduler, ssh, slurm, pbs, kubernetes; got 'toy'"):
        parse_profile(_profile(n_workers=2), None)


def test_required_fields_must_be_fields():
    with pytest.raises(ValueError, match="not among its fields"):
        register_cluster_kind(ClusterKind("bad", describe=str, start=None,
                                          required=("address",)))
    assert "bad" not in all_cluster_kinds()


def test_cluster_check_describes_a_registered_kind(toy, tmp_path, capsys):
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(_profile(n_workers=3)))
    assert main(["cluster", "check", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:3] == [f"profile: {path}", "kind: toy", "a toy cluster of 3 workers"]
    assert STARTED == []  # a check starts nothing


def test_fit_runs_on_the_cluster_a_registered_kind_starts(toy, tmp_path, capsys):
    rng = np.random.default_rng(3)
    n, D, q = 90, 12, 3
    Y = (rng.uniform(size=(n, q)) < 0.4).astype(np.uint8)
    X = Y @ rng.normal(size=(q, D)) + 0.3 * rng.normal(size=(n, D))
    X[rng.uniform(size=X.shape) < 0.3] = 0.0
    splits = ["train" if i % 4 else "test" for i in range(n)]
    store = write_store(tmp_path / "s.zarr", sp.csr_matrix(X), Y, splits, chunk_rows=16)
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(_profile(n_workers=2)))
    out = tmp_path / "model"
    assert main(["fit", str(store), "--method", "mddm_p", "--dim", "3", "--split", "train",
                 "--out", str(out), "--cluster", str(path), "--quiet"]) == 0
    # the fit ran on the toy's cluster, which the command closed
    assert len(STARTED) == 1
    cluster = STARTED[0]
    assert cluster.status.name == "closed" and cluster.scheduler.transition_counter > 0
    # mddm eq. 6 (L = Y Y^T) on the training rows, dense
    train = np.array([s == "train" for s in splits])
    Xc = X[train] - X[train].mean(axis=0)
    Yt = Y[train].astype(float)
    A = Xc.T @ Yt @ Yt.T @ Xc
    top = np.sort(np.linalg.eigvalsh(A))[::-1][:3]
    np.testing.assert_allclose(load_model(out).eigenvalues_, top, rtol=1e-8)
