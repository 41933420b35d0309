"""The pure parts of catalog registration, without a server: statistics, plans, names, SQL, _SUCCESS."""

from __future__ import annotations

import json

import pytest

from mpcommit.catalog import (
    CatalogResult,
    PartitionColumnsMismatchError,
    Registration,
    RegistrationMode,
    TableLayout,
    TableLocationMismatchError,
    TableName,
)
from mpcommit.catalog.plan import (
    Action,
    ExistingPartition,
    format_of,
    normalize_location,
    partition_values,
    plan_partitions,
    stats_parameters,
    table_parameters,
    table_root,
    write_layout,
)
from mpcommit.catalog.spark_catalog import add_partitions_sql, set_properties_sql, sql_string, unset_properties_sql
from mpcommit.catalog.sync import _register
from mpcommit.errors import UsageError
from mpcommit.protocol.records.success import PartitionStats, SuccessData

T = TableName("db", "t")
NOW = 1_700_000_000


# ---------------------------------------------------------------- statistics
def test_append_adds_to_known_counts_and_forgets_unknown_ones():
    old = {"numFiles": "2", "totalSize": "100", "numRows": "-1", "owner": "me"}
    params = stats_parameters(old, PartitionStats(1, 10, 5), add=True, job_id="j", now=NOW)
    assert params == {"numFiles": "3", "totalSize": "110", "owner": "me", "transient_lastDdlTime": str(NOW),
                      "mpcommit.lastJobId": "j"}  # numRows was unknown (-1): still unknown, so not accurate


def test_a_new_partition_starts_from_zero_and_is_marked_accurate():
    params = stats_parameters(None, PartitionStats(2, 20, 7), add=True, job_id="j", now=NOW)
    assert params["numFiles"] == "2" and params["totalSize"] == "20" and params["numRows"] == "7"
    assert params["COLUMN_STATS_ACCURATE"] == '{"BASIC_STATS":"true"}'


def test_overwrite_replaces_counts_and_drops_what_no_longer_holds():
    old = {"numFiles": "9", "totalSize": "900", "numRows": "90", "rawDataSize": "5000",
           "COLUMN_STATS_ACCURATE": '{"BASIC_STATS":"true","COLUMN_STATS":{"id":"true"}}',
           "spark.sql.statistics.totalSize": "900", "spark.sql.statistics.colStats.id.max": "7"}
    params = stats_parameters(old, PartitionStats(1, 10, None), add=False, job_id="j", now=NOW)
    assert params == {"numFiles": "1", "totalSize": "10", "transient_lastDdlTime": str(NOW), "mpcommit.lastJobId": "j"}


def test_unknown_commit_statistics_remove_the_counts():
    params = stats_parameters({"numFiles": "1", "totalSize": "1", "numRows": "1"}, None, add=True, job_id="j", now=NOW)
    assert not {"numFiles", "totalSize", "numRows"} & set(params)


def test_spark_statistics_are_written_when_asked():
    params = stats_parameters(None, PartitionStats(1, 10, 3), add=False, job_id="j", now=NOW, spark_stats=True)
    assert params["spark.sql.statistics.totalSize"] == "10" and params["spark.sql.statistics.numRows"] == "3"


def test_table_parameters_are_left_alone_when_this_job_set_them():
    reg = Registration("s3://b/t", "j", RegistrationMode.APPEND, {"": PartitionStats(1, 1, 1)})
    assert table_parameters({"mpcommit.lastJobId": "j", "numFiles": "5"}, reg, now=NOW) is None
    empty = Registration("s3://b/t", "k", RegistrationMode.OVERWRITE, {})
    assert table_parameters({"numFiles": "5", "totalSize": "9", "numRows": "2"}, empty, now=NOW)["numFiles"] == "0"


# ---------------------------------------------------------------- plans
def existing(values, location, **params):
    return ExistingPartition(tuple(values), location, params)


def test_plan_creates_updates_skips_and_flags_conflicts():
    reg = Registration("s3://b/t", "job2", RegistrationMode.APPEND, {
        "dt=1": PartitionStats(1, 1, 1), "dt=2": PartitionStats(1, 1, 1),
        "dt=3": PartitionStats(1, 1, 1), "dt=4": PartitionStats(1, 1, 1)})
    have = {
        ("2",): existing(["2"], "s3a://b/t/dt=2", numFiles="1", totalSize="1", numRows="1"),
        ("3",): existing(["3"], "s3://b/t/dt=3/", **{"mpcommit.lastJobId": "job2"}),
        ("4",): existing(["4"], "s3://b/archive/dt=4/"),
    }
    changes = {c.path: c for c in plan_partitions(T, reg, columns=["dt"], root="s3://b/t", existing=have, now=NOW,
                                                  trailing_slash=True)}
    assert {p: c.action for p, c in changes.items()} == {
        "dt=1": Action.CREATE, "dt=2": Action.UPDATE, "dt=3": Action.UNCHANGED, "dt=4": Action.CONFLICT}
    assert changes["dt=1"].location == "s3://b/t/dt=1/"
    assert changes["dt=2"].parameters["numFiles"] == "2"
    assert "s3://b/archive/dt=4/" in changes["dt=4"].reason


