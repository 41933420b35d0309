"""A write whose executors run a Python that cannot import mpcommit (run by test_executor_environment.py in its own
process: the executors' interpreter is fixed when the SparkContext starts).

The executors' interpreter is this venv's Python, started through a wrapper that removes mpcommit's editable
install and the working directory from the import path -- as on a cluster whose workers have pyspark, pyarrow
and pandas but not mpcommit. Prints one JSON line: the error's type and message, and what is left in the bucket.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
import warnings
from pathlib import Path

WRAPPER = """#!/bin/sh
exec {python} -c '
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f) and "editable" not in str(type(f))]
sys.path[:] = [p for p in sys.path if p not in ("", ".", "{repo}")]
import runpy
sys.argv[0] = "pyspark.daemon"
runpy.run_module(sys.argv[2] if len(sys.argv) > 2 else "pyspark.daemon", run_name="__main__", alter_sys=True)
' "$@"
"""


def main(endpoint: str, bucket: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="no-mpcommit-"))
    wrapper = folder / "python"
    wrapper.write_text(WRAPPER.format(python=sys.executable, repo=Path(__file__).resolve().parents[2]))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    os.environ["PYSPARK_PYTHON"] = str(wrapper)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    warnings.filterwarnings("ignore")
    import boto3
    from pyspark.sql import SparkSession

    from mpcommit import S3Options
    from mpcommit.errors import MpcommitError
    from mpcommit.spark import write
    from tests.support.spark_s3a import JVM_CONF

    spark = (SparkSession.builder.master("local[1,1]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "1g").config(map=JVM_CONF).getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    options = S3Options(endpoint_url=endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")
    try:
        write(spark.range(10), f"s3://{bucket}/t", format="parquet", mode="overwrite", s3=options)
        outcome = {"error": None}
    except MpcommitError as exc:
        outcome = {"error": type(exc).__name__, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - what a user would see without the translation
        outcome = {"error": type(exc).__name__, "message": str(exc)[-3000:]}
    finally:
        spark.stop()
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="test",
                          aws_secret_access_key="test")
    outcome["keys"] = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    outcome["uploads"] = len(client.list_multipart_uploads(Bucket=bucket).get("Uploads", []))
    print(json.dumps(outcome))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
