"""Persisted formats: frozen, versioned records that validate themselves when read."""

from .job import CommitJournal, DeleteEntry, JobDescriptor
from .manifest import Part, PendingUpload, StagedFile, TaskManifest, TaskResult
from .success import SuccessData

__all__ = [
    "CommitJournal", "DeleteEntry", "JobDescriptor", "Part", "PendingUpload", "StagedFile",
    "SuccessData", "TaskManifest", "TaskResult",
]
