"""mpcommit: commit many files written in parallel to S3 without renames, on multipart uploads.

Tasks stream files to their final keys as multipart uploads left uncompleted and record them in
manifests; the driver alone completes the winners, aborts the rest and cleans up.
"""

from .errors import MpcommitError
from .modes import CommitOutcome, JobState, PartitionOverwrite, WriteMode
from .options import RetryPolicy, S3Options, WriterSettings
from .protocol.commit import AbortReport, CommitReport
from .protocol.job import Job
from .protocol.records.manifest import TaskResult
from .protocol.records.order import Txn
from .protocol.inventory import list_jobs
from .protocol.recovery import recover
from .protocol.task import JobSpec, TaskAttempt

__version__ = "0.1.0"

__all__ = [
    "AbortReport", "CommitOutcome", "CommitReport", "Job", "JobSpec", "JobState", "MpcommitError",
    "PartitionOverwrite", "RetryPolicy", "S3Options", "TaskAttempt", "TaskResult", "Txn", "WriteMode",
    "WriterSettings", "list_jobs", "recover",
]
