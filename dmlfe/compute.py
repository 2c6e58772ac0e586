"""The one home of dmlfe's dask plumbing.

Everything that turns an input into row blocks and runs a pass over them lives
here, as public names, so that the statistics pass (:mod:`dmlfe.stats.pass_`),
the matrix-free solvers (:mod:`dmlfe.solvers.matrix_free`), projection
(:mod:`dmlfe.projection`) and the relation route (:mod:`dmlfe.relation`) share
one implementation:

* inputs: :func:`is_dask`, :func:`as_row_blocks`, :func:`check_row_blocks`,
  :func:`row_block_list`, :func:`as_2d_labels`, :func:`align_rows`;
* blocks: :data:`BlockFn`, :func:`to_float_block`, :func:`block_width`;
* driver threads: :func:`driver_threads`, :func:`in_threads`;
* passes: :func:`tree_reduce`, :func:`run`, :func:`compute_one` -- one compute
  per pass, optional progress (drawn by :mod:`dmlfe.progress`), reductions on the
  workers.

This module imports nothing from the rest of dmlfe but :mod:`dmlfe.progress`.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any, TypeAlias

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.base import tokenize
from dask.delayed import Delayed, delayed
from threadpoolctl import ThreadpoolController

from dmlfe.progress import LocalProgress, ProgressLine, progress_default, watch_futures

log = logging.getLogger(__name__)

#: A per-block feature map: called on one row block of X (CSR or ndarray), it
#: returns that block's rows in another feature space (sparse or dense, any width).
BlockFn: TypeAlias = Callable[[Any], Any]


# --------------------------------------------------------------------------- #
# Inputs
# --------------------------------------------------------------------------- #
def is_dask(a: Any) -> bool:
    """Whether ``a`` is a dask array.

    Parameters
    ----------
    a : object
        Anything.

    Returns
    -------
    bool
        True for a :class:`dask.array.Array`, False otherwise.
    """
    return isinstance(a, da.Array)


def as_row_blocks(a: Any, row_chunks: Sequence[int]) -> da.Array:
    """Wrap an in-memory matrix as a dask array of row blocks.

    The blocks keep the input's kind (CSR stays CSR), so every function that
    accepts a store's X accepts the result.

    Parameters
    ----------
    a : scipy.sparse matrix or ndarray
        The in-memory matrix (rows are documents).
    row_chunks : sequence of int
        Rows of each block; they must sum to ``a.shape[0]``.

    Returns
    -------
    dask.array.Array
        ``a`` as one delayed block per entry of ``row_chunks`` (CSR blocks for a
        sparse ``a``).

    Raises
    ------
    ValueError
        If ``row_chunks`` does not sum to the number of rows.
    """
    row_chunks = tuple(int(c) for c in row_chunks)
    if sum(row_chunks) != a.shape[0]:
        raise ValueError(
            f"row chunks {row_chunks[:5]}... sum to {sum(row_chunks)} but the matrix has "
            f"{a.shape[0]} rows"
        )
    if sp.issparse(a):
        a = sp.csr_matrix(a)
        meta: Any = sp.csr_matrix((0, a.shape[1]), dtype=a.dtype)
    else:
        a = np.asarray(a)
        meta = np.empty((0,) * a.ndim, dtype=a.dtype)
    blocks = []
    start = 0
    for c in row_chunks:
        piece = a[start : start + c]
        shape = (c,) + tuple(a.shape[1:])
        blocks.append(da.from_delayed(delayed(piece), shape=shape, dtype=a.dtype, meta=meta))
        start += c
    return da.concatenate(blocks, axis=0)


def check_row_blocks(X: da.Array) -> da.Array:
    """Check a dask X and give it whole rows per block.

    Parameters
    ----------
    X : dask.array.Array
        Documents x features, 2-D, with known row-chunk sizes.

    Returns
    -------
    dask.array.Array
        ``X`` itself, or ``X`` rechunked to a single column chunk when it had
        several (per-block reductions need whole rows).

    Raises
    ------
    ValueError
        If ``X`` is not 2-D or its row-chunk sizes are unknown (NaN).
    """
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (documents x features); got shape {X.shape}")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(
            "X has unknown row-chunk sizes; call X.compute_chunk_sizes() or open the store "
            "again so that the row blocks have known lengths"
        )
    if len(X.chunks[1]) > 1:
        # One column chunk per row block: the per-block reductions need whole rows.
        X = X.rechunk({1: -1})
    return X


def row_block_list(X: Any) -> tuple[list[Any], np.ndarray]:
    """X's row blocks (delayed, whole rows each) and their first rows.

    Parameters
    ----------
    X : dask array, scipy.sparse matrix or ndarray
        Documents x features; an in-memory X is one block.

    Returns
    -------
    (blocks, starts)
        The blocks in row order and ``starts`` (int64, one more entry than blocks: the
        first row of each block, then the number of rows), for passes whose tasks read
        pairs of blocks.
    """
    if is_dask(X):
        blocks = list(check_row_blocks(X).to_delayed().ravel())
        sizes = [int(c) for c in X.chunks[0]]
    else:
        blocks, sizes = [X], [int(X.shape[0])]
    return blocks, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def as_2d_labels(Y: Any) -> Any:
    """A label matrix as 2-D: a 1-D Y becomes one column.

    Parameters
    ----------
    Y : array-like or dask array, shape (n,) or (n, q)
        Labels (in memory or dask; not converted).

    Returns
    -------
    array-like or dask array, shape (n, q)
        ``Y`` itself when 2-D, ``Y.reshape(-1, 1)`` when 1-D.

    Raises
    ------
    ValueError
        If ``Y`` has more than two dimensions.
    """
    if Y.ndim == 1:
        return Y.reshape(-1, 1)
    if Y.ndim != 2:
        raise ValueError(f"Y must be 2-D (documents x labels); got shape {Y.shape}")
    return Y


def align_rows(X: Any, Y: Any) -> tuple[Any, Any]:
    """Bring X and Y to the same form: both in memory, or both dask with the same row chunks.

    Parameters
    ----------
    X : dask array, scipy.sparse matrix or ndarray
        Documents x features.
    Y : dask array or array-like, shape (n,) or (n, q)
        Labels of the same documents (a 1-D Y becomes one column).

    Returns
    -------
    (X, Y)
        Unchanged when both are in memory. When either is a dask array, an
        in-memory X is wrapped with Y's row chunks (:func:`as_row_blocks`), X is
        checked (:func:`check_row_blocks`) and Y is wrapped or rechunked to X's
        row chunks and a single column chunk.

    Raises
    ------
    ValueError
        If the row counts differ, or X fails :func:`check_row_blocks`.
    """
    Y = as_2d_labels(Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X has {X.shape[0]} rows (documents) but Y has {Y.shape[0]}; they must describe "
            "the same documents in the same order"
        )
    if not is_dask(X) and not is_dask(Y):
        return X, Y
    if not is_dask(X):
        X = as_row_blocks(X, Y.chunks[0])
    X = check_row_blocks(X)
    if not is_dask(Y):
        Y = da.from_array(np.asarray(Y), chunks=(X.chunks[0], -1))
    elif Y.chunks[0] != X.chunks[0] or len(Y.chunks[1]) > 1:
        Y = Y.rechunk((X.chunks[0], -1))
    return X, Y


# --------------------------------------------------------------------------- #
# Blocks
# --------------------------------------------------------------------------- #
def to_float_block(xb: Any, dtype: Any = np.float64) -> Any:
    """One row block as float64 (or ``dtype``), keeping its kind.

    Parameters
    ----------
    xb : scipy.sparse matrix or array-like
        A row block of X (or of a ``block_fn``'s output).
    dtype : numpy dtype, default float64
        float32 only for products with float32 components (see
        :func:`dmlfe.projection.project`); every pass accumulates in float64.

    Returns
    -------
    scipy.sparse.csr_matrix or ndarray
        A CSR matrix of ``dtype`` for a sparse block, an ndarray of ``dtype`` otherwise.
    """
    if sp.issparse(xb):
        return sp.csr_matrix(xb, dtype=dtype)
    return np.asarray(xb, dtype=dtype)


#: At most this many threads for the driver's own sparse kernels (:func:`driver_threads`).
DRIVER_THREADS_MAX = 8


def _in_worker_task() -> bool:
    try:
        from distributed import get_worker

        get_worker()
    except (ImportError, ValueError):
        return False
    return True


@functools.cache
def _blas_controller() -> ThreadpoolController:
    # found once per process: a controller looks through every loaded shared library
    return ThreadpoolController()


def blas_threads(n: int) -> Any:
    """A context in which the driver's BLAS libraries (numpy's and scipy's) run on ``n``
    threads."""
    return _blas_controller().limit(limits=max(1, int(n)), user_api="blas")


def one_blas_thread() -> Any:
    """:func:`blas_threads` (1): for chains of small products and factorisations, whose
    BLAS threads would only wait for each other (and, on a busy machine, for the CPU)."""
    return blas_threads(1)


@functools.cache
def _numpy_blas() -> ThreadpoolController:
    # numpy's wheel brings its own OpenBLAS (under numpy.libs), beside scipy's
    ctl = _blas_controller()
    return ctl.select(filepath=[c.filepath for c in ctl.lib_controllers
                                if c.user_api == "blas" and
                                os.path.basename(os.path.dirname(c.filepath)) == "numpy.libs"])


def numpy_blas_threads(n: int) -> Any:
    """A context in which numpy's own BLAS library, where its wheel brings one beside
    scipy's, runs on ``n`` threads (scipy's keeps its own): for loops that alternate
    numpy's small products with scipy's large solves, where numpy's idle threads,
    spinning after each product, take the CPUs from scipy's. A no-op where both use one
    library."""
    return _numpy_blas().limit(limits=max(1, int(n)))


def symmetric_matmul(G: np.ndarray, V: np.ndarray) -> np.ndarray:
    """G V for a symmetric float64 G by scipy's BLAS, with G passed in Fortran order
    without a copy (G or its transpose, which is G): the product keeps scipy's threads
    inside a :func:`numpy_blas_threads` (1) context."""
    from scipy.linalg.blas import dgemm

    return dgemm(1.0, G if G.flags.f_contiguous else G.T, V)


def idle_cpus() -> int:
    """The CPUs this process may run on that the machine's 1-minute load average leaves
    idle, at least 1: BLAS threads beyond them wait for a CPU at every
    synchronisation, and a product split over them takes several times longer than on
    one thread."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        n = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - platforms without a load average
        return n
    return max(1, min(n, int(n - load + 0.5)))


