"""Slots: where the shards of a sharded computation live and their tasks run.

A :class:`Slots` has one slot per dask worker (or, without a distributed client, per
thread of this process). A sharded object (:class:`dmlfe.shards.tiles.TiledMatrix`, the
Krylov vectors of :mod:`dmlfe.solvers.nspace`) keeps its part ``i`` in slot ``i``, and
every task on that part runs there: on a cluster it is submitted pinned to the slot's
worker, so the part never moves and only what a task asks of another slot travels,
worker to worker, never through the driver. Small results (matrices of a few hundred
rows) come back to the driver with :meth:`Slots.gather`.

Without a client the same functions run in this process, a stage's tasks in a thread
pool (the kernels are scipy's and BLAS's, which release the GIL), and a handle is the
value itself: one code path for a laptop's in-memory matrix and a cluster's store.

A computation whose every step needs all slots at once (the Krylov passes of
:mod:`dmlfe.solvers.nspace`) runs as a :class:`Group`: one object per slot, a dask
actor on the slot's worker (:meth:`Slots.spawn`), whose methods the driver calls on all
slots together (:meth:`Group.call`) and which hand each other pieces directly
(:class:`Mailbox`): a call is one message each way, where a chain of dependent tasks
would pass through the scheduler at every link (``docs/scaling.rst`` has the figures).

A worker that leaves the cluster takes its parts with it: waiting stops with
:class:`ShardLostError` instead of waiting for a worker that will not come back.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dmlfe.errors import DmlfeError, InputError

#: Seconds between two checks that every slot's worker is still there, while waiting.
ALIVE_CHECK = 2.0


class ShardLostError(DmlfeError, RuntimeError):
    """A worker that held part of a sharded computation left the cluster.

    ``address``: that worker's, when known.
    """

    def __init__(self, message: str, address: str | None = None) -> None:
        super().__init__(message)
        self.address = address


@dataclass
class _Done:
    """A handle of the local mode: the value itself."""

    value: Any


def _resolve(obj: Any) -> Any:
    if isinstance(obj, _Done):
        return obj.value
    if isinstance(obj, list):
        return [_resolve(o) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_resolve(o) for o in obj)
    return obj


@dataclass
class Clock:
    """Driver-side time of a sharded computation: how long the driver waited for its
    slots, how long it worked itself (CPU seconds of this process, its comm thread's
    serialisation included), and how many round trips it made."""

    waited: float = 0.0
    round_trips: int = 0
    started_wall: float = field(default_factory=time.perf_counter)
    started_cpu: float = field(default_factory=time.process_time)

    def snapshot(self) -> dict[str, float]:
        return {"wall": time.perf_counter() - self.started_wall,
                "driver_cpu": time.process_time() - self.started_cpu,
                "waited": self.waited, "round_trips": self.round_trips}


class Slots:
    """One slot per worker of ``client``, or ``n_local`` slots in this process.

    Parameters
    ----------
    client : distributed.Client, optional
        Slots are its workers, in the order of their names (then addresses).
    n_local : int, optional
        Without a client: how many slots (threads) this process runs.
    """

    def __init__(self, client: Any = None, n_local: int | None = None) -> None:
        self.client = client
        if client is not None:
            workers = client.scheduler_info()["workers"]
            if not workers:
                raise InputError(
                    "the dask cluster has no workers: start some (or wait for them to "
                    "join) before a distributed fit")
            self.addresses: list[str | None] = sorted(
                workers, key=lambda a: (str(workers[a].get("name")), a))
        else:
            self.addresses = [None] * max(1, int(n_local or 1))
        self._pool: ThreadPoolExecutor | None = None
        self.clock = Clock()
        self._run = uuid.uuid4().hex[:10]
        self._count = 0

    @property
    def n(self) -> int:
        """The number of slots."""
        return len(self.addresses)

    @property
    def distributed(self) -> bool:
        return self.client is not None

    def _local_pool(self) -> ThreadPoolExecutor:
        # a member of a Group may wait for the others: every member needs its own thread
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.n, thread_name_prefix="dmlfe-slot")
        return self._pool

    def _key(self, name: str) -> str:
        self._count += 1
        return f"{name}-{self._run}-{self._count}"

    def map(self, fn: Callable[..., Any], calls: Sequence[tuple[int, tuple]], *,
            name: str) -> list[Any]:
        """One task ``fn(*args)`` per ``(slot, args)`` of ``calls``, independent of each
        other; their handles in the same order. On a cluster nothing is waited for."""
        if self.client is None:
            if len(calls) > 1 and self.n > 1:
                pool = self._local_pool()
                futures = [pool.submit(fn, *_resolve(args)) for _, args in calls]
                return [_Done(f.result()) for f in futures]
            return [_Done(fn(*_resolve(args))) for _, args in calls]
        return [self.client.submit(fn, *args, key=self._key(name),
                                   workers=[self.addresses[slot]],
                                   allow_other_workers=False, pure=False)
                for slot, args in calls]

    def gather(self, handles: Sequence[Any]) -> list[Any]:
        """The values of ``handles``, waited for (one round trip on a cluster)."""
        self.clock.round_trips += 1
        if self.client is None:
            return [_resolve(h) for h in handles]
        t0 = time.perf_counter()
        values = []
        try:
            for h in handles:
                while True:
                    try:
                        values.append(h.result(timeout=ALIVE_CHECK))
                        break
                    except TimeoutError:  # still running: is every slot's worker there?
                        self.check_alive()
        except Exception as exc:
            if isinstance(exc, ShardLostError) or not _is_lost_worker(exc):
                raise
            address = self.lost_worker()
            raise ShardLostError(
                f"worker {address or '(unknown)'} left the dask cluster during the "
                "computation and took its part of the data with it (a crash, or its "
                "memory limit): run the fit again, with more memory per worker or more "
                "workers", address=address) from exc
        finally:
            self.clock.waited += time.perf_counter() - t0
        return values

    def check_alive(self) -> None:
        """Raise :class:`ShardLostError` when a slot's worker has left the cluster."""
        if self.client is None:
            return
        here = set(self.client.scheduler_info()["workers"])
        gone = [a for a in self.addresses if a not in here]
        if gone:
            raise ShardLostError(
                f"worker {gone[0]} left the dask cluster during the computation and took "
                "its part of the data with it (a crash, or its memory limit): run the fit "
                "again, with more memory per worker or more workers", address=gone[0])

    def lost_worker(self, timeout: float = 10.0) -> str | None:
        """The first slot's worker the scheduler no longer lists, waiting up to
        ``timeout`` for it to notice (None if none went)."""
        if self.client is None:
            return None
        deadline = time.monotonic() + timeout
        while True:
            here = set(self.client.scheduler_info()["workers"])
            gone = [a for a in self.addresses if a not in here]
            if gone or time.monotonic() > deadline:
                return gone[0] if gone else None
            time.sleep(0.1)

    def release(self, *handles: Any) -> None:
        """Drop handles early (the cluster frees their values once no task needs them)."""
        if self.client is None:
            return
        for h in handles:
            if isinstance(h, list | tuple):
                self.release(*h)
            elif h is not None and hasattr(h, "release"):
                h.release()

    def spawn(self, cls: type, per_slot: Sequence[tuple]) -> Group:
        """One ``cls(*per_slot[i])`` per slot (an actor on the slot's worker), connected
        to each other (``connect(peers)``); handles among the arguments stand for their
        values, which the actor then holds where they are."""
        futures: list[Any] = []
        if self.client is None:
            members: list[Any] = [cls(*_resolve(args)) for args in per_slot]
        else:
            futures = [self.client.submit(cls, *args, actor=True, key=self._key("dmlfe-slot"),
                                          workers=[self.addresses[i]],
                                          allow_other_workers=False)
                       for i, args in enumerate(per_slot)]
            # an actor's handle binds to the current client as it arrives (this one, which
            # need not be the process's default)
            with self.client.as_current():
                members = self.gather(futures)
        group = Group(self, members, futures)
        group.call("connect", [(members,)] * len(members))
        return group

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def _is_lost_worker(exc: BaseException) -> bool:
    """Whether an actor call failed because its worker went away (distributed says so in
    a RuntimeError, or the connection broke)."""
    if isinstance(exc, OSError | EOFError):
        return True
    try:
        from distributed.comm.core import CommClosedError
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, CommClosedError) or "holding Actor was lost" in str(exc)


