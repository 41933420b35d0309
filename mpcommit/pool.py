"""Many calls at once, within bounds: the one driver behind the job commit's completes, deletes and aborts, the
listing and aborting of pending uploads, and the compaction's bins and checks. Nothing here knows about S3.

:func:`run_windowed` keeps at most a :class:`Window` of calls in flight, pulling its items lazily, so that a
caller walking millions of items (a commit's pending uploads, read manifest by manifest) holds only that many at
once. A call is *started* (``start(item, done)``) and reports its end through ``done`` from any thread: on a
thread pool (:func:`on_threads`, what :func:`run_bounded` does), or on an asynchronous transport that needs no
thread per call at all (the AWS CRT's HTTP client: hundreds of completes in flight from one thread). Finished
calls come back through one queue, so handing back a result costs O(1) however many are in flight, and results
are handed back on the calling thread, so callers gather them without locks.

The window can be fixed, or adaptive: it grows while answers come back fast and clean, and halves when the
service asks to slow down (AIMD, :class:`Window`); a call that failed transiently is retried by the driver after
a backoff (``retries``), without holding a thread or a place in the window while it waits.

It can be cancelled (a ``threading.Event``, set on Ctrl-C): nothing more starts, what is in flight finishes.
:class:`SerialExecutor` (and ``threads=0``) runs everything in the caller's thread, which makes failure tests
deterministic (as s3transfer's ``NonThreadedExecutor`` does).
"""

from __future__ import annotations

import heapq
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

#: Called as work advances with (phase, done, total); ``total`` is None while it is unknown. Every long
#: operation of mpcommit reports through this one shape (the CLI's progress bars take it as it is).
ProgressHook = Callable[[str, int, "int | None"], None]
#: Reports a call's end, once, from any thread: (result, None) or (None, the exception).
Done = Callable[[Any, "BaseException | None"], None]
#: Starts one call at an item without waiting for it; it reports through ``done``.
Start = Callable[[T, Done], None]


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


@contextmanager
def lent_or_own(lent: Executor | None, threads: int, name: str) -> Iterator[Executor]:
    """``lent`` when the caller lends a pool (it stays the caller's to shut down), else a pool of ``threads``
    threads made here and shut down, after its calls end, when the block exits -- however it exits."""
    if lent is not None:
        yield lent
        return
    pool = executor_for(threads, name)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True)


def on_threads(executor: Executor, fn: Callable[[T], Any]) -> Start[T]:
    """Calls of ``fn`` on ``executor``, as :func:`run_windowed` starts them."""

    def start(item: T, done: Done) -> None:
        executor.submit(fn, item).add_done_callback(lambda future: done(*_outcome(future)))

    return start


def _outcome(future: Future) -> tuple[Any, BaseException | None]:
    try:
        error = future.exception()
    except CancelledError as cancelled:
        return None, cancelled
    return (None, error) if error is not None else (future.result(), None)


