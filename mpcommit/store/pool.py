"""Many store requests at once, within bounds: the one pool behind the commit's completes, the listing and
aborting of pending uploads, and the compaction's bins and checks.

:func:`run_bounded` pulls its items lazily and keeps at most ``window`` calls submitted, so that a caller
walking millions of items (a commit's pending uploads, read manifest by manifest) holds only that many at
once. Results are handed back on the calling thread, so callers gather them without locks. It can be
cancelled (a ``threading.Event``, set on Ctrl-C): nothing more starts, what is in flight finishes. It runs
on its own thread pool, or on an executor the caller passes in; :class:`SerialExecutor` runs everything in
the caller's thread, which makes failure tests deterministic (as s3transfer's ``NonThreadedExecutor`` does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ThreadPoolExecutor, wait
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
    """Run ``fn`` over ``items`` on ``threads`` threads (or on ``executor``), with at most ``window``
    (default ``2 * threads``) calls submitted at once; items are pulled from ``items`` only as slots free up.

    ``on_result(item, result)`` runs on the calling thread as each call finishes (calls that finished together
    in the order they were submitted); when it returns False, nothing more is submitted. ``progress(phase, done, total)`` follows each finished
    call. The first exception raised by ``fn``, ``on_result`` or ``items`` also stops submitting and is raised
    once the calls in flight have ended (their results are then dropped): no call outlives this function.

    Returns False when ``cancel`` was set before every item had started, True otherwise.
    """
    threads = max(1, threads)
    window = max(1, window if window is not None else 2 * threads)
    own = executor is None
    pool: Executor = ThreadPoolExecutor(threads, thread_name_prefix="mpcommit") if own else executor  # type: ignore[assignment]
    iterator = iter(items)
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
                inflight[pool.submit(fn, item)] = item
            if not inflight:
                break
            finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
            # In submission order, so that a serial executor hands results back in a deterministic order.
            for future in [f for f in inflight if f in finished]:
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
        if inflight:  # interrupted while waiting (KeyboardInterrupt): the calls in flight still end first
            wait(inflight)
        if own:
            pool.shutdown(wait=True)
    if error is not None:
        raise error
    return not cancelled
