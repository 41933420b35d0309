"""Which PySpark mpcommit runs on, and the one place where PySpark's versions differ for it.

Supported: PySpark 3.5 and every 4.x, on Python 3.10 and later (README, "Supported versions", lists the combinations
the tests ran). ``write()`` and ``writer(df)`` need only ``mapInArrow`` (PySpark 3.3+), so they run on 3.5 and 4.x
alike; the data source is built on PySpark 4's Python Data Source API, which 3.5 lacks, and the streaming sink on its
Arrow stream writer, which 4.0 lacks too.

Anything else is refused by name at the first write (:func:`check_pyspark`, :func:`check_data_source`) -- "PySpark
3.4 is not supported: ..." -- never by an error from deeper down that blames something else. The differences
between the supported versions are small shims here, chosen by what the installed PySpark offers rather than by
version numbers where that can be told (a backported fix then needs no change).

pyspark is imported inside the functions only: ``import mpcommit.spark`` loads no pyspark.
"""

from __future__ import annotations

import inspect
import re
import sys
from typing import Any

import pyarrow as pa

from ..errors import UnsupportedVersionError

#: The oldest PySpark mpcommit runs on, and the first it does not.
PYSPARK_MIN = (3, 5)
PYSPARK_END = (5, 0)
#: The first PySpark with the Python Data Source API (``pyspark.sql.datasource``): the data source and the sink.
DATA_SOURCE_MIN = (4, 0)

_VERSION = re.compile(r"(\d+)\.(\d+)")

#: What a user of PySpark 3.5 writes instead of the data source's doors.
_ON_3_5 = ("write with mpcommit.spark.writer(df) -- the same chain as df.write: "
           "writer(df).mode('overwrite').partitionBy('dt').parquet('s3://bucket/table') -- or "
           "mpcommit.spark.write(df, 's3://bucket/table', ...), which run on PySpark 3.5; or upgrade to PySpark 4")


def parse_version(text: str) -> tuple[int, int]:
    """(major, minor) of a PySpark version string (``3.5.9``, ``4.1.0.dev1``)."""
    found = _VERSION.match(text.strip())
    if found is None:
        raise UnsupportedVersionError(f"PySpark reports version {text!r}, which mpcommit cannot read: it needs "
                                      "PySpark 3.5 or a 4.x")
    return int(found.group(1)), int(found.group(2))


def pyspark_version() -> tuple[int, int]:
    """(major, minor) of the PySpark this process imports."""
    import pyspark

    return parse_version(pyspark.__version__)


def _where() -> str:
    import pyspark

    return f"PySpark {pyspark.__version__} from {pyspark.__file__.rsplit('/', 2)[0]}, Python {sys.version.split()[0]}"


def check_pyspark(version: tuple[int, int] | None = None) -> None:
    """Refuse a PySpark that mpcommit does not run on, by name, before anything is written."""
    major, minor = version if version is not None else pyspark_version()
    if PYSPARK_MIN <= (major, minor) < PYSPARK_END:
        return
    where = "" if version is not None else f" (this process runs {_where()})"
    raise UnsupportedVersionError(
        f"PySpark {major}.{minor} is not supported: mpcommit runs on PySpark 3.5 and 4.x{where}. "
        "Install one of those (pip install 'pyspark>=3.5,<5'). Nothing was written.")


def check_data_source(version: tuple[int, int] | None = None) -> None:
    """Refuse the data source's doors (``df.write.format("mpcommit")``, SQL ``USING mpcommit``,
    ``df.writeStream.format("mpcommit")``, :func:`mpcommit.spark.register`) on a PySpark without the Python Data
    Source API, saying what works there instead."""
    found = version if version is not None else pyspark_version()
    check_pyspark(found)
    if found < DATA_SOURCE_MIN:
        raise UnsupportedVersionError(
            f"the mpcommit data source (df.write.format('mpcommit'), SQL ... USING mpcommit, "
            f"df.writeStream.format('mpcommit')) needs PySpark 4.0 or later: PySpark {found[0]}.{found[1]} has no "
            f"Python data source API. On PySpark {found[0]}.{found[1]}, {_ON_3_5}. Nothing was written.")


