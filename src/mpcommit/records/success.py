"""``PREFIX/_SUCCESS``: the JSON summary a commit writes last (the S3A committer's SuccessData, extended)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .base import Reader, check_kind, dumps, loads_object

SUCCESS_NAME = "mpcommit.SuccessData/1"


@dataclass(frozen=True)
class SuccessData:
    job_id: str
    mode: str
    filenames: tuple[str, ...]
    bytes: int
    rows: int | None
    partitions: tuple[str, ...]
    timings: dict[str, float] = field(default_factory=dict)
    hostname: str = ""
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    purpose: str = "write"

    @property
    def files(self) -> int:
        return len(self.filenames)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": SUCCESS_NAME,
            "kind": "mpcommit.SuccessData",
            "version": 1,
            "committer": "mpcommit",
            "timestamp": self.timestamp_ms,
            "date": datetime.fromtimestamp(self.timestamp_ms / 1000, timezone.utc).isoformat(),
            "hostname": self.hostname,
            "jobId": self.job_id,
            "mode": self.mode,
            "purpose": self.purpose,
            "filenames": list(self.filenames),
            "files": self.files,
            "bytes": self.bytes,
            "rows": self.rows,
            "partitions": list(self.partitions),
            "timings": self.timings,
        }

    def to_bytes(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> "SuccessData":
        obj = loads_object(data, what="_SUCCESS", where=where)
        check_kind(obj, kind="mpcommit.SuccessData", versions=(1,), what="_SUCCESS", where=where)
        r = Reader(obj, what="_SUCCESS", where=where)
        timings = obj.get("timings") or {}
        return cls(
            job_id=r.str("jobId"),
            mode=r.str("mode"),
            filenames=r.list("filenames", lambda v, w: str(v)),
            bytes=r.int("bytes"),
            rows=r.int("rows", optional=True),
            partitions=r.list("partitions", lambda v, w: str(v)),
            timings={str(k): float(v) for k, v in timings.items()} if isinstance(timings, dict) else {},
            hostname=r.str("hostname", optional=True) or "",
            timestamp_ms=r.int("timestamp"),
            purpose=r.str("purpose", optional=True) or "write",
        )