def driver_threads() -> int:
    """Threads for sparse products the driver runs itself (scipy's kernels release the GIL).

    The CPUs this process may run on (``os.sched_getaffinity``), at most
    :data:`DRIVER_THREADS_MAX`, or the ``DMLFE_DRIVER_THREADS`` environment variable
    when set (1 turns the threading off). Inside a dask worker's task it is 1: there
    the worker's own threads are the parallelism.
    """
    if _in_worker_task():
        return 1
    env = os.environ.get("DMLFE_DRIVER_THREADS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"DMLFE_DRIVER_THREADS must be a positive integer; got {env!r}"
                             ) from None
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        n = os.cpu_count() or 1
    return max(1, min(n, DRIVER_THREADS_MAX))


def _default_client() -> Any:
    """The process's default distributed client, or None."""
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def cluster_threads(client: Any = None) -> int | None:
    """Threads of the workers that would run a pass: ``client``'s, or the default
    distributed client's; None when passes run on dask's local scheduler in this
    process (no client at all)."""
    client = client if client is not None else _default_client()
    return None if client is None else int(sum(client.nthreads().values()))


def computing_client(client: Any = None) -> Any:
    """``client``, or the distributed client ``dask.compute`` would run a graph on now
    (the default one, unless dask's ``scheduler`` is set to a local scheduler); None."""
    if client is not None:
        return client
    if dask.config.get("scheduler", None) not in (None, "dask.distributed", "distributed"):
        return None
    return _default_client()


