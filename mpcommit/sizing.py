"""Part sizing and the multipart ETag: small pure functions, tested exhaustively.

S3 allows at most 10,000 parts per upload, parts of 5 MiB to 5 GiB (the last may be smaller) and objects up
to 5 TiB. A writer streams without knowing the final size, so its part size must grow with the part number:
it starts small (low memory for the many small files a job writes) and doubles every ``step`` parts.
"""

from __future__ import annotations

import base64
import hashlib
import zlib

from .errors import UsageError

MiB = 1024 * 1024
GiB = 1024 * MiB
TiB = 1024 * GiB

MIN_PART_SIZE = 5 * MiB
MAX_PART_SIZE = 5 * GiB
MAX_PARTS = 10_000
MAX_OBJECT_SIZE = 5 * TiB


def part_size_for(part_number: int, *, initial: int, step: int) -> int:
    """The size of part ``part_number`` (1-based): ``initial`` doubled once every ``step`` parts, capped at 5 GiB."""
    if part_number < 1 or part_number > MAX_PARTS:
        raise UsageError(f"part number {part_number} is outside S3's range 1..{MAX_PARTS}")
    doublings = (part_number - 1) // step
    # Cap the shift before computing: 2**doublings grows fast and only the cap matters past it.
    return min(MAX_PART_SIZE, initial << min(doublings, 40))


def capacity(*, initial: int, step: int, parts: int = MAX_PARTS) -> int:
    """How many bytes ``parts`` parts of the growing schedule hold."""
    total = 0
    for n in range(1, parts + 1):
        total += part_size_for(n, initial=initial, step=step)
    return total


def check_schedule_reaches_limit(*, initial: int, step: int) -> None:
    """Refuse a schedule that cannot write a 5 TiB object in 10,000 parts."""
    if capacity(initial=initial, step=step) < MAX_OBJECT_SIZE:
        raise UsageError(
            f"a part schedule starting at {initial} bytes and doubling every {step} parts cannot reach S3's "
            "5 TiB object limit within 10,000 parts; raise initial_part_size or lower parts_per_size_step"
        )


def plan_part_sizes(total: int, *, initial: int, step: int) -> list[int]:
    """The part sizes a streaming writer would use for a file of ``total`` bytes (for planning and tests)."""
    if total < 0:
        raise UsageError("a file size cannot be negative")
    if total > MAX_OBJECT_SIZE:
        raise UsageError(f"{total} bytes exceeds S3's 5 TiB object limit")
    sizes: list[int] = []
    remaining = total
    n = 1
    while True:
        size = part_size_for(n, initial=initial, step=step)
        if remaining <= size:
            sizes.append(remaining)
            return sizes
        sizes.append(size)
        remaining -= size
        n += 1


def multipart_etag(part_etags: list[str]) -> str:
    """The ETag S3 gives a completed multipart object: MD5 of the parts' binary MD5s, then ``-N``.

    Only meaningful when part ETags are MD5s (not for SSE-KMS or SSE-C); callers fall back to size checks.
    """
    digest = hashlib.md5()
    for etag in part_etags:
        digest.update(bytes.fromhex(etag.strip('"')))
    return f'"{digest.hexdigest()}-{len(part_etags)}"'


def crc32_b64(data: bytes | bytearray | memoryview) -> str:
    """The base64 big-endian CRC32 that S3 expects in ``ChecksumCRC32``."""
    return base64.b64encode((zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "big")).decode("ascii")
