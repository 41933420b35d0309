"""The one path every request of the store takes, whatever its transport: its security parameters added
(:mod:`.security`), counted per operation, retried when it fails transiently (:mod:`.retry`), its error translated
(:mod:`.errors`), and its answer's Date read for the store's clock (:mod:`.clock`).

:class:`Funnel` is what :class:`mpcommit.store.s3.S3Store` builds its operations on, and what the paginated
listings (:mod:`.paging`) send their pages through. Counting every request here lets tests and benchmarks assert
request sequences.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from botocore.exceptions import ClientError

from ..options import S3Options
from .clock import StoreClock
from .errors import translate
from .retry import call_with_retry
from .security import RequestSecurity
from .transport import Done


class Funnel:
    """Sends requests over one boto3 client, or through another transport, the same way. Thread-safe."""

    def __init__(self, options: S3Options, client: Any):
        self.options = options
        self._client = client
        self._security = RequestSecurity(options, client)
        self._counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        #: Whether the endpoint ever answered (a wrong endpoint fails at once; a known one is retried).
        self._reached = False
        self._clock = StoreClock()

    @property
    def endpoint(self) -> str:
        return str(self._client.meta.endpoint_url)

    def request_counts(self) -> dict[str, int]:
        with self._count_lock:
            return dict(self._counts)

    def reset_counts(self) -> None:
        with self._count_lock:
            self._counts.clear()

    def _call(self, operation: str, *, client: Any | None = None, bucket: str = "", key: str = "", **params: Any) -> Any:
        """One request through boto3, by botocore's operation name and parameters."""
        params.update(self._security.parameters(operation))  # the same function the CRT transport's headers come from
        method: Callable[..., Any] = getattr(client or self._client, operation)
        return self._clock.timed(lambda: self._send(operation, lambda: method(**params), bucket=bucket, key=key))

    def _send(self, operation: str, request: Callable[[], Any], *, bucket: str, key: str) -> Any:
        """Count, translate errors and retry: what every request goes through, whatever its transport."""

        def attempt() -> Any:
            with self._count_lock:
                self._counts[operation] += 1
            try:
                response = request()
            except Exception as exc:  # noqa: BLE001 - translated and chained below
                if isinstance(exc, ClientError):
                    self._reached = True  # the server answered, if only with an error
                raise translate(exc, operation=operation, bucket=bucket, key=key, endpoint=self.endpoint,
                                reached=self._reached) from exc
            self._reached = True
            return response

        where = f"s3://{bucket}/{key}" if key else f"s3://{bucket}"
        return call_with_retry(attempt, policy=self.options.retry, describe=f"{operation} {where}")

    def _one_attempt(self, operation: str, *, bucket: str, key: str, done: Done) -> Done:
        """Count one attempt at a request not waited for, and return the callback its transport reports to: it
        hands ``done`` the answer, or the error translated as :meth:`_send` would after one attempt. Not retried:
        the caller retries (:class:`mpcommit.store.retry.Attempts`)."""
        with self._count_lock:
            self._counts[operation] += 1

        def finished(result: Any, error: BaseException | None) -> None:
            if error is None:
                self._reached = True
                done(result, None)
                return
            if isinstance(error, ClientError):
                self._reached = True
            failure = translate(error, operation=operation, bucket=bucket, key=key, endpoint=self.endpoint,
                                reached=self._reached)
            failure.__cause__ = error
            done(None, failure)

        return finished
