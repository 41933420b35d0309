"""How long a task's requests take, start to answer, as the task sends them: :mod:`bench.bench_task_cpu`'s task
(one ``run_task`` of 128 MiB, every batch holding every partition value) against the stub server, with every CRT
request's time from its start to its answer recorded, and the task's wait on its closing-bytes budget. Written for
the Nagle delay (mpcommit/store/crt_nodelay.py): a part that waits 40 ms for the server's delayed acknowledgement
shows here as a median of 40+ ms where the server answers in a few.

    python -m bench.task_request_latency --values 1250 [--runs 2] [--records DIR]

One JSON line per run in ``task_request_latency.jsonl`` (bench/records.py).
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(len(values) * q))]  # noqa: E731
    return {"n": len(values), "p50_ms": 1000 * pick(0.5), "p90_ms": 1000 * pick(0.9), "p99_ms": 1000 * pick(0.99),
            "sum_s": sum(values)}


def one_run(endpoint: str, values: int) -> dict[str, Any]:
    from bench import bench_task_cpu as task
    from mpcommit.protocol import writer
    from mpcommit.store import crt_transport

    times: dict[str, list[float]] = {}
    waits: list[float] = []
    lock = threading.Lock()
    start, acquire = crt_transport.CrtCompleter._start, writer.ByteBudget.acquire

    def timed_start(self: Any, method: str, bucket: str, tail: str, body: Any, done: Any, parse: Any,
                    **kw: Any) -> None:
        kind = "CreateMultipartUpload" if tail.endswith("?uploads") else "UploadPart" if "partNumber=" in tail \
            else f"{method} other"
        t0 = time.perf_counter()

        def ended(result: Any, error: Any) -> None:
            with lock:
                times.setdefault(kind, []).append(time.perf_counter() - t0)
            done(result, error)

        start(self, method, bucket, tail, body, ended, parse, **kw)

    def timed_acquire(self: Any, n: int) -> int:
        t0 = time.perf_counter()
        try:
            return acquire(self, n)
        finally:
            waits.append(time.perf_counter() - t0)

    crt_transport.CrtCompleter._start, writer.ByteBudget.acquire = timed_start, timed_acquire
    try:
        result = task.child(endpoint, values, task.TASK_BYTES // task.ROW_BYTES)
    finally:
        crt_transport.CrtCompleter._start, writer.ByteBudget.acquire = start, acquire
    return {**{k: result[k] for k in ("files", "cpu_s", "main_thread_cpu_s", "wall_s")},
            "requests": {kind: percentiles(v) for kind, v in times.items()},
            "budget_wait_s": sum(waits)}


def main() -> int:
    from bench.bench_commit_scale import Stub
    from bench.bench_task_cpu import BUCKET
    from bench.common import ensure_bucket, log, make_client
    from bench.records import RecordLog

    p = argparse.ArgumentParser(prog="python -m bench.task_request_latency")
    p.add_argument("--values", type=int, default=1250)
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--records", default=None, help="directory of the raw records (default bench/results)")
    args = p.parse_args()
    stub = Stub()
    try:
        ensure_bucket(make_client(stub.endpoint), BUCKET)
        records = RecordLog("task_request_latency", directory=args.records, server="bench.stub_s3 (another process)",
                            values=args.values)
        for n in range(args.runs):
            r = one_run(stub.endpoint, args.values)
            records.run(pair=n, **r)
            part = r["requests"].get("UploadPart", {})
            log(f"task latency: {r['files']} files, wall {r['wall_s']:.1f} s, CPU {r['cpu_s']:.2f} s, UploadPart "
                f"p50 {part.get('p50_ms', 0):.1f} ms p90 {part.get('p90_ms', 0):.1f} ms, budget waits "
                f"{r['budget_wait_s']:.1f} s")
    finally:
        stub.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
