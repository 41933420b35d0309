"""Many calls at once, within bounds: the one pool behind the job commit's completes, the listing and aborting
of pending uploads, and the compaction's bins and checks. Nothing here knows about S3.

:func:`run_bounded` pulls its items lazily and keeps at most ``window`` calls submitted, so that a caller
walking millions of items (a commit's pending uploads, read manifest by manifest) holds only that many at
once. Finished calls come back through one queue (a done-callback puts each future there), so handing back a
result costs O(1) however many calls are in flight -- a ``wait(FIRST_COMPLETED)`` over the window would cost
O(window) per call, which at 128 completes in flight was a visible share of the commit's CPU. Results are
handed back on the calling thread, so callers gather them without locks. It can be cancelled (a
``threading.Event``, set on Ctrl-C): nothing more starts, what is in flight finishes. It runs on its own thread
pool, or on an executor the caller passes in; :class:`SerialExecutor` (and ``threads=0``) runs everything in
the caller's thread, which makes failure tests deterministic (as s3transfer's ``NonThreadedExecutor`` does).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Called as work advances with (phase, done, total); ``total`` is None while it is unknown. Every long
#: operation of mpcommit reports through this one shape (the CLI's progress bars take it as it is).
ProgressHook = Callable[[str, int, "int | None"], None]


class SerialExecutor(Executor):
    """Runs every submitted call at once, in the caller's thread: a deterministic order for tests."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:  # type: ignore[override]
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - delivered through the future
            future.set_exception(exc)
        return future


def executor_for(threads: int, name: str) -> Executor:
    """A thread pool of ``threads`` threads, or the caller's own thread when ``threads`` is 0."""
    return SerialExecutor() if threads <= 0 else ThreadPoolExecutor(threads, thread_name_prefix=name)


def run_bounded(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    threads: int,
    on_result: Callable[[T, R], bool | None] | None = None,
    window: int | None = None,
    cancel: threading.Event | None = None,
    executor: Executor | None = None,
    progress: ProgressHook | None = None,
    phase: str = "",
    total: int | None = None,
) -> bool:
    """Run ``fn`` over ``items`` on ``threads`` threads (or on ``executor``; 0 threads: the caller's thread),
    with at most ``window`` (default ``2 * threads``) calls submitted at once; items are pulled from ``items``
    only as slots free up.

    ``on_result(item, result)`` runs on the calling thread as each call finishes (in the order they finished;
    with a serial executor, the order they were submitted); when it returns False, nothing more is submitted.
    ``progress(phase, done, total)`` follows each finished call. The first exception raised by ``fn``,
    ``on_result`` or ``items`` also stops submitting and is raised once the calls in flight have ended (their
    results are then dropped): no call outlives this function.

    Returns False when ``cancel`` was set before every item had started, True otherwise.
    """
    window = max(1, window if window is not None else 2 * max(1, threads))
    own = executor is None
    pool: Executor = executor_for(threads, "mpcommit") if own else executor  # type: ignore[assignment]
    iterator = iter(items)
    finished: queue.SimpleQueue[Future[R]] = queue.SimpleQueue()
    inflight: dict[Future[R], T] = {}
    error: BaseException | None = None
    stopped = cancelled = False
    done = 0
    try:
        while True:
            while not stopped and error is None and len(inflight) < window:
                if cancel is not None and cancel.is_set():
                    stopped = cancelled = True
                    break
                try:
                    item = next(iterator)
                except StopIteration:
                    stopped = True
                    break
                except BaseException as exc:  # noqa: BLE001 - e.g. a manifest that could not be read
                    error = exc
                    break
                future = pool.submit(fn, item)
                inflight[future] = item
                future.add_done_callback(finished.put)
            if not inflight:
                break
            # Every call finished by now is handed back before more are submitted (with a serial executor:
            # the whole window, in the order it was submitted).
            batch = [finished.get()]
            while True:
                try:
                    batch.append(finished.get_nowait())
                except queue.Empty:
                    break
            for future in batch:
                item = inflight.pop(future)
                if error is not None:
                    continue
                try:
                    result = future.result()
                    done += 1
                    if on_result is not None and on_result(item, result) is False:
                        stopped = True
                    if progress is not None:
                        progress(phase, done, total)
                except BaseException as exc:  # noqa: BLE001 - raised once the calls in flight have ended
                    error = exc
    finally:
        while inflight:  # interrupted while waiting (KeyboardInterrupt): the calls in flight still end first
            inflight.pop(finished.get(), None)
        close = getattr(iterator, "close", None)
        if close is not None:
            close()  # a generator reading manifests ahead stops its reads now, not at garbage collection
        if own:
            pool.shutdown(wait=True)
    if error is not None:
        raise error
    return not cancelled
