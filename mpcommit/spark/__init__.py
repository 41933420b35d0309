"""The PySpark binding: ``mpcommit.spark.write(df, "s3://bucket/table", ...)``, the same shaped like PySpark's
DataFrameWriter -- ``mpcommit.spark.writer(df).mode("overwrite").partitionBy("dt").parquet("s3://bucket/table")`` --
and a PySpark data source, ``df.write.format("mpcommit")`` (also SQL and Structured Streaming), found by Spark by
itself or after :func:`register`. All three are one implementation (:mod:`.plan`, :mod:`.tasks`).

pyspark is imported in this package, by the Spark session catalog (catalog/spark_catalog.py's caller,
catalog/sync.py) and by the demo job -- nowhere else (tests/test_boundaries.py). ``import mpcommit.spark``
loads neither pyspark nor the catalogs nor the compaction package: a write imports what it needs.
"""

from typing import Any

try:
    import pyarrow  # noqa: F401 - what the binding stands on, on the driver and in every task
except ImportError as exc:
    # pyarrow 26 needs NumPy 2 and says only that; the NumPy 1 beside it is most often PySpark 3.5's (its sql and
    # connect extras pin numpy<2), and pip cannot tell, since pyarrow does not declare NumPy.
    if "NumPy" not in str(exc):
        raise
    raise ImportError(f"{exc}. PySpark 3.5's extras pin NumPy below 2: beside PySpark 3.5 install a pyarrow that runs "
                      "on NumPy 1 (pip install 'pyarrow<26'); with PySpark 4, NumPy 2 (pip install 'numpy>=2')") from exc

from .fluent import DataFrameWriter, writer  # noqa: E402
from .table_schema import SchemaMismatchError, SchemaMismatchWarning  # noqa: E402
from .writer import write  # noqa: E402

__all__ = ["DataFrameWriter", "SchemaMismatchError", "SchemaMismatchWarning", "register", "write", "writer"]


def register(spark: Any) -> None:
    """Register the ``mpcommit`` data source in ``spark`` (classic or Spark Connect), for an installation Spark
    does not find by itself (mpcommit installed in a way that Python's module listing does not show, e.g. an editable install without
    the checkout's .pth; see :mod:`mpcommit.spark.datasource`). Needs PySpark 4 (the Python Data Source API);
    refused by name on PySpark 3.5."""
    from .compat import check_data_source, register_data_source

    check_data_source()  # PySpark 3.5 has no Python data source API: said by name, with what works there
    from .pyspark_source import DefaultSource  # pyspark is loaded here, not by ``import mpcommit.spark``

    register_data_source(spark, DefaultSource)
