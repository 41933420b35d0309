"""A data-source write that names its table resolves the catalog target once (issue 37, item 6): the Glue client is
made once per process for the options, and the table is read from Glue once -- where the options are read, which
take the path, format and partition columns from it -- not again where the write starts. No Spark: the options are
read and the write started as the data source does on the driver."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from mpcommit.catalog.glue import GlueCatalog
from mpcommit.spark.plan import plan_write
from mpcommit.spark.session import Recorder, SessionSettings
from mpcommit.spark.source_options import parse
from tests.support.glue import create_table

SCHEMA = pa.schema([("id", pa.int64()), ("dt", pa.string())])


def test_a_data_source_write_into_a_glue_table_reads_the_table_once(moto_backend, glue_client, database,
                                                                     monkeypatch) -> None:  # noqa: ANN001
    bucket = moto_backend.new_bucket("mpc-target")
    create_table(glue_client, database, "events", f"s3://{bucket}/events")
    made: Counter[str] = Counter()
    init, get_table = GlueCatalog.__init__, GlueCatalog._get_table

    def counted_init(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        made["catalog"] += 1
        init(self, *args, **kwargs)

    def counted_get(self, table):  # noqa: ANN001, ANN202
        made["get_table"] += 1
        return get_table(self, table)

    monkeypatch.setattr(GlueCatalog, "__init__", counted_init)
    monkeypatch.setattr(GlueCatalog, "_get_table", counted_get)
    o = moto_backend.options
    options = {"table": f"{database}.events", "catalog": "glue", "glue.endpointUrl": moto_backend.endpoint_url,
               "s3.endpointUrl": moto_backend.endpoint_url, "s3.accessKeyId": o.access_key_id or "test",
               "s3.secretAccessKey": o.secret_access_key or "test", "s3.region": o.region or "us-east-1"}
    session = Recorder(SessionSettings.unseen())
    source = parse(options, overwrite=False, session=session, columns=["id", "dt"])
    assert (source.request.uri, tuple(source.request.partition_by)) == (f"s3://{bucket}/events", ("dt",))

    started = plan_write(source.request, SCHEMA, session).start()
    try:
        assert started.target is not None
        assert made == {"catalog": 1, "get_table": 1}, made
    finally:
        started.abort()
