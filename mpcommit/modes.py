"""Write modes, as Spark's DataFrameWriter names them, and the states a job goes through."""

from __future__ import annotations

from enum import Enum

from .errors import UsageError


class WriteMode(str, Enum):
    APPEND = "append"
    OVERWRITE = "overwrite"
    ERROR = "error"
    IGNORE = "ignore"

    @classmethod
    def parse(cls, value: "str | WriteMode") -> "WriteMode":
        if isinstance(value, WriteMode):
            return value
        text = str(value).strip().lower()
        if text in ("errorifexists", "error_if_exists", "default"):
            return cls.ERROR
        try:
            return cls(text)
        except ValueError:
            raise UsageError(
                f"unknown mode {value!r}: use append, overwrite, error (errorifexists) or ignore"
            ) from None


class Purpose(str, Enum):
    """What a job is for: writing data, or compacting it (merged files replace their sources; no row changes)."""

    WRITE = "write"
    COMPACT = "compact"

    @classmethod
    def parse(cls, value: "str | Purpose") -> "Purpose":
        if isinstance(value, Purpose):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise UsageError(f"unknown job purpose {value!r}: write or compact") from None


class PartitionOverwrite(str, Enum):
    """Like Spark's ``spark.sql.sources.partitionOverwriteMode``: static replaces the whole destination,
    dynamic only the partitions the job wrote (Hive's INSERT OVERWRITE ... PARTITION)."""

    STATIC = "static"
    DYNAMIC = "dynamic"

    @classmethod
    def parse(cls, value: "str | PartitionOverwrite") -> "PartitionOverwrite":
        if isinstance(value, PartitionOverwrite):
            return value
        try:
            return cls(str(value).strip().lower())
        except ValueError:
            raise UsageError(f"unknown partition_overwrite {value!r}: use static or dynamic") from None


class CommitMode(str, Enum):
    """What a commit did to the destination, as ``_SUCCESS`` and the commit report name it: the write mode,
    an overwrite told apart by what it replaced."""

    APPEND = "append"
    OVERWRITE = "overwrite"                  # static: the whole destination replaced
    OVERWRITE_DYNAMIC = "overwrite-dynamic"  # only the partitions the job wrote replaced
    ERROR = "error"                          # wrote to an empty destination
    IGNORE = "ignore"                        # wrote to an empty destination, or nothing at all

    @classmethod
    def of(cls, mode: WriteMode, partition_overwrite: PartitionOverwrite) -> "CommitMode":
        if mode is WriteMode.OVERWRITE and partition_overwrite is PartitionOverwrite.DYNAMIC:
            return cls.OVERWRITE_DYNAMIC
        return cls(mode.value)

    @classmethod
    def parse(cls, value: "str | CommitMode") -> "CommitMode":
        """From ``_SUCCESS``'s ``mode`` as written (or an enum, as it is)."""
        if isinstance(value, CommitMode):
            return value
        text = str(value).strip().lower()
        try:
            return cls.ERROR if text == "errorifexists" else cls(text)
        except ValueError:
            raise UsageError(f"unknown commit mode {value!r}") from None


class JobState(str, Enum):
    """What the records under a job's hidden prefix say about it."""

    WRITING = "writing"        # descriptor only: tasks may still be writing
    COMMITTING = "committing"  # journal written: `recover` finishes it, never cleans it up
    ROLLING_BACK = "rolling_back"  # a rollback claimed its journal key: it can never commit; `recover` ends it
    COMMITTED = "committed"    # _SUCCESS names this job; only leftover records remain
    # An aborted job has no state: its abort removes every record it had.


class CommitOutcome(str, Enum):
    """The three outcomes of a commit (pyiceberg's rule): only NOT_COMMITTED may be cleaned up."""

    COMMITTED = "committed"
    NOT_COMMITTED = "not_committed"
    UNKNOWN = "unknown"