def test_static_overwrite_drops_only_partitions_under_the_table_root():
    reg = Registration("s3://b/t", "j", RegistrationMode.OVERWRITE, {"dt=1": PartitionStats(1, 1, 1)})
    have = {("0",): existing(["0"], "s3://b/t/dt=0"), ("x",): existing(["x"], "s3://b/elsewhere/dt=x"),
            ("1",): existing(["1"], "s3://b/t/dt=1")}
    changes = plan_partitions(T, reg, columns=["dt"], root="s3://b/t", existing=have, now=NOW, trailing_slash=True)
    assert sorted((c.action.value, c.path) for c in changes) == [("drop", "dt=0"), ("update", "dt=1")]
    dynamic = Registration("s3://b/t", "j", RegistrationMode.OVERWRITE_DYNAMIC, reg.partitions)
    changes = plan_partitions(T, dynamic, columns=["dt"], root="s3://b/t", existing=have, now=NOW, trailing_slash=True)
    assert [c.action for c in changes] == [Action.UPDATE]


def test_partition_values_follow_the_tables_columns_and_hive_escaping():
    assert partition_values(T, "DT=2024-01-01/country=a%3Ab", ["dt", "country"]) == ("2024-01-01", "a:b")
    assert partition_values(T, "dt=__HIVE_DEFAULT_PARTITION__", ["dt"]) == ("__HIVE_DEFAULT_PARTITION__",)
    with pytest.raises(PartitionColumnsMismatchError, match=r"partitioned by \(country, dt\)"):
        partition_values(T, "dt=1/country=x", ["country", "dt"])


def test_non_partitioned_and_partitioned_mismatches_are_refused():
    flat = Registration("s3://b/t", "j", RegistrationMode.APPEND, {"dt=1": PartitionStats(1, 1, 1)})
    with pytest.raises(PartitionColumnsMismatchError, match="not partitioned"):
        plan_partitions(T, flat, columns=[], root="s3://b/t", existing={}, now=NOW, trailing_slash=True)
    rooted = Registration("s3://b/t", "j", RegistrationMode.APPEND, {"": PartitionStats(1, 1, 1)})
    with pytest.raises(PartitionColumnsMismatchError, match="table's root"):
        plan_partitions(T, rooted, columns=["dt"], root="s3://b/t", existing={}, now=NOW, trailing_slash=True)


def test_locations_compare_across_s3_schemes_and_slashes():
    assert normalize_location("s3a://b/t/") == normalize_location("S3://b/t") == "s3://b/t"
    assert normalize_location("file:///tmp/x/") == normalize_location("file:/tmp/x")
    assert table_root(T, "s3a://b/t/", "s3://b/t") == "s3a://b/t"  # the table's own spelling is kept
    with pytest.raises(TableLocationMismatchError, match="located at s3://b/other"):
        table_root(T, "s3://b/other", "s3://b/t")
    with pytest.raises(TableLocationMismatchError, match="no location"):
        table_root(T, None, "s3://b/t")


# ---------------------------------------------------------------- names, modes, errors
@pytest.mark.parametrize("bad", ["t", "db.", ".t", "a.b.c", "my db.t"])
def test_table_names_must_be_database_qualified(bad):
    with pytest.raises(UsageError, match="db.table"):
        TableName.parse(bad)


def test_modes_map_from_commit_modes():
    assert RegistrationMode.from_commit_mode("overwrite-dynamic") is RegistrationMode.OVERWRITE_DYNAMIC
    assert RegistrationMode.from_commit_mode("error") is RegistrationMode.APPEND
    with pytest.raises(UsageError):
        RegistrationMode.from_commit_mode("compact")


class PartialCatalog:
    name = "glue"

    def register(self, table, registration):
        return CatalogResult(str(table), "glue", created=("dt=1",), not_registered={"dt=2": "quota"},
                             not_updated={"dt=3": "denied"})


def test_a_partial_result_names_each_partition_and_the_sync_command():
    reg = Registration("s3://b/t", "j", RegistrationMode.APPEND, {p: None for p in ("dt=1", "dt=2", "dt=3")})
    with pytest.raises(Exception) as caught:
        _register(PartialCatalog(), T, reg, report=None)
    err = caught.value
    assert err.not_registered == ("dt=2",) and err.not_updated == ("dt=3",)
    assert "not registered (1): dt=2" in str(err) and "dt=3 (denied)" in str(err)
    assert err.sync_command == "mpcommit catalog sync s3://b/t --table db.t"


