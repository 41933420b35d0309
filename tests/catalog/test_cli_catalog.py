"""``mpcommit catalog sync``: register a commit from its _SUCCESS, on moto's S3 and Glue."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mpcommit.catalog import CatalogRegistrationError, TableNotFoundError
from mpcommit.cli.catalog import catalog
from mpcommit.cli.common import CliContext
from tests.support.glue import create_table, partitions, stats_of, write


def invoke(backend, *args):
    runner = CliRunner()
    return runner.invoke(catalog, ["sync", *args, "--glue-endpoint-url", backend.endpoint_url],
                         obj=CliContext(backend.options), catch_exceptions=True)


def test_sync_registers_a_commit_made_without_a_table(moto_backend, glue_client, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    create_table(glue_client, database, "t", uri)
    report = write(moto_backend, uri, {"dt=1": [b"a\n", b"b\n"], "dt=2": [b"c\n"]}, mode="overwrite")

    result = invoke(moto_backend, uri, "--table", f"{database}.t", "--json")

    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["ok"] is True and document["created"] == ["dt=1", "dt=2"]
    found = partitions(glue_client, database, "t")
    assert stats_of(found["1"]) == (2, 4, 2) and stats_of(found["2"]) == (1, 2, 1)
    assert found["1"]["Parameters"]["mpcommit.lastJobId"] == report.job_id

    again = invoke(moto_backend, uri, "--table", f"{database}.t")
    assert again.exit_code == 0, again.output
    assert "Unchanged" in again.output and "2: dt=1, dt=2" in again.output


def test_sync_into_a_missing_table_fails_clearly(moto_backend, database):
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    write(moto_backend, uri, {"dt=1": [b"a\n"]})

    result = invoke(moto_backend, uri, "--table", f"{database}.nope")

    assert isinstance(result.exception, CatalogRegistrationError)
    assert isinstance(result.exception.__cause__, TableNotFoundError)
    assert "not registered (1): dt=1" in str(result.exception)


@pytest.mark.parametrize("args, needle", [
    (["s3://bucket/t", "--table", "nodot"], "db.table"),
    (["not-a-uri", "--table", "db.t"], "not an S3 URI"),
    (["s3://bucket/t", "--table", "db.t", "--catalog", "hive"], "'hive' is not one of"),
])
def test_usage_errors_exit_2(moto_backend, args, needle):
    result = invoke(moto_backend, *args)
    assert result.exit_code == 2 and needle in result.output, result.output


def test_the_mpcommit_command_registers_catalog_and_exits_1_on_a_refusal(moto_backend, glue_client, database,
                                                                         monkeypatch, capsys):
    from mpcommit.cli.main import main

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    bucket = moto_backend.new_bucket()
    uri = f"s3://{bucket}/t"
    write(moto_backend, uri, {"dt=1": [b"a\n"]})
    base = ["--endpoint-url", moto_backend.endpoint_url, "--region", "us-east-1", "catalog", "sync", uri,
            "--glue-endpoint-url", moto_backend.endpoint_url, "--table"]

    assert main([*base, f"{database}.t"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("mpcommit: error: ") and "Traceback" not in err
    assert f"{database}.t does not exist" in err and f"mpcommit catalog sync {uri} --table {database}.t" in err

    create_table(glue_client, database, "t", uri)
    assert main([*base, f"{database}.t"]) == 0
    assert "Created" in capsys.readouterr().out
    assert set(partitions(glue_client, database, "t")) == {"1"}