class Mailbox:
    """What a slot object of a :class:`Group` receives from the others.

    ``post`` hands values to other members (directly: an async method of the receiving
    actor stores it, so the receiver's own thread may be busy); ``collect`` waits until
    one value of a tag has come from every member, or an ``abort``.
    """

    #: Seconds a member waits for the others' pieces before it gives up.
    TIMEOUT = 3600.0

    def __init__(self, index: int, n_members: int) -> None:
        self.index, self.n_members = int(index), int(n_members)
        self.peers: list[Any] = []
        self._box: dict[tuple[str, int], Any] = {}
        self._cond = threading.Condition()
        self._aborted: str | None = None
        self._sent: list[Any] = []
        #: seconds this member spent, by kind: "send" and "wait" here, the rest as the
        #: subclass books them with :meth:`timed` (the breakdown of a computation)
        self.seconds: dict[str, float] = {}

    @contextmanager
    def timed(self, kind: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[kind] = self.seconds.get(kind, 0.0) + time.perf_counter() - t0

    def timings(self) -> dict[str, float]:
        return dict(self.seconds)

    def connect(self, peers: list[Any]) -> bool:
        self.peers = list(peers)
        return True

    def disconnect(self) -> bool:
        """Drop the peers' handles and whatever is in the box. On a worker, an actor's
        handle holds a future of its key: members holding each other's handles would
        keep each other (and all they hold) alive after the driver let them go."""
        self.peers, self._sent = [], []
        with self._cond:
            self._box.clear()
        return True

    async def receive(self, tag: str, src: int, value: Any) -> bool:
        self.store(tag, src, value)
        return True

    async def abort(self, why: str) -> bool:
        with self._cond:
            self._aborted = why
            self._cond.notify_all()
        return True

    def store(self, tag: str, src: int, value: Any) -> None:
        with self._cond:
            self._box[(tag, int(src))] = value
            self._cond.notify_all()

    def post(self, tag: str, values: dict[int, Any]) -> None:
        """Send ``values[dest]`` to each member ``dest``. The sends go on while this member
        waits for what it collects next; :meth:`collect` returns once they have arrived."""
        with self.timed("send"):
            for dest, value in values.items():
                if dest == self.index:
                    self.store(tag, self.index, value)
                    continue
                peer = self.peers[dest]
                if isinstance(peer, Mailbox):  # a member in this process
                    peer.store(tag, self.index, value)
                else:
                    self._sent.append(peer.receive(tag, self.index, value))

    def _delivered(self) -> None:
        """Wait for the answers to this member's sends."""
        deadline = time.monotonic() + self.TIMEOUT
        for p in self._sent:
            while True:
                # a call to a member whose worker died may never answer: wake up now and
                # then to see whether the driver has called the computation off
                try:
                    p.result(timeout=ALIVE_CHECK)
                    break
                except TimeoutError:
                    if self._aborted is not None:
                        raise ShardLostError(self._aborted) from None
                    if time.monotonic() > deadline:
                        raise ShardLostError(
                            f"slot {self.index} could not hand its part of a step to the "
                            f"other workers in {self.TIMEOUT:.0f} s") from None
        self._sent = []

    def reduce(self, tag: str, value: Any, finish: Callable[[list[Any]], Any]) -> Any:
        """``finish(every member's value, in member order)``, for every member: member 0
        makes it and sends it to the others (2 (W - 1) messages, two hops). One member
        makes it because two processes need not round the same small algebra alike
        (BLAS kernels differ with the data's alignment): every member must hold the
        same bits of the factors it builds on.
        """
        W = self.n_members
        self.post(tag, {0: value})
        if self.index == 0:
            result = finish(self.collect(tag))
            self.post(tag + "/all", {d: result for d in range(W)})
        return self.collect(tag + "/all", sources=[0])[0]

    def collect(self, tag: str, sources: Sequence[int] | None = None) -> list[Any]:
        """The value of ``tag`` from every member (or from ``sources``), in member order
        (removed from the box)."""
        keys = [(tag, src) for src in (range(self.n_members) if sources is None
                                       else sources)]
        deadline = time.monotonic() + self.TIMEOUT
        with self.timed("wait"):
            got = self._collected(keys, tag, deadline)
            self._delivered()
        return got

    def _collected(self, keys: list[tuple[str, int]], tag: str, deadline: float
                   ) -> list[Any]:
        with self._cond:
            while not all(k in self._box for k in keys):
                if self._aborted is not None:
                    raise ShardLostError(self._aborted)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ShardLostError(
                        f"slot {self.index} waited {self.TIMEOUT:.0f} s for the other "
                        f"workers' part of step {tag!r}: a worker is stuck or gone")
                self._cond.wait(timeout=min(left, ALIVE_CHECK))
            return [self._box.pop(k) for k in keys]


class Group:
    """The members of a :meth:`Slots.spawn`: call a method on all of them at once."""

    def __init__(self, slots: Slots, members: list[Any], futures: list[Any]) -> None:
        self.slots, self.members = slots, members
        self._futures = futures  # the actors live while these are held
        self._threads: list[ThreadPoolExecutor] = []

    def close(self) -> None:
        """Let the members go (their workers free what they held)."""
        if self._futures:
            try:
                self.call("disconnect")
            except Exception:  # noqa: BLE001 - a member whose worker is gone holds nothing
                pass
        # each handle holds a future of its actor's key too, and the handles can outlive
        # this group in reference cycles (an actor call's coroutine refers to its
        # handle) until the driver's garbage collector runs: let the keys go now
        self.slots.release(self._futures, [getattr(m, "_future", None) for m in self.members])
        for t in self._threads:
            t.shutdown(wait=True)
        self._futures, self.members, self._threads = [], [], []

    def fire(self, method: str, per_member: Sequence[tuple] | None = None) -> list[Any]:
        """Start ``method(*per_member[i])`` on every member; :meth:`wait` gives results."""
        args = per_member if per_member is not None else [()] * len(self.members)
        if self.slots.client is None:
            # one thread per member, as an actor has: its calls run one after another, in
            # the order they were made, while the members run side by side
            if not self._threads:
                self._threads = [ThreadPoolExecutor(1, thread_name_prefix=f"dmlfe-slot-{i}")
                                 for i in range(len(self.members))]
            return [t.submit(getattr(m, method), *a)
                    for t, m, a in zip(self._threads, self.members, args, strict=True)]
        try:
            return [getattr(m, method)(*a) for m, a in zip(self.members, args, strict=True)]
        except Exception as exc:  # an actor whose worker is known gone refuses calls
            lost = self._lost(exc)
            if lost is exc:
                raise
            raise lost from exc

    def wait(self, fired: list[Any]) -> list[Any]:
        """The results of :meth:`fire`, waited for (checking that every worker stays).

        A member whose worker went away ends the wait with :class:`ShardLostError`
        naming that worker; the other members are woken first (:meth:`abort`).
        """
        t0 = time.perf_counter()
        self.slots.clock.round_trips += 1
        out: list[Any] = []
        try:
            if self.slots.client is None:
                for f in fired:
                    out.append(f.result())
            else:
                # every member's answer in one trip to the client's event loop: a
                # result() per member costs the driver a trip each, every step
                async def every() -> list[Any]:
                    return [await f for f in fired]

                while True:
                    try:
                        out = self.slots.client.sync(every, callback_timeout=ALIVE_CHECK)
                        break
                    except TimeoutError:  # still running: is every member's worker there?
                        self.slots.check_alive()
        except Exception as exc:
            lost = self._lost(exc)
            if lost is exc:
                raise
            raise lost from exc
        finally:
            self.slots.clock.waited += time.perf_counter() - t0
        return out

    def _lost(self, exc: Exception) -> Exception:
        """``exc`` itself, or -- when a member's worker went away -- a
        :class:`ShardLostError` naming it, after the other members were woken."""
        if not (isinstance(exc, ShardLostError) or _is_lost_worker(exc)):
            return exc
        self.abort(str(exc))
        address = getattr(exc, "address", None) or self.slots.lost_worker()
        return ShardLostError(
            f"worker {address or '(unknown)'} left the dask cluster during the computation "
            "and took its part of the data with it (a crash, or its memory limit): run the "
            "fit again, with more memory per worker or more workers", address=address)

    def call(self, method: str, per_member: Sequence[tuple] | None = None) -> list[Any]:
        """:meth:`fire` then :meth:`wait`."""
        return self.wait(self.fire(method, per_member))

    def abort(self, why: str) -> None:
        """Wake every member waiting for the others (after a worker was lost)."""
        for m in self.members:
            try:
                if isinstance(m, Mailbox):
                    with m._cond:
                        m._aborted = why
                        m._cond.notify_all()
                else:
                    m.abort(why)
            except Exception:  # noqa: BLE001 - a member on the lost worker cannot answer
                pass
