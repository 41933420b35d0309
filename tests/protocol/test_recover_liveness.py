"""`jobs recover --older-than` judges a writing job by its last sign of life, as `uploads abort` does."""

import time

import pytest

from mpcommit.modes import JobState
from mpcommit.protocol.inventory import JobStatus
from mpcommit.protocol.layout import Destination
from mpcommit.protocol.recovery import RecoveryOutcome, _recover_one


class Committer:
    """Stands in for JobCommitter: records whether the job was rolled back."""

    def __init__(self):
        self.aborted = False

    def rollback(self, *, reason):
        self.aborted = True

        class Report:
            aborted_uploads, deleted_records, ended_before = 3, 2, False

        return Report()


def status(*, created_ago: float, active_ago: float) -> JobStatus:
    now_ms = time.time() * 1000
    return JobStatus(job_id="0b9c5e8e-8a5e-4c1e-9b7e-1d2f3a4b5c6d", destination=Destination("bkt", "t"),
                     state=JobState.WRITING, records=2, created_ms=int(now_ms - created_ago * 1000),
                     last_activity_ms=int(now_ms - active_ago * 1000))


@pytest.mark.parametrize("created_ago,active_ago,rolled_back", [
    (7200, 60, False),    # started two hours ago and still writing: live, whatever its age
    (7200, 5400, True),   # quiet for 90 minutes: abandoned
    (600, 600, False),    # young
])
def test_a_writing_job_is_rolled_back_only_after_an_hour_without_a_sign_of_life(created_ago, active_ago, rolled_back):
    committer = Committer()
    action = _recover_one(committer, status(created_ago=created_ago, active_ago=active_ago), named=False,
                          older_than=3600, now=time.time(), dry_run=False)
    assert committer.aborted is rolled_back
    assert action.action is (RecoveryOutcome.ROLLED_BACK if rolled_back else RecoveryOutcome.SKIPPED)
    if not rolled_back:
        assert "--job" in action.detail
