"""The one retry boundary: tenacity, exponential backoff with full jitter, bounded in attempts and time.

Only transient failures are retried (TransientStoreError and its subclasses); every other error surfaces at
once. botocore's own retries are switched off in the client so that this is the only place that retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from ..errors import EndpointUnreachableError, RetriesExhaustedError, ThrottledError, TransientStoreError
from ..options import RetryPolicy

T = TypeVar("T")


def call_with_retry(fn: Callable[[], T], *, policy: RetryPolicy, describe: str) -> T:
    """Run ``fn``; retry transient failures per ``policy``; raise RetriesExhaustedError when they persist.

    The first attempt runs bare: a commit makes a hundred thousand requests, nearly all of which succeed, and a
    retry controller per request would cost more client CPU than the request's own work beyond botocore. Only a
    transient failure sets one up, which counts that first attempt and its time as tenacity would have.
    """
    started = time.monotonic()
    try:
        return fn()
    except TransientStoreError as exc:
        first: TransientStoreError | None = exc

    def attempt() -> T:
        nonlocal first
        if first is not None:  # the failure already seen, replayed as tenacity's first attempt
            failed, first = first, None
            raise failed
        return fn()

    retrying = Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        wait=wait_random_exponential(multiplier=policy.initial_delay, max=policy.max_delay),
        stop=stop_after_attempt(policy.max_attempts)
        | stop_after_delay(max(0.0, policy.max_total_seconds - (time.monotonic() - started))),
        reraise=False,
    )
    try:
        return retrying(attempt)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        attempts = exc.last_attempt.attempt_number
        assert isinstance(last, TransientStoreError)
        reason = str(last)
        if reason.startswith(f"{describe} failed: "):
            reason = reason[len(f"{describe} failed: "):]
        raise RetriesExhaustedError(
            # No claim about visibility here: the caller knows whether this happened before or after a commit.
            f"{describe} still failed after {attempts} attempts: {reason}. {_advice(last)}",
            operation=last.operation,
            code=last.code,
            bucket=last.bucket,
            key=last.key,
        ) from last


def _advice(last: TransientStoreError) -> str:
    """What to do about a failure that outlasted the retries, by its kind."""
    if isinstance(last, ThrottledError):
        return "S3 kept asking to slow down: retry later, or raise S3Options.retry.max_attempts."
    if isinstance(last, EndpointUnreachableError):
        return "Check the endpoint, S3Options(endpoint_url=...) or AWS_ENDPOINT_URL, that the server is running, and the network."
    return "The store is unavailable or the network unreliable: retry later, or raise S3Options.retry.max_attempts."
