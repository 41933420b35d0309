"""mpcommit doctor's judgement, as pure logic: findings -> features, and the probes' readings of dates and ETags."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from mpcommit.operations import probes
from mpcommit.operations.doctor import features
from mpcommit.operations.probes import BEHAVIOURS, Finding, Status

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def as_s3(**changed: tuple[str, Status]) -> list[Finding]:
    """A store that behaves as AWS documents everywhere, except the findings given (probe -> (value, status))."""
    return [Finding(b.id, changed.get(b.id, ("as documented", Status.AS_S3))[0],
                    changed.get(b.id, ("as documented", Status.AS_S3))[1]) for b in BEHAVIOURS]


def feature(findings, name):
    return next(f for f in features(findings) if f.name.startswith(name))


def test_a_store_as_aws_documents_is_safe_for_every_feature():
    judged = features(as_s3())
    assert judged and all(f.safe for f in judged), [f for f in judged if not f.safe]


@pytest.mark.parametrize("probe,name,advice", [
    ("put_if_none_match", "concurrent jobs", "one writing job per table"),
    ("put_if_match", "concurrent jobs", "one writing job per table"),
    ("uploads_initiated", "age-based cleanup", "--job ID"),
    ("lifecycle", "lifecycle safety net", "--older-than 7d"),
    ("copy_range", "compaction", "do not merge or compact"),
    ("copy_if_match", "compaction while jobs write", "compact only while no job writes"),
    ("delete_if_match", "one finisher per commit", "one `mpcommit jobs recover` per job at a time"),
    ("key_and_folder", "destinations below", "not also an object's key"),
    ("listing_past_1000", "overwrite, recovery and cleanup", "InconsistentListingError"),
])
def test_each_limit_names_the_feature_and_what_to_do(probe, name, advice):
    judged = feature(as_s3(**{probe: ("something else", Status.LIMITS)}), name)
    assert advice in judged.advice
    assert not judged.safe and probe in judged.probes
    assert all(f.safe for f in features(as_s3(**{probe: ("something else", Status.LIMITS)})) if probe not in f.probes)


#: Behaviours mpcommit relies on that no feature is judged from: their probes answer "as S3" or "differs, handled"
#: only (mpcommit copes with every answer seen), never "differs, limits". A new behaviour belongs to a feature, or
#: here once its probe is shown never to say "limits".
JUDGED_BY_NO_FEATURE = {"multipart_last_modified", "part_size_minimum", "aborted_upload_part", "delete_objects_quiet"}


def test_every_limit_points_at_a_feature_judged_unsafe_from_it():
    """Issue 40: `DeleteObject If-Match ... | differs, limits` on LocalStack, while every feature said yes: a row that
    says "limits" must point at a "no" in the features' table, or "limits" means nothing."""
    used = {b.id for b in BEHAVIOURS if b.used}
    judged = {p for f in features(as_s3()) for p in f.probes}
    assert used - judged == JUDGED_BY_NO_FEATURE
    for probe in sorted(used & judged):
        unsafe = [f for f in features(as_s3(**{probe: ("something else", Status.LIMITS)})) if not f.safe]
        assert any(probe in f.probes for f in unsafe), probe


def test_a_request_mpcommit_does_not_send_differs_unused():
    unsent = [b.id for b in BEHAVIOURS if not b.used]
    assert unsent == ["complete_if_none_match"]
    shown = probes.judged(Finding("complete_if_none_match", "ignored: replaced the key", Status.LIMITS, "a limit"))
    assert (shown.status, shown.status.value) == (Status.UNUSED, "differs, unused")
    assert "does not send" in shown.note
    for status in (Status.AS_S3, Status.FAILED):
        assert probes.judged(Finding("complete_if_none_match", "x", status)).status is status
    sent = Finding("put_if_none_match", "ignored: replaced the key", Status.LIMITS, "a limit")
    assert probes.judged(sent) == sent


def test_a_behaviour_not_probed_is_not_taken_for_safe():
    findings = [f for f in as_s3() if f.probe != "put_if_none_match"]
    assert not feature(findings, "concurrent jobs").safe


def test_retried_completes_are_unsafe_only_where_both_a_repeat_fails_and_the_etag_differs():
    assert feature(as_s3(complete_twice=("NoSuchUpload", Status.WORKED_AROUND)), "retried completes").safe
    assert feature(as_s3(multipart_etag=("other", Status.WORKED_AROUND)), "retried completes").safe
    both = as_s3(complete_twice=("NoSuchUpload", Status.WORKED_AROUND), multipart_etag=("other", Status.WORKED_AROUND))
    assert not feature(both, "retried completes").safe


def test_initiated_is_the_uploads_start_or_named_as_not():
    assert probes._initiated_finding(T0 + timedelta(seconds=1), T0).status is Status.AS_S3
    moto = probes._initiated_finding(datetime(2010, 11, 10, 20, 48, 33, tzinfo=timezone.utc), T0)
    assert moto.status is Status.LIMITS and "2010-11-10" in moto.value and "--job" in moto.note
    assert probes._initiated_finding(None, T0).status is Status.LIMITS


def test_last_modified_is_read_as_the_start_or_the_completion():
    done = T0 + timedelta(seconds=probes.DATE_GAP + 0.5)
    assert probes._last_modified_finding(T0, T0, done).value == "the upload's start"
    assert probes._last_modified_finding(done, T0, done).value == "the completion"
    assert probes._last_modified_finding(T0 - timedelta(hours=1), T0, done).value.startswith("neither")
    assert probes._last_modified_finding(None, T0, done).status is Status.FAILED


def test_the_multipart_etag_is_compared_with_the_md5_of_the_parts_md5s():
    parts = ['"' + "0" * 32 + '"', '"' + "1" * 32 + '"']
    from mpcommit.sizing import multipart_etag

    assert probes._etag_finding(multipart_etag(parts), parts).status is Status.AS_S3
    other = probes._etag_finding('"abc"', parts)
    assert other.status is Status.WORKED_AROUND and "CommitStateUnknownError" in other.note


def test_the_plan_stays_below_the_hidden_doctor_folder_of_the_destination():
    assert probes.probe_base("", "r") == f"{probes.PROBE_FOLDER}/r/"
    assert probes.probe_base("a/b", "r") == f"a/b/{probes.PROBE_FOLDER}/r/"
    keys = probes.planned_keys(probes.probe_base("a/b", "r"))
    assert all(k.startswith(f"a/b/{probes.PROBE_FOLDER}/r/") for k, _ in keys)
    assert len({k for k, what in keys if what == "object"}) == len([k for k, what in keys if what == "object"])
