"""Shared fixtures: the real corpora folder and one real LocalCluster per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DMLFE_DATA", ROOT.parent / "shared" / "data"))


def data_path(*parts: str) -> Path:
    """Path to a file of the shared corpora; skips the test when it is absent."""
    p = DATA.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"shared corpus file {p} not found (set DMLFE_DATA to the shared/data folder)")
    return p


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
