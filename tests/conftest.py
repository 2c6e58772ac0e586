"""Shared fixtures: the real corpora folder and one real LocalCluster per session.

The helper functions live in ``helpers.py``; they are imported here too, so that a test
or benchmark written as ``from helpers import write_store`` keeps working.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import (  # noqa: F401  (the old import path of the helpers)
    DATA,
    ROOT,
    CountingScheduler,
    count_computes,
    data_path,
    decaying_data,
    labels_dask,
    mulan_arrays,
    scheduler_graphs,
    sparse_dask,
    write_store,
)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not DATA.is_dir():
        pytest.skip(f"shared data folder {DATA} not found (set DMLFE_DATA)")
    return DATA


@pytest.fixture(scope="session")
def cluster_client():
    """A real distributed.LocalCluster with two worker processes."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        memory_limit="3GiB",
        dashboard_address=":0",
    )
    client = Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(autouse=True)
def _local_scheduler(request):
    """Tests that do not ask for the cluster run on dask's threaded scheduler, even once
    the session's LocalCluster client exists (it would otherwise become the default)."""
    if "cluster_client" in request.fixturenames:
        yield
    else:
        import dask

        with dask.config.set(scheduler="threads"):
            yield
