"""`mpcommit doctor` on every test server: the store probes run through the real console script, say what
docs/STORES.md says for that server, and leave nothing behind; the dry run writes nothing; bad input is refused."""

from __future__ import annotations

import pytest

from mpcommit.operations import probes
from mpcommit.operations.probes import BEHAVIOURS, PROBE_FOLDER, Finding, Status, probe_base, run_probes
from mpcommit.store.s3 import S3Store
from tests.support.cli import assert_clean_error, cli
from tests.stores.matrix import COLUMNS, DOC, cell, found_by_tests, parse, server_versions
from tests.support.checks import all_keys, pending_uploads

TITLES = {b.id: b.title for b in BEHAVIOURS}


@pytest.mark.ci_on("localstack", "versitygw")  # moto's case (about 19 s) in the long tier
def test_doctor_finds_what_the_matrix_says_and_leaves_nothing(backend, bucket):
    result = cli(backend)("doctor", f"s3://{bucket}/table", "--json", timeout=300)
    assert result.returncode == 0, result
    report = result.json()
    assert report["probeKeysUnder"].startswith(f"table/{PROBE_FOLDER}/") and report["complete"] is True
    assert [f["probe"] for f in report["findings"]] == [b.id for b in BEHAVIOURS]
    # Progress went to stderr, one line per check.
    assert result.stderr.count("mpcommit doctor: probing") == len(probes.CHECKS), result.stderr

    # Nothing of the probes is left: no object, no pending upload (the lead's conditional probe's key included).
    assert all_keys(backend.client, bucket) == set()
    assert pending_uploads(backend.client, bucket) == []

    # docs/STORES.md says the same of this server, for the version the tests run.
    matrix, measured = parse(DOC.read_text())
    label, running = COLUMNS[backend.name], server_versions()[backend.name]
    found = {TITLES[f["probe"]]: cell(Finding(f["probe"], f["value"], Status(f["status"]))) for f in report["findings"]}
    if measured.get(backend.name) != running and backend.name == "moto":
        # moto is not pinned (pyproject: >=5.0.20,<6): a newer release may behave otherwise; the page is about its own.
        if found != matrix[backend.name]:
            pytest.skip(f"docs/STORES.md was measured on moto {measured.get('moto')}; moto {running} differs in "
                        f"{sorted(k for k in found if found[k] != matrix[backend.name].get(k))}: run `make stores-doc`")
    else:
        assert measured.get(backend.name) == running, (
            f"docs/STORES.md was measured on {label} {measured.get(backend.name)}, the tests run {running}: "
            "run `make stores-doc`")
        assert found == matrix[backend.name], "docs/STORES.md is stale for " + label + ": run `make stores-doc`"

    # The features follow from the findings: two that differ between the servers here, checked against them.
    features = {x["feature"]: x for x in report["features"]}
    # "differs, limits" always points at a feature judged unsafe from it (issue 40: LocalStack's DeleteObject
    # If-Match said "limits" while every feature said yes).
    unsafe = {p for x in report["features"] if not x["safe"] for p in x["probes"]}
    limits = {f["probe"] for f in report["findings"] if f["status"] == Status.LIMITS.value}
    assert limits <= unsafe, f"'differs, limits' with every feature judged from it safe: {sorted(limits - unsafe)}"
    lifecycle = next(f for f in report["findings"] if f["probe"] == "lifecycle")
    assert features["lifecycle safety net (mpcommit lifecycle)"]["safe"] is (lifecycle["status"] == "as S3")
    initiated = next(f for f in report["findings"] if f["probe"] == "uploads_initiated")
    ages = features["age-based cleanup (--older-than)"]
    assert ages["safe"] is (initiated["status"] == "as S3")
    assert ages["safe"] or "--job" in ages["advice"]


def test_the_page_ends_with_what_other_tests_found():
    """The page's last section is written from FOUND_BY_TESTS, as `make stores-doc` writes it."""
    assert DOC.read_text().endswith("\n".join(found_by_tests()).rstrip() + "\n")


def test_doctor_prints_the_row_and_the_features_for_people(versitygw_backend):
    backend = versitygw_backend
    bucket = backend.new_bucket()
    result = cli(backend)("doctor", f"s3://{bucket}/events")
    assert result.returncode == 0, result
    out = result.stdout
    assert "refuses its own UploadIdMarker" in out and "KeyMarker alone works" in out
    assert "mpcommit's features on this store" in out
    lifecycle = next(line for line in out.splitlines() if "lifecycle safety net (mpcommit" in line)
    assert "│ no " in lifecycle and "--older-than 7d" in out
    assert "mpcommit doctor: cleaning up the probe keys" in result.stderr
    assert all_keys(backend.client, bucket) == set() and pending_uploads(backend.client, bucket) == []


