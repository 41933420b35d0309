"""The README's "Deploying to a cluster", run as written on the session's standalone cluster: the wheel built with
``pip wheel``, installed into a clean venv, the venv packed and shipped with the job through ``spark.archives``,
and a write through ``writer(df)`` whose executors import mpcommit from that packed venv -- not from this checkout.

One application with one executor (one unpack of the archive): the route costs a wheel build, a venv install, a
tar and an application start."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.backends import Backend
from tests.support.spark_tables import data_keys, read_table, s3_filesystem
from tests.support.spark_cluster import StandaloneCluster
from tests.test_readme import ROOT, code_blocks, section

#: Run after the README's block, in the same driver: where the executors found mpcommit and their Python.
WHERE = """
import json as _json


def _where(batches):
    import sys as _sys

    import pyarrow as _pa

    import mpcommit as _mpcommit

    for _ in batches:
        yield _pa.RecordBatch.from_pydict({"path": [_mpcommit.__file__], "python": [_sys.executable]})


_found = spark.range(2).repartition(2).mapInArrow(_where, "path string, python string").collect()
print("RESULT", _json.dumps({"rows": report.rows, "files": report.files,
                             "executors": sorted({(r.path, r.python) for r in _found})}))
spark.stop()
"""


@pytest.mark.long
def test_the_readme_wheel_in_a_packed_env_writes_on_the_cluster(cluster: StandaloneCluster, cluster_backend: Backend,
                                                                tmp_path: Path) -> None:
    deploying = section("Deploying to a cluster")
    build, pack = code_blocks(deploying, "bash")
    (job,) = code_blocks(deploying, "python")
    backend, bucket = cluster_backend, cluster_backend.new_bucket()
    dist, env_dir = tmp_path / "dist", tmp_path / "mpcommit-env"

    def shell(block: str) -> None:
        block = block.replace("dist/", f"{dist}/").replace("mpcommit-env", str(env_dir))
        done = subprocess.run(["bash", "-c", f"set -e\n{block}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{block}\n{done.stderr[-3000:]}"

    shell(build)
    assert [p.name for p in dist.iterdir()] == ["mpcommit-0.1.0-py3-none-any.whl"]
    shell(pack)
    archive = Path(f"{env_dir}.tar.gz")
    assert archive.is_file()

    script = tmp_path / "job.py"
    script.write_text(job.replace("spark://master-host:7077", cluster.master_url)
                      .replace("mpcommit-env.tar.gz", str(archive))
                      .replace("s3://bucket/deployed", f"s3://{bucket}/deployed") + WHERE)
    credentials = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1",
                   "AWS_ENDPOINT_URL_S3": backend.endpoint_url}
    # What a site's spark-defaults.conf would hold: the cluster's driver settings, and how executors reach S3.
    conf: dict[str, Any] = {k: v for k, v in cluster.driver_conf(cores_max=1).items()
                            if k not in ("spark.master", "spark.pyspark.python", "spark.pyspark.driver.python")}
    conf.update({f"spark.executorEnv.{k}": v for k, v in credentials.items()})
    submit = " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()) + " pyspark-shell"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYSPARK_"))}
    env.update(credentials, PYSPARK_SUBMIT_ARGS=submit, SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])

    assert result["rows"] == 1000 and result["files"] == len(data_keys(backend.client, bucket, "deployed"))
    for path, python in result["executors"]:
        # Imported on the executors from the unpacked archive, not from this checkout's editable install.
        assert "/environment/lib/python" in path and "site-packages/mpcommit/" in path, path
        assert not path.startswith(str(ROOT)) and python.endswith("environment/bin/python"), (path, python)
    table = read_table(s3_filesystem(backend.endpoint_url), bucket, "deployed")
    assert sorted(table.column("id").to_pylist()) == list(range(1000))
