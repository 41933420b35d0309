"""What a job commit keeps per file until ``_SUCCESS``: the committed files' keys and the winners' upload ids.

A commit of a million files must not hold a million of either in the driver (issue 25: the driver's growth from
10,000 files to a million stays under 100 MiB, the way Hadoop's manifest committer bounds its driver). So:

* the keys are held in memory up to SPILL_AT, then written out, sorted, as runs to a local temporary file and
  merged back in order once every file is complete: ``_SUCCESS`` keeps its whole, sorted ``filenames`` list;
* the report of a large commit carries its keys compressed (:class:`FileNames`, a few bytes a key);
* the upload ids are kept as 8-byte digests (:class:`UploadIds`), only ever asked "is this one of ours?".
"""

from __future__ import annotations

import hashlib
import heapq
import tempfile
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import IO, TYPE_CHECKING, Any, overload

import orjson

if TYPE_CHECKING:
    from ..records.manifest import TaskResult

#: Keys held in memory before they are spilled, sorted, to the commit's temporary file (about 100-200 bytes
#: each in memory: ~5-10 MiB held at most). Below it a commit never touches the local disk.
SPILL_AT = 50_000
#: Where the temporary file goes (None: the system's, ``TMPDIR``).
SPILL_DIRECTORY: str | None = None
#: Bytes read from a spilled run at a time while merging.
RUN_BUFFER = 1 << 16


class CommittedKeys:
    """The keys a commit made visible, for ``_SUCCESS`` and its report, in order of completion; handed back sorted.

    Spilling: beyond SPILL_AT keys held, the held keys are sorted and appended to a temporary file as one run (JSON
    string lines: a key with a newline stays one line); :meth:`sorted_keys` merges the runs. The file is an
    anonymous ``TemporaryFile`` (unlinked at once where the system allows: even a killed driver leaves nothing),
    closed by :meth:`close` -- use the object as a context manager so that every exit path closes it.
    """

    def __init__(self, *, spill_at: int | None = None, directory: str | None = None):
        self.spill_at = max(1, spill_at if spill_at is not None else SPILL_AT)
        self.directory = directory if directory is not None else SPILL_DIRECTORY
        self._held: list[str] = []
        self._file: IO[bytes] | None = None
        self._runs: list[tuple[int, int]] = []  # (offset, length) of each sorted run in the file
        self._count = 0

    def __enter__(self) -> "CommittedKeys":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        return self._count

    @property
    def spilled(self) -> bool:
        return bool(self._runs)

    def add(self, key: str) -> None:
        self._held.append(key)
        self._count += 1
        if len(self._held) >= self.spill_at:
            self._spill()

    def _spill(self) -> None:
        # Why spill: a million keys of ~80 characters held as Python strings cost ~150 MiB of driver memory until
        # _SUCCESS is written; sorted runs on the local disk cost a few MiB to merge back.
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="mpcommit-keys-", dir=self.directory)
        self._held.sort()
        start = self._file.seek(0, 2)
        self._file.writelines(orjson.dumps(k) + b"\n" for k in self._held)  # through the file's buffer
        self._runs.append((start, self._file.tell() - start))
        self._held = []

    def sorted_keys(self) -> Iterator[str]:
        """Every key, sorted (as ``sorted()`` orders str): the runs on disk merged with the keys still held."""
        self._held.sort()
        if self._file is None:
            return iter(self._held)
        self._file.flush()
        return heapq.merge(*(self._read_run(offset, length) for offset, length in self._runs), self._held)

    def _read_run(self, offset: int, length: int) -> Iterator[str]:
        end, rest = offset + length, b""
        while offset < end:
            f = self._file
            if f is None:
                raise ValueError("the commit's key file was closed while it was being read")
            f.seek(offset)
            chunk = f.read(min(RUN_BUFFER, end - offset))
            if not chunk:
                raise OSError("the commit's key file ended before its runs did")
            offset += len(chunk)
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield orjson.loads(line)
        if rest:
            yield orjson.loads(rest)

    def names(self) -> Sequence[str]:
        """The keys sorted, and the temporary file closed: a tuple when none were spilled, else :class:`FileNames`
        (compressed in memory: a report can outlive the commit, a temporary file should not)."""
        try:
            if self._file is None:
                return tuple(self.sorted_keys())
            return FileNames.of(self.sorted_keys(), count=self._count)
        finally:
            self.close()

    def close(self) -> None:
        self._held = []
        self._runs = []
        if self._file is not None:
            f, self._file = self._file, None
            f.close()