#: Arrays of more bytes are scattered to a distributed client's workers before a graph
#: that needs them is built (:func:`graph_operand`): distributed warns of graphs above
#: 10 MB ("Sending large graph"), and an embedded array travels through the scheduler.
SCATTER_BYTES = 2**23


def graph_operand(a: np.ndarray, client: Any = None, nbytes: int | None = None) -> Any:
    """One graph reference to ``a`` shared by every task of a graph: a future of ``a``
    scattered to :func:`computing_client`'s workers when it holds over
    :data:`SCATTER_BYTES` (or ``nbytes`` does: the size of what ``a`` is a piece of;
    the graph must then be computed on that client), a single delayed key otherwise."""
    size = a.nbytes if nbytes is None else int(nbytes)
    client = computing_client(client) if size > SCATTER_BYTES else None
    if client is None:
        return delayed(a)
    return client.scatter(a, hash=False)


def in_threads(fn: Callable[..., Any], *arg_lists: Sequence[Any], threads: int) -> None:
    """``fn(*args)`` for each tuple of ``zip(*arg_lists)``, in up to ``threads`` threads.

    For driver-side kernels that release the GIL and write disjoint parts of one output
    (scipy's sparse products); with one thread or one call, they run in this thread.
    """
    calls = list(zip(*arg_lists, strict=True))
    if threads > 1 and len(calls) > 1:
        with ThreadPoolExecutor(min(threads, len(calls))) as pool:
            for future in [pool.submit(fn, *args) for args in calls]:
                future.result()  # re-raises a worker thread's exception here
    else:
        for args in calls:
            fn(*args)


