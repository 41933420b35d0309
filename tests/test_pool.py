"""The bounded pool behind the commit, the upload operations and the compaction. Pure, no server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from mpcommit.pool import SerialExecutor, run_bounded


def test_every_item_runs_once_and_results_come_back_on_the_calling_thread() -> None:
    caller = threading.get_ident()
    seen: dict[int, int] = {}
    threads_of_results: set[int] = set()
    progress: list[tuple[str, int, int | None]] = []

    def keep(item: int, result: int) -> None:
        threads_of_results.add(threading.get_ident())
        seen[item] = result

    assert run_bounded(lambda n: n * n, range(50), threads=4, on_result=keep,
                       progress=lambda *args: progress.append(args), phase="square", total=50)
    assert seen == {n: n * n for n in range(50)}
    assert threads_of_results == {caller}  # callers gather results without locks
    assert [p[1] for p in progress] == list(range(1, 51))
    assert {(p[0], p[2]) for p in progress} == {("square", 50)}


def test_items_are_pulled_lazily_and_never_more_than_the_window_is_held() -> None:
    """What the commit relies on to keep driver memory bounded: manifests are read only as slots free up."""
    pulled = finished = 0
    most_held = 0
    lock = threading.Lock()
    concurrent = most_concurrent = 0

    def items() -> Iterator[int]:
        nonlocal pulled, most_held
        for n in range(200):
            with lock:
                pulled += 1
                most_held = max(most_held, pulled - finished)
            yield n

    def slow(n: int) -> int:
        nonlocal concurrent, most_concurrent
        with lock:
            concurrent += 1
            most_concurrent = max(most_concurrent, concurrent)
        time.sleep(0.001)
        with lock:
            concurrent -= 1
        return n

    def done(_item: int, _result: int) -> None:
        nonlocal finished
        with lock:
            finished += 1

    run_bounded(slow, items(), threads=3, window=5, on_result=done)
    assert pulled == finished == 200
    assert most_held <= 5
    assert most_concurrent <= 3


def test_serial_executor_makes_a_failure_deterministic() -> None:
    """With the serial executor, which items ran and which results came back before a failure is exact."""
    pulled: list[int] = []
    handed: list[int] = []

    def items() -> Iterator[int]:
        for n in range(10):
            pulled.append(n)
            yield n

    def fail_at_three(n: int) -> int:
        if n == 3:
            raise RuntimeError("item 3 failed")
        return n

    with pytest.raises(RuntimeError, match="item 3 failed"):
        run_bounded(fail_at_three, items(), threads=1, window=2, executor=SerialExecutor(),
                    on_result=lambda item, _result: handed.append(item))
    assert pulled == [0, 1, 2, 3]  # nothing is pulled after the failure
    assert handed == [0, 1, 2]


def test_a_failure_is_raised_only_after_every_call_in_flight_has_ended() -> None:
    started: list[int] = []
    ended: list[int] = []
    release = threading.Event()

    def work(n: int) -> int:
        started.append(n)
        if n == 0:
            release.wait(5)
            raise ValueError("first call failed")
        release.set()  # the failing call returns while the others are still running
        time.sleep(0.05)
        ended.append(n)
        return n

    with pytest.raises(ValueError, match="first call failed"):
        run_bounded(work, range(100), threads=4, window=4)
    assert sorted(ended) == sorted(n for n in started if n != 0)  # no call outlives run_bounded
    assert len(started) < 100


def test_on_result_returning_false_stops_submitting_but_hands_back_what_was_in_flight() -> None:
    handed: list[int] = []

    def keep(item: int, _result: int) -> bool:
        handed.append(item)
        return item != 4

    assert run_bounded(lambda n: n, range(100), threads=1, window=3, executor=SerialExecutor(), on_result=keep)
    assert handed == [0, 1, 2, 3, 4, 5]  # 5 was already submitted when 4 said stop


def test_cancel_stops_what_has_not_started_and_says_so() -> None:
    cancel = threading.Event()
    ran: list[int] = []

    def work(n: int) -> int:
        ran.append(n)
        if n == 2:
            cancel.set()
        return n

    assert run_bounded(work, range(10), threads=1, window=1, executor=SerialExecutor(), cancel=cancel) is False
    assert ran == [0, 1, 2]
    # Set once everything had started: the run was complete.
    assert run_bounded(work, [5], threads=1, executor=SerialExecutor(), cancel=threading.Event()) is True


def test_an_items_iterator_that_fails_stops_the_run_after_the_calls_in_flight() -> None:
    ended: list[int] = []

    def items() -> Iterator[int]:
        yield 1
        yield 2
        raise OSError("manifest unreadable")

    def work(n: int) -> int:
        time.sleep(0.05)
        ended.append(n)
        return n

    with pytest.raises(OSError, match="manifest unreadable"):
        run_bounded(work, items(), threads=2)
    assert sorted(ended) == [1, 2]


def test_cancel_on_threads_stops_submitting_and_finishes_what_is_in_flight() -> None:
    cancel = threading.Event()
    seen: list[int] = []

    def keep(_item: int, result: int) -> None:
        seen.append(result)
        if len(seen) == 5:
            cancel.set()

    finished = run_bounded(lambda i: i, range(1000), threads=2, on_result=keep, cancel=cancel)
    assert finished is False
    assert 5 <= len(seen) <= 5 + 4  # at most 2 * threads were in flight when it stopped
    assert run_bounded(lambda i: i, range(10), threads=3, cancel=threading.Event()) is True


def test_a_failure_on_threads_stops_submitting_and_is_raised_after_in_flight_work() -> None:
    def fn(i: int) -> int:
        if i == 3:
            raise RuntimeError("boom")
        return i

    done: list[int] = []
    with pytest.raises(RuntimeError, match="boom"):
        run_bounded(fn, range(100), threads=2, on_result=lambda _i, result: done.append(result))
    assert len(done) < 100


# ---------------------------------------------------------------- the adaptive window
from mpcommit.pool import Window, run_windowed  # noqa: E402


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _window(initial: int, **kw) -> Window:
    window = Window(initial, clock=_Clock(), **kw)
    _round(window, 9.9)  # the first round only warms up (new connections, a cold server): it decides nothing
    assert window.limit == window.initial
    return window


def _round(window: Window, seconds: float, *, took: float | None = None, full: bool = True) -> None:
    """One round: as many answers as the window holds, each after ``seconds``, the last of them ``took`` after
    the round began (by default one round trip: a service that answers everything sent in the time it takes)."""
    window._clock.now += seconds if took is None else took
    for _ in range(window.limit):
        window.answered(seconds, full=full)


def test_a_window_doubles_per_round_while_answers_are_fast_up_to_its_ceiling() -> None:
    window = _window(4, ceiling=50)
    sizes = [window.limit]
    for _ in range(6):
        _round(window, 0.08)
        sizes.append(window.limit)
    assert sizes == [4, 8, 16, 32, 50, 50, 50]
    assert window.peak == 50


def test_a_doubling_that_brings_no_more_answers_per_second_is_taken_back() -> None:
    """A busy service (LocalStack on two cores): twice the requests in flight take twice as long each, the same
    number answered per second. The window goes back to its start and grows no faster than by steps after."""
    window = _window(32, ceiling=512)
    _round(window, 0.032)  # 1,000 answers/s at 32
    assert window.limit == 64
    _round(window, 0.064)  # 64 in flight: each twice as long, still 1,000/s
    assert window.limit == 32
    _round(window, 0.032)
    assert window.limit == 32 + window.step  # no more doubling
    assert window.peak == 64


def test_a_fixed_window_never_grows_but_still_halves_when_refused_and_recovers() -> None:
    window = _window(8)
    _round(window, 0.01)
    assert window.limit == 8
    window.slowed(time.monotonic())
    assert window.limit == 4
    for _ in range(10):
        _round(window, 0.01)
    assert window.limit == 8


def test_a_refusal_halves_once_per_round_trip_and_growth_is_then_additive() -> None:
    window = _window(32, ceiling=512)
    _round(window, 0.08)
    assert window.limit == 64
    window.slowed(10.0, now=10.1)
    window.slowed(10.05, now=10.11)  # sent before the halving: the same overshoot
    window.slowed(9.9, now=10.12)
    assert window.limit == 32 and window.halvings == 1 and window.slowdowns == 3
    _round(window, 0.08)
    _round(window, 0.08)
    assert window.limit == 32 + 2 * window.step  # no slow start after a refusal
    for n in range(20):
        window.slowed(11.0 + n, now=11.0 + n)
    assert window.limit == 1 and window.at_floor


def test_a_window_stops_growing_when_answers_slow_down_and_shrinks_no_lower_than_it_started() -> None:
    window = _window(16, ceiling=512)
    _round(window, 0.010)  # the fastest round
    assert window.limit == 32
    _round(window, 0.014)  # within 1.5x: still fast
    assert window.limit == 64
    _round(window, 0.018)  # 1.8x: not fast -- hold
    assert window.limit == 64
    _round(window, 0.050)  # 5x: queueing what the window added -- shrink
    assert window.limit == 48
    for _ in range(10):
        _round(window, 0.050)
    assert window.limit == 16  # the commit's threads' worth: what it would have had without a window


def test_one_slow_round_is_noise_two_end_the_doubling() -> None:
    window = _window(8, ceiling=512)
    _round(window, 0.010)
    _round(window, 0.018, took=0.005)  # one slow round (answered at twice the rate): held, still doubling after
    _round(window, 0.010)
    assert window.limit == 32
    _round(window, 0.018, took=0.005)
    _round(window, 0.018, took=0.005)  # two in a row: the service is pushing back; from here on, a step per round
    _round(window, 0.010)
    assert window.limit == 32 + window.step


def test_a_window_the_caller_does_not_fill_does_not_grow() -> None:
    window = _window(8, ceiling=512)
    for _ in range(5):
        _round(window, 0.01, full=False)
    assert window.limit == 8


class _Service:
    """An asynchronous service on one scheduler thread: each call answers after ``latency``; with more than
    ``capacity`` calls in flight it refuses the newcomer with SlowDown (as S3 answers beyond a partition's rate)."""

    def __init__(self, latency: float, capacity: int, *, fail: dict[int, int] | None = None):
        import heapq

        self.latency, self.capacity = latency, capacity
        self.fail = dict(fail or {})  # item -> transient failures to answer before succeeding
        self.inflight = self.most = self.calls = self.refused = 0
        self.threads: set[int] = set()
        self._heap: list = []
        self._heapq = heapq
        self._lock = threading.Condition()
        self._seq = 0
        threading.Thread(target=self._run, daemon=True).start()

    def start(self, item: int, done) -> None:
        from mpcommit.errors import ThrottledError, TransientStoreError

        self.threads.add(threading.get_ident())
        with self._lock:
            self.calls += 1
            if self.inflight >= self.capacity:
                self.refused += 1
                outcome = (None, ThrottledError("complete failed: SlowDown", operation="op", code="SlowDown"))
            elif self.fail.get(item, 0) > 0:
                self.fail[item] -= 1
                outcome = (None, TransientStoreError("complete failed: 500", operation="op", code="500"))
                self.inflight += 1
            else:
                outcome = (item, None)
                self.inflight += 1
            self.most = max(self.most, self.inflight)
            self._seq += 1
            self._heapq.heappush(self._heap, (time.monotonic() + self.latency, self._seq, done, outcome,
                                              outcome[1] is None or not isinstance(outcome[1], ThrottledError)))
            self._lock.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._lock.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                _due, _seq, done, outcome, counted = self._heapq.heappop(self._heap)
                if counted:
                    self.inflight -= 1
            done(*outcome)


def _retries(max_attempts: int):
    from mpcommit.options import RetryPolicy
    from mpcommit.store.retry import Attempts

    policy = RetryPolicy(max_attempts=max_attempts, initial_delay=0.001, max_delay=0.01, max_total_seconds=30)
    return lambda first: Attempts(policy, started=first)


def test_a_window_finds_what_the_service_takes_and_absorbs_its_refusals() -> None:
    """Many calls in flight from one thread; the service refuses beyond 12 at once. Every item is done although
    max_attempts=1 allows no retry at all: refusals while the window could still shrink are the window's, not
    the request's."""
    from mpcommit.store.retry import slows_down

    service = _Service(latency=0.01, capacity=12)
    window = Window(4, ceiling=256)
    got: list[int] = []
    caller = threading.get_ident()
    assert run_windowed(service.start, range(600), window=window, on_result=lambda item, result: got.append(result),
                        retries=_retries(1), slow_down=slows_down)
    assert sorted(got) == list(range(600))
    assert service.threads == {caller}  # started from the calling thread, no thread per call
    assert service.refused > 0 and window.slowdowns == service.refused and window.halvings >= 1
    assert window.peak > 12  # it looked for more
    assert window.limit <= 2 * 12  # and settled near what the service takes


def test_without_a_window_to_shrink_refusals_count_and_a_request_gives_up() -> None:
    from mpcommit.errors import RetriesExhaustedError
    from mpcommit.store.retry import slows_down

    service = _Service(latency=0.01, capacity=0)  # refuses everything
    window = Window(4, ceiling=4)
    with pytest.raises(RetriesExhaustedError, match="SlowDown"):
        run_windowed(service.start, range(10), window=window, retries=_retries(3), slow_down=slows_down)
    assert window.at_floor


def test_transient_failures_are_retried_after_a_backoff_without_holding_the_window() -> None:
    service = _Service(latency=0.005, capacity=100, fail={0: 2, 5: 1})
    window = Window(2)
    order: list[int] = []
    run_windowed(service.start, range(10), window=window, on_result=lambda item, _r: order.append(item),
                 retries=_retries(3))
    assert sorted(order) == list(range(10))
    assert order.index(0) > order.index(1)  # item 0 waited out of the window while others went on
    assert service.calls == 13

    from mpcommit.errors import RetriesExhaustedError

    with pytest.raises(RetriesExhaustedError, match="after 3 attempts"):
        run_windowed(_Service(0.001, 100, fail={3: 5}).start, range(10), window=Window(2), retries=_retries(3))
    with pytest.raises(Exception, match="500"):  # no retries: the first failure stops the run
        run_windowed(_Service(0.001, 100, fail={3: 1}).start, range(10), window=Window(2))


def test_the_pause_that_gathers_answers_is_a_twentieth_of_an_answer_bounded_and_none_for_fast_answers() -> None:
    window = Window(32, ceiling=32, clock=_Clock())
    assert window.gather_pause() == 0.0  # nothing judged yet: no pause
    _round(window, 9.9)  # the warm-up round decides nothing
    assert window.gather_pause() == 0.0
    _round(window, 0.08)  # completes through the S3-like network: 80 ms
    assert window.gather_pause() == pytest.approx(0.004)
    slow = Window(32, clock=_Clock())
    _round(slow, 9.9)
    _round(slow, 0.5)
    assert slow.gather_pause() == Window.GATHER_MAX  # never longer than this, however slow the answers
    fast = Window(32, clock=_Clock())
    _round(fast, 9.9)
    _round(fast, 0.002)  # a local server: a pause would cost more than it gathers
    assert fast.gather_pause() == 0.0


class _RecordedSleeps:
    """Stands in for the pool's ``time`` module: the real clock, with every sleep recorded."""

    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        time.sleep(seconds)


def test_slow_answers_are_gathered_after_a_wake_up_and_fast_ones_are_not(monkeypatch) -> None:
    import mpcommit.pool as pool

    recorded = _RecordedSleeps()
    monkeypatch.setattr(pool, "time", recorded)
    got: list[int] = []
    service = _Service(latency=0.06, capacity=10_000)
    window = Window(64)
    assert run_windowed(service.start, range(640), window=window, on_result=lambda _item, result: got.append(result))
    assert sorted(got) == list(range(640))
    assert recorded.sleeps, "answers 60 ms apart from their start, 64 in flight: wake-ups should have gathered"
    assert all(0 < s <= Window.GATHER_MAX for s in recorded.sleeps)
    assert len(recorded.sleeps) < len(got)

    recorded.sleeps.clear()
    quick = _Service(latency=0.001, capacity=10_000)
    assert run_windowed(quick.start, range(640), window=Window(64), on_result=lambda _item, _result: None)
    assert recorded.sleeps == []
