"""The one way dmlfe runs a dask pass: one compute, optional progress, tree reductions."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import dask
from dask.delayed import Delayed, delayed


def tree_reduce(items: Sequence[Delayed], combine: Callable[..., Any], width: int = 8) -> Delayed:
    """Combine delayed partial results pairwise-ish in a tree of fan-in ``width``.

    ``combine(*parts)`` must be associative. The reduction runs on the workers;
    only the root result travels to the driver.
    """
    if width < 2:
        raise ValueError(f"split_every must be at least 2; got {width}")
    if not items:
        raise ValueError("nothing to reduce: the data set has no chunks")
    level = list(items)
    while len(level) > 1:
        level = [
            delayed(combine, pure=True)(*level[i : i + width])
            for i in range(0, len(level), width)
        ]
    return level[0]


def run(*objs: Any, desc: str = "", progress: bool = False, client: Any = None) -> tuple:
    """Compute dask collections in ONE pass (a single scheduler call).

    With a distributed ``client`` the work runs there and, with ``progress``, a line
    per ~5 s says how many tasks are done. Without one, ``dask.compute`` runs it on
    dask's configured scheduler (the process's default distributed client if any).
    """
    t0 = time.perf_counter()
    if client is None:
        if progress:
            from dask.diagnostics import ProgressBar

            print(f"[dmlfe] {desc}", file=sys.stderr)
            with ProgressBar(out=sys.stderr, dt=1.0):
                out = dask.compute(*objs)
        else:
            out = dask.compute(*objs)
    else:
        futures = client.compute(list(objs))
        if progress:
            _watch(futures, desc, t0)
        out = tuple(client.gather(futures))
    if progress:
        print(f"[dmlfe] {desc}: done in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return out


def compute_one(obj: Any, client: Any = None, progress: bool = False, desc: str = "pass") -> Any:
    """:func:`run` for a single collection; returns its value."""
    return run(obj, desc=desc, progress=progress, client=client)[0]


def _watch(futures: list, desc: str, t0: float) -> None:
    from distributed import wait

    client = futures[0].client
    while True:
        try:
            wait(futures, timeout=5.0)
            return
        except TimeoutError:
            pass
        try:
            done, total = client.run_on_scheduler(_task_counts)
            extra = f" ({done}/{total} tasks finished)"
        except Exception:  # progress is best effort: never fail the pass for it
            extra = ""
        print(f"[dmlfe] {desc}: {time.perf_counter() - t0:.0f} s{extra}", file=sys.stderr)


def _task_counts(dask_scheduler=None) -> tuple[int, int]:
    tasks = dask_scheduler.tasks
    done = sum(1 for ts in tasks.values() if ts.state in ("memory", "released", "forgotten"))
    return done, len(tasks)
