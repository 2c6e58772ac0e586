"""Saved sufficient statistics, so a failed solve or another method does not repeat the pass.

Layout: statistics of a store ``path/to/corpus.zarr`` live in the sibling folder
``path/to/corpus.zarr.stats/``. A sibling, not a folder inside the store,
because a store is written once atomically and then treated as immutable (and
readers such as anndata should see only the store's own groups); deleting the
sibling folder simply forgets the cache. Other inputs (a dask array, an in-memory
matrix) are cached only in an explicit ``cache_dir``.

Each entry is a pair of files named by ``key`` = a hash of its parameters:

* ``<key>.npz``  -- n, sum_x, sum_y, xty, yty and, when computed, xtx and xtwx
  (float64, written with ``allow_pickle=False`` and read back the same way);
* ``<key>.json`` -- the parameters in clear (data identity: the store's
  ``fingerprint``; the view's selection (split); block_fn route; label map; dmlfe
  version; cache format), which of X^T X / X^T W X are present, and the shapes.

The key leaves out ``need_xtx`` / ``need_xtwx``: an entry with X^T X serves
requests without it, and a request that needs X^T X replaces an entry that
lacks it. Both files are
written to a temporary name and renamed into place, the ``.json`` last, so an
entry is only ever seen complete.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from dmlfe._version import __version__
from dmlfe.compute import BlockFn, is_dask
from dmlfe.stats.pass_ import LabelFn, compute_stats
from dmlfe.stats.sufficient import SufficientStats
from dmlfe.store import Store, open_store

log = logging.getLogger(__name__)

#: Bumped whenever the meaning or layout of a saved entry changes.
CACHE_FORMAT = 2

_ARRAYS = ("sum_x", "sum_y", "xty", "yty", "xtx", "xtwx")


# --------------------------------------------------------------------------- #
# Keys and identities
# --------------------------------------------------------------------------- #
def _canonical(obj: Any) -> Any:
    """JSON round trip: the exact form the parameters have once stored."""
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def stats_key(params: dict[str, Any]) -> str:
    """Hex digest naming a cache entry: sha256 of the canonical JSON of ``params``."""
    text = json.dumps(_canonical(params), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def stats_dir_for(store_path: str | os.PathLike[str]) -> Path:
    """Cache folder of a store: ``<store>.stats`` next to it."""
    p = Path(store_path).resolve()
    return p.with_name(p.name + ".stats")


def _hash_array(h: Any, a: Any) -> None:
    if sp.issparse(a):
        a = sp.csr_matrix(a)
        for part in (a.data, a.indices, a.indptr):
            h.update(np.ascontiguousarray(part).tobytes())
        h.update(repr((a.shape, str(a.dtype))).encode())
    else:
        a = np.ascontiguousarray(a)
        h.update(a.tobytes())
        h.update(repr((a.shape, str(a.dtype))).encode())


def array_identity(a: Any) -> dict[str, Any]:
    """Identity of an array: the dask name (graph token), or a content hash in memory."""
    if a is None:
        return {"kind": "none"}
    if is_dask(a):
        return {"kind": "dask", "name": a.name, "shape": list(a.shape)}
    h = hashlib.sha256()
    _hash_array(h, a)
    return {"kind": "memory", "sha256": h.hexdigest(), "shape": list(a.shape)}


# --------------------------------------------------------------------------- #
# Saving and loading
# --------------------------------------------------------------------------- #
def _tmp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def save_stats(
    stats: SufficientStats, directory: str | os.PathLike[str], params: dict[str, Any]
) -> Path:
    """Write ``stats`` as ``<key>.npz`` + ``<key>.json`` under ``directory``; return the npz."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = stats_key(params)
    npz_path = directory / f"{key}.npz"
    json_path = directory / f"{key}.json"
    arrays = {"n": np.asarray(stats.n, dtype=np.int64)}
    for name in _ARRAYS:
        value = getattr(stats, name, None)
        if value is not None:
            arrays[name] = np.ascontiguousarray(value, dtype=np.float64)
    meta = {
        "key": key,
        "params": _canonical(params),
        "has_xtx": stats.xtx is not None,
        "has_xtwx": getattr(stats, "xtwx", None) is not None,
        "n": int(stats.n),
        "n_features": stats.n_features,
        "n_labels": stats.n_labels,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "dmlfe_version": __version__,
    }
    tmp = _tmp_name(npz_path)
    try:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
        os.replace(tmp, npz_path)
        tmp = _tmp_name(json_path)
        tmp.write_text(json.dumps(meta, indent=2, sort_keys=True), encoding="utf-8")
        os.replace(tmp, json_path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return npz_path


def load_stats(
    directory: str | os.PathLike[str],
    params: dict[str, Any],
    *,
    need_xtx: bool = False,
    need_xtwx: bool = False,
) -> SufficientStats | None:
    """The saved statistics for ``params``; None when absent, unusable or lacking X^T (W) X."""
    directory = Path(directory)
    key = stats_key(params)
    npz_path = directory / f"{key}.npz"
    json_path = directory / f"{key}.json"
    if not json_path.is_file() or not npz_path.is_file():
        return None
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
        if meta.get("params") != _canonical(params):
            # A hash collision or a hand-edited file: never trust it.
            return None
        if need_xtx and not meta.get("has_xtx", False):
            return None
        if need_xtwx and not meta.get("has_xtwx", False):
            return None
        with np.load(npz_path, allow_pickle=False) as z:
            stats = SufficientStats(
                n=int(z["n"]),
                sum_x=np.array(z["sum_x"]),
                sum_y=np.array(z["sum_y"]),
                xty=np.array(z["xty"]),
                yty=np.array(z["yty"]),
                xtx=np.array(z["xtx"]) if "xtx" in z.files else None,
                xtwx=np.array(z["xtwx"]) if "xtwx" in z.files else None,
            )
    except (OSError, ValueError, KeyError) as exc:
        warnings.warn(
            f"ignoring unreadable statistics cache entry {npz_path} ({exc}); recomputing",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    d, q = stats.n_features, stats.n_labels
    if stats.xty.shape != (d, q) or stats.yty.shape != (q, q) or stats.n != meta.get("n"):
        warnings.warn(
            f"ignoring inconsistent statistics cache entry {npz_path}: shapes "
            f"xty {stats.xty.shape}, yty {stats.yty.shape} for D={d}, q={q}; recomputing",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return stats


# --------------------------------------------------------------------------- #
# The reuse-or-compute entry point
# --------------------------------------------------------------------------- #
def _describe(fn: Any, description: Any, cache_on: bool, fn_name: str, arg: str) -> Any:
    if fn is None:
        return None
    if description is None and cache_on:
        raise ValueError(
            f"{fn_name} is set but {arg} is not: pass {arg}= (a string or JSON-able dict that "
            f"identifies the map and its parameters) so cached statistics of different maps "
            "are kept apart, or pass cache=False"
        )
    return description


def load_or_compute_stats(
    source: Any,
    Y: Any = None,
    *,
    need_xtx: bool = False,
    max_dense_features: int = 20_000,
    client: Any = None,
    block_fn: BlockFn | None = None,
    route: Any = None,
    label_fn: LabelFn | None = None,
    labels: Any = None,
    need_xtwx: bool = False,
    split: str | Sequence[str] | None = None,
    row_mask: Any = None,
    subset: Any = None,
    cache: bool = True,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> SufficientStats:
    """Statistics from the cache when saved with the same parameters, else one pass (then saved).

    Parameters
    ----------
    source : str, PathLike, Store, dask array, scipy.sparse matrix or ndarray
        A store path or an opened :class:`dmlfe.store.Store` (or a view of one: its
        ``selection`` is part of the key). X and Y are read from the store and the
        cache goes to ``<store>.stats/``, keyed by the store's ``fingerprint``. Or X
        itself: then Y is required and the cache is used only when ``cache_dir`` is
        given.
    Y : array-like, optional
        Labels when ``source`` is X.
    need_xtx, max_dense_features, client, block_fn, label_fn, need_xtwx, row_mask, progress
        As in :func:`dmlfe.stats.pass_.compute_stats`.
    route : str or dict, optional
        Description of ``block_fn`` (feature map and its parameters); required
        with ``block_fn`` when caching.
    labels : str or dict, optional
        Description of ``label_fn`` (e.g. MLDA's label-correlation matrix);
        required with ``label_fn`` when caching.
    split : str or sequence of str, optional
        Store path only: keep documents whose split is one of these.
    subset : str or dict, optional
        Name of the ``row_mask`` subset for the cache key; by default the mask's
        identity (content hash, or dask name).
    cache : bool
        Use and fill the cache.
    cache_dir : path, optional
        Cache folder; default ``<store>.stats`` for a store path.

    Returns
    -------
    SufficientStats
    """
    if subset is None and row_mask is not None and cache:
        subset = array_identity(row_mask)
    route_desc = _describe(block_fn, route, cache, "block_fn", "route")
    labels_desc = _describe(label_fn, labels, cache, "label_fn", "labels")
    if isinstance(source, str | os.PathLike):
        source = open_store(source)
        if split is not None:
            source = source.subset(split)
    elif split is not None:
        raise ValueError("split= applies to a store path; subset the Store itself instead")
    if isinstance(source, Store):
        X, Y = source.X, source.Y
        identity = source.fingerprint if cache else None
        selection = source.selection or {}
        split = selection.get("split")
        if subset is None and "rows" in selection:
            subset = {"rows": selection["rows"]}
        if cache and cache_dir is None:
            cache_dir = stats_dir_for(source.path)
    else:
        if Y is None:
            raise ValueError("Y (labels) is required when X is given instead of a store path")
        X = source
        identity = None
        if cache and cache_dir is not None:
            identity = {"x": array_identity(X), "y": array_identity(Y)}

    kwargs = dict(
        need_xtx=need_xtx,
        max_dense_features=max_dense_features,
        client=client,
        block_fn=block_fn,
        label_fn=label_fn,
        need_xtwx=need_xtwx,
        row_mask=row_mask,
        progress=progress,
    )
    if not cache or cache_dir is None:
        return compute_stats(X, Y, **kwargs)

    params = {
        "cache_format": CACHE_FORMAT,
        "dmlfe_version": __version__,
        "data": identity,
        "split": None if split is None else ([split] if isinstance(split, str) else list(split)),
        "subset": subset,
        "route": route_desc,
        "labels": labels_desc,
    }
    found = load_stats(cache_dir, params, need_xtx=need_xtx, need_xtwx=need_xtwx)
    if found is not None:
        log.info("reusing statistics %s from %s", stats_key(params), cache_dir)
        found.from_cache = True
        return found
    stats = compute_stats(X, Y, **kwargs)
    try:
        path = save_stats(stats, cache_dir, params)
        log.info("saved statistics to %s", path)
    except OSError as exc:
        warnings.warn(
            f"could not save statistics to {cache_dir} ({exc}); they will be recomputed next "
            "time. Pass cache_dir= to a writable folder to keep them",
            RuntimeWarning,
            stacklevel=2,
        )
    return stats
