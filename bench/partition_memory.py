"""Peak memory of one task writing many partitions: open writers bounded vs. one writer per partition.

    python -m bench.partition_memory [--partitions 48] [--mib-per-partition 12] [--max-open 8]

Each configuration runs in a fresh child process that writes one task's rows -- partitions interleaved batch
by batch, the worst case for open writers -- through the real ``TaskAttempt``, ``MultipartWriter`` and
``PartitionedWriter`` into a store that accepts and discards every part (no network, no server memory in the
measurement). It reports the child's peak resident set size (``ru_maxrss``) above its baseline after imports.

Expected (see :mod:`mpcommit.formats.partitioning`): with every partition open the peak grows with the number of
partitions; with ``--max-open`` writers it stays near ``max_open x (format buffer + part buffers)`` whatever
the number of partitions, the rest going through the local spill.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

ROWS_PER_BATCH = 10_000
FLOATS_PER_ROW = 4  # random float64 columns: incompressible, so Parquet pages are as large as the data


class DiscardingStore:
    """Just enough of S3Store for a task attempt: every request succeeds and nothing is kept."""

    def __init__(self) -> None:
        self.parts = 0
        self.bytes = 0

    def create_multipart_upload(self, bucket: str, key: str, *, content_type: str | None = None) -> str:
        return f"upload-{key}"

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: Any, crc32: str) -> str:
        self.parts += 1
        self.bytes += len(body)
        return '"0123456789abcdef0123456789abcdef"'

    def abort_multipart_upload(self, bucket: str, key: str, upload_id: str) -> bool:
        return True

    def put_object(self, bucket: str, key: str, body: bytes, **_: Any) -> str:
        return '"manifest"'

    def delete_objects(self, bucket: str, keys: Any) -> int:
        return len(keys)


def child(partitions: int, mib_per_partition: float, max_open: int) -> dict[str, Any]:
    import numpy as np
    import pyarrow as pa

    from mpcommit.formats import make_format
    from mpcommit.formats.partitioning import PartitionedWriter
    from mpcommit.protocol.layout import Destination, new_job_id
    from mpcommit.protocol.task import JobSpec

    rows_per_partition = int(mib_per_partition * 1024 * 1024 / (8 * FLOATS_PER_ROW))
    total_rows = rows_per_partition * partitions
    keys = np.array([f"p{i:04d}" for i in range(partitions)], dtype=object)
    rng = np.random.default_rng(1)
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    store = DiscardingStore()
    spec = JobSpec(job_id=new_job_id(), destination=Destination("bench", "t"))
    started = time.monotonic()
    with spec.task(0, 0, store=store) as task:  # type: ignore[arg-type]
        out = PartitionedWriter(fmt=make_format("parquet"), open_sink=lambda p, e: task.create(p, e),
                                partition_columns=["k"], max_open_writers=max_open)
        for start in range(0, total_rows, ROWS_PER_BATCH):
            n = min(ROWS_PER_BATCH, total_rows - start)
            columns = {"k": pa.array(keys[(np.arange(start, start + n)) % partitions])}
            columns.update({f"v{j}": pa.array(rng.random(n)) for j in range(FLOATS_PER_ROW)})
            out.write(pa.record_batch(columns))
        stats = out.close()
        result = task.commit()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "partitions": partitions, "max_open_writers": max_open, "data_mib": round(total_rows * 8 * FLOATS_PER_ROW / 2**20),
        "files": result.files, "rows": stats.rows, "spilled_rows": stats.spilled_rows, "max_open": stats.max_open,
        "uploaded_mib": round(store.bytes / 2**20, 1), "seconds": round(time.monotonic() - started, 1),
        # ru_maxrss is in KiB on Linux.
        "baseline_rss_mib": round(baseline / 1024), "peak_rss_mib": round(peak / 1024),
        "peak_above_baseline_mib": round((peak - baseline) / 1024),
        # What Arrow itself held at most (its allocator may keep more resident than that).
        "arrow_peak_mib": round(pa.default_memory_pool().max_memory() / 2**20),
        "arrow_pool": pa.default_memory_pool().backend_name,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", type=int, default=48)
    parser.add_argument("--mib-per-partition", type=float, default=12.0)
    parser.add_argument("--max-open", type=int, default=8)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.partitions, args.mib_per_partition, args.max_open)))
        return 0
    results = []
    for max_open in (args.partitions, args.max_open):
        done = subprocess.run([sys.executable, "-m", "bench.partition_memory", "--child", "--partitions",
                               str(args.partitions), "--mib-per-partition", str(args.mib_per_partition), "--max-open",
                               str(max_open)], capture_output=True, text=True, check=True)
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for r in results:
        print(json.dumps(r))
    unbounded, bounded = results
    print(f"peak above baseline: {unbounded['peak_above_baseline_mib']} MiB with all {args.partitions} partitions open, "
          f"{bounded['peak_above_baseline_mib']} MiB with {args.max_open} open writers and the sorted fallback "
          f"({bounded['spilled_rows']:,} rows spilled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
