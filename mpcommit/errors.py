"""The project's exceptions: one base, one class per thing a caller may want to tell apart.

Store errors keep the botocore error they came from as ``__cause__``; messages say what to do next.
"""

from __future__ import annotations


class MpcommitError(Exception):
    """Base of every error mpcommit raises on purpose."""


# ---------------------------------------------------------------- usage and configuration
class UsageError(MpcommitError, ValueError):
    """An argument or option that cannot work (bad URI, unknown mode, malformed size)."""


class ConditionalWritesMissingError(UsageError):
    """The store does not honour conditional writes (If-None-Match / If-Match), and the user did not state that
    each table has one job at a time (``S3Options(single_writer=True)``): nothing can be ordered, nothing ran."""


class InvalidUriError(UsageError):
    """A destination that is not an s3://, s3a:// or s3n:// URI with a bucket."""


class UnsupportedVersionError(UsageError):
    """A PySpark (or Python) that mpcommit does not run on, or a door its PySpark lacks (the data source before
    PySpark 4): named with its version and what works instead, before anything is written."""


class ExecutorEnvironmentError(MpcommitError):
    """Spark's executors could not run mpcommit's tasks: their Python lacks mpcommit or one of its dependencies."""


class SparkWriterError(UsageError):
    """What PySpark's DataFrameWriter refuses too, refused under Spark's own error condition (``INVALID_SAVE_MODE``,
    ``DATA_SOURCE_NOT_FOUND`` ...): the message starts ``[CONDITION]`` as Spark's do, and :meth:`getCondition`
    answers as on a PySpark exception, so code written against Spark's errors still recognises them."""

    def __init__(self, condition: str, message: str):
        super().__init__(f"[{condition}] {message}")
        self.condition = condition

    def getCondition(self) -> str:  # noqa: N802 - PySparkException's name for it
        return self.condition


class DestinationExistsError(MpcommitError):
    """Mode ``error`` and the destination already holds data."""


# ---------------------------------------------------------------- object store
class StoreError(MpcommitError):
    """An S3 request failed. ``code`` is S3's error code when it gave one."""

    def __init__(self, message: str, *, operation: str = "", code: str = "", bucket: str = "", key: str = ""):
        super().__init__(message)
        self.operation = operation
        self.code = code
        self.bucket = bucket
        self.key = key


class TransientStoreError(StoreError):
    """A failure worth retrying (throttling, 5xx, timeouts, dropped connections)."""


class ThrottledError(TransientStoreError):
    """S3 asked us to slow down (503 SlowDown, 429, RequestLimitExceeded)."""


class RetriesExhaustedError(StoreError):
    """A transient failure persisted through every retry the policy allows."""


class EndpointUnreachableError(StoreError):
    """The endpoint could not be reached: nothing listens there (connection refused) or its host name does not
    resolve. Not retried when the endpoint never answered this process (a wrong URL, a server not running)."""


class TransientEndpointError(EndpointUnreachableError, TransientStoreError):
    """Connecting timed out, or an endpoint that answered before refused a connection (a server restarting):
    retried."""


class InconsistentListingError(StoreError):
    """The server's paginated listing contradicts itself (pages lost or repeated): nothing may be acted on."""


class NotFoundError(StoreError):
    """Something named in the request does not exist."""


class NoSuchBucketError(NotFoundError):
    """The bucket does not exist."""


class NoSuchKeyError(NotFoundError):
    """The object does not exist."""


class NoSuchUploadError(NotFoundError):
    """The multipart upload is not pending: completed, aborted, or never existed."""


class AccessDeniedError(StoreError):
    """The credentials lack a permission the request needs."""


class InvalidCredentialsError(StoreError):
    """The credentials are unknown, malformed or expired."""


class PreconditionFailedError(StoreError):
    """A conditional request (If-Match, If-None-Match) did not hold."""


class InvalidPartError(StoreError):
    """S3 refused the parts of a multipart upload (EntityTooSmall, InvalidPart, InvalidPartOrder)."""


class ChecksumMismatchError(StoreError):
    """The checksum S3 computed for uploaded bytes differs from the one computed here."""


