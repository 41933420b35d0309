"""The pure core of the cleanup and the lifecycle merge: no server."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import pytest

from mpcommit.errors import UsageError
from mpcommit.modes import JobState
from mpcommit.operations.lifecycle import RULE_ID, Change, abort_rules, merge
from mpcommit.operations.uploads import InProgressUpload, UploadScope, plan_abort
from mpcommit.protocol.inventory import JobStatus, _ancestors, _common_directory
from mpcommit.protocol.layout import Destination, owner_of_key

NOW = 1_800_000_000.0
J1, J2 = str(uuid.uuid4()), str(uuid.uuid4())


def upload(key: str, age: float | None, job: str | None = None) -> InProgressUpload:
    initiated = None if age is None else datetime.fromtimestamp(NOW - age, timezone.utc)
    return InProgressUpload(key, f"id-{key}-{age}", initiated, job if job is not None else owner_of_key(key)[0])


def job(job_id: str, state: JobState, idle: float | None) -> JobStatus:
    activity = None if idle is None else int((NOW - idle) * 1000)
    return JobStatus(job_id, Destination("b", "t"), state, records=3, created_ms=activity, last_activity_ms=activity)


def key(job_id: str, n: int = 0) -> str:
    return f"t/dt=1/part-{n:05d}-{job_id}.c000.txt"


# ---------------------------------------------------------------- scopes and ownership
def test_scope_is_a_folder_unless_string_prefix_is_asked_for():
    assert UploadScope.parse("s3://bkt/data1").prefix == "data1/"
    assert UploadScope.parse("s3://bkt/data1/").prefix == "data1/"
    assert UploadScope.parse("s3a://bkt").prefix == ""
    assert UploadScope.parse("s3://bkt/data1", string_prefix=True).prefix == "data1"
    assert UploadScope.parse("s3://bkt/logs/2024-", string_prefix=True).prefix == "logs/2024-"
    with pytest.raises(UsageError):
        UploadScope.parse("/tmp/data1")
    with pytest.raises(UsageError):
        UploadScope.parse("s3://bkt/t/_temporary/mpcommit")


def test_owner_of_reads_the_job_from_data_names_and_hidden_prefixes():
    assert owner_of_key(key(J1)) == (J1, None)
    assert owner_of_key(f"a/b/_temporary/mpcommit/{J1}/staged/x") == (J1, "a/b/")
    assert owner_of_key(f"_temporary/mpcommit/{J1}/job.json") == (J1, "")
    assert owner_of_key(f"ab_temporary/mpcommit/{J1}/x") == (None, None)  # not a path segment
    assert owner_of_key("t/part-00000.snappy.parquet") == (None, None)  # Spark's own names carry no mpcommit job
    assert owner_of_key("t/whatever.bin") == (None, None)


def test_candidate_roots_are_the_common_folder_and_its_ancestors():
    assert _common_directory(["t/dt=1/a", "t/dt=2/b"]) == "t/"
    assert _common_directory(["data1/a", "data10/b"]) == ""
    assert _common_directory(["t/dt=1/a", "t/dt=1/b"]) == "t/dt=1/"
    assert _common_directory(["a"]) == ""
    assert _ancestors("t/dt=1/") == ["t/dt=1/", "t/", ""]
    assert _ancestors("") == [""]


# ---------------------------------------------------------------- selection
def test_no_selection_is_refused():
    with pytest.raises(UsageError, match="--older-than"):
        plan_abort([upload("t/x", 10)], {}, older_than=None, job_id=None, now=NOW)


def test_age_selects_old_orphans_only():
    uploads = [upload("t/old", 7200), upload("t/young", 60), upload("t/unknown-age", None), upload(key(J1), 7200)]
    plan = plan_abort(uploads, {}, older_than=3600, job_id=None, now=NOW)
    assert [u.key for u in plan.selected] == ["t/old", key(J1)]  # J1 has no records: an orphan
    assert plan.not_matched == 2 and plan.protected == ()


def test_a_writing_job_active_within_the_threshold_is_live():
    uploads = [upload(key(J1, 0), 7200), upload(key(J1, 1), 7200), upload(key(J2), 7200)]
    jobs = {J1: job(J1, JobState.WRITING, idle=600), J2: job(J2, JobState.WRITING, idle=7000)}
    plan = plan_abort(uploads, jobs, older_than=3600, job_id=None, now=NOW)
    assert [u.job_id for u in plan.selected] == [J2]  # idle for longer than the threshold: dead
    assert [p.upload.job_id for p in plan.protected] == [J1, J1]
    assert "may still be writing" in plan.protected[0].reason


def test_a_job_with_unknown_activity_counts_as_live():
    plan = plan_abort([upload(key(J1), 7200)], {J1: job(J1, JobState.WRITING, idle=None)}, older_than=60,
                      job_id=None, now=NOW)
    assert plan.selected == () and len(plan.protected) == 1


def test_a_committing_job_is_never_selected_even_when_named():
    jobs = {J1: job(J1, JobState.COMMITTING, idle=10**6)}
    for older_than, job_id in ((60, None), (None, J1), (60, J1)):
        plan = plan_abort([upload(key(J1), 10**6)], jobs, older_than=older_than, job_id=job_id, now=NOW)
        assert plan.selected == ()
        assert "jobs recover" in plan.protected[0].reason


def test_naming_a_live_writing_job_selects_its_uploads_and_nothing_else():
    uploads = [upload(key(J1), 5), upload(key(J2), 10**6), upload("t/orphan", 10**6)]
    jobs = {J1: job(J1, JobState.WRITING, idle=1)}
    plan = plan_abort(uploads, jobs, older_than=None, job_id=J1, now=NOW)
    assert [u.job_id for u in plan.selected] == [J1]
    assert plan.not_matched == 2
    # Age and job together: both must hold.
    plan = plan_abort(uploads, jobs, older_than=60, job_id=J1, now=NOW)
    assert plan.selected == ()


def test_leftovers_of_a_committed_job_are_orphans():
    plan = plan_abort([upload(key(J1), 7200)], {J1: job(J1, JobState.COMMITTED, idle=1)}, older_than=3600,
                      job_id=None, now=NOW)
    assert len(plan.selected) == 1


# ---------------------------------------------------------------- lifecycle merge
EXISTING = [
    {"ID": "expire-logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"}, "Expiration": {"Days": 30}},
    {"ID": "old-abort", "Status": "Enabled", "Filter": {"Prefix": "tmp/"},
     "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1}},
]


def test_merge_adds_our_rule_and_keeps_every_other_rule_as_it_was():
    merged, change = merge(EXISTING, 7)
    assert change is Change.ADDED
    assert merged[:2] == EXISTING
    assert merged[2] == {"ID": RULE_ID, "Status": "Enabled", "Filter": {"Prefix": ""},
                         "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}}
    again, change = merge(merged, 7)
    assert change is Change.UNCHANGED and again == merged
    updated, change = merge(merged, 3)
    assert change is Change.UPDATED and updated[:2] == EXISTING and len(updated) == 3
    assert updated[2]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}


def test_merge_refuses_nonsense_days_and_finds_abort_rules():
    for bad in (0, -1, True):
        with pytest.raises(UsageError):
            merge([], bad)
    found = abort_rules(merge(EXISTING, 7)[0])
    assert [(r.rule_id, r.days, r.prefix, r.ours) for r in found] == [("old-abort", 1, "tmp/", False), (RULE_ID, 7, "", True)]
