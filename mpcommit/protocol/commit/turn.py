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

A take-over breaks the lease before it touches the turn: the taker writes the job's heartbeat over the very beat
it watched stay the same (:meth:`~mpcommit.protocol.heartbeat.Heartbeat.adopt`), and only then the turn. A
holder that was only paused finds its next beat refused, and stops (:mod:`.fence`); a holder that beat in the
meantime makes the take-over fail, and is waited for again.

The job's own driver takes the turn too, with its journal: a `recover` that finds the journal while the driver
is still committing (a cron's, or the soak's every 11 s, both having waited for a dead job before it) waits for
the driver instead of completing the same uploads beside it -- which on LocalStack left two of a committed
overwrite's files empty (CI, 2026-11-26; two completes of one upload at once empty the object in 66 of 200
pairs). A driver whose commit fails gives the turn back at once. A rollback racing the driver is decided by the
journal key, not by the turn (see journal.claim_rollback). A turn is never taken for a job that has ended: a
waiter asks before every try, and a taker that finds the job ended right after its create gives the turn back.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from ...errors import ManifestError, MpcommitError
from ...options import OrderSettings
from ...store.conditional import Held, Records, Taken
from ...store.s3 import S3Store
from ..heartbeat import Heartbeat, Pulse
from ..layout import JobPaths, table_of
from ..records.liveness import Beat, Holder, TurnRecord

log = logging.getLogger(__name__)

#: What :meth:`FinisherTurn._hold_heartbeat` says when this process's own beat still landed.
_OWN_BEAT = object()


class FinisherTurn:
    """The right to carry out one job's journal, held by one process at a time, beside the job's heartbeat
    (``heartbeat``: the driver's, running since ``Job.create``; or a finisher's own, started when it takes the
    job)."""

    def __init__(self, store: S3Store, paths: JobPaths, settings: OrderSettings, heartbeat: Heartbeat):
        self.store = store
        self.paths = paths
        self.settings = settings
        self.heartbeat = heartbeat
        self.key = paths.finishing
        self._held: Held | None = None
        self._body: bytes | None = None  # what this process wrote at the turn's key

    def _records(self) -> Records:
        return Records.of(self.store, self.paths.destination.bucket, table_of(self.paths.destination).root)

    @property
    def held(self) -> bool:
        """Whether this process holds the turn now."""
        return self._held is not None

    def take(self, ended: Callable[[], bool]) -> bool:
        """Wait for the turn: True once this process holds it (and the job's heartbeat), False once ``ended()``
        says the job's end is recorded (another finisher's work). Never waits on a job that ended, and never
        holds the turn of one."""
        records = self._records()
        pulse = Pulse(self.store)
        announced = waited = False
        while True:
            if waited and ended():
                return False
            body = TurnRecord(self.paths.job_id, Holder.here(self.heartbeat.role)).to_bytes()
            found = records.create(self.key, body)
            if isinstance(found, Held):
                self._held, self._body = found, body
                held = self._hold_heartbeat()
                if held is _OWN_BEAT or (held and not ended()):
                    return True
                self.release()  # the job ended before the create, or another process beats for it
                if ended():
                    return False
            elif found.body is None:
                continue  # given back meanwhile: try again at once
            elif self._take_over(records, found, pulse, body):
                return True
            if not announced:
                log.info("job %s: another process is finishing it; waiting for its end", self.paths.job_id)
                announced = True
            time.sleep(self.settings.poll_seconds)
            waited = True

    def _hold_heartbeat(self) -> object:
        """With a free turn no finisher is at work: this process beats for the job -- on from its own beat if
        that still lands (``_OWN_BEAT``: then no other process took the job since, and none can have ended it),
        else over the beat there now (True: a driver displaced before its commit began, a job's first finisher
        after a dead driver -- the job may have ended meanwhile), False when another process beat first."""
        if self.heartbeat.running and self.heartbeat.beat_now():
            return _OWN_BEAT
        info = self.store.head_object(self.paths.destination.bucket, self.paths.heartbeat)
        return self.heartbeat.adopt(info.etag if info is not None else None)

    def _take_over(self, records: Records, holder: Taken, pulse: Pulse, body: bytes) -> bool:
        """Take the turn from a holder that is gone: its heartbeat first -- only while it is still the beat this
        waiter watched stay the same for a lease, or the beat of a dead process of this host -- then the turn,
        only while it is still the gone holder's. Of several waiters, the one whose heartbeat write lands first
        takes over; the others find the beat changed and wait on."""
        beat, silent = pulse.watch(self.paths)
        if silent < self.settings.lease_seconds and not (self._dead_here(holder.body) and self._dead_beat(beat)):
            return False
        if not self.heartbeat.adopt(beat):
            return False  # it beat meanwhile: alive after all (or another waiter took it over first)
        taken = records.replace(self.key, body, etag=holder.etag)
        if not isinstance(taken, Held):
            return False  # the turn changed meanwhile; its holder's beats now refuse ours, or ours theirs
        self._held, self._body = taken, body
        log.warning("job %s: the process finishing it is gone; this one finishes it", self.paths.job_id)
        return True

    def _dead_here(self, body: bytes | None) -> bool:
        """A turn or beat of a process of this host that no longer runs (unreadable: judged by the lease)."""
        if body is None:
            return False
        try:
            record: TurnRecord | Beat = (TurnRecord.from_bytes(body, where=self.key, job_id=self.paths.job_id)
                                         if b'"mpcommit.FinisherTurn"' in body else
                                         Beat.from_bytes(body, where=self.paths.heartbeat, job_id=self.paths.job_id))
        except ManifestError:
            return False
        return record.holder.is_here() and not _running(record.holder.pid)

    def _dead_beat(self, etag: str | None) -> bool:
        """Whether the heartbeat at ``etag`` (None: none) is a dead process's of this host: then no process is
        at work for the job, and the beat may be taken at once. A live process's beat -- another waiter that
        took the job over a moment ago -- is not."""
        if etag is None:
            return True
        try:
            body = self.store.get_object(self.paths.destination.bucket, self.paths.heartbeat, if_match=etag)
        except MpcommitError:
            return False  # changed or gone meanwhile: someone is at work
        return self._dead_here(body)

    def release(self) -> None:
        """Give the turn back when the finish did not end the job (an error): the next finisher need not wait.
        After a finish the job's records go, and the turn with them."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            self._records().delete(self.key, etag=held.etag, body=self._body)
        except MpcommitError as exc:  # a turn left behind costs the next finisher a lease, no more
            log.warning("job %s: the finishing turn stays, the next finisher waits for it (%s)", self.paths.job_id, exc)


def _running(pid: int) -> bool:
    if pid <= 0:
        return True  # not ours to judge: the heartbeat decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
