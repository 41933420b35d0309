"""One finisher at a time: a job's driver, the ``recover`` runs and the jobs taking a dead job over that meet on
one commit take turns instead of completing its uploads side by side.

Two finishers are safe by the protocol's own means -- completes are idempotent, the end of a place is taken
once, the loser says "finished by another process" -- but they double the requests of a large commit, and a
store may not make two completes of one upload atomic: LocalStack 4.13 writes the object of each into one file
at once, and three recoveries started together left a file with the wrong bytes there (the suite, 2026-11-26).
So the first finisher creates ``JOB/finishing.json`` with If-None-Match; the others wait until the job's end is
recorded. A turn is taken over only from a holder that is gone: one of this host whose process no longer runs
(a killed ``recover``, re-run at once by the on-call engineer), or one whose job heartbeat -- the holder beats
it while it works -- stayed the same for a lease, on the waiter's own clock.

The job's own driver takes the turn too, with its journal: a `recover` that finds the journal while the driver
is still committing (a cron's, or the soak's every 11 s, both having waited for a dead job before it) waits for
the driver instead of completing the same uploads beside it -- which on LocalStack left two of a committed
overwrite's files empty (CI, 2026-11-26; two completes of one upload at once empty the object in 66 of 200
pairs). A driver whose commit fails gives the turn back at once. A rollback racing the driver is decided by the
journal key, not by the turn (see journal.claim_rollback).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import orjson

from ...errors import PreconditionFailedError, UnsupportedRequestError
from ...options import OrderSettings
from ...store.s3 import S3Store
from ..heartbeat import Pulse
from ..layout import JobPaths

log = logging.getLogger(__name__)


class FinisherTurn:
    """The right to carry out one job's journal, held by one process at a time."""

    def __init__(self, store: S3Store, paths: JobPaths, settings: OrderSettings):
        self.store = store
        self.paths = paths
        self.settings = settings
        self.key = paths.finishing
        self._etag: str | None = None
        self._held: bytes | None = None  # what this process wrote at the turn's key

    def take(self, ended: Callable[[], bool]) -> bool:
        """Wait for the turn: True once this process holds it, False once ``ended()`` says the job's end is
        recorded (another finisher's work). Never waits on a job that ended."""
        bucket = self.paths.destination.bucket
        pulse = Pulse(self.store)
        announced = False
        while True:
            body = self._body()
            try:
                self._etag = self.store.put_object(bucket, self.key, body, if_none_match=True)
                self._held = body
                return True
            except PreconditionFailedError:
                pass
            holder = self.store.head_object(bucket, self.key)
            if holder is not None and self._raw(holder.etag) == body:
                # Our own create, whose answer was lost and whose retry the store refused: the turn is ours (the
                # body carries a random token, so no other process or thread wrote these bytes).
                self._etag, self._held = holder.etag, body
                return True
            if ended():
                return False
            if holder is None:
                continue  # released meanwhile: try again at once
            if self._gone(holder.etag, pulse):
                try:
                    body = self._body()
                    self._etag = self.store.put_object(bucket, self.key, body, if_match=holder.etag)
                    self._held = body
                    log.warning("job %s: the process finishing it is gone; this one finishes it",
                                self.paths.job_id)
                    return True
                except PreconditionFailedError:
                    pass  # another waiter took it over first
            if not announced:
                log.info("job %s: another process is finishing it; waiting for its end", self.paths.job_id)
                announced = True
            time.sleep(self.settings.poll_seconds)

    def release(self) -> None:
        """Give the turn back when the finish did not end the job (an error): the next finisher need not wait.
        After a finish the job's records go, and the turn with them."""
        if self._etag is None:
            return
        bucket = self.paths.destination.bucket
        try:
            try:
                self.store.delete_object(bucket, self.key, if_match=self._etag)
            except UnsupportedRequestError:
                # A store that cannot make a delete conditional (LocalStack 4.13: NotImplemented): the turn is deleted
                # only while it still holds this process's bytes. Between that read and the delete only a finisher
                # that took this process for gone could write it, and this one is alive and beating.
                if self._held is not None and self._raw(self._etag) == self._held:
                    self.store.delete_object(bucket, self.key)
        except Exception as exc:  # noqa: BLE001 -- a turn left behind costs the next finisher a lease, no more
            log.warning("job %s: the finishing turn stays, the next finisher waits for it (%s)", self.paths.job_id, exc)
        self._etag = None
        self._held = None

    def _gone(self, etag: str, pulse: Pulse) -> bool:
        held = self._read(etag)
        if held is not None and held.get("hostname") == socket.gethostname() and not _running(held.get("pid")):
            return True
        return pulse.silent_for(self.paths) >= self.settings.lease_seconds

    def _raw(self, etag: str) -> bytes | None:
        try:
            return self.store.get_object(self.paths.destination.bucket, self.key, if_match=etag)
        except Exception:  # noqa: BLE001 -- unreadable or gone: not ours, judged by the heartbeat alone
            return None

    def _read(self, etag: str) -> dict | None:
        body = self._raw(etag)
        try:
            found = orjson.loads(body) if body is not None else None
        except orjson.JSONDecodeError:
            return None
        return found if isinstance(found, dict) else None

    def _body(self) -> bytes:
        return orjson.dumps({"jobId": self.paths.job_id, "hostname": socket.gethostname(), "pid": os.getpid(),
                             "time": int(time.time() * 1000), "token": uuid.uuid4().hex})


def _running(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True  # not ours to judge: the heartbeat decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
