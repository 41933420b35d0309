"""Layout: URIs, data keys, job ids, Hive escaping. Pure, no server."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpcommit.errors import InvalidUriError, UsageError
from mpcommit.protocol.layout import (
    DEFAULT_PARTITION,
    Destination,
    JobPaths,
    data_file_name,
    escape_partition_value,
    is_hidden_key,
    job_id_of_key,
    new_job_id,
    normalize_partition,
    parse_data_name,
    parse_partition_path,
    parse_uri,
    partition_path,
)


@pytest.mark.parametrize(
    "uri,bucket,prefix",
    [
        ("s3://bkt/table", "bkt", "table"),
        ("s3a://bkt/a/b/", "bkt", "a/b"),
        ("s3n://bkt", "bkt", ""),
        ("S3://bkt/x", "bkt", "x"),
    ],
)
def test_parse_uri_accepts_s3_schemes(uri, bucket, prefix):
    assert parse_uri(uri) == Destination(bucket, prefix)


@pytest.mark.parametrize(
    "uri,fragment",
    [
        ("/local/path", "not an S3 URI"),
        ("hdfs://nn/x", "not an S3 URI"),
        ("s3://", "no valid bucket"),
        ("s3://B/x", "no valid bucket"),
        ("s3://bkt/a/../b", "'..'"),
        ("s3://bkt/a//b", "empty"),
        ("s3://bkt/t/_temporary/x", "_temporary"),
    ],
)
def test_parse_uri_rejects_bad_uris_with_a_reason(uri, fragment):
    with pytest.raises(InvalidUriError, match=fragment.replace(".", r"\.").replace("'", "'")):
        parse_uri(uri)


@pytest.mark.parametrize("bucket", ["my_bucket", "b" * 64, "ab", "Bucket", "-bkt", "bkt-", ".bkt"])
def test_bucket_names_follow_s3s_rule_and_the_error_says_it(bucket):
    with pytest.raises(InvalidUriError) as info:
        parse_uri(f"s3://{bucket}/t")
    message = str(info.value)
    assert "3-63 characters of lowercase letters, digits, dots and hyphens" in message
    rule = message.split("bucket name:", 1)[1]
    assert "255" not in rule and "_" not in rule


@pytest.mark.parametrize("bucket", ["abc", "b" * 63, "my.bucket-01", "0bkt9"])
def test_bucket_names_s3_accepts(bucket):
    assert parse_uri(f"s3://{bucket}/t").bucket == bucket


def test_sibling_prefixes_are_not_contained():
    d = parse_uri("s3://bkt/data1")
    assert d.contains("data1/x.csv")
    assert not d.contains("data10/x.csv")
    assert not d.contains("data1")
    assert not d.contains("data1/../data10/x")
    assert not d.contains("data1//x")


def test_bucket_root_destination():
    d = parse_uri("s3://bkt")
    assert d.root == "" and d.hidden_root == "_temporary/mpcommit/"
    assert d.contains("x/y")
    assert not d.contains("/x")


def test_data_names_carry_the_job_id_and_round_trip():
    job = new_job_id()
    name = data_file_name(task_id=7, job_id=job, file_number=12, ext="snappy.parquet")
    assert name == f"part-00007-{job}.c012.snappy.parquet"
    parsed = parse_data_name(name)
    assert parsed is not None and (parsed.task_id, parsed.job_id, parsed.file_number, parsed.ext) == (7, job, 12, "snappy.parquet")
    d = parse_uri("s3://bkt/t")
    assert job_id_of_key(d, f"t/dt=1/{name}") == job
    assert job_id_of_key(d, "t/dt=1/part-00007-notajob.c000.csv") is None
    assert job_id_of_key(d, f"t/_temporary/mpcommit/{job}/tasks/x.json") == job


def test_job_ids_are_random():
    ids = {new_job_id() for _ in range(1000)}
    assert len(ids) == 1000


@pytest.mark.parametrize("ext", ["", "../x", "a/b", ".hidden", "x" * 80])
def test_bad_extensions_are_refused(ext):
    with pytest.raises(UsageError):
        data_file_name(task_id=0, job_id=new_job_id(), file_number=0, ext=ext)


@pytest.mark.parametrize(
    "value,escaped",
    [
        ("2024-01-01", "2024-01-01"),
        ("a/b", "a%2Fb"),
        ("x=y", "x%3Dy"),
        ("50%", "50%25"),
        ("with space", "with space"),
        ("line\nbreak", "line%0Abreak"),
        ("..", ".."),
        ("ünïcødé", "ünïcødé"),
        (None, DEFAULT_PARTITION),
        ("", DEFAULT_PARTITION),
        (3, "3"),
        (True, "true"),
    ],
)
def test_hive_escaping(value, escaped):
    assert escape_partition_value(value) == escaped


@given(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3))
def test_partition_paths_round_trip(values):
    cols = [f"c{i}" for i in range(len(values))]
    path = partition_path(cols, values)
    assert len(path.split("/")) == len(values)  # escaping keeps every value in one segment
    assert parse_partition_path(path) == dict(zip(cols, values))


def test_normalize_partition_forms():
    assert normalize_partition(None) == ""
    assert normalize_partition("dt=1/") == "dt=1"
    assert normalize_partition({"dt": "2024-01-01", "c": "a/b"}) == "dt=2024-01-01/c=a%2Fb"
    assert normalize_partition([("dt", None)]) == f"dt={DEFAULT_PARTITION}"
    for bad in ("../x", "a//b", "_hidden=1", "dt=1/.x"):
        with pytest.raises(UsageError):
            normalize_partition(bad)


def test_hidden_keys():
    d = parse_uri("s3://bkt/t")
    assert is_hidden_key(d, "t/_SUCCESS")
    assert is_hidden_key(d, "t/_temporary/mpcommit/x")
    assert is_hidden_key(d, "t/dt=1/.crc")
    assert not is_hidden_key(d, "t/dt=1/part-0.csv")


def test_job_paths():
    job = new_job_id()
    p = JobPaths(parse_uri("s3://bkt/t"), job)
    assert p.root == f"t/_temporary/mpcommit/{job}/"
    assert p.task_manifest(3, 1, "ab12").startswith(p.tasks)
    assert p.staged_key(3, 1, "ab12", "dt=1/part.csv").startswith(p.staged)
