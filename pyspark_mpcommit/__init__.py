"""mpcommit's PySpark data source, under the name Spark looks for by itself.

PySpark 4 imports every installed top-level module named ``pyspark_*`` and registers its ``DefaultSource``
(pyspark/sql/worker/lookup_data_sources.py), so ``df.write.format("mpcommit")`` works in any session with no
import and no register call. The classes live in :mod:`mpcommit.spark.pyspark_source`; this module only gives them
the name Spark finds, and nothing imports it but Spark.
"""

from mpcommit.spark.pyspark_source import BatchWriter, DefaultSource, StreamWriter, TaskMessage

__all__ = ["BatchWriter", "DefaultSource", "StreamWriter", "TaskMessage"]