# ---------------------------------------------------------------- SQL
def test_spark_sql_quotes_identifiers_and_escapes_literals():
    assert sql_string("a'b\\c") == "'a\\'b\\\\c'"
    sql = add_partitions_sql(TableName("d", "t`x"), ["dt", "n"], [(("2024", "1"), "s3a://b/t/dt=2024/n=1"),
                                                                  (("it's", "2"), "s3a://b/t/dt=it's/n=2")])
    assert sql == ("ALTER TABLE `d`.`t``x` ADD IF NOT EXISTS PARTITION (`dt`='2024', `n`='1') "
                   "LOCATION 's3a://b/t/dt=2024/n=1' PARTITION (`dt`='it\\'s', `n`='2') LOCATION 's3a://b/t/dt=it\\'s/n=2'")
    assert set_properties_sql(T, {"numRows": "3", "numFiles": "1"}) == \
        "ALTER TABLE `db`.`t` SET TBLPROPERTIES ('numFiles'='1', 'numRows'='3')"
    assert unset_properties_sql(T, ["numRows"]) == "ALTER TABLE `db`.`t` UNSET TBLPROPERTIES IF EXISTS ('numRows')"


# ---------------------------------------------------------------- _SUCCESS
def test_success_keeps_partition_statistics_and_reads_files_without_them():
    success = SuccessData(job_id="j", mode="append", filenames=("t/dt=1/a", "t/dt=1/b"), bytes=30, rows=None,
                          partitions=("dt=1",), partition_stats={"dt=1": PartitionStats(2, 30, None)})
    again = SuccessData.from_bytes(success.to_bytes(), where="x")
    assert again.partition_stats == {"dt=1": PartitionStats(2, 30, None)}

    old = json.loads(success.to_bytes())
    del old["partitionStats"]
    legacy = SuccessData.from_bytes(json.dumps(old).encode(), where="x")
    assert legacy.partition_stats is None
    reg = Registration.from_success(legacy, "s3a://bkt/t")
    assert reg.location == "s3://bkt/t" and reg.partitions == {"dt=1": None}

    flat = SuccessData(job_id="j", mode="overwrite", filenames=("t/a",), bytes=5, rows=2, partitions=())
    assert Registration.from_success(flat, "s3://bkt/t").partitions == {"": PartitionStats(1, 5, 2)}


# ---------------------------------------------------------------- a write into a table: its layout
LAYOUT = TableLayout(TableName("db", "events"), "s3a://bucket/events", "parquet", "parquet", ("dt", "hour"))


def test_a_write_that_names_a_table_takes_what_it_leaves_out_from_the_table() -> None:
    assert write_layout(LAYOUT, path=None, fmt=None, partition_by=None) == \
        ("s3a://bucket/events", "parquet", ("dt", "hour"))
    assert write_layout(LAYOUT, path="s3://bucket/events/", fmt="parquet", partition_by=["DT", "hour"]) == \
        ("s3://bucket/events/", "parquet", ("DT", "hour")), "what the write says stays as it said it"


@pytest.mark.parametrize("given,error,match", [
    ({"path": "s3://bucket/other"}, TableLocationMismatchError,
     r"^the write goes to s3://bucket/other, but table db.events is located at s3a://bucket/events"),
    ({"fmt": "csv"}, UsageError, r"^the write is csv, but table db.events is stored as parquet"),
    ({"partition_by": ["dt"]}, PartitionColumnsMismatchError,
     r"^the write is partitioned by \(dt\), but table db.events by \(dt, hour\)"),
    ({"partition_by": ["hour", "dt"]}, PartitionColumnsMismatchError, r"in order"),
])
def test_a_write_that_contradicts_its_table_is_refused_by_name(given, error, match) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match) as caught:
        write_layout(LAYOUT, **{"path": None, "fmt": None, "partition_by": None, **given})
    assert "Nothing was written" in str(caught.value)


def test_a_table_without_location_or_with_a_format_mpcommit_does_not_write_needs_it_said() -> None:
    bare = TableLayout(TableName("db", "t"), None, None, "org.apache.hadoop.hive.ql.io.orc.OrcSerde", ())
    with pytest.raises(UsageError, match="table db.t has no location in the catalog"):
        write_layout(bare, path=None, fmt="parquet", partition_by=None)
    with pytest.raises(UsageError, match="stored as org.apache.hadoop.hive.ql.io.orc.OrcSerde, which mpcommit does "
                                         "not write"):
        write_layout(bare, path="s3://b/t", fmt=None, partition_by=None)
    assert write_layout(bare, path="s3://b/t", fmt="csv", partition_by=None) == ("s3://b/t", "csv", ())


def test_a_tables_format_is_read_from_what_catalogs_call_it() -> None:
    assert format_of("parquet") == "parquet" and format_of("PARQUET") == "parquet"
    assert format_of(None, "csv") == "csv", "a crawler's classification"
    assert format_of("hive", "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe") == "parquet"
    assert format_of(None, None, "org.openx.data.jsonserde.JsonSerDe") == "json"
    assert format_of("delta") is None and format_of(None) is None
