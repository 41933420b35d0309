"""The driver's job commit, abort and the finishing of an interrupted commit.

A commit goes through three outcomes, never two:

* before the journal is written, a failure means NOT COMMITTED: nothing was made visible and the job can be
  aborted safely (:class:`~mpcommit.errors.CommitFailedError`);
* once the journal exists, a failure means UNKNOWN: some files may be visible, so nothing may be cleaned up;
  ``recover`` finishes the commit from the journal (:class:`~mpcommit.errors.CommitStateUnknownError`);
* after ``_SUCCESS`` is written, COMMITTED.

Every step after the journal is idempotent, which is what makes ``recover`` equal to an uninterrupted commit
(invariant I4): completing an already completed upload is resolved by checking the object's multipart ETag,
deletes skip what is gone, and ``_SUCCESS`` is rewritten.

The modules, in the order a commit uses them: ``journal`` (winners, manifests validated, the journal),
``finisher`` (carries a journal out, for the driver and ``recover`` alike), ``turn`` (the finishing turn a
finisher holds from the journal on), ``placing`` (completes and staged moves, on the CRT transport or on threads),
``replacing`` (an overwrite's older objects, a compaction's sources), ``cleanup`` (leftover uploads, the job's
records); ``committer`` runs a first commit up to its journal, ``rollback`` rolls a job back, ``work`` holds what
the three share about the job, ``fence`` checks before each step that cannot be undone that this process still
holds the job, ``context`` owns the threads, ``manifests`` reads the winners' manifests, ``committed`` holds the
committed keys within a memory bound, ``reports`` holds what comes back.
"""

from .committer import DEFAULT_COMMIT_THREADS, JobCommitter
from .reports import AbortReport, CatalogSummary, CommitReport

__all__ = ["DEFAULT_COMMIT_THREADS", "AbortReport", "CatalogSummary", "CommitReport", "JobCommitter"]
