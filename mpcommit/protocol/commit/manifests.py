"""The winners' task manifests, read for a commit: validated as they are read (I7), streamed a few at a time so
that the driver never holds them all (memory flat in parts, linear in files)."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future

from ...store.s3 import S3Store
from ..layout import Destination
from ..records.manifest import TaskManifest
from .context import MANIFESTS_AHEAD, CommitContext

#: Parts held in manifests read ahead, at most (about): large manifests are read one ahead, small ones many.
MANIFEST_PARTS_AHEAD = 50_000


class ManifestReader:
    """Reads and validates the task manifests of one job."""

    def __init__(self, store: S3Store, destination: Destination, job_id: str):
        self.store = store
        self.destination = destination
        self.job_id = job_id

    def read(self, key: str) -> TaskManifest:
        data = self.store.get_object(self.destination.bucket, key)
        return TaskManifest.from_bytes(data, where=f"s3://{self.destination.bucket}/{key}",
                                       destination=self.destination, job_id=self.job_id)

    def stream(self, keys: Sequence[str], inline: Mapping[str, TaskManifest | None],
               context: CommitContext, *, consume: bool = False) -> Iterator[TaskManifest]:
        """The manifests named by ``keys``, in order: inline ones as they are, the others read ahead in parallel
        on the context's outer pool, each dropped by the caller once its files are handed on -- never all held.

        How many are read ahead follows their size: MANIFEST_PARTS_AHEAD divided by the largest manifest's
        parts seen so far, between 1 and MANIFESTS_AHEAD (2 before the first is read). Small manifests are thus
        read many at a time (a GET each would otherwise cost a round trip per task), large ones one ahead.

        ``consume`` (the commit's last pass, ``inline`` a dict): each in-line manifest is taken out of ``inline``
        as it is handed on, so that the commit does not hold it once its files are placed.
        """
        ahead: deque[tuple[Future[tuple[TaskManifest, int]] | None, TaskManifest | None]] = deque()
        pending = iter(keys)
        largest = 0

        def read(key: str) -> tuple[TaskManifest, int]:
            manifest = self.read(key)
            return manifest, manifest.part_count

        def window() -> int:
            if largest == 0:
                return 2
            return max(1, min(MANIFESTS_AHEAD, MANIFEST_PARTS_AHEAD // largest))

        def fill() -> None:
            while len(ahead) < window():
                key = next(pending, None)
                if key is None:
                    return
                m = inline.pop(key, None) if consume else inline.get(key)  # type: ignore[attr-defined]
                ahead.append((None, m) if m is not None else (context.beside(read, key), None))

        fill()
        try:
            while ahead:
                future, manifest = ahead.popleft()
                if future is not None:
                    manifest, parts = future.result()
                    largest = max(largest, parts)
                del future
                fill()
                assert manifest is not None
                yield manifest
                del manifest
        finally:
            for f, _m in ahead:
                if f is not None:
                    f.cancel()
