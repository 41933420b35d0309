"""mpcommit: commit many files written in parallel to S3 without renames, on multipart uploads.

Tasks stream files to their final keys as multipart uploads left uncompleted and record them in
manifests; the driver alone completes the winners, aborts the rest and cleans up.
"""

import sys

# Said first, in code every Python 3 parses: on an older Python the package's own modules fail further in with
# errors that name something else (a syntax error, a type annotation). pip refuses such an install already
# (requires-python); this is for a checkout on the path or an install that forced it.
if sys.version_info < (3, 10):
    raise ImportError(f"Python {sys.version_info[0]}.{sys.version_info[1]} is not supported: mpcommit needs Python "
                      "3.10 or later (the interpreter is " + sys.executable + ")")

from .errors import MpcommitError  # noqa: E402
from .modes import CommitOutcome, JobState, PartitionOverwrite, WriteMode  # noqa: E402
from .options import RetryPolicy, S3Options, WriterSettings  # noqa: E402
from .protocol.commit import AbortReport, CommitReport  # noqa: E402
from .protocol.job import Job  # noqa: E402
from .protocol.records.manifest import TaskResult  # noqa: E402
from .protocol.records.order import Txn  # noqa: E402
from .protocol.inventory import list_jobs  # noqa: E402
from .protocol.recovery import recover  # noqa: E402
from .protocol.task import JobSpec, TaskAttempt  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "AbortReport", "CommitOutcome", "CommitReport", "Job", "JobSpec", "JobState", "MpcommitError",
    "PartitionOverwrite", "RetryPolicy", "S3Options", "TaskAttempt", "TaskResult", "Txn", "WriteMode",
    "WriterSettings", "list_jobs", "recover",
]
