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
