"""Progress of a dask pass on stderr.

On a terminal, a bar redrawn in place::

    [dmlfe] statistics pass [##########..........]  50%  120/240 tasks  12 s

elsewhere (a log file, a pipe, a batch job's output) the same text as a new line
every :data:`LOG_INTERVAL` seconds, so logs stay readable. The task counts come from
dask itself: on a distributed cluster from the scheduler's progress plugin (every task
the pass's results depend on, as ``distributed.progress`` counts them), on dask's
local schedulers from a :class:`dask.callbacks.Callback`.

This module imports nothing from the rest of dmlfe.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from dask.callbacks import Callback

#: Seconds between two progress lines when stderr is not a terminal.
LOG_INTERVAL = 5.0
#: Seconds between two redraws of the bar on a terminal.
TTY_INTERVAL = 0.2
BAR_WIDTH = 24


_SHOW: ContextVar[bool] = ContextVar("dmlfe_progress", default=False)


@contextlib.contextmanager
def show_progress(on: bool = True) -> Iterator[None]:
    """Within the block, passes that were not told otherwise show their progress.

    A pass's own ``progress=`` argument wins; this sets the default of the rest (the
    command line turns it on unless ``--quiet``, so that every long pass -- the
    matrix-free solver's, projection's -- shows progress without each caller passing
    a flag down).
    """
    token = _SHOW.set(on)
    try:
        yield
    finally:
        _SHOW.reset(token)


def progress_default() -> bool:
    """Whether passes show progress when not told (see :func:`show_progress`)."""
    return _SHOW.get()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """The text of one pass's progress, drawn in place or logged as lines.

    Parameters
    ----------
    desc : str
        What the pass does ("statistics pass").
    stream : file, optional
        Where to write (default: ``sys.stderr`` at the time of the call).
    tty : bool, optional
        Redraw in place (default: whether ``stream`` is a terminal).
    """

    def __init__(self, desc: str, stream: TextIO | None = None, tty: bool | None = None):
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        self.tty = _isatty(self.stream) if tty is None else tty
        self.interval = TTY_INTERVAL if self.tty else LOG_INTERVAL
        self.t0 = time.monotonic()
        self._last = self.t0  # the first line comes after one interval: short passes
        self._width = 0       # print only their "done" line
        self.lines = 0

    def text(self, done: int, total: int) -> str:
        """The progress text for ``done`` of ``total`` tasks."""
        frac = min(1.0, done / total) if total else 0.0
        bar = "#" * int(round(BAR_WIDTH * frac))
        return (f"[dmlfe] {self.desc} [{bar:.<{BAR_WIDTH}}] {int(100 * frac):3d}%  "
                f"{done}/{total} tasks  {time.monotonic() - self.t0:.0f} s")

    def update(self, done: int, total: int, force: bool = False) -> None:
        """Show ``done`` of ``total`` tasks if an interval has passed since the last."""
        now = time.monotonic()
        if not force and now - self._last < self.interval:
            return
        self._last = now
        msg = self.text(done, total)
        try:
            if self.tty:
                self.stream.write("\r" + msg.ljust(self._width))
                self._width = len(msg)
            else:
                self.stream.write(msg + "\n")
            self.stream.flush()
        except ValueError:  # a closed stream: progress is never worth an error
            return
        self.lines += 1

    def close(self) -> None:
        """Clear the bar on a terminal (the caller prints the pass's result line)."""
        if self.tty and self._width:
            try:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            except ValueError:
                pass
            self._width = 0


class LocalProgress(Callback):
    """Progress of a compute on dask's local schedulers (threads, processes, sync)."""

    def __init__(self, line: ProgressLine) -> None:
        super().__init__()
        self.line = line

    def _posttask(self, key: Any, result: Any, dsk: Any, state: dict, worker_id: Any) -> None:
        done = len(state["finished"])
        self.line.update(done, done + sum(len(state[k]) for k in ("ready", "waiting",
                                                                   "running")))

    def _finish(self, dsk: Any, state: Any, errored: bool) -> None:
        self.line.close()


def watch_futures(futures: list, line: ProgressLine) -> None:
    """Show the progress of ``futures`` until they finish or one fails.

    Uses distributed's own progress machinery (the scheduler-side ``Progress`` plugin
    behind ``distributed.progress``): it counts every task the futures depend on, not
    only the futures.
    """
    from distributed.diagnostics.progressbar import TextProgressBar

    class _Bar(TextProgressBar):
        # distributed's text bar writes to stdout, which is for results: draw through
        # the ProgressLine on stderr instead
        def _draw_bar(self, remaining: int, all: int, **kwargs: Any) -> None:  # noqa: A002
            line.update(all - remaining, all)

        def _draw_stop(self, **kwargs: Any) -> None:
            line.close()

    client = futures[0].client
    _Bar(futures, scheduler=client.scheduler.address, interval=f"{int(1000 * TTY_INTERVAL)}ms",
         complete=True, loop=client.loop)