class Window:
    """How many calls may be in flight: fixed, or found from the answers (``ceiling`` above ``initial``).

    Answers are judged a round at a time (as many answers as the window holds: about one round trip); the first
    round only warms up (new connections, a cold server). A round whose answers came back *fast* -- their mean
    time within :attr:`FAST` of the fastest round's, so the service is not queueing them -- and *clean* (no
    failure), with the window kept full, grows the window: doubling per round at first (slow start), as long as
    each doubling brings :attr:`GAIN` more answers per second -- when it does not, the service was already
    answering all it could, and the window goes back to what it was -- then by ``step`` per round (a quarter of
    ``initial``). Slow start also ends on a refusal, or two slow rounds in a row (one is noise). A round slower
    than :attr:`SLOW` times the fastest -- the service queueing what the window added -- shrinks it by a quarter,
    never below ``initial``: a service that only slows down under load (a local server, a saturated client)
    keeps about the window it started with. A request the service refused as too many (503 SlowDown) halves it,
    down to ``floor`` -- once per round trip: refusals of requests sent before the last halving are the same
    overshoot. (TCP's congestion window is the model; the rate check is its "hybrid slow start".)
    """

    FAST = 1.5
    SLOW = 2.0
    GAIN = 1.25
    GATHER_MAX = 0.005
    GATHER_MIN = 0.0005

    def __init__(self, initial: int, *, ceiling: int | None = None, floor: int = 1, step: int | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.initial = max(1, initial)
        self.ceiling = max(self.initial, ceiling or self.initial)
        self.floor = max(1, min(floor, self.initial))
        self.step = step or max(1, self.initial // 4)
        self._limit = float(self.initial)
        self._slow_start = True
        self._slow_rounds = 0  # slow rounds in a row
        self._cut_at = -math.inf
        self._fastest: float | None = None  # the fastest round's mean answer time so far
        self._clock = clock
        self._round = self._round_full = 0
        self._round_seconds = 0.0
        self._round_clean = True
        self._round_started = clock()
        self._warm = False  # past the first round
        self._last_rate: float | None = None  # answers per second of the last round
        self._doubled_from: float | None = None  # the window before the last doubling, while it is judged
        #: What the window went through, for reports and benchmarks.
        self.peak = self.initial
        self.slowdowns = 0
        self.halvings = 0

    @property
    def limit(self) -> int:
        return int(self._limit)

    def gather_pause(self) -> float:
        """How long to wait, once an answer has woken the caller, for the answers right behind it: a twentieth of
        the fastest round's mean answer time, at most :attr:`GATHER_MAX` seconds; none while answers are too fast
        for a pause to pay (under :attr:`GATHER_MIN`).

        With hundreds of completes in flight at 80 ms each, answers arrive every few hundred microseconds, and
        waking the calling thread for each one hands the interpreter lock back and forth with the thread the
        answers arrive on (the CRT's event loop) once per answer. Waiting a moment hands back tens of answers per
        wake-up instead: the 10,000-file commit through the S3-like network took 0.84x the CPU it took without (6
        pairs; bench/results/commit_37/README.md, "Answers gathered"). The price is bounded: each call restarts at
        most this much later, so the window's throughput drops by at most 1/20; a local server answering in a
        millisecond gets no pause at all."""
        if self._fastest is None:
            return 0.0
        pause = min(self.GATHER_MAX, self._fastest / 20)
        return pause if pause >= self.GATHER_MIN else 0.0

    @property
    def at_floor(self) -> bool:
        return self._limit <= self.floor

    def answered(self, seconds: float, *, full: bool = True) -> None:
        """A call ended well after ``seconds``; ``full``: the window was full when it did (the caller was
        keeping it busy, so its size was what limited the calls in flight)."""
        self._round += 1
        self._round_seconds += seconds
        self._round_full += full
        if self._round >= self._limit:
            self._end_round()

    def failed(self) -> None:
        """A call failed, not for the window's size: the round is not clean (no growth)."""
        self._round_clean = False

    def slowed(self, sent: float, now: float | None = None) -> None:
        """The service refused a call sent at ``sent`` (time.monotonic) as one too many: halve."""
        self.slowdowns += 1
        if sent < self._cut_at:
            return
        self._limit = max(float(self.floor), self._limit / 2)
        self._cut_at = time.monotonic() if now is None else now
        self._slow_start = False
        self.halvings += 1
        self._new_round()

    def _end_round(self) -> None:
        mean = self._round_seconds / self._round
        elapsed = self._clock() - self._round_started
        rate = self._round / elapsed if elapsed > 0 else math.inf
        if not self._warm:
            self._warm = True
            self._new_round()
            return
        last_rate, self._last_rate = self._last_rate, rate
        doubled_from, self._doubled_from = self._doubled_from, None
        if self._slow_start and doubled_from is not None and last_rate is not None and rate < self.GAIN * last_rate:
            # Twice the requests in flight, hardly more answered: the service was busy already. Back, and on by steps.
            self._limit = doubled_from
            self._slow_start = False
            self._new_round()
            return
        if self._fastest is None or mean < self._fastest:
            self._fastest = mean
        fast = mean <= self.FAST * self._fastest
        self._slow_rounds = 0 if fast else self._slow_rounds + 1
        if self._slow_rounds >= 2:
            self._slow_start = False
        if self.ceiling > self.initial or self._limit < self.initial:
            if fast and self._round_clean and 2 * self._round_full >= self._round:
                if self._slow_start:
                    self._doubled_from = self._limit
                grown = self._limit * 2 if self._slow_start else self._limit + self.step
                self._limit = min(float(self.ceiling), grown)
                self.peak = max(self.peak, self.limit)
            elif mean > self.SLOW * self._fastest and self._limit > self.initial:
                self._limit = max(float(self.initial), self._limit * 0.75)
        self._new_round()

    def _new_round(self) -> None:
        self._round = self._round_full = 0
        self._round_seconds = 0.0
        self._round_clean = True
        self._round_started = self._clock()


class Retries(Protocol):
    """One item's retries (mpcommit.store.retry.Attempts): the wait before the next attempt after ``error``, or
    the exception to give up with (raised). ``counted=False``: a refusal the window answers for, not the item."""

    def after(self, error: BaseException, *, counted: bool = True) -> float: ...


class _Try(Generic[T]):
    __slots__ = ("item", "first", "sent", "retries")

    def __init__(self, item: T, now: float):
        self.item = item
        self.first = self.sent = now
        self.retries: Retries | None = None


#: Answers are gathered (:meth:`Window.gather_pause`) only with at least this many calls in flight: fewer cannot
#: bring enough answers in a pause to pay for it.
GATHER_FROM = 16


def _never(_error: BaseException) -> bool:
    return False


def run_windowed(
    start: Start[T],
    items: Iterable[T],
    *,
    window: Window,
    on_result: Callable[[T, Any], bool | None] | None = None,
    retries: Callable[[float], Retries] | None = None,
    slow_down: Callable[[BaseException], bool] = _never,
    cancel: threading.Event | None = None,
    progress: ProgressHook | None = None,
    phase: str = "",
    total: int | None = None,
) -> bool:
    """Start a call at every item of ``items``, at most ``window.limit`` in flight; items are pulled only as
    places free up.

    ``on_result(item, result)`` runs on the calling thread as each call succeeds (in the order they ended; with
    calls that end before ``start`` returns, the order they started); when it returns False, nothing more starts.
    ``progress(phase, done, total)`` follows each. A failure ``slow_down`` recognises halves the window. With
    ``retries`` (a factory taking the item's first start, made at its first failure), a failed item is started
    again after the wait it says, outside the window meanwhile; without, or when it gives up, the failure stops
    the run. The first exception (of a call, ``on_result`` or ``items``) is raised once the calls in flight have
    ended (their results dropped): no call outlives this function.

    Returns False when ``cancel`` was set before every item had started, True otherwise.
    """
    iterator = iter(items)
    finished: queue.SimpleQueue[tuple[_Try[T], Any, BaseException | None, float]] = queue.SimpleQueue()
    waiting: list[tuple[float, int, _Try[T]]] = []  # retries not yet due: (due, sequence, try)
    sequence = 0
    inflight = 0
    error: BaseException | None = None
    exhausted = stopped = cancelled = False
    done = 0
    clock = time.monotonic

    def launch(attempt: _Try[T]) -> None:
        attempt.sent = clock()

        def ended(result: Any, failure: BaseException | None) -> None:
            finished.put((attempt, result, failure, clock()))

        try:
            start(attempt.item, ended)
        except BaseException as exc:  # noqa: BLE001 - this attempt's failure, handled as any other
            finished.put((attempt, None, exc, clock()))

    try:
        while True:
            if error is None and not stopped:
                now = clock()
                while inflight < window.limit:
                    if waiting and waiting[0][0] <= now:
                        launch(heapq.heappop(waiting)[2])
                    elif exhausted:
                        break
                    elif cancel is not None and cancel.is_set():
                        stopped = cancelled = True
                        break
                    else:
                        try:
                            item = next(iterator)
                        except StopIteration:
                            exhausted = True
                            break
                        except BaseException as exc:  # noqa: BLE001 - e.g. a manifest that could not be read
                            error = exc
                            break
                        launch(_Try(item, now))
                    inflight += 1
            retrying = bool(waiting) and error is None and not stopped
            if not inflight and not retrying:
                break
            try:
                if inflight:
                    first = finished.get(timeout=max(0.0, waiting[0][0] - clock()) if retrying else None)
                else:  # only retries waiting: until the first is due
                    time.sleep(max(0.0, waiting[0][0] - clock()))
                    continue
            except queue.Empty:
                continue
            if inflight >= GATHER_FROM:
                # The answers due in the next moment are gathered into this wake-up (see Window.gather_pause).
                pause = window.gather_pause()
                if pause:
                    time.sleep(pause)
            # Every call ended by now is handed back before more start (with calls that end at once: the whole
            # window, in the order it started).
            batch = [first]
            while True:
                try:
                    batch.append(finished.get_nowait())
                except queue.Empty:
                    break
            full = inflight >= window.limit  # the window was kept full: its size limited what was in flight
            for attempt, result, failure, at in batch:
                inflight -= 1
                if error is not None:
                    continue
                if failure is None:
                    window.answered(at - attempt.sent, full=full)
                    done += 1
                    try:
                        if on_result is not None and on_result(attempt.item, result) is False:
                            stopped = True
                        if progress is not None:
                            progress(phase, done, total)
                    except BaseException as exc:  # noqa: BLE001 - raised once the calls in flight have ended
                        error = exc
                    continue
                refused = slow_down(failure)
                if refused:
                    window.slowed(attempt.sent)
                else:
                    window.failed()
                if retries is None or stopped:
                    error = failure
                    continue
                try:
                    if attempt.retries is None:
                        attempt.retries = retries(attempt.first)
                    # A refusal while the window can still shrink is the window's, not the item's.
                    delay = attempt.retries.after(failure, counted=not (refused and not window.at_floor))
                except BaseException as exc:  # noqa: BLE001 - the item gives up: the run fails
                    error = exc
                    continue
                heapq.heappush(waiting, (clock() + delay, sequence, attempt))
                sequence += 1
    finally:
        while inflight:  # interrupted while waiting (KeyboardInterrupt): the calls in flight still end first
            finished.get()
            inflight -= 1
        close = getattr(iterator, "close", None)
        if close is not None:
            close()  # a generator reading manifests ahead stops its reads now, not at garbage collection
    if error is not None:
        raise error
    return not cancelled


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
    """:func:`run_windowed` of ``fn`` on ``threads`` threads (or on ``executor``; 0 threads: the caller's thread),
    with a fixed window of ``window`` calls (default ``2 * threads``); no retries (``fn`` does its own)."""
    size = max(1, window if window is not None else 2 * max(1, threads))
    with lent_or_own(executor, threads, "mpcommit") as pool:
        return run_windowed(on_threads(pool, fn), items, window=Window(size), on_result=on_result, cancel=cancel,
                            progress=progress, phase=phase, total=total)
