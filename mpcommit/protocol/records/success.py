"""``PREFIX/_SUCCESS``: the JSON summary a commit writes last (the S3A committer's SuccessData, extended)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

import orjson

from ...errors import ManifestCorruptError
from ...modes import Purpose
from .base import Reader, check_kind, dumps, loads_object

SUCCESS_NAME = "mpcommit.SuccessData/1"


@dataclass(frozen=True)
class PartitionStats:
    """What one commit put into one partition ("" for the table's root): Hive's basic statistics numFiles,
    totalSize and numRows, counted from the committed files themselves, never from a listing.

    ``rows`` is None when any file's row count is unknown.
    """

    files: int
    bytes: int
    rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"files": self.files, "bytes": self.bytes}
        if self.rows is not None:
            out["rows"] = self.rows
        return out

    @classmethod
    def from_json(cls, value: Any, *, where: str) -> "PartitionStats":
        if not isinstance(value, dict):
            raise ManifestCorruptError(f"_SUCCESS at {where} must be an object with files, bytes and rows")
        r = Reader(value, what="_SUCCESS", where=where)
        return cls(files=r.int("files"), bytes=r.int("bytes"), rows=r.int("rows", optional=True))


def partition_stats_from_json(value: Any, *, where: str) -> dict[str, PartitionStats] | None:
    """The optional ``partitionStats`` object of _SUCCESS: None when absent (files written before it existed)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ManifestCorruptError(f"_SUCCESS at {where}: field 'partitionStats' must be an object")
    return {str(k): PartitionStats.from_json(v, where=f"{where}: partitionStats[{k!r}]") for k, v in value.items()}


@dataclass(frozen=True)
class SuccessData:
    job_id: str
    mode: str
    #: Sorted. A tuple, or for a large commit its compressed list (:class:`~mpcommit.protocol.commit.committed.FileNames`).
    filenames: Sequence[str]
    bytes: int
    rows: int | None
    partitions: tuple[str, ...]
    timings: dict[str, float] = field(default_factory=dict)
    hostname: str = ""
    timestamp_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    purpose: Purpose = Purpose.WRITE
    #: Per partition ("" for the root), what this commit wrote; None in _SUCCESS files written before
    #: mpcommit recorded it (readers must accept both).
    partition_stats: Mapping[str, PartitionStats] | None = None
    #: A compaction: how many files it merged into ``filenames`` (and removed). None for other commits.
    merged_from: int | None = None
    #: The job's place in its table's commit order: a _SUCCESS is only ever replaced by a later job's.
    position: int | None = None

    def __post_init__(self) -> None:
        # A Purpose, also when given by its name (the API and older callers pass "write" or "compact").
        object.__setattr__(self, "purpose", Purpose.parse(self.purpose))

    @property
    def files(self) -> int:
        return len(self.filenames)

    def to_json(self) -> dict[str, Any]:
        head, tail = self._around_filenames()
        return {**head, "filenames": list(self.filenames), **tail}

    def _around_filenames(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The fields before ``filenames`` and those after, in the file's order."""
        head: dict[str, Any] = {
            "name": SUCCESS_NAME,
            "kind": "mpcommit.SuccessData",
            "version": 1,
            "committer": "mpcommit",
            "timestamp": self.timestamp_ms,
            "date": datetime.fromtimestamp(self.timestamp_ms / 1000, timezone.utc).isoformat(),
            "hostname": self.hostname,
            "jobId": self.job_id,
            "mode": self.mode,
            "purpose": self.purpose.value,
        }
        tail: dict[str, Any] = {
            "files": self.files,
            "bytes": self.bytes,
            "rows": self.rows,
            "partitions": list(self.partitions),
            "timings": self.timings,
        }
        if self.partition_stats is not None:
            tail["partitionStats"] = {p: s.to_json() for p, s in sorted(self.partition_stats.items())}
        if self.merged_from is not None:
            tail["mergedFrom"] = self.merged_from
        if self.position is not None:
            tail["position"] = self.position
        return head, tail

    def write_to(self, out: IO[bytes]) -> None:
        """Write exactly :meth:`to_bytes` to ``out``, the names a few at a time: a million of them are ~75 MB of
        JSON, never built whole in memory."""
        head, tail = self._around_filenames()
        out.write(dumps(head)[:-1] + b',"filenames":[')
        buffer = bytearray()
        for i, name in enumerate(self.filenames):
            if i:
                buffer += b","
            buffer += orjson.dumps(name)
            if len(buffer) >= 1 << 16:
                out.write(buffer)
                buffer.clear()
        out.write(buffer)
        out.write(b"]," + dumps(tail)[1:])

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
            purpose=_purpose(r.str("purpose", optional=True) or "write", where),
            partition_stats=partition_stats_from_json(obj.get("partitionStats"), where=where),
            merged_from=r.int("mergedFrom", optional=True),
            position=r.int("position", optional=True, minimum=1),
        )


# ---------------------------------------------------------------- a large _SUCCESS read without its names
# A _SUCCESS of a million files is ~75 MB of JSON; decoded whole it costs the reader ~200 MB for the moment it is
# held. A writer that only needs to know which commit wrote it (its job and place) reads it as a stream and skips
# the names as they pass, holding one chunk at a time.
_NAMES_START = b'"filenames":['
#: One name of the list and the comma before it (a name cut by the chunk's end does not match: more is read).
#: The string is the unrolled loop ("plain run, then escape and plain run, ..."), whose parts cannot match the same
#: bytes two ways: a name cut short fails in linear time. (Not possessive quantifiers: those are Python 3.11's.)
_NAME = re.compile(rb'\s*(?:,\s*)?"[^"\\]*(?:\\.[^"\\]*)*"')
_SPACE = re.compile(rb"\s*")
#: How far into the file its names list must have started: every field before it is small.
_HEAD_LIMIT = 1 << 20


def success_without_names(chunks: Iterable[bytes], *, where: str) -> tuple[SuccessData, int]:
    """Every field of a _SUCCESS read from ``chunks`` but its names (``filenames`` is empty in what is returned),
    and how many names it held. Raises ManifestCorruptError as :meth:`SuccessData.from_bytes` does for anything
    that is not mpcommit's _SUCCESS."""
    it = iter(chunks)
    head = bytearray()
    for chunk in it:
        head += chunk
        start = head.find(_NAMES_START)
        if start >= 0:
            buffer = bytes(head[start + len(_NAMES_START):])
            del head[start + len(_NAMES_START):]
            break
        if len(head) > _HEAD_LIMIT:
            raise ManifestCorruptError(f"_SUCCESS at {where} has no names list near its start; it was not acted upon.")
    else:
        return SuccessData.from_bytes(bytes(head), where=where), 0  # no names list: refused by name there
    names, pos = 0, 0
    while True:
        match = _NAME.match(buffer, pos)
        if match is not None:
            names, pos = names + 1, match.end()
            continue
        rest = _SPACE.match(buffer, pos).end()  # type: ignore[union-attr]
        if rest < len(buffer) and buffer[rest:rest + 1] == b"]":
            tail = buffer[rest:] + b"".join(it)
            return SuccessData.from_bytes(bytes(head) + tail, where=where), names
        more = next(it, None)
        if more is None:
            raise ManifestCorruptError(f"_SUCCESS at {where} ends inside its names list; it may be truncated. It was "
                                       "not acted upon.")
        buffer = buffer[pos:] + more
        pos = 0


def _purpose(value: str, where: str) -> Purpose:
    try:
        return Purpose(value)
    except ValueError:
        raise ManifestCorruptError(f"_SUCCESS at {where}: unknown purpose {value!r}") from None
