"""Arguments that were removed keep working code working: accepted, ignored, and said so."""

from __future__ import annotations

import pytest

from mpcommit import Job
from mpcommit.modes import CommitOutcome
from tests.support.checks import visible_keys
from tests.support.jobs import write_task


def test_commit_processes_is_ignored_with_a_warning_and_the_commit_is_whole(moto_backend):
    """``commit_processes`` spread the completes over worker processes until they were removed (issue 37): a
    caller that still passes it gets a DeprecationWarning naming what to do, and the same commit."""
    bucket = moto_backend.new_bucket()
    with pytest.warns(DeprecationWarning, match="commit_processes.*ignored.*drop the argument"):
        job = Job.create(f"s3://{bucket}/t", s3=moto_backend.options, commit_processes=2)
    refs = [write_task(job, t, {f"dt={t % 2}": f"task {t}\n".encode()}) for t in range(4)]
    report = job.commit(refs)
    assert report.outcome is CommitOutcome.COMMITTED and report.files == 4
    assert len(visible_keys(moto_backend.client, bucket, "t")) == 4
