"""The PySpark binding: ``mpcommit.spark.write(df, "s3://bucket/table", ...)``.

The only part of mpcommit that imports pyspark.
"""

from .writer import write

__all__ = ["write"]
