"""The records that say which process works for a job: its heartbeat (``JOB/alive.json``, rewritten by the
process that holds the job) and its finishing turn (``JOB/finishing.json``, created by the one finisher that
carries out the journal). Both are read back by other processes -- a waiter judging whether the holder is gone,
a process that lost the job naming who took it -- and so are validated like every record (I7); a record that
does not validate is judged by the heartbeat's changes alone, never trusted.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from ...errors import ManifestScopeError
from .base import Reader, check_kind, dumps, loads_object

BEAT_KIND = "mpcommit.Heartbeat"
TURN_KIND = "mpcommit.FinisherTurn"


@dataclass(frozen=True)
class Holder:
    """A process working for a job: where it runs and what it is."""

    hostname: str
    pid: int
    #: "driver" (the job's own process), "recover", or "take-over by job ID" (a later job finishing a dead one).
    role: str

    @classmethod
    def here(cls, role: str) -> "Holder":
        return cls(socket.gethostname(), os.getpid(), role)

    def describe(self) -> str:
        return f"{self.role} on host {self.hostname} (pid {self.pid})"

    def is_here(self) -> bool:
        return self.hostname == socket.gethostname()


def _holder(r: Reader) -> Holder:
    return Holder(r.str("hostname"), r.int("pid"), r.str("role"))


@dataclass(frozen=True)
class Beat:
    """One beat of a job's heartbeat. ``interval``: how often its holder beats, so that a waiter can judge a
    lease against the holder's own pace."""

    job_id: str
    holder: Holder
    number: int
    interval: float
    time_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_bytes(self) -> bytes:
        return dumps({"kind": BEAT_KIND, "version": 1, "jobId": self.job_id, "hostname": self.holder.hostname,
                      "pid": self.holder.pid, "role": self.holder.role, "beat": self.number,
                      "interval": self.interval, "time": self.time_ms})

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, job_id: str) -> "Beat":
        what = "heartbeat"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=BEAT_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        _same_job(r, job_id, what, where)
        interval = obj.get("interval")
        if not isinstance(interval, (int, float)) or isinstance(interval, bool) or interval <= 0:
            raise r._fail("interval", "a positive number of seconds")
        return cls(job_id, _holder(r), r.int("beat"), float(interval), r.int("time"))


@dataclass(frozen=True)
class TurnRecord:
    """The finishing turn, held by one finisher. ``token`` is random: the bytes of one take are that take's
    alone, so a finisher that reads its own bytes back knows its lost answer was applied."""

    job_id: str
    holder: Holder
    token: str = field(default_factory=lambda: uuid.uuid4().hex)
    time_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def to_bytes(self) -> bytes:
        return dumps({"kind": TURN_KIND, "version": 1, "jobId": self.job_id, "hostname": self.holder.hostname,
                      "pid": self.holder.pid, "role": self.holder.role, "token": self.token, "time": self.time_ms})

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str, job_id: str) -> "TurnRecord":
        what = "finishing turn"
        obj = loads_object(data, what=what, where=where)
        check_kind(obj, kind=TURN_KIND, versions=(1,), what=what, where=where)
        r = Reader(obj, what=what, where=where)
        _same_job(r, job_id, what, where)
        return cls(job_id, _holder(r), r.str("token"), r.int("time"))


def _same_job(r: Reader, job_id: str, what: str, where: str) -> None:
    if r.str("jobId") != job_id:
        raise ManifestScopeError(f"{what} at {where} belongs to job {r.obj.get('jobId')}, not {job_id}; refused")
