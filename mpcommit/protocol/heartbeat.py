"""A job's sign of life: ``JOB/alive.json``, rewritten every few seconds while a process works for the job -- and
the lease that decides which process that is.

The driver beats from ``Job.create`` until its commit or abort ends, and a ``recover`` while it finishes a job.
Others read it two ways: the job inventory counts its Last-Modified as the job's latest activity (so a task
streaming one large file for hours does not make its job look idle to ``uploads abort --older-than``), and a
job waiting in the table's commit order watches its ETag change (:class:`Pulse`): a heartbeat that stays the
same for a lease, timed on the watcher's own clock, means the job is dead -- no two hosts' clocks are compared.

Every beat is a conditional write over the beat before it (If-Match), and a process that takes a job over
writes the heartbeat first, over the very beat it watched stay the same for a lease (:meth:`Heartbeat.adopt`).
So the heartbeat is also the job's fence: a holder whose beat still lands holds the job -- no take-over can
have happened without changing the beat it matches -- and one whose beat is refused has lost it, and knows.
A lease tells a waiter when it may take over; the refused beat is what tells the old holder that it lost.
The heartbeat therefore never gives up while its job lives: a store that refuses beats for a while (503s, a
brownout) is retried with backoff for as long as it takes, said once on the log.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from typing import Any

from ..errors import ManifestError, MpcommitError, NoSuchKeyError, PreconditionFailedError
from ..store.conditional import Held, Records
from ..store.s3 import S3Store
from .layout import JobPaths, table_of
from .records.liveness import Beat, Holder

log = logging.getLogger(__name__)

#: The longest pause between two tries of a heartbeat the store keeps refusing.
MAX_RETRY_DELAY = 5.0


class Heartbeat:
    """Beats for one job on a daemon thread until :meth:`stop`, or until ``owner`` (when given) is collected:
    a Job that nobody holds any more is not worth keeping alive. ``role`` says who beats, for people reading the
    record ("driver", "recover")."""

    def __init__(self, store: S3Store, paths: JobPaths, interval: float, *, owner: Any | None = None,
                 role: str = "driver"):
        self.store = store
        self.paths = paths
        self.interval = interval
        self.role = role
        self._owner = weakref.ref(owner) if owner is not None else None
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # one beat at a time: the thread's and a fence's (beat_now)
        self._beats = 0
        self._etag: str | None = None
        self._thread: threading.Thread | None = None
        #: When the last beat that landed was sent (monotonic): the job was this process's at least until then.
        self._held_at: float | None = None
        #: Why this process no longer holds the job (its beat was refused), else None.
        self.lost: str | None = None

    # ------------------------------------------------------------ beating
    def _body(self) -> bytes:
        return Beat(self.paths.job_id, Holder.here(self.role), self._beats, self.interval).to_bytes()

    def _write(self, *, if_match: str | None) -> None:
        """One beat over the beat ``if_match`` (None: where there is none), through the store's one seam of
        conditional writes: a beat applied whose answer was lost, and whose retry the store refused, is still
        this process's beat. PreconditionFailedError when another process's beat holds the key."""
        self._beats += 1
        sent = time.monotonic()
        records = Records.of(self.store, self.paths.destination.bucket, table_of(self.paths.destination).root)
        found = records.replace(self.paths.heartbeat, self._body(), etag=if_match)
        if not isinstance(found, Held):
            raise PreconditionFailedError(f"the heartbeat of job {self.paths.job_id} was written by another process",
                                          operation="put_object", key=self.paths.heartbeat)
        self._etag, self._held_at = found.etag, sent

    def beat(self) -> None:
        """Rewrite the heartbeat over the beat before it. PreconditionFailedError or NoSuchKeyError when another
        process wrote it meanwhile (a take-over) or the job's records were removed (it ended elsewhere): this
        process has lost the job, and :attr:`lost` says so from then on."""
        with self._lock:
            if self.lost is not None:
                raise PreconditionFailedError(self.lost, operation="put_object", key=self.paths.heartbeat)
            try:
                self._write(if_match=self._etag)
            except (PreconditionFailedError, NoSuchKeyError) as exc:
                self.lost = self._why_lost()
                raise PreconditionFailedError(self.lost, operation="put_object", key=self.paths.heartbeat) from exc

    def beat_now(self) -> bool:
        """One beat now, on the caller's thread: True when it landed (this process holds the job), False when it
        was refused (it does not). A store that cannot be reached raises: nothing can be said."""
        try:
            self.beat()
        except PreconditionFailedError:
            return False
        return True

    @property
    def running(self) -> bool:
        """Whether this process beats for the job (started or adopted, not stopped)."""
        return self._thread is not None and not self._stopped.is_set()

    def holds(self, within: float) -> bool:
        """Whether a beat that landed was sent less than ``within`` seconds ago, and none was refused since."""
        held = self._held_at
        return self.lost is None and held is not None and time.monotonic() - held < within

    def _why_lost(self) -> str:
        """Who holds the job now, from the heartbeat that replaced this process's (for the error a fence raises)."""
        bucket, key = self.paths.destination.bucket, self.paths.heartbeat
        try:
            found = Beat.from_bytes(self.store.get_object(bucket, key), where=f"s3://{bucket}/{key}",
                                    job_id=self.paths.job_id)
        except NoSuchKeyError:
            return "its records were removed: another process ended it"
        except (ManifestError, MpcommitError):
            return "another process wrote its heartbeat"
        return f"taken over by {found.holder.describe()}"

    # ------------------------------------------------------------ holding
    def start(self) -> "Heartbeat":
        """The first beat of a job's own process (``Job.create``; the process a data source commits in): create
        the heartbeat, or go on from the beat already there (another process of the same job -- the one that
        planned it -- whose next beat is then refused). The caller learns at once if the store cannot be
        written; then every ``interval`` seconds on a daemon thread."""
        bucket, key = self.paths.destination.bucket, self.paths.heartbeat
        for _attempt in range(3):
            with self._lock:
                try:
                    self._write(if_match=self._etag)
                    break
                except (PreconditionFailedError, NoSuchKeyError):
                    found = self.store.head_object(bucket, key)
                    self._etag = found.etag if found is not None else None
        return self._run_thread()

    def adopt(self, etag: str | None) -> bool:
        """Take the job over from the process that wrote the heartbeat ``etag`` (None: there is none): write it
        only while it is still that beat. False when it changed meanwhile -- its holder is alive after all. On
        True this process holds the job, and the holder's next beat is refused."""
        with self._lock:
            self.lost = None
            try:
                self._write(if_match=etag)
            except (PreconditionFailedError, NoSuchKeyError):
                return False
        self._run_thread()
        return True

    def _run_thread(self) -> "Heartbeat":
        if (self._thread is None or not self._thread.is_alive()) and not self._stopped.is_set():
            self._thread = threading.Thread(target=self._run, name=f"mpcommit-heartbeat-{self.paths.job_id[:8]}",
                                            daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        failing_since: float | None = None
        delay = self.interval
        while not self._stopped.wait(delay):
            if self._owner is not None and self._owner() is None:
                return
            try:
                self.beat()
            except PreconditionFailedError:
                log.warning("job %s: this process no longer holds it (%s); its heartbeat stops", self.paths.job_id,
                            self.lost)
                return
            except MpcommitError as exc:
                # Never give up while the job lives: a holder that stopped beating would be taken for dead while it
                # goes on. Retried sooner than the interval, so that the lease sees a beat as soon as one lands.
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning("job %s: its heartbeat cannot be written (%s); retrying until it can -- past %.0f s "
                                "others may take the job for dead, and this process then stops acting for it",
                                self.paths.job_id, exc, self.interval)
                delay = min(MAX_RETRY_DELAY, self.interval, max(0.05, delay / 2))
                continue
            if failing_since is not None:
                log.warning("job %s: its heartbeat is written again after %.1f s of failures", self.paths.job_id,
                            time.monotonic() - failing_since)
                failing_since = None
            delay = self.interval

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
        return self.watch(paths)[1]

    def watch(self, paths: JobPaths) -> tuple[str | None, float]:
        """The heartbeat's ETag now (None: there is none) and for how many seconds this watcher has seen it so.
        A take-over adopts exactly that ETag (:meth:`Heartbeat.adopt`), so a beat in between stops it."""
        info = self.store.head_object(paths.destination.bucket, paths.heartbeat)
        tag = info.etag if info is not None else None
        now = time.monotonic()
        seen = self._seen.get(paths.heartbeat)
        if seen is None or seen[0] != tag:
            self._seen[paths.heartbeat] = (tag, now)
            return tag, 0.0
        return tag, now - seen[1]
