"""The one retry boundary: exponential backoff with full jitter, bounded in attempts and time.

Only transient failures are retried (TransientStoreError and its subclasses); every other error surfaces at
once. botocore's own retries are switched off in the client so that this is the only place that decides.

Two callers share one policy, :class:`Attempts`: :func:`call_with_retry` retries a request on the calling thread
(sleeping between attempts), and an adaptive window (:func:`mpcommit.pool.run_windowed`) retries the requests it
keeps in flight itself, without a thread per request, learning from each failure as it comes back. Inside
:func:`single_attempts`, a request makes one attempt and raises: the window around it does the retrying.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from ..errors import EndpointUnreachableError, RetriesExhaustedError, ThrottledError, TransientStoreError
from ..options import RetryPolicy

T = TypeVar("T")

_local = threading.local()


def slows_down(error: BaseException) -> bool:
    """Whether ``error`` is the store asking the client to send less (503 SlowDown, 503 Service Unavailable,
    429, RequestLimitExceeded): what halves an adaptive window."""
    return isinstance(error, ThrottledError) or (
        isinstance(error, TransientStoreError) and error.code in ("ServiceUnavailable", "503"))


class Attempts:
    """One request's retries under ``policy``: exponential backoff with full jitter (the wait before attempt n+1 is
    uniform in [0, min(max_delay, initial_delay * 2**(n-1))]), at most ``max_attempts`` attempts and
    ``max_total_seconds`` from the first.

    Made only once a request has failed (a request that succeeds costs no retry state). ``counted=False`` in
    :meth:`after` leaves an attempt out of the count (never out of the time): an adaptive window does so for a
    SlowDown while it can still shrink, since the request was not refused for itself but for the window's size.
    """

    __slots__ = ("policy", "started", "count", "failures")

    def __init__(self, policy: RetryPolicy, *, started: float | None = None):
        self.policy = policy
        self.started = time.monotonic() if started is None else started
        self.count = 1  # attempts made and counted so far (the first one failed)
        self.failures = 0  # failures seen: the backoff grows with every one, counted or not

    def after(self, error: BaseException, *, describe: str = "", counted: bool = True) -> float:
        """Seconds to wait before the next attempt after ``error``; raises ``error`` itself when it is not
        transient, RetriesExhaustedError when the policy allows no more."""
        if not isinstance(error, TransientStoreError):
            raise error
        self.failures += 1
        if not counted:
            self.count -= 1
        elapsed = time.monotonic() - self.started
        if self.count >= self.policy.max_attempts or elapsed >= self.policy.max_total_seconds:
            raise exhausted(error, describe or _describe(error), self.failures) from error
        self.count += 1
        delay = random.uniform(0.0, min(self.policy.max_delay, self.policy.initial_delay * 2 ** (self.failures - 1)))
        return min(delay, self.policy.max_total_seconds - elapsed)


def call_with_retry(fn: Callable[[], T], *, policy: RetryPolicy, describe: str) -> T:
    """Run ``fn``; retry transient failures per ``policy``; raise RetriesExhaustedError when they persist.

    The first attempt runs bare: a commit makes a hundred thousand requests, nearly all of which succeed, and
    retry state per request would cost client CPU for nothing. Only a transient failure sets it up, counting that
    first attempt and its time. Inside :func:`single_attempts` the first failure is raised as it is.
    """
    started = time.monotonic()
    try:
        return fn()
    except TransientStoreError as exc:
        if getattr(_local, "single", False):
            raise
        error: TransientStoreError = exc
    attempts = Attempts(policy, started=started)
    while True:
        time.sleep(attempts.after(error, describe=describe))
        try:
            return fn()
        except TransientStoreError as exc:
            error = exc


@contextmanager
def single_attempts() -> Iterator[None]:
    """On this thread, within the block, every request makes one attempt and raises its transient failure: for
    work run under an adaptive window, which retries the item itself and learns from the failure (a SlowDown
    halves the window) instead of having a thread sleep through the store's backoff unseen."""
    before = getattr(_local, "single", False)
    _local.single = True
    try:
        yield
    finally:
        _local.single = before


def exhausted(last: TransientStoreError, describe: str, attempts: int) -> RetriesExhaustedError:
    """The error for a transient failure that outlasted the policy: what failed, how often, and what to do."""
    reason = str(last)
    if reason.startswith(f"{describe} failed: "):
        reason = reason[len(f"{describe} failed: "):]
    return RetriesExhaustedError(
        # No claim about visibility here: the caller knows whether this happened before or after a commit.
        f"{describe} still failed after {attempts} attempts: {reason}. {_advice(last)}",
        operation=last.operation,
        code=last.code,
        bucket=last.bucket,
        key=last.key,
    )


def _describe(error: TransientStoreError) -> str:
    where = f"s3://{error.bucket}/{error.key}" if error.key else f"s3://{error.bucket}"
    return f"{error.operation} {where}"


def _advice(last: TransientStoreError) -> str:
    """What to do about a failure that outlasted the retries, by its kind."""
    if isinstance(last, ThrottledError):
        return "S3 kept asking to slow down: retry later, or raise S3Options.retry.max_attempts."
    if isinstance(last, EndpointUnreachableError):
        return "Check the endpoint, S3Options(endpoint_url=...) or AWS_ENDPOINT_URL, that the server is running, and the network."
    return "The store is unavailable or the network unreliable: retry later, or raise S3Options.retry.max_attempts."
