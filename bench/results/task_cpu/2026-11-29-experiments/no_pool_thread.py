"""Issue 39 experiment (2026-11-29): how much of one task's CPU the upload pool's thread costs.

One task of bench_task_cpu's shape (128 MiB, Parquet, 125 then 1,250 interleaved partition values, three times each,
against the bench's local stub server) in this process, with the product code found in CODE_DIR (a checkout or
``git archive <commit> mpcommit bench | tar -x -C CODE_DIR``), in one of three modes:

* ``pool``: as shipped -- a background file's create and part go through the task's upload pool's thread;
* ``inline``: the task's upload pool replaced by an executor that runs each work item on the calling thread at
  once, so a file's requests are sent and waited for on the task's own thread (the CRT's event loop still answers):
  a model of the same requests with no pool thread -- never what a task should do (its round trips would be
  serial), only a bound on what the pool thread's hand-overs cost;
* ``switch``: as shipped, with ``sys.setswitchinterval(0.05)`` (ten times the default).

    python bench/results/task_cpu/2026-11-29-experiments/no_pool_thread.py CODE_DIR pool|inline|switch

Prints the median process CPU per cell and the CPU per extra file.
"""

import statistics
import sys
import time
from unittest import mock
from concurrent.futures import Future, Executor
sys.path.insert(0, sys.argv[1])
from bench import bench_task_cpu as b
from bench.bench_commit_scale import Stub
from bench.common import ensure_bucket, make_client
from mpcommit import Job, S3Options
from mpcommit.formats import make_format
from mpcommit.spark import tasks
from mpcommit.spark.plan import TaskPlan
from mpcommit.protocol import task as tk

class Inline(Executor):
    def submit(self, fn, *a, **k):
        f = Future(); f.set_running_or_notify_cancel()
        try: f.set_result(fn(*a, **k))
        except BaseException as e: f.set_exception(e)
        return f
    def shutdown(self, wait=True, **k): pass

stub = Stub()
ensure_bucket(make_client(stub.endpoint), b.BUCKET)
options = S3Options(endpoint_url=stub.endpoint, region="us-east-1", access_key_id="test", secret_access_key="test")
job = Job.create(f"s3://{b.BUCKET}/prof-{time.time_ns()}", mode="append", s3=options)
plan = TaskPlan(spec=job.spec, fmt=make_format("parquet"), partition_columns=("p",), max_open_writers=8, max_records_per_file=0)
with mock.patch.object(tasks, "task_numbers", lambda: (b.JOB_TASKS, 0)):
    tasks.run_task(plan, b.batches(4, 20_000))
inline = sys.argv[2] == "inline"
if sys.argv[2] == "switch": sys.setswitchinterval(0.05)
res = {}
for v in [125, 1250] * 3:
    data = b.batches(v, b.TASK_BYTES // b.ROW_BYTES)
    ctx = mock.patch.object(tk.TaskAttempt, "_pool", lambda self: Inline()) if inline else mock.patch.object(tasks, "_local_dir", tasks._local_dir)
    with ctx, mock.patch.object(tasks, "task_numbers", lambda: (0, 0)):
        t = time.process_time()
        tasks.run_task(plan, data)
        res.setdefault(v, []).append(time.process_time() - t)

m = {v: statistics.median(x) for v, x in res.items()}
print(sys.argv[2], {v: round(x, 2) for v, x in m.items()}, "per extra file ms", round((m[1250] - m[125]) / 1125 * 1000, 3))
