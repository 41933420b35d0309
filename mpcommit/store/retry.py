"""The one retry boundary: tenacity, exponential backoff with full jitter, bounded in attempts and time.

Only transient failures are retried (TransientStoreError and its subclasses); every other error surfaces at
once. botocore's own retries are switched off in the client so that this is the only place that retries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt, stop_after_delay
from tenacity.wait import wait_random_exponential

from ..errors import RetriesExhaustedError, TransientStoreError
from ..options import RetryPolicy

T = TypeVar("T")


def call_with_retry(fn: Callable[[], T], *, policy: RetryPolicy, describe: str) -> T:
    """Run ``fn``; retry transient failures per ``policy``; raise RetriesExhaustedError when they persist."""
    retrying = Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        wait=wait_random_exponential(multiplier=policy.initial_delay, max=policy.max_delay),
        stop=stop_after_attempt(policy.max_attempts) | stop_after_delay(policy.max_total_seconds),
        reraise=False,
    )
    try:
        return retrying(fn)
    except RetryError as exc:
        last = exc.last_attempt.exception()
        attempts = exc.last_attempt.attempt_number
        assert isinstance(last, TransientStoreError)
        raise RetriesExhaustedError(
            # No claim about visibility here: the caller knows whether this happened before or after a commit.
            f"{describe} still failed after {attempts} attempts: {last}. The store is throttling or unavailable; "
            "retry later, or raise S3Options.retry.max_attempts.",
            operation=last.operation,
            code=last.code,
            bucket=last.bucket,
            key=last.key,
        ) from last