def kept_float_dtype(a: np.ndarray) -> np.dtype:
    """float32 for a float32 array, float64 for any other: the dtype float32 components
    (``components_dtype="float32"``) keep in a projection and in a saved model, where
    every other array is float64."""
    return np.dtype(np.float32 if a.dtype == np.float32 else np.float64)


def used_columns(xb: Any) -> tuple[np.ndarray, Any]:
    """(columns, block on those columns): a sparse row block narrowed to the columns it uses.

    A row block of hashed text touches a small fraction of the D columns, so a partial
    result over D (a D x k product, 0.9 GB at D = 2^20, k = 110) would be mostly zeros
    on its way to the sum: passes send partials over ``columns`` only and add them with
    :func:`add_column_parts`. A dense block keeps all its columns.

    Parameters
    ----------
    xb : scipy.sparse matrix or ndarray
        A float row block (see :func:`to_float_block`).

    Returns
    -------
    (columns, block)
        Sorted int64 column indices and the block restricted to them (same rows).
    """
    if not sp.issparse(xb):
        return np.arange(xb.shape[1]), xb
    xb = sp.csr_matrix(xb)
    D = xb.shape[1]
    if D <= 16 * max(xb.nnz, 1):
        # a used-column mask and its running count: O(D + nnz), where sorting the
        # indices (np.unique) was most of a map-back task at 2^20 (benchmarks/scale.py)
        used = np.zeros(D, dtype=bool)
        used[xb.indices] = True
        cols = np.flatnonzero(used).astype(np.int64)
        new_index = np.cumsum(used, dtype=np.int64)
        new_index -= 1
        indices = new_index[xb.indices]
    else:
        cols = np.unique(xb.indices).astype(np.int64)
        indices = np.searchsorted(cols, xb.indices)
    narrow = sp.csr_matrix((xb.data, indices, xb.indptr), shape=(xb.shape[0], cols.size))
    return cols, narrow