def test_doctor_says_limits_only_where_a_feature_is_limited(localstack_backend):
    """Issue 40: on LocalStack `DeleteObject If-Match with a stale ETag | not implemented | differs, limits`, while
    every feature was safe there: mpcommit gives a finishing turn back by reading it first where the store refuses
    the conditional delete, so the row says "differs, handled", and no row says "limits"."""
    backend = localstack_backend
    result = cli(backend)("doctor", f"s3://{backend.new_bucket()}/events")
    assert result.returncode == 0, result
    out = result.stdout
    row = next(line for line in out.splitlines() if "DeleteObject `If-Match`" in line)
    assert "not implemented" in row and "differs, handled" in row, out
    assert "differs, limits" not in out, out
    turns = next(line for line in out.splitlines() if "one finisher per commit" in line)
    assert "│ yes " in turns, out


def test_dry_run_lists_what_it_would_create_and_writes_nothing(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket()
    text = cli(backend)("doctor", f"s3://{bucket}/t", "--dry-run")
    assert text.returncode == 0, text
    assert "Dry run: nothing written" in text.stdout and f"s3://{bucket}/t/{PROBE_FOLDER}/RUN/" in text.stdout
    assert "multipart upload  mpu/b" in text.stdout and "list/dt=2024-01-00/k=0000.csv" in text.stdout
    listed = cli(backend)("doctor", f"s3://{bucket}/t", "--dry-run", "--json")
    assert listed.returncode == 0, listed
    planned = listed.json()["wouldCreate"]
    assert all(item["key"].startswith(probe_base("t", "RUN")) for item in planned)
    assert all_keys(backend.client, bucket) == set() and pending_uploads(backend.client, bucket) == []


def test_the_dry_run_plan_is_exactly_what_a_run_creates(moto_backend):
    backend = moto_backend
    bucket = backend.new_bucket()
    store = S3Store(backend.options)
    created: list[tuple[str, str]] = []
    request, put_object = store.request, store.put_object

    def recording_request(operation, **kw):
        if operation in ("put_object", "create_multipart_upload"):
            created.append((kw["Key"], "object" if operation == "put_object" else "multipart upload"))
        return request(operation, **kw)

    def recording_put(bucket_name, key, body, **kw):
        created.append((key, "object"))
        return put_object(bucket_name, key, body, **kw)

    store.request, store.put_object = recording_request, recording_put  # type: ignore[method-assign]
    base = probe_base("t", "r2")
    run_probes(store, bucket, base)
    planned = probes.planned_keys(base)
    random_key = f"{base}{probes.CONDITIONAL_FOLDER}<random id>"
    made = [(k if not k.startswith(f"{base}{probes.CONDITIONAL_FOLDER}") else random_key, what) for k, what in created]
    assert sorted(w for w in planned if w[1] == "multipart upload") == sorted(w for w in made if w[1] == "multipart upload")
    # Objects: each key once in the plan; a completed upload makes one too (copy/target, dates/object...).
    completed = {k for k, what in planned if what == "multipart upload"}
    assert {k for k, what in planned if what == "object"} == {k for k, what in made if what == "object"} | (
        completed & {k for k, what in planned if what == "object"})


def test_a_missing_bucket_or_a_bad_uri_is_refused_clearly(moto_backend):
    mpcommit = cli(moto_backend)
    assert_clean_error(mpcommit("doctor", "s3://no-such-bucket-here/t"), 1, "no-such-bucket-here", "does not exist")
    assert_clean_error(mpcommit("doctor", "s3://no-such-bucket-here/t", "--dry-run"), 1, "does not exist")
    assert_clean_error(mpcommit("doctor", "/tmp/not-s3"), 2, "s3://")


def test_probe_keys_are_removed_even_when_a_probe_breaks_off(moto_backend, monkeypatch):
    """Whatever a run created is aborted and deleted when it stops on an unexpected error."""
    backend = moto_backend
    bucket = backend.new_bucket()

    def breaks(run):
        run.put("half/object", b"x")
        run.create_upload("half/upload")
        raise RuntimeError("the probe broke off")

    monkeypatch.setattr(probes, "CHECKS", (probes.Check("a broken check", ("lifecycle",), breaks, lambda b: []),))
    with pytest.raises(RuntimeError, match="broke off"):
        run_probes(S3Store(backend.options), bucket, probe_base("t", "r1"))
    assert all_keys(backend.client, bucket) == set() and pending_uploads(backend.client, bucket) == []
