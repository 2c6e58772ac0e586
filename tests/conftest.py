"""Shared fixtures: the real corpora folder and one real LocalCluster per session.

The helper functions live in ``helpers.py``; they are imported here too, so that a test
or benchmark written as ``from helpers import write_store`` keeps working.
"""

from __future__ import annotations

import inspect
import re
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


#: What, in a test's own source, starts dask worker processes or other processes: the
#: session's cluster, a LocalCluster, a subprocess, the command line or a pipeline
#: (which start a LocalCluster unless told of a scheduler).
_STARTS_PROCESSES = ("cluster_client", "LocalCluster", "Client(", "subprocess", "Popen",
                     "main([", "run_pipeline", "--workers", "multiprocessing")


def _source(fn: object) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


def _mentions(fn: object, module: object, depth: int = 2) -> bool:
    """Whether ``fn``'s source, or that of a function of ``module`` it names (``depth``
    calls deep), mentions one of :data:`_STARTS_PROCESSES`."""
    text = _source(fn)
    if any(word in text for word in _STARTS_PROCESSES):
        return True
    if depth == 0 or module is None:
        return False
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\(", text)):
        helper = getattr(module, name, None)
        if inspect.isfunction(helper) and helper is not fn and \
                helper.__module__ == module.__name__ and _mentions(helper, module, depth - 1):
            return True
    return False


def _starts_processes(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    if "cluster_client" in names:
        return True
    module = getattr(item, "module", None)
    if _mentions(getattr(item, "function", None), module):
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(_mentions(d[-1].func, inspect.getmodule(d[-1].func))
               for name, d in defs.items() if d and name not in ("request", "_local_scheduler"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``) the tests that start processes run
    one after another on one xdist worker, as in a serial run, while the other worker
    runs the rest: two sets of dask workers at once on a 2-core machine made tests that
    wait on workers time out. Without xdist the mark does nothing."""
    for item in items:
        if _starts_processes(item):
            item.add_marker(pytest.mark.xdist_group("processes"))
