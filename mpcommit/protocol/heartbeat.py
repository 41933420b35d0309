"""A job's sign of life: ``JOB/alive.json``, rewritten every few seconds while a process works for the job.

The driver beats from ``Job.create`` until its commit or abort ends, and ``recover`` while it finishes a job.
Others read it two ways: the job inventory counts its Last-Modified as the job's latest activity (so a task
streaming one large file for hours does not make its job look idle to ``uploads abort --older-than``), and a
job waiting in the table's commit order watches its ETag change (:class:`Pulse`): a heartbeat that stays the
same for a lease, timed on the watcher's own clock, means the job is dead -- no two hosts' clocks are compared.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import weakref
from typing import Any

import orjson

from ..errors import MpcommitError, NoSuchKeyError, PreconditionFailedError
from ..store.s3 import S3Store
from .layout import JobPaths

log = logging.getLogger(__name__)

#: Beats that may fail in a row before the heartbeat gives up (a deleted bucket, revoked credentials).
MAX_FAILED_BEATS = 3


class Heartbeat:
    """Beats for one job on a daemon thread until :meth:`stop`, or until ``owner`` (when given) is collected:
    a Job that nobody holds any more is not worth keeping alive."""

    def __init__(self, store: S3Store, paths: JobPaths, interval: float, *, owner: Any | None = None):
        self.store = store
        self.paths = paths
        self.interval = interval
        self._owner = weakref.ref(owner) if owner is not None else None
        self._stopped = threading.Event()
        self._beats = 0
        self._etag: str | None = None
        self._thread: threading.Thread | None = None

    def beat(self) -> None:
        """Rewrite the heartbeat, conditionally: the first beat only where there is none, every later one only
        over the beat before it. A job whose records were removed meanwhile (rolled back by another process)
        then gets PreconditionFailedError or NoSuchKeyError instead of a heartbeat written back among nothing."""
        self._beats += 1
        body = orjson.dumps({"jobId": self.paths.job_id, "beat": self._beats, "time": int(time.time() * 1000),
                             "hostname": socket.gethostname(), "pid": os.getpid()})
        bucket, key = self.paths.destination.bucket, self.paths.heartbeat
        if self._etag is not None:
            self._etag = self.store.put_object(bucket, key, body, if_match=self._etag)
            return
        try:
            self._etag = self.store.put_object(bucket, key, body, if_none_match=True)
        except PreconditionFailedError:
            # Another process beat for this job before (its driver, when `recover` takes over): go on from its
            # beat. Should that process beat again, its next conditional beat fails and it stops.
            found = self.store.head_object(bucket, key)
            if found is None:
                raise
            self._etag = self.store.put_object(bucket, key, body, if_match=found.etag)

    def start(self) -> "Heartbeat":
        """Beat once now (the caller learns at once if the store cannot be written), then every ``interval``
        seconds. Where several processes work for one job at once (recoveries racing), their beats may take
        each other's place; a beat that loses is not an error -- the job is alive either way."""
        for _attempt in range(3):
            try:
                self.beat()
                break
            except (PreconditionFailedError, NoSuchKeyError):
                self._etag = None
                continue
        self._thread = threading.Thread(target=self._run, name=f"mpcommit-heartbeat-{self.paths.job_id[:8]}",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        failed = 0
        while not self._stopped.wait(self.interval):
            if self._owner is not None and self._owner() is None:
                return
            try:
                self.beat()
                failed = 0
            except (PreconditionFailedError, NoSuchKeyError):
                return  # the job's records were removed (or taken over): nothing left to keep alive
            except MpcommitError as exc:
                failed += 1
                if failed >= MAX_FAILED_BEATS:
                    log.warning("job %s: its heartbeat failed %d times in a row (%s); others may take it for dead",
                                self.paths.job_id, failed, exc)
                    return

    def stop(self) -> None:
        """Stop beating; returns once a beat in flight has landed, so that a job's records can be removed after
        this without a last beat writing one back."""
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def __enter__(self) -> "Heartbeat":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Pulse:
    """Watches other jobs' heartbeats: how long each has stayed the same, on this process's monotonic clock."""

    def __init__(self, store: S3Store):
        self.store = store
        self._seen: dict[str, tuple[str | None, float]] = {}

    def silent_for(self, paths: JobPaths) -> float:
        """Seconds since this watcher first saw the job's heartbeat as it is now (0 on a change)."""
        info = self.store.head_object(paths.destination.bucket, paths.heartbeat)
        tag = info.etag if info is not None else None
        now = time.monotonic()
        seen = self._seen.get(paths.heartbeat)
        if seen is None or seen[0] != tag:
            self._seen[paths.heartbeat] = (tag, now)
            return 0.0
        return now - seen[1]