#: Most bytes of :class:`SelectColumns`' lookup table (one int32 per feature: 4 MiB at
#: 2^20 features); above it, a binary search per stored value.
SELECT_TABLE_BYTES = 64 * 2**20


class SelectColumns:
    """A :data:`BlockFn` keeping the given columns of every row block, renumbered 0..m-1.

    For a matrix whose other columns are empty: every entry of a sparse block must lie
    in ``columns`` (a ValueError says otherwise) -- unless ``drop_others``, which drops
    the entries of the other columns (new documents projected on components that are
    zero there). Picklable, so it ships to workers.
    """

    def __init__(self, columns: np.ndarray, n_features: int, drop_others: bool = False
                 ) -> None:
        self.columns = np.asarray(columns, dtype=np.int64)
        self.n_features = int(n_features)
        self.drop_others = bool(drop_others)
        self._table: np.ndarray | None = None

    def __getstate__(self) -> dict:
        # the lookup table is rebuilt where it is used, not shipped to the workers
        return {**self.__dict__, "_table": None}

    def _positions(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(each index's position in ``columns``, whether it is one of them).

        Through a table of one int32 per feature while that is at most
        :data:`SELECT_TABLE_BYTES`: a gather per stored value, cheaper than a binary
        search of each."""
        m = self.columns.size
        # (the table's int32 positions: m <= n_features, far below 2^31 under the limit)
        if 4 * self.n_features <= SELECT_TABLE_BYTES and \
                int(indices.max(initial=-1)) < self.n_features:
            if self._table is None:
                table = np.full(self.n_features, -1, dtype=np.int32)
                table[self.columns] = np.arange(m, dtype=np.int32)
                self._table = table
            pos = self._table[indices]
            return pos, pos >= 0
        pos = np.searchsorted(self.columns, indices)
        inside = pos < m
        inside[inside] = self.columns[pos[inside]] == indices[inside]
        return pos, inside

    def __call__(self, xb: Any) -> Any:
        if not sp.issparse(xb):
            return np.asarray(xb)[:, self.columns]
        xb = sp.csr_matrix(xb)
        pos, inside = self._positions(xb.indices)
        if inside.all():
            return sp.csr_matrix((xb.data, pos, xb.indptr),
                                 shape=(xb.shape[0], self.columns.size))
        if not self.drop_others:
            raise ValueError("a row block has entries in columns the statistics found empty: "
                             "the statistics do not describe this X (recompute them)")
        rows = np.repeat(np.arange(xb.shape[0]), np.diff(xb.indptr))[inside]
        indptr = np.zeros(xb.shape[0] + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=xb.shape[0]), out=indptr[1:])
        return sp.csr_matrix((xb.data[inside], pos[inside], indptr),
                             shape=(xb.shape[0], self.columns.size))

    def __dask_tokenize__(self) -> Any:
        return ("dmlfe.SelectColumns", self.n_features, self.drop_others,
                tokenize(self.columns))


def add_column_parts(*parts: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Sum of column-restricted partials ``(columns, values)``, on the union of the columns.

    ``values`` has one row per column (shape ``(len(columns), ...)``): a D x k partial
    kept in that C order is added a contiguous row at a time.
    """
    cols = parts[0][0]
    for c, _ in parts[1:]:
        cols = np.union1d(cols, c)
    out = np.zeros((cols.size, *parts[0][1].shape[1:]))
    for c, v in parts:
        out[np.searchsorted(cols, c)] += v
    return cols, out


def block_width(block_fn: BlockFn | None, n_features: int, dtype: Any) -> int | None:
    """Number of columns a pass sees: ``block_fn``'s output width, probed on an empty block.

    Parameters
    ----------
    block_fn : callable or None
        The per-block feature map; None means X's own columns.
    n_features : int
        Columns of X.
    dtype : dtype
        X's dtype, for the empty CSR probe block (0 x ``n_features``).

    Returns
    -------
    int or None
        ``n_features`` without a ``block_fn``; else the width of
        ``block_fn``'s output on the empty block, or None when the map does not
        accept one (the width is then checked block by block).
    """
    if block_fn is None:
        return n_features
    try:
        out = block_fn(sp.csr_matrix((0, n_features), dtype=dtype))
        return int(out.shape[1])
    except Exception:  # the hook need not accept empty blocks: checked per block then
        return None


# --------------------------------------------------------------------------- #
# Passes
# --------------------------------------------------------------------------- #


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


def run(*objs: Any, desc: str = "", progress: bool | None = None, client: Any = None,
        fold: Callable[[Any], None] | None = None, scheduler: str | None = None,
        window: int | None = None) -> tuple:
    """Compute dask collections in ONE pass (a single scheduler call).

    With a distributed ``client`` the work runs there; without one, ``dask.compute``
    runs it on ``scheduler`` (e.g. "threads": in this process, whatever client exists)
    or else on dask's configured scheduler (the process's default distributed client
    if any). With ``progress``, a bar on stderr (:mod:`dmlfe.progress`: redrawn in
    place on a terminal, a line every few seconds otherwise) and, for a pass that took
    a second or more, a closing line with its time. ``progress=None`` takes the
    default of :func:`dmlfe.progress.show_progress`.

    With ``fold``, each result is handed to ``fold`` in the order of ``objs`` and an
    empty tuple is returned: on a client a result leaves the cluster only when its
    turn comes and is released at once, so the driver holds one at a time (partials
    that a tree reduction would add on a worker into one more full-size array).
    ``window`` (with ``fold`` on a client) also bounds what the workers hold: at most
    that many results are submitted and not yet folded, the next being submitted as one
    is folded (results of hundreds of MB each, which would otherwise wait on the workers
    all at once); the progress bar then counts folded results.
    """
    t0 = time.perf_counter()
    desc = desc or "pass"
    if progress is None:
        progress = progress_default()
    log.info("%s: started", desc)
    line = ProgressLine(desc) if progress else None
    if client is None:
        if line is not None:
            with LocalProgress(line):
                out = dask.compute(*objs, scheduler=scheduler)
        else:
            out = dask.compute(*objs, scheduler=scheduler)
    elif fold is not None and window:
        _fold_windowed(client, objs, fold, int(window), line)
        out = ()
    else:
        futures = client.compute(list(objs))
        if line is not None:
            try:
                watch_futures(futures, line)
            except Exception as exc:  # progress is best effort: never fail the pass for it
                log.info("%s: no progress bar (%s)", desc, exc)
        if fold is None:
            out = tuple(client.gather(futures))
        else:
            for future in futures:
                fold(future.result())
                future.release()
            out = ()
    if fold is not None and client is None:
        for value in out:
            fold(value)
        out = ()
    took = time.perf_counter() - t0
    log.info("%s: done in %.1f s", desc, took)
    if line is not None and (line.lines or took >= 1.0):
        print(f"[dmlfe] {desc}: done in {took:.1f} s", file=sys.stderr)
    return out


def _fold_windowed(client: Any, objs: Sequence[Any], fold: Callable[[Any], None], window: int,
                   line: ProgressLine | None) -> None:
    """:func:`run`'s ``fold`` with at most ``window`` results submitted and not folded."""
    queue = iter(objs)
    pending = deque(client.compute(obj) for obj in islice(queue, max(1, window)))
    done = 0
    while pending:
        future = pending.popleft()
        fold(future.result())
        future.release()
        nxt = next(queue, None)
        if nxt is not None:
            pending.append(client.compute(nxt))
        done += 1
        if line is not None:
            line.update(done, len(objs))
    if line is not None:
        line.close()


def compute_one(obj: Any, client: Any = None, progress: bool | None = None,
                desc: str = "pass") -> Any:
    """:func:`run` for a single collection; returns its value."""
    return run(obj, desc=desc, progress=progress, client=client)[0]
