"""What ``import mpcommit.spark`` loads for a plain write: not the catalogs (Glue, the Spark session catalog), not the
compaction package, not pyspark -- those load when a write names a table, asks for a merge, or runs."""

from __future__ import annotations

import json
import subprocess
import sys


def loaded_after(statement: str) -> list[str]:
    # A fresh interpreter: this one has imported everything for other tests already.
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def test_importing_the_spark_binding_loads_no_catalog_no_compaction_and_no_pyspark() -> None:
    loaded = loaded_after("import mpcommit.spark")
    assert "mpcommit.spark.writer" in loaded and "mpcommit.spark.fluent" in loaded
    unwanted = [m for m in loaded if m.startswith(("mpcommit.catalog", "mpcommit.compaction", "pyspark"))]
    assert unwanted == []


def test_the_data_source_and_the_stream_sink_import_without_the_catalogs_or_compaction() -> None:
    loaded = loaded_after("import mpcommit.spark.datasource, mpcommit.spark.streaming")
    assert [m for m in loaded if m.startswith(("mpcommit.catalog", "mpcommit.compaction"))] == []
    # The classes Spark sees need PySpark, and only they do: the entry module.
    assert "pyspark" not in loaded