def has_data_source() -> bool:
    """Whether this PySpark has the Python Data Source API (the batch data source can run)."""
    return pyspark_version() >= DATA_SOURCE_MIN


def register_data_source(spark: Any, source: type) -> None:
    """Register ``source`` in ``spark`` (classic or Connect). PySpark 4.1 and later replace a data source of the same
    name; 4.0 refuses (``DATA_SOURCE_ALREADY_EXISTS``) -- where Spark has found mpcommit by itself already, so the
    source is there and the refusal says nothing that needs doing."""
    try:
        spark.dataSource.register(source)
    except Exception as exc:  # noqa: BLE001 - classic and Connect raise their own AnalysisException
        condition = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
        if not callable(condition) or condition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise


def stream_writer_base() -> type | None:
    """PySpark's Arrow stream writer (``DataSourceStreamArrowWriter``), the base of the streaming sink; None where
    PySpark has none (4.0 hands a Python stream writer its rows one by one, not as Arrow batches)."""
    import pyspark.sql.datasource as datasource

    return getattr(datasource, "DataSourceStreamArrowWriter", None)


def check_stream_sink() -> None:
    """Refuse ``df.writeStream.format("mpcommit")`` on a PySpark whose stream writers get rows, not Arrow batches,
    saying what works there."""
    check_data_source()
    if stream_writer_base() is None:
        major, minor = pyspark_version()
        raise UnsupportedVersionError(
            f"the mpcommit streaming sink (df.writeStream.format('mpcommit')) needs a PySpark that hands a Python "
            f"stream writer Arrow batches (DataSourceStreamArrowWriter, PySpark 4.1 and later): PySpark "
            f"{major}.{minor} hands it rows one by one. Upgrade PySpark, or write each micro-batch with "
            "foreachBatch and mpcommit.spark.writer(batch_df) -- which commits each batch through mpcommit but "
            "writes a micro-batch that Spark replays once more. Nothing was written.")


# ---------------------------------------------------------------- the shims
def to_arrow_schema(spark_schema: Any, *, time_zone: str | None, large_var_types: bool) -> pa.Schema:
    """The Arrow schema Spark hands Python (``mapInArrow``, a data source's writer) for a ``StructType``:
    zoned timestamps in the session's time zone, strings and binaries as large types when the session sets
    ``spark.sql.execution.arrow.useLargeVarTypes``.

    PySpark 4's ``to_arrow_schema`` takes both as arguments. PySpark 3.5's takes the schema alone and gives
    ``timestamp[us, tz=UTC]`` and the small types; the JVM of 3.5 still hands the batches over in the session's
    time zone and with the large types when set, so those are put in here.
    """
    from pyspark.sql.pandas.types import to_arrow_schema as convert

    zone = time_zone or "UTC"
    if {"timezone", "prefers_large_types"} <= set(inspect.signature(convert).parameters):
        return convert(spark_schema, timezone=zone, prefers_large_types=large_var_types)
    schema = convert(spark_schema)
    return pa.schema([f.with_type(_as_handed_over(f.type, zone, large_var_types)) for f in schema],
                     metadata=schema.metadata)


def _as_handed_over(t: pa.DataType, zone: str, large: bool) -> pa.DataType:
    """``t`` from PySpark 3.5's conversion as its JVM hands it over (see :func:`to_arrow_schema`)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp(t.unit, tz=zone) if t.tz is not None else t
    if large and pa.types.is_string(t):
        return pa.large_string()
    if large and pa.types.is_binary(t):
        return pa.large_binary()
    if pa.types.is_map(t):
        return pa.map_(t.key_field.with_type(_as_handed_over(t.key_type, zone, large)),
                       t.item_field.with_type(_as_handed_over(t.item_type, zone, large)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_as_handed_over(t.value_type, zone, large)))
    if pa.types.is_struct(t):
        return pa.struct([t.field(i).with_type(_as_handed_over(t.field(i).type, zone, large))
                          for i in range(t.num_fields)])
    return t
