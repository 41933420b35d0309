"""Plain, frozen, picklable settings. They travel from the driver to every worker inside the job spec.

A setting that cannot work raises UsageError, which is a ValueError too."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from .errors import UsageError
from .sizing import MAX_PART_SIZE, MIN_PART_SIZE, MiB


@dataclass(frozen=True)
class RetryPolicy:
    """How transient S3 failures are retried: exponential backoff with full jitter, bounded in count and time."""

    max_attempts: int = 8
    initial_delay: float = 0.1
    max_delay: float = 10.0
    max_total_seconds: float = 120.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise UsageError(f"RetryPolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.initial_delay < 0 or self.max_delay < self.initial_delay:
            raise UsageError("RetryPolicy needs 0 <= initial_delay <= max_delay")


class CompleteTransport(str, Enum):
    """How CompleteMultipartUpload, the job commit's one request per file, is sent (mpcommit.store.transport), and
    with it a task's requests per file: CreateMultipartUpload, UploadPart of parts up to 1 MiB, its manifest's PUT.

    ``crt``: built and signed by mpcommit (botocore's signature) and sent on the AWS Common Runtime's asynchronous
    HTTP connections -- many completes in flight from one thread, a fraction of boto3's client CPU. ``boto3``: through
    boto3 like every other request. ``auto`` (the default): the CRT wherever it is equivalent to boto3 -- awscrt
    imports, the store made its own client (so it knows the credentials) and no HTTP proxy is configured -- else
    boto3. ``crt`` where it cannot be used is a UsageError naming why.
    """

    AUTO = "auto"
    CRT = "crt"
    BOTO3 = "boto3"


@dataclass(frozen=True)
class S3Options:
    """How to reach the object store. With no arguments, boto3's usual sources apply
    (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, profiles, region).

    Secrets are kept out of ``repr`` so that they never reach logs or error messages.
    """

    endpoint_url: str | None = None
    region: str | None = None
    profile: str | None = None
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    # Path-style addressing works everywhere (LocalStack, MinIO, Ceph); virtual-host style needs DNS per bucket.
    addressing_style: str = "path"
    max_pool_connections: int = 64
    connect_timeout: float = 10.0
    read_timeout: float = 120.0
    retry: RetryPolicy = RetryPolicy()
    # Server-side encryption, passed on every request that accepts it.
    sse: str | None = None  # "AES256" (SSE-S3) or "aws:kms" (SSE-KMS)
    sse_kms_key_id: str | None = None
    #: SSE-C: a 256-bit key of the caller's (32 bytes) that S3 encrypts every object mpcommit writes with, sent
    #: (with its MD5) on every request that writes or reads an object or its parts -- so every object of the table
    #: must be encrypted with it. S3 accepts it only over HTTPS.
    sse_customer_key: bytes | None = field(default=None, repr=False)
    expected_bucket_owner: str | None = None
    #: Whether the store honours conditional writes (PutObject If-None-Match / If-Match): None asks it once per
    #: bucket (mpcommit.store.conditional); True or False states it, e.g. for a store that forbids the probe's
    #: hidden writes. Without them, concurrent destructive jobs on one table are refused, never raced.
    conditional_writes: bool | None = None
    #: States that each table in this store has one job at a time: no concurrent writes, and no `jobs abort` or
    #: `recover` beside a running job. Needed only on a store that does not honour conditional writes, where
    #: mpcommit cannot order concurrent processes and otherwise refuses to run (mpcommit.store.conditional).
    single_writer: bool = False
    #: How the job commit's completes are sent: :class:`CompleteTransport` (or its value, "auto", "crt", "boto3").
    complete_transport: CompleteTransport = CompleteTransport.AUTO
    #: The most completes a commit keeps in flight on the CRT transport (each on a connection of its own): the
    #: ceiling of the commit's adaptive window, which starts at the commit's threads and grows only while the
    #: store answers as fast as it did with fewer (mpcommit.pool.Window) -- a local server that slows down under
    #: load keeps it low. With boto3 the commit's threads bound it.
    max_completes_in_flight: int = 512

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "complete_transport", CompleteTransport(self.complete_transport))
        except ValueError:
            raise UsageError(f"S3Options.complete_transport must be one of "
                             f"{', '.join(t.value for t in CompleteTransport)}, got {self.complete_transport!r}") from None
        if self.max_completes_in_flight < 1:
            raise UsageError("S3Options.max_completes_in_flight must be at least 1")
        if self.sse_customer_key is not None:
            if not isinstance(self.sse_customer_key, bytes) or len(self.sse_customer_key) != 32:
                raise UsageError("S3Options.sse_customer_key must be 32 bytes (an AES-256 key)")
            if self.sse:
                raise UsageError("S3Options: sse (SSE-S3/KMS) and sse_customer_key (SSE-C) exclude each other")
        if self.sse not in (None, "AES256", "aws:kms"):
            raise UsageError(f"S3Options.sse must be None, 'AES256' or 'aws:kms', got {self.sse!r}")
        if self.sse_kms_key_id and self.sse != "aws:kms":
            raise UsageError("S3Options.sse_kms_key_id needs sse='aws:kms'")
        if self.addressing_style not in ("path", "virtual", "auto"):
            raise UsageError(f"S3Options.addressing_style must be path, virtual or auto, got {self.addressing_style!r}")


@dataclass(frozen=True)
class WriterSettings:
    """Sizing of the streaming multipart writer.

    The writer's buffers per open file are bounded by ``part_size(n) * (max_parts_in_flight + 1)``: one buffer
    filling, up to ``max_parts_in_flight`` uploading (24 MiB with the defaults); the HTTP client adds a few MiB
    of its own per process (BENCHMARKS.md, section 2). Part size starts at ``initial_part_size`` and doubles every
    ``parts_per_size_step`` parts, so that no file needs more than 10,000 parts up to S3's 5 TiB limit.
    """

    initial_part_size: int = 8 * MiB
    parts_per_size_step: int = 1000
    max_parts_in_flight: int = 2
    upload_threads: int = 4
    #: What files closing in the background (a task's sorted partition path) may still hold, all of one task's
    #: together: their last parts and parts still uploading. ``close`` waits for room beyond it.
    closing_bytes: int = 32 * MiB

    def __post_init__(self) -> None:
        if self.initial_part_size < MIN_PART_SIZE:
            raise UsageError(f"initial_part_size must be at least 5 MiB (S3's minimum part size), got {self.initial_part_size}")
        if self.initial_part_size > MAX_PART_SIZE:
            raise UsageError("initial_part_size must be at most 5 GiB (S3's maximum part size)")
        if not 1 <= self.parts_per_size_step <= 10_000:
            raise UsageError("parts_per_size_step must be between 1 and 10,000")
        if self.closing_bytes < 1:
            raise UsageError("closing_bytes must be at least 1")
        if self.max_parts_in_flight < 1 or self.upload_threads < 1:
            raise UsageError("max_parts_in_flight and upload_threads must be at least 1")


#: How long a job waits for a live earlier job of its table before it fails by name (OrderSettings).
DEFAULT_MAX_WAIT_SECONDS = 30 * 60.0


@dataclass(frozen=True)
class OrderSettings:
    """How a job keeps its place in its table's commit order (mpcommit.protocol.order).

    A live job says so by rewriting a small heartbeat record every ``heartbeat_seconds``. A job that waits for
    an earlier one (an overwrite waits for every earlier job touching what it replaces) takes the earlier job
    for dead once its heartbeat has not changed for ``lease_seconds`` of the waiter's own observation (no two
    hosts' clocks are compared), and then finishes or rolls it back itself, as ``mpcommit jobs recover`` would.
    ``max_wait_seconds`` bounds the wait for live jobs (30 minutes by default; None or ``math.inf``: as long as
    they are alive). A job waits before its journal -- an overwrite for the earlier jobs touching what it replaces,
    a versioned write for its application's earlier one -- so past its max wait it fails, naming the job it waited
    for, with nothing of its own visible (WaitedTooLongError): it can be run again once that job has ended. Only
    ``recover`` finishing a journal an older mpcommit wrote before its wait can stop past a journal, with
    CommitStateUnknownError; it is finished once that job has ended.
    """

    heartbeat_seconds: float = 10.0
    lease_seconds: float = 60.0
    poll_seconds: float = 1.0
    max_wait_seconds: float | None = DEFAULT_MAX_WAIT_SECONDS
    #: Resolved entries kept below the oldest unresolved one; older ones are deleted now and then, so that a
    #: table with a million jobs lists a few hundred order records, not a million.
    keep_resolved: int = 200
    #: The job that ends every ``tidy_every``-th place collects the order (the randomized trials collect often).
    tidy_every: int = 25

    def __post_init__(self) -> None:
        if self.heartbeat_seconds <= 0 or self.poll_seconds <= 0:
            raise UsageError("OrderSettings: heartbeat_seconds and poll_seconds must be positive")
        if self.lease_seconds < 2 * self.heartbeat_seconds:
            raise UsageError("OrderSettings.lease_seconds must be at least twice heartbeat_seconds, or a live job "
                             "could be taken for dead between two beats")
        if self.max_wait_seconds is None:  # for ever
            object.__setattr__(self, "max_wait_seconds", math.inf)
        if self.max_wait_seconds < 0:
            raise UsageError("OrderSettings.max_wait_seconds cannot be negative")
        if self.keep_resolved < 10:
            raise UsageError("OrderSettings.keep_resolved must be at least 10")
        if self.tidy_every < 1:
            raise UsageError("OrderSettings.tidy_every must be at least 1")

    @classmethod
    def for_lease(cls, lease_seconds: float | None = None, max_wait_seconds: float | None = None) -> OrderSettings:
        """The settings of a lease and a max wait as a user gives them (None: the default), the heartbeat and the
        polls made short enough for the lease: what ``--lease``/``--max-wait`` and the data source's
        ``order.lease``/``order.maxWait`` mean."""
        defaults = cls()
        lease = defaults.lease_seconds if lease_seconds is None else lease_seconds
        if lease <= 0:
            raise UsageError(f"a lease must be longer than 0 s, got {lease}")
        return cls(lease_seconds=lease, heartbeat_seconds=min(defaults.heartbeat_seconds, lease / 3),
                   poll_seconds=min(defaults.poll_seconds, lease / 5),
                   max_wait_seconds=defaults.max_wait_seconds if max_wait_seconds is None else max_wait_seconds)
