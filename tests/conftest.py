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


#: What marks a test that kills a worker, a scheduler or a command on purpose: its
#: recovery is timed, so it runs alone after the others (``-m serial``).
_KILLS = ("SIGKILL", "os.kill(", "killpg", "SIGINT", "SIGTERM")

#: What marks a test of the approximate K-NN search: its first use in a process compiles
#: pynndescent's numba functions (about a minute), then cached on disk for the next ones.
_USES_NNDESCENT = ("pynndescent", '"approximate"')


def _mentions(fn: object, module: object, words: tuple[str, ...], depth: int = 2) -> bool:
    """Whether ``fn``'s source, or that of a function of ``module`` it names (``depth``
    calls deep), mentions one of ``words``."""
    text = _source(fn)
    if any(word in text for word in words):
        return True
    if depth == 0 or module is None:
        return False
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\(", text)):
        helper = getattr(module, name, None)
        if inspect.isfunction(helper) and helper is not fn and \
                helper.__module__ == module.__name__ and \
                _mentions(helper, module, words, depth - 1):
            return True
    return False


def _uses(item: pytest.Item, words: tuple[str, ...]) -> bool:
    """Whether the test, a helper it calls or one of its fixtures mentions ``words``."""
    if "cluster_client" in words and "cluster_client" in getattr(item, "fixturenames", ()):
        return True
    if _mentions(getattr(item, "function", None), getattr(item, "module", None), words):
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    return any(_mentions(d[-1].func, inspect.getmodule(d[-1].func), words)
               for name, d in defs.items() if d and name not in ("request", "_local_scheduler"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n 2 --dist loadgroup``) the tests that start processes run
    one after another on one xdist worker, as in a serial run, while the other worker
    runs the rest: two sets of dask workers at once on a 2-core machine made tests that
    wait on workers time out. The other tests of the approximate K-NN search run in one
    process too, so that pynndescent is compiled once. Tests that kill processes on
    purpose are marked ``serial``: the test command runs them alone, after the rest
    (a lost-worker fit hung under the other process's load). Without xdist the groups do
    nothing."""
    for item in items:
        if _uses(item, _KILLS):
            item.add_marker(pytest.mark.serial)
        if _uses(item, _STARTS_PROCESSES):
            item.add_marker(pytest.mark.xdist_group("processes"))
        elif _uses(item, _USES_NNDESCENT):
            item.add_marker(pytest.mark.xdist_group("nndescent"))
