"""CSV encoding throughput: MB of CSV text per second that one format writer turns Arrow batches into.

    python -m bench.bench_csv [--batches 30] [--repeats 7]

A batch is Spark's default Arrow batch, 10,000 rows, of a typical table: ids, a short code, free text (one value
in ten holds a comma, a quote or a line break), an amount (decimal), a price (double), a timestamp, a date and a
flag; and a second, all-string table. No S3: the writer writes to a counting sink, so only encoding is timed.
Reports the best of the repeats (the machine is shared; the minimum is the least disturbed figure).
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import io
import json
import random
import time
from typing import Any

BATCH_ROWS = 10_000


class CountingSink(io.RawIOBase):
    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = memoryview(data).nbytes
        self.bytes += n
        return n


def typical_batch(seed: int = 6) -> Any:
    import pyarrow as pa

    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "north", "south", "grüße", "naïve", "data", "lake", "spark", "s3"]
    tricky = ['say "hi"', "a, b", "line\nbreak", "back\\slash"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 8))) + (rng.choice(tricky) if i % 10 == 0 else "")
             for i in range(BATCH_ROWS)]
    start = dt.datetime(2024, 6, 15, tzinfo=dt.timezone.utc)
    return pa.record_batch({
        "id": pa.array(range(BATCH_ROWS), pa.int64()),
        "code": pa.array([f"C{rng.randint(0, 999):03d}" for _ in range(BATCH_ROWS)]),
        "text": pa.array([t if i % 17 else None for i, t in enumerate(texts)]),
        "amount": pa.array([decimal.Decimal(rng.randint(-10**6, 10**8)) / 100 for _ in range(BATCH_ROWS)], pa.decimal128(12, 2)),
        "price": pa.array([rng.uniform(0, 5000) for _ in range(BATCH_ROWS)], pa.float64()),
        "ts": pa.array([start + dt.timedelta(seconds=rng.randint(0, 10**7), microseconds=rng.randint(0, 10**6 - 1))
                        for _ in range(BATCH_ROWS)], pa.timestamp("us", tz="UTC")),
        "day": pa.array([(start + dt.timedelta(days=rng.randint(0, 400))).date() for _ in range(BATCH_ROWS)], pa.date32()),
        "ok": pa.array([rng.random() < 0.5 for _ in range(BATCH_ROWS)]),
    })


def strings_batch(seed: int = 7) -> Any:
    import pyarrow as pa

    rng = random.Random(seed)
    alphabet = "abcdefghij klmnopqrstuvwxyz0123456789"
    columns = {}
    for c in range(6):
        columns[f"s{c}"] = pa.array(["".join(rng.choice(alphabet) for _ in range(rng.randint(4, 30))) +
                                     ('"q",' if rng.random() < 0.05 else "") for _ in range(BATCH_ROWS)])
    return pa.record_batch(columns)


def measure(batch: Any, *, batches: int, repeats: int, options: dict[str, str] | None = None) -> dict[str, Any]:
    from mpcommit.formats import make_format

    fmt = make_format("csv", options or {})
    fmt.check_schema(batch.schema)
    best = None
    size = 0
    for _ in range(repeats):
        sink = CountingSink()
        t = time.perf_counter()
        writer = fmt.open(sink, batch.schema)
        for _ in range(batches):
            writer.write(batch)
        writer.close()
        seconds = time.perf_counter() - t
        size = sink.bytes
        best = seconds if best is None else min(best, seconds)
    assert best is not None
    return {"rows": batches * batch.num_rows, "bytes": size, "seconds": round(best, 4),
            "MBps": round(size / best / 1e6, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import mpcommit

    results = {
        "mpcommit": mpcommit.__file__,
        "typical": measure(typical_batch(), batches=args.batches, repeats=args.repeats),
        "strings": measure(strings_batch(), batches=args.batches, repeats=args.repeats),
        "typical quoteAll": measure(typical_batch(), batches=args.batches, repeats=args.repeats,
                                    options={"quoteAll": "true"}),
    }
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