class UnsupportedRequestError(StoreError):
    """The S3 server does not implement this request or a header it carries (501 NotImplemented): asking again
    cannot help (versitygw has no bucket lifecycle; LocalStack no DeleteObject If-Match)."""


# ---------------------------------------------------------------- persisted records
class ManifestError(MpcommitError):
    """A persisted record (job descriptor, task manifest, journal) that must not be acted upon."""


class ManifestCorruptError(ManifestError):
    """Truncated or invalid JSON, or fields of the wrong type."""


class ManifestVersionError(ManifestError):
    """A record written by an unknown format version."""


class ManifestScopeError(ManifestError):
    """A record naming keys outside the destination, another bucket or another job (invariant I7)."""


# ---------------------------------------------------------------- protocol
class ProtocolError(MpcommitError):
    """The committer was used in a way its protocol does not allow."""


class DuplicateTaskResultError(ProtocolError):
    """Two results for one task id were passed to one job commit."""


class JobStateError(ProtocolError):
    """An operation that the job's current state does not allow (commit after abort, ...)."""


class CommitFailedError(MpcommitError):
    """The commit definitely did not happen: nothing was made visible, cleanup is safe."""


class WaitedTooLongError(CommitFailedError):
    """A job waited its max wait (OrderSettings.max_wait_seconds) for a live earlier job of its table and gave up
    before its journal: not committed, nothing of it visible."""

    def __init__(self, message: str, *, job_id: str, blocker: str, waited: float):
        super().__init__(message)
        self.job_id = job_id
        self.blocker = blocker
        self.waited = waited


class CommitConflictError(CommitFailedError):
    """Another job on the table, earlier in its commit order, changed what this job was built from (a compaction
    whose sources an overwrite replaced): this job was not committed, nothing of it is visible."""

    def __init__(self, message: str, *, job_id: str, other_job_id: str, destination: str):
        super().__init__(message)
        self.job_id = job_id
        self.other_job_id = other_job_id
        self.destination = destination

    def __reduce__(self):  # picklable across processes, keyword arguments and all
        return (_rebuild, (type(self), str(self), {"job_id": self.job_id, "other_job_id": self.other_job_id,
                                                   "destination": self.destination}))


class JobRolledBackError(CommitFailedError):
    """The job was rolled back by another process (``jobs abort``, ``recover``, an orphan cleanup) before its
    commit began: nothing of it is visible and it cannot be committed any more."""


class TxnVersionError(CommitFailedError):
    """A write named a version of its application older than one the table committed already: versions of one
    application (a stream's micro-batches, a scheduler's runs) commit in increasing order. Nothing is visible."""


class ConcurrentJobsRefusedError(CommitFailedError):
    """The store does not honour conditional writes, so concurrent jobs on one table cannot be ordered, and
    another job was committing on the table: this one was refused before anything of it became visible."""


def _rebuild(cls: type, message: str, kwargs: dict) -> BaseException:
    return cls(message, **kwargs)


class CommitStateUnknownError(MpcommitError):
    """The commit may have partly happened: never clean up, run ``mpcommit jobs recover``."""

    def __init__(self, message: str, *, job_id: str, destination: str):
        super().__init__(message)
        self.job_id = job_id
        self.destination = destination


class JobTakenOverError(CommitStateUnknownError):
    """This process no longer holds the job it was finishing: while it was paused or cut off from the store,
    another process (``recover``, a later job taking it over) took the job over and is finishing it. This process
    stopped before its next completion or deletion; the other one decides the outcome."""

    def __init__(self, message: str, *, job_id: str, destination: str, holder: str = ""):
        super().__init__(message, job_id=job_id, destination=destination)
        self.holder = holder

    def __reduce__(self):
        return (_rebuild, (type(self), str(self), {"job_id": self.job_id, "destination": self.destination,
                                                   "holder": self.holder}))


# ---------------------------------------------------------------- operations
class OperationCancelledError(MpcommitError):
    """The caller cancelled (Ctrl-C) a listing before it finished; nothing was changed."""
