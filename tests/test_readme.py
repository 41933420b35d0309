"""The README, as a newcomer follows it: the Operations list names every command, the Python example runs with
the setup the README gives for it, the PySpark section says what the executors need, and the "Reading it back"
blocks read a table through Spark's S3A and pyarrow. The "Deploying to a cluster" blocks need the standalone
cluster's fixtures: tests/cluster/test_readme_deploy.py runs them (with the helpers here)."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from mpcommit.cli.main import cli
from tests.support.servers import free_port

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def commands(group: click.Group, prefix: str = "mpcommit") -> list[str]:
    ctx = click.Context(group)
    found = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix} {name}")
        else:
            found.append(f"{prefix} {name}")
    return found


def test_the_operations_list_names_every_command() -> None:
    (listing,) = code_blocks(section("Operations"), "")
    listed = {" ".join(line.split()[:3]) if line.split()[1] in ("uploads", "jobs", "catalog") else " ".join(line.split()[:2])
              for line in listing.strip().splitlines()}
    assert set(commands(cli)) <= listed, f"missing from the README's Operations: {set(commands(cli)) - listed}"


def test_the_pyspark_section_says_what_the_executors_need() -> None:
    text = " ".join(section("Using it").split())
    for needed in ("every executor's Python needs mpcommit installed", "PYSPARK_PYTHON", "spark.pyspark.python",
                   "No module named 'mpcommit'"):
        assert needed in text, needed


@contextlib.contextmanager
def readme_server() -> Iterator[tuple[str, str, dict[str, str]]]:
    """The S3 server and bucket of the README's setup, on a free port: (port, the setup's other lines, the
    environment without the caller's AWS variables). The lines export the credentials and create the bucket."""
    (setup,) = [b for b in code_blocks(section("Using it"), "bash") if "moto_server" in b]
    port = str(free_port())
    lines = [line for line in setup.replace("4566", port).splitlines() if line.strip() and not line.startswith("#")]
    server_line = next(line for line in lines if line.split("#")[0].rstrip().endswith("&"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    server = subprocess.Popen(["bash", "-c", f"exec {server_line.split('&')[0]}"], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:  # a person would wait the second the server takes to start; so does this test
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the README's server command did not start a server")
                time.sleep(0.2)
        yield port, "\n".join(line for line in lines if line != server_line), env
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_the_python_example_runs_with_the_setup_the_readme_gives(tmp_path) -> None:  # noqa: ANN001
    using = section("Using it")
    assert "needs an S3 server on `127.0.0.1:4566` with a bucket named `bucket`" in " ".join(using.split())
    example = next(b for b in code_blocks(using, "python") if "Job.create" in b)
    with readme_server() as (port, setup, env):
        script = tmp_path / "example.py"
        script.write_text(example.replace("4566", port) + "\nprint(report.outcome.value, len(report.filenames))\n")
        done = subprocess.run(["bash", "-c", f"set -e\n{setup}\n.venv/bin/python {script}"], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split()[-2:] == ["committed", "1"]


#: Parquet files of two days, written through mpcommit's Job API (no Spark): the table the README reads back.
EVENTS = """
import io
import pyarrow as pa, pyarrow.parquet as pq
from mpcommit import Job, S3Options
job = Job.create("s3://bucket/events", mode="overwrite", s3=S3Options(endpoint_url="http://127.0.0.1:4566"))
refs = []
for task_id, day in enumerate(["2024-01-01", "2024-01-02"]):
    with job.spec.task(task_id=task_id, attempt=0) as task:
        with task.create(partition=f"dt={day}", ext="snappy.parquet") as out:
            body = io.BytesIO()
            pq.write_table(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}), body)
            out.write(body.getvalue())
        refs.append(task.commit())
job.commit(refs)
"""


@pytest.mark.spark
@pytest.mark.s3a
def test_reading_it_back_runs_as_written(tmp_path) -> None:  # noqa: ANN001
    """The "Reading it back" blocks, as a newcomer runs them after the README's setup: Spark through S3A with the
    jars make s3a-install fetched, then pyarrow's dataset reader; both see six rows and the dt column."""
    from tests.support.spark_s3a import require_s3a_jars

    require_s3a_jars()
    reading = section("Reading it back")
    spark_block, arrow_block = code_blocks(reading, "python")
    for needed in ("make s3a-install", "spark.jars", "fs.s3a.endpoint", "fs.s3a.path.style.access",
                   'partitioning="hive"'):
        assert needed in reading, needed
    with readme_server() as (port, setup, env):
        exports = "\n".join(line for line in setup.splitlines() if line.startswith("export "))
        outputs = []
        # The setup's lines (credentials, the bucket), then the table, then each reader in a shell of its own.
        for name, block, before in (("events", EVENTS, setup), ("spark", spark_block, exports),
                                    ("arrow", arrow_block, exports)):
            script = tmp_path / f"{name}.py"
            script.write_text(block.replace("4566", port))
            done = subprocess.run(["bash", "-c", f"set -e\n{before}\n.venv/bin/python {script}"], cwd=ROOT,
                                  env={**env, "SPARK_LOCAL_IP": "127.0.0.1"}, capture_output=True, text=True,
                                  timeout=300)
            assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
            outputs.append(done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "")
    assert outputs[1:] == ["6 ['dt', 'id', 'name']", "6 ['dt', 'id', 'name']"], outputs