class FileNames(Sequence[str]):
    """A long sorted list of keys held compressed in memory (zlib over JSON string lines: keys of one table share
    long prefixes, so a few bytes each): a large commit's ``CommitReport.filenames`` and ``SuccessData.filenames``.
    ``len`` is immediate; iterating decompresses as it goes; an index walks from the start (a slice from the
    start, as ``names[:10]``, stops early)."""

    __slots__ = ("_data", "_count")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, data: bytes, count: int):
        self._data = data
        self._count = count

    @classmethod
    def of(cls, keys: Iterable[str], *, count: int | None = None) -> "FileNames":
        packer = zlib.compressobj(6)
        data = bytearray()
        n = 0
        for key in keys:
            data += packer.compress(orjson.dumps(key) + b"\n")
            n += 1
        data += packer.flush()
        if count is not None and n != count:
            raise ValueError(f"expected {count} keys, got {n}")
        return cls(bytes(data), n)

    @property
    def compressed_bytes(self) -> int:
        return len(self._data)

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        unpacker = zlib.decompressobj()
        view = memoryview(self._data)
        rest = b""
        for start in range(0, len(view), RUN_BUFFER):
            lines = (rest + unpacker.decompress(view[start:start + RUN_BUFFER])).split(b"\n")
            rest = lines.pop()
            yield from map(orjson.loads, lines)
        lines = (rest + unpacker.flush()).split(b"\n")
        rest = lines.pop()
        yield from map(orjson.loads, lines)
        if rest:
            yield orjson.loads(rest)

    def __reversed__(self) -> Iterator[str]:
        return reversed(tuple(self))

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step > 0:
                return tuple(islice(self, start, max(start, stop), step))
            return tuple(self)[index]
        i = index.__index__()
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError("FileNames index out of range")
        return next(islice(self, i, None))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, FileNames) and self._data == other._data:
            return self._count == other._count
        if isinstance(other, (FileNames, tuple, list)):
            return self._count == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"FileNames({self._count:,} keys, {len(self._data):,} bytes compressed)"


class HandedOverResults(list["TaskResult"]):
    """Task results whose holder gives them to the job commit for good (the Spark path's collected results): the
    commit empties this list once its journal is written, so that each in-line manifest is freed as soon as its
    files are placed rather than held by the caller through the whole commit. Until the journal, a commit that
    fails leaves it as it was."""


class UploadIds:
    """The upload ids a commit completed, as 8-byte digests (a million cost 8 MiB, not ~150 as strings), for the
    abort of leftovers to skip. Never a false "not ours": a winner is never aborted. A false "ours" (about n / 2^64
    per leftover) leaves that one leftover pending, for the bucket's lifecycle rule or ``mpcommit cleanup``."""

    def __init__(self) -> None:
        self._digests = array("Q")
        self._sorted: Any = None

    def add(self, upload_id: str) -> None:
        self._digests.append(_digest(upload_id))
        self._sorted = None

    def __len__(self) -> int:
        return len(self._digests)

    def __contains__(self, upload_id: object) -> bool:
        if not isinstance(upload_id, str) or not self._digests:
            return False
        import numpy as np

        if self._sorted is None:
            self._sorted = np.sort(np.frombuffer(self._digests, dtype=np.uint64))
        d = np.uint64(_digest(upload_id))
        i = int(np.searchsorted(self._sorted, d))
        return i < len(self._sorted) and bool(self._sorted[i] == d)

    def clear(self) -> None:
        self._digests = array("Q")
        self._sorted = None


def _digest(upload_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(upload_id.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")
